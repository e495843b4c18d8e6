"""stoker.agent."""
