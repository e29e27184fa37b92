"""The overrun watch: one process-wide timer behind every aborted call's
"has not returned 1 s after its abort" warning (docs/contract.md#a21,
docs/contract.md#scale).

Guarantees:

* ``watch(target, delay)`` makes ``target._overdue()`` run once, on an
  abort runner (``dshtools._signal.timer``), about ``delay`` seconds later;
  ``target._overdue`` decides itself whether there is still something to
  report (a settled call has nothing).
* The aborting thread pays one ``deque.append`` and one unlocked read per
  call: a shared abort of thousands of in-flight calls takes no lock and
  schedules no timer per call, so it does not contend with the calls it
  woke (they return and settle while it still runs listeners). At most one
  timer entry is pending for all watches together.
* A target is held strongly until its delay passed (``Run`` drops what it
  no longer needs when its dispatch settles).

Invariants: ``_due`` is in the order of its deadlines up to the few
microseconds by which two aborting threads' clock reads and appends may
interleave (every watch has the delay ``OVERRUN_WARNING_S``). ``_armed[0]``
is ``True`` while a sweep is scheduled or running; it is set only under
``_lock``; a sweep clears it under ``_lock`` and then re-reads ``_due``, and
``watch`` appends and then reads ``_armed[0]``: one of them sees the other,
so no watch is left without a sweep (sequentially consistent with the GIL;
``deque`` operations and the flag's list item are atomic on free-threaded
builds too).
"""

from __future__ import annotations

import collections
import threading
import time
from typing import Any, Final

from .._core.errors import report_unraisable, safe_repr
from .._core.interrupts import after_fork_in_child
from .._signal import timer as _timer

__all__ = ["watch"]

_due: collections.deque[tuple[float, Any]] = collections.deque()
_lock = threading.Lock()
_armed: list[bool] = [False]


class _Sweeper:
    """The timer target of the one pending sweep (module-level: the
    timer's weak reference to it never dies)."""

    __slots__ = ("__weakref__",)

    def _on_timer(self) -> None:
        _sweep()


_SWEEPER: Final = _Sweeper()


def watch(target: Any, delay: float) -> None:
    """Run ``target._overdue()`` once about ``delay`` seconds from now, on
    an abort runner. Called in the aborting thread; never blocks except
    for the first watch after an idle period, which takes ``_lock`` to
    schedule the sweep."""
    _due.append((time.monotonic() + delay, target))
    if not _armed[0]:
        with _lock:
            if not _armed[0]:
                _armed[0] = True
                _timer.schedule(delay, _SWEEPER)


def _sweep() -> None:
    # On an abort runner: report what is due, then schedule the next sweep
    # or stand down.
    now = time.monotonic()
    while True:
        try:
            item = _due.popleft()
        except IndexError:
            break
        if item[0] > now:
            _due.appendleft(item)
            break
        try:
            item[1]._overdue()
        except Exception as exc:
            report_unraisable(exc, "Exception in overrun watch " + safe_repr(item[1]), None)
    with _lock:
        _armed[0] = False
        try:
            head = _due[0][0]
        except IndexError:
            return
        _armed[0] = True
        _timer.schedule(max(0.0, head - time.monotonic()), _SWEEPER)


def _after_fork_in_child() -> None:
    # The parent's watched calls do not exist in the child, and its lock
    # may have been held by a thread that does not either.
    global _lock
    _lock = threading.Lock()
    _due.clear()
    _armed[0] = False


after_fork_in_child(_after_fork_in_child)
