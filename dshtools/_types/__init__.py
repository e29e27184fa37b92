"""_types."""
