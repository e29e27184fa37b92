"""_interop."""
