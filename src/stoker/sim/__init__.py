"""stoker.sim."""
