"""Deadlines: the timing and classification half of timeouts
(docs/contract.md#cancellation).

A ``Deadline`` only *says* "time is up" (its signal aborts with a
``TimeoutReason``); stopping the work belongs to whoever owns it. Guarantees:

* ``Deadline.signal`` aborts on the upstream's abort (with the upstream's
  reason) or when the timer fires (with ``TimeoutReason(code, seconds)``),
  whichever happens first; the reason says which, so a timeout is never
  mistaken for a user abort.
* ``close()`` (or leaving ``with``) cancels the timer and detaches from the
  upstream deterministically; it never aborts anything.
"""

from __future__ import annotations

from .._core.errors import AbortError, TimeoutReason, check_seconds
from . import AbortSignal, _timeout_signal, deadline_signal, timer_fired

__all__ = ["Deadline", "deadline", "timeout_of"]


class Deadline:
    """A signal bounded by an upstream signal and an optional timer.

    Attributes: ``signal`` (the ``AbortSignal`` to hand to the work),
    ``seconds`` (the budget, or ``None`` when no timer was armed), ``code``.
    """

    __slots__ = ("_owns_signal", "code", "seconds", "signal")

    def __init__(self, upstream: AbortSignal | None, seconds: float | None, code: str) -> None:
        if not isinstance(code, str):
            raise TypeError(f"code must be a str, not {type(code).__name__}")
        if upstream is not None and not isinstance(upstream, AbortSignal):
            raise TypeError(f"upstream must be an AbortSignal or None, not {type(upstream).__name__}")
        value = None if seconds is None else check_seconds(seconds)
        self.code = code
        if value is None or value <= 0:
            # No timer: the upstream itself (never closed by us), or a signal
            # that never aborts.
            self.seconds: float | None = None
            self.signal: AbortSignal = upstream if upstream is not None else AbortSignal()
            self._owns_signal = False
            return
        self.seconds = value
        # One signal: the upstream's aborts and this deadline's own timer.
        self.signal = _timeout_signal(value, code) if upstream is None else deadline_signal(upstream, value, code)
        self._owns_signal = True

    @property
    def timed_out(self) -> bool:
        """``True`` when this deadline's own timer aborted its signal (not
        the upstream, whatever its reason)."""
        return self._owns_signal and timer_fired(self.signal)

    def close(self) -> None:
        """Cancel the timer and detach from the upstream. Idempotent."""
        if self._owns_signal:
            self.signal.close()

    def __enter__(self) -> Deadline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Deadline code={self.code!r} seconds={self.seconds!r} signal={self.signal!r}>"


def deadline(upstream: AbortSignal | None, seconds: float | None, code: str) -> Deadline:
    """Arm a deadline of ``seconds`` (``None`` or ``<= 0``: no timer) over
    ``upstream`` (``None``: no upstream). The timer aborts the signal with
    ``TimeoutReason(code, seconds)``; its listeners run on a library thread,
    never the caller's. Raises ``TypeError`` for a
    non-number ``seconds`` or non-``str`` code, ``ValueError`` for NaN or
    infinity. Source: docs/contract.md#cancellation."""
    return Deadline(upstream, seconds, code)


def timeout_of(source: AbortSignal | BaseException, code: str | None = None) -> TimeoutReason | None:
    """The ``TimeoutReason`` that aborted ``source`` (a signal's reason, an
    ``AbortError``'s reason, or a ``TimeoutReason`` itself), or ``None``.
    With ``code``, only a reason of that code counts, so one wrapper's timer
    is never mistaken for another's."""
    reason: object
    if isinstance(source, AbortSignal):
        reason = source.reason
    elif isinstance(source, BaseException):
        reason = source
    else:
        raise TypeError(f"timeout_of() takes an AbortSignal or an exception, not {type(source).__name__}")
    seen = 0
    while isinstance(reason, AbortError) and seen < 100:
        reason = reason.reason
        seen += 1
    if isinstance(reason, TimeoutReason) and (code is None or reason.code == code):
        return reason
    return None
