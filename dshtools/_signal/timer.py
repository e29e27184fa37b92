"""The one process-wide timer thread behind every timeout (docs/contract.md §1).

Guarantees:

* All timeouts in the process share a single daemon thread, started lazily
  on the first ``schedule``; 10 000 pending timeouts cost 10 000 heap
  entries, not 10 000 threads.
* An entry holds its target **weakly** unless the target asks to be kept
  alive (``entry.strong``): a timeout signal nobody can observe is released
  and its entry dropped, while one that has listeners or dependents stays
  alive until it fires (the liveness half of B02, the leak half of B04).
* ``cancel`` is O(1); cancelled and released entries are compacted away as
  soon as they are the majority of the heap (and at least 64), so memory
  follows the live timers, not the long deadlines of dead ones.
* A target's ``_on_timer()`` runs on the timer thread without the timer
  lock held; an exception from it is reported through
  ``sys.unraisablehook`` and the thread carries on.
"""

from __future__ import annotations

import heapq
import itertools
import math
import os
import threading
import time
import weakref
from collections.abc import Callable
from typing import Protocol

from .._core.errors import report_unraisable

__all__ = ["TimerEntry", "cancel", "pending_count", "schedule"]


class _Target(Protocol):
    def _on_timer(self) -> None: ...


class TimerEntry:
    """One scheduled firing. ``strong`` is set by the target while it must be
    kept alive; ``cancelled`` is final."""

    __slots__ = ("__weakref__", "cancelled", "ref", "seq", "strong", "when")

    def __init__(self, when: float, seq: int, target: _Target) -> None:
        self.when = when
        self.seq = seq
        # Replaced by `_no_target` on cancel: dropping the weak reference
        # also drops its callback, so a cancelled entry's target is freed
        # without running `_released`.
        self.ref: Callable[[], _Target | None] = weakref.ref(target, _released)
        self.strong: _Target | None = None
        self.cancelled = False

    def live(self) -> bool:
        return not self.cancelled and (self.strong is not None or self.ref() is not None)


# Plain `with _lock:` where nothing waits (schedule, cancel): entering a
# Condition costs two Python-level calls; notify() only needs the lock held.
_lock = threading.Lock()
_cond = threading.Condition(_lock)
# Heap items are (when, seq, entry): ordered by C tuple comparison (seq is
# unique, so entries are never compared), not by a Python __lt__ called
# log(n) times per schedule.
_heap: list[tuple[float, int, TimerEntry]] = []
_seq = itertools.count()
_thread: threading.Thread | None = None
# When the timer thread will wake on its own: the deadline it sleeps until,
# +inf while it sleeps with nothing to wait for, -inf while it is awake (it
# rescans the heap under the lock before sleeping again). ``schedule``
# notifies only for an entry due before that, so arming and cancelling a
# long timeout per call (TimeoutPolicy) does not wake the thread each time.
_wake_at = math.inf
# Entries known to be dead (cancelled or target released) but still in the
# heap. Only a heuristic for compaction: written racily by weakref callbacks.
_garbage = 0


def _released(_ref: object) -> None:
    # Runs inside the garbage collector, possibly in a thread that already
    # holds ``_cond``: it must never block. Count the garbage and, only if the
    # lock happens to be free, compact right away.
    global _garbage
    _garbage += 1
    if _lock.acquire(blocking=False):
        try:
            _maybe_compact_locked()
        finally:
            _lock.release()


# Below this many dead entries a compaction is not worth its cost: arming and
# cancelling one timeout per call (TimeoutPolicy) would otherwise rebuild a
# tiny heap three times per call (schedule, cancel, release).
_COMPACT_MIN = 64


def _maybe_compact_locked() -> None:
    global _garbage
    if _garbage < _COMPACT_MIN or (_garbage * 2 < len(_heap) and _garbage < 4096):
        return
    _heap[:] = [item for item in _heap if item[2].live()]
    heapq.heapify(_heap)
    _garbage = 0


def _start_thread_locked() -> None:
    global _thread
    _thread = threading.Thread(target=_run, name="dshtools-timer", daemon=True)
    _thread.start()


def _after_fork_in_child() -> None:
    # fork() copies this module's state but not the timer thread: without
    # this, `_thread` names a thread that does not exist in the child, no
    # timeout ever fires there again (gunicorn --preload workers,
    # multiprocessing "fork" children), and `_cond` may be copied while held
    # by the parent's timer thread. Give the child a fresh lock, re-heapify
    # (the parent's thread may have been between two steps of a compaction)
    # and a timer thread of its own if inherited timers are pending.
    global _lock, _cond, _thread, _wake_at
    _lock = threading.Lock()
    _cond = threading.Condition(_lock)
    _thread = None
    _wake_at = math.inf
    heapq.heapify(_heap)
    if _heap:
        _start_thread_locked()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _no_target() -> None:
    return None


def schedule(delay: float, target: _Target) -> TimerEntry:
    """Arrange ``target._on_timer()`` to run on the timer thread after
    ``delay`` seconds (monotonic clock). Returns the entry for ``cancel``."""
    entry = TimerEntry(time.monotonic() + delay, next(_seq), target)
    with _lock:
        if _garbage >= _COMPACT_MIN:
            _maybe_compact_locked()
        heapq.heappush(_heap, (entry.when, entry.seq, entry))
        if _thread is None:
            _start_thread_locked()
        elif entry.when < _wake_at:
            _cond.notify()
    return entry


def cancel(entry: TimerEntry) -> None:
    """Drop ``entry``: its target will not be fired. Idempotent, O(1)."""
    global _garbage
    with _lock:
        if entry.cancelled:
            return
        entry.cancelled = True
        entry.strong = None
        entry.ref = _no_target
        _garbage += 1
        if _garbage >= _COMPACT_MIN:
            _maybe_compact_locked()


def pending_count() -> int:
    """Entries that can still fire (diagnostics and leak tests)."""
    with _lock:
        return sum(1 for item in _heap if item[2].live())


def _run() -> None:
    global _wake_at
    while True:
        with _cond:
            while True:
                while _heap and not _heap[0][2].live():
                    heapq.heappop(_heap)
                if not _heap:
                    _wake_at = math.inf
                    _cond.wait()
                    _wake_at = -math.inf
                    continue
                delay = _heap[0][0] - time.monotonic()
                if delay <= 0:
                    break
                _wake_at = _heap[0][0]
                # Clamp: Condition.wait() raises OverflowError above
                # threading.TIMEOUT_MAX, and a valid but huge timeout
                # (AbortSignal.timeout(1e300)) must not kill the one timer
                # thread every timeout in the process depends on. Waking
                # early only makes the loop rescan and sleep again.
                _cond.wait(min(delay, threading.TIMEOUT_MAX))
                _wake_at = -math.inf
            entry = heapq.heappop(_heap)[2]
            # Read `strong` once: a listener removal on another thread clears
            # it under the signal lock (not this one). Reading it twice
            # ("is not None", then the value) could see the signal, then
            # None, and drop a live timer whose signal is still referenced.
            target = entry.strong
            if target is None:
                target = entry.ref()
            entry.cancelled = True
            entry.strong = None
        # Fire outside the lock: the target runs signal listeners, which may
        # schedule or cancel other timers.
        if target is not None:
            try:
                target._on_timer()
            except BaseException as exc:  # the timer thread must survive anything
                report_unraisable(exc, "Exception in dshtools timer callback", target)
            del target
