"""_backends."""
