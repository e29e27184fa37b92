"""``Closing``: an object whose ``close()`` ends it, used as ``with obj:``.

``__enter__`` returns the object itself; ``__exit__`` calls ``close()``
whatever ends the block and never suppresses an exception. Slotted
classes can use it (it adds no slot). Package-internal.
"""

from __future__ import annotations

from types import TracebackType
from typing import TypeVar

__all__ = ["Closing"]

_C = TypeVar("_C", bound="Closing")


class Closing:
    """``with obj:`` closes ``obj`` at the end of the block (see the module docstring)."""

    __slots__ = ()

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self: _C) -> _C:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
