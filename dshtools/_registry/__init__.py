"""_registry."""
