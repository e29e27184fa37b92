"""Exceptions and abort reasons shared by every layer (docs/contract.md#cancellation).

Guarantees:

* ``AbortError.reason`` is exactly the reason object the signal was aborted
  with; when that reason is an exception it is also ``__cause__``, so a
  traceback shows *why* the work was aborted.
* ``TimeoutReason`` is a ``TimeoutError`` carrying the classification
  ``code`` and the budget in ``seconds``; ``timeout_of`` recovers it from a
  signal or an exception without string matching.
"""

from __future__ import annotations

import math
import sys
import traceback
from collections.abc import Callable
from types import TracebackType
from typing import Any, Final, TypeVar

__all__ = [
    "AbortError",
    "TimeoutReason",
    "check_items",
    "check_seconds",
    "report_unraisable",
    "safe_repr",
    "safe_str",
]

_T = TypeVar("_T")


class AbortError(Exception):
    """Raised when work stops because its ``AbortSignal`` was aborted.

    ``AbortError(reason=None)``: ``.reason`` holds the signal's reason (any
    object, ``None`` only for a hand-made error). When the reason is a
    ``BaseException`` it is also set as ``__cause__``. Source: docs/contract.md#cancellation.
    """

    reason: object

    def __init__(self, reason: object = None) -> None:
        # What BaseException.__init__(reason) does, without the super() call:
        # every abort() without a reason creates one of these.
        self.args = (reason,)
        self.reason = reason
        if isinstance(reason, BaseException):
            self.__cause__ = reason

    def __str__(self) -> str:
        if self.reason is None:
            return "operation aborted"
        if isinstance(self.reason, AbortError):
            return str(self.reason)
        return f"operation aborted: {self.reason}"

    def __repr__(self) -> str:
        return f"AbortError(reason={self.reason!r})"


class TimeoutReason(TimeoutError):
    """The reason a timer-driven signal aborts with.

    ``TimeoutReason(code, seconds)``: ``code`` classifies the timer (for
    example ``"TOOL_TIMEOUT"`` for the timeout policy, ``"TIMEOUT"`` for
    ``AbortSignal.timeout``); ``seconds`` is the budget that ran out, in
    seconds. Source: docs/contract.md#cancellation.
    """

    code: str
    seconds: float

    def __init__(self, code: str, seconds: float) -> None:
        if not isinstance(code, str):
            raise TypeError(f"code must be a str, not {type(code).__name__}")
        super().__init__(code, seconds)
        self.code = code
        self.seconds = float(seconds)

    def __str__(self) -> str:
        return f"{self.code}: timed out after {self.seconds:g} s"

    def __repr__(self) -> str:
        return f"TimeoutReason({self.code!r}, {self.seconds!r})"


class _UnraisableArgs:
    """Duck-typed ``sys.UnraisableHookArgs`` (the real type is not constructible)."""

    __slots__ = ("err_msg", "exc_traceback", "exc_type", "exc_value", "object")

    def __init__(self, exc: BaseException, err_msg: str, obj: object) -> None:
        self.exc_type: type[BaseException] = type(exc)
        self.exc_value: BaseException | None = exc
        self.exc_traceback: TracebackType | None = exc.__traceback__
        self.err_msg: str | None = err_msg
        self.object: Any = obj


def safe_repr(obj: object) -> str:
    """``repr(obj)``, or a stand-in naming its type when that ``repr``
    raises: containment paths describe foreign objects (listeners,
    observers, hooks, returned values) and must never fail doing so
    (docs/contract.md#a4)."""
    return _guarded(repr, obj, "object (repr failed)")


def safe_str(exc: BaseException) -> str:
    """``str(exc)``, or a stand-in naming its class when that ``__str__``
    raises or returns a non-``str`` (docs/contract.md#a4)."""
    return _guarded(str, exc, "(str() failed)")


def _guarded(text_of: Callable[[Any], object], obj: object, failed: str) -> str:
    """``text_of(obj)`` when it returns a ``str``, else ``<TypeName failed>``
    (it raised, or returned something else): the one guard behind
    ``safe_repr`` and ``safe_str``."""
    try:
        text = text_of(obj)
        if type(text) is str:
            return text
    except Exception:
        pass
    return f"<{safe_type_name(obj)} {failed}>"


def safe_type_name(obj: object) -> str:
    """The name of ``obj``'s class (``type(obj).__name__`` cannot run user
    code, but is kept in one place with the other guards)."""
    name = type(obj).__name__
    return name if type(name) is str else "object"


def report_unraisable(exc: BaseException, err_msg: str, obj: object) -> None:
    """Report an exception nobody can catch (a listener's, an observer's)
    through ``sys.unraisablehook``; never raises."""
    try:
        hook = sys.unraisablehook
        if hook is sys.__unraisablehook__:
            # The built-in hook accepts only its own (unconstructible) args
            # type and would reject ours with TypeError, losing the report:
            # write what it writes, with every foreign object guarded.
            _write_unraisable(exc, err_msg, obj)
        else:
            hook(_UnraisableArgs(exc, err_msg, obj))
    except BaseException:  # pragma: no cover - a broken hook must not break abort()
        pass


def _write_unraisable(exc: BaseException, err_msg: str, obj: object) -> None:
    stream = sys.stderr
    if stream is None:
        return
    # traceback guards a raising __str__ itself ("<exception str() failed>").
    lines = traceback.format_exception(type(exc), exc, exc.__traceback__)
    stream.write(f"{err_msg}: {safe_repr(obj)}\n" + "".join(lines))
    stream.flush()


_INF: Final = math.inf
_NEG_INF: Final = -math.inf


def check_seconds(seconds: object, what: str = "seconds") -> float:
    """Validate a duration in seconds: a real number (not ``bool``), finite,
    not NaN. Returns it as ``float``; raises ``TypeError``/``ValueError``."""
    if type(seconds) is float and _NEG_INF < seconds < _INF:  # the usual case (NaN fails both)
        return seconds
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise TypeError(f"{what} must be a number of seconds, not {type(seconds).__name__}")
    value = float(seconds)
    if math.isnan(value) or math.isinf(value):
        raise ValueError(f"{what} must be finite, got {seconds!r}")
    return value


def check_items(values: object, kind: type[_T], *, one: str, item: str) -> list[_T]:
    """``values``, an iterable of ``kind`` instances, as a list. Raises
    ``TypeError(one)`` when ``values`` is itself one ``kind`` (a ``str`` is
    an iterable of one-letter ``str``; a single call is a mistake for a
    list of one), and ``TypeError(item.format(name))`` with the type name
    of the first item that is not a ``kind``."""
    if isinstance(values, kind):
        raise TypeError(one)
    items: list[object] = list(values)  # type: ignore[call-overload]
    for value in items:
        if not isinstance(value, kind):
            raise TypeError(item.format(type(value).__name__))
    return items  # type: ignore[return-value]  # every item is a kind
