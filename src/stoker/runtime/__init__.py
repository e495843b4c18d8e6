"""stoker.runtime."""
