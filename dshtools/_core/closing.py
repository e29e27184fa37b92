"""Objects that are closed on leaving a ``with`` block.

Guarantees:

* ``with obj as x:`` binds ``x`` to ``obj`` itself, and calls
  ``obj.close()`` on the way out of the block, whether the block returned,
  raised or was interrupted; an exception from the block is never
  suppressed (``__exit__`` returns ``None``).
* ``close()`` is the subclass's: a class that derives from ``ClosedOnExit``
  defines it (the base raises ``NotImplementedError``). Slotted subclasses
  stay slotted: the base adds no instance attribute.
"""

from __future__ import annotations

from typing import TypeVar

__all__ = ["ClosedOnExit"]

_C = TypeVar("_C", bound="ClosedOnExit")


class ClosedOnExit:
    """A resource whose ``with`` block ends with its ``close()``."""

    __slots__ = ()

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self: _C) -> _C:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
