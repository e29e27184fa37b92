"""Process lifecycle signals of the command line (docs/contract.md#a13):
SIGTERM and SIGHUP are handled like Ctrl-C.

Guarantees:

* While ``_interrupts()`` is active (main thread only), SIGINT, SIGTERM and
  SIGHUP each raise ``KeyboardInterrupt`` in the main thread, exactly what
  Ctrl-C does by default, so one code path cancels, joins and reports,
  whichever signal came. The first signal's number and the monotonic time
  it arrived are recorded (the handler only appends to a list and reads a
  clock, nothing that takes a lock), so the run can say which signal
  stopped it and exit ``128 + signum``.
* A signal already ignored when the run starts (``nohup`` ignores SIGHUP,
  a non-interactive shell's background job SIGINT) stays ignored.
* The previous handlers are restored on exit. Off the main thread (the
  command line called in-process from a worker) nothing is installed and
  Ctrl-C keeps its default meaning.
* SIGQUIT (Ctrl-\\) is left alone: it ends the process at once, the way out
  when a body ignores its cancellation.
"""

from __future__ import annotations

import signal as _os_signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

_HANDLED: tuple[int, ...] = (_os_signal.SIGINT, _os_signal.SIGTERM, _os_signal.SIGHUP)


class _Interrupts:
    """What the lifecycle handlers saw: ``received`` (signal numbers, in
    order) and ``since`` (``time.monotonic()`` of the first, or ``None``)."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self.since: float | None = None

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        if self.since is None:
            self.since = time.monotonic()
        self.received.append(signum)
        raise KeyboardInterrupt

    def name(self) -> str:
        """How the run was interrupted, for the report: ``"Ctrl-C"`` for
        SIGINT (or a ``KeyboardInterrupt`` no handler of ours raised),
        else the signal's name."""
        if not self.received or self.received[0] == _os_signal.SIGINT:
            return "Ctrl-C"
        return _os_signal.Signals(self.received[0]).name

    def exit_status(self) -> int:
        """``128 + signum`` of the first signal; 130 (SIGINT) when none was
        recorded."""
        return 128 + (self.received[0] if self.received else _os_signal.SIGINT)


_current = _Interrupts()  # replaced on each _interrupts() entry


def current() -> _Interrupts:
    """The record of the innermost active ``_interrupts()`` (an empty one
    outside it)."""
    return _current


@contextmanager
def _interrupts() -> Iterator[_Interrupts]:
    global _current
    record = _Interrupts()
    previous_record = _current
    _current = record
    previous: dict[int, Any] = {}
    try:
        if threading.current_thread() is threading.main_thread():
            for signum in _HANDLED:
                # An ignored signal stays ignored: ``nohup`` (SIGHUP), a
                # background job of a non-interactive shell (SIGINT).
                if _os_signal.getsignal(signum) is not _os_signal.SIG_IGN:
                    previous[signum] = _os_signal.signal(signum, record._handle)
        yield record
    finally:
        for signum, handler in previous.items():
            _os_signal.signal(signum, handler if handler is not None else _os_signal.SIG_DFL)
        _current = previous_record
