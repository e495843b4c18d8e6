"""stoker.client."""
