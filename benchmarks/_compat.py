"""Imports that may live in private modules until they are re-exported."""

from __future__ import annotations

try:
    from dshtools import TimeoutPolicy  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - before the re-export lands
    from dshtools._policies import TimeoutPolicy

try:
    from dshtools import execute_batch  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover
    from dshtools._batch import execute_batch

__all__ = ["TimeoutPolicy", "execute_batch"]
