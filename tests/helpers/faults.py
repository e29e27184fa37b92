"""Faults put in on purpose.

``FirstCallSkipped`` (a function whose first matching call does not
happen); ``Unprintable`` (an exception whose ``str`` and ``repr`` raise)
and ``Unrepresentable`` (an object whose ``repr`` raises, with methods that
raise ``Unprintable`` in the place of a hook, an observer or a listener).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # only in annotations
    import pytest


class FirstCallSkipped:
    """Replaces ``owner.name`` (through ``monkeypatch``, so the test's end
    puts it back) with a wrapper that skips the first call for which
    ``matching(*args, **kwargs)`` holds (it returns ``None`` without running
    the real function, as a check that passed or a request that was lost)
    and runs the real function for every other call. ``calls`` holds the
    positional arguments of every call, ``skipped`` those of the one skipped."""

    def __init__(
        self,
        monkeypatch: pytest.MonkeyPatch,
        owner: object,
        name: str,
        matching: Callable[..., bool] = lambda *args, **kwargs: True,
    ) -> None:
        real = getattr(owner, name)
        self.calls: list[tuple[Any, ...]] = []
        self.skipped: list[tuple[Any, ...]] = []

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(args)
            if not self.skipped and matching(*args, **kwargs):
                self.skipped.append(args)
                return None
            return real(*args, **kwargs)

        monkeypatch.setattr(owner, name, wrapper)


class Unprintable(Exception):
    """An exception whose ``str`` and ``repr`` raise."""

    def __str__(self) -> str:
        raise RuntimeError("no str for you")

    def __repr__(self) -> str:
        raise RuntimeError("no repr for you")


class Unrepresentable:
    """An object whose ``repr`` raises. Its bound methods raise
    ``Unprintable`` where a hook, a result observer or an abort listener
    goes; the observer and the listener first append ``"observer ran"`` or
    ``"listener ran"`` to ``log``."""

    def __init__(self, log: list[str]) -> None:
        self.log = log

    def __repr__(self) -> str:
        raise RuntimeError("no repr")

    def raising_observer(self, e: Any, r: Any) -> None:
        self.log.append("observer ran")
        raise Unprintable

    def raising_listener(self, signal: Any) -> None:
        self.log.append("listener ran")
        raise Unprintable

    def raising_hook(self, *a: Any) -> Any:
        raise Unprintable
