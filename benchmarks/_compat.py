"""Names the benchmarks import from one place (both are public exports)."""

from __future__ import annotations

from dshtools import TimeoutPolicy, execute_batch

__all__ = ["TimeoutPolicy", "execute_batch"]
