"""stoker.forecast."""
