"""stoker.broker."""
