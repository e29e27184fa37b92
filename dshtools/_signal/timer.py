"""The one process-wide timer thread behind every timeout, and the threads
that run the aborts it decides (docs/contract.md#cancellation,
docs/contract.md#a15).

Guarantees:

* All pending timeouts in the process share a single daemon thread, started
  lazily on the first ``schedule``; 10 000 pending timeouts cost 10 000 heap
  entries, not 10 000 threads.
* The timer thread never runs user code, so no listener can hold back
  another timer: it only decides that a deadline is reached and hands the
  abort (the target's ``_on_timer()``: mark aborted, wake the waiters, run
  the listeners, in that order on one thread) to an *abort runner*. A
  runner is a library thread that runs one abort at a time; an abort goes
  to an idle runner, or to a new one when every runner is busy, so a
  listener that blocks delays only the rest of its own abort. The timer
  thread starts a runner only when none is idle or starting; aborts that
  find no idle runner wait in a backlog, and a runner that takes a job
  while others wait starts spares first (up to ``SPARES_PER_START`` each),
  so a burst of blocking aborts grows the runners by doubling. A runner idle for
  ``RUNNER_IDLE_EXIT`` seconds ends: a quiet process has no runner
  threads.
* An entry holds its target **weakly** unless the target asks to be kept
  alive (``entry.strong``): a timeout signal nobody can observe is released
  and its entry dropped, while one that has listeners or dependents stays
  alive until it fires: a timeout with listeners is never lost to the
  garbage collector, and one nobody holds leaves nothing behind.
* ``cancel`` is O(1); cancelled and released entries are compacted away as
  soon as they are the majority of the heap (and at least 64), so memory
  follows the live timers, not the long deadlines of dead ones.
* A target's ``_on_timer()`` runs on a runner, no timer lock held; an
  exception from it is reported through ``sys.unraisablehook`` and the
  runner carries on.
* ``run_on_abort_runner`` hands an abort decided on any other thread to
  the same runners, so a thread that must not be held up (an event loop's)
  decides an abort without running its listeners.
* In the child of ``os.fork()`` the timer state is fresh: a timer thread of
  its own if inherited timers are pending, and no runner.
"""

from __future__ import annotations

import collections
import heapq
import itertools
import math
import threading
import time
import weakref
from collections.abc import Callable
from typing import Final, Protocol

from .._core.errors import report_unraisable
from .._core.interrupts import after_fork_in_child

__all__ = [
    "RUNNER_IDLE_EXIT",
    "SPARES_PER_START",
    "TimerEntry",
    "cancel",
    "pending_count",
    "run_on_abort_runner",
    "runner_count",
    "schedule",
]

# A fired timer's abort, run by an abort runner.
_Job = Callable[[], object]


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
    # fork() copies this module's state but not the timer thread nor the
    # runners: without this, `_thread` names a thread that does not exist in
    # the child, so no timeout would ever fire there, idle runners that do
    # not exist would be handed jobs, and either lock may be copied while
    # held by a parent thread. Give the child fresh locks, no runner,
    # re-heapify (the parent's timer thread may have been between two steps
    # of a compaction) and a timer thread of its own if inherited timers
    # are pending.
    global _lock, _cond, _thread, _wake_at, _runners_lock, _idle, _runners, _backlog, _starting
    _lock = threading.Lock()
    _cond = threading.Condition(_lock)
    _thread = None
    _wake_at = math.inf
    _runners_lock = threading.Lock()
    _idle = []
    _backlog = collections.deque()
    _starting = 0
    _runners = 0
    heapq.heapify(_heap)
    if _heap:
        _start_thread_locked()


after_fork_in_child(_after_fork_in_child)


def _no_target() -> None:
    return None


def schedule(delay: float, target: _Target) -> TimerEntry:
    """Arrange ``target._on_timer()`` to run on an abort runner once
    ``delay`` seconds (monotonic clock) have passed. Returns the entry for
    ``cancel``."""
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


# ------------------------------------------------------------ abort runners

RUNNER_IDLE_EXIT: Final = 1.0
"""Seconds an abort runner waits for its next job before it ends."""

SPARES_PER_START: Final = 2
"""At most this many spare runners a runner starts when it takes a job while
fired aborts still wait for one: a burst of aborts whose listeners block
grows the runners by doubling, not by one thread start after another."""


class _Runner:
    """One abort runner: ``wake`` is held while it waits for a job; the
    hand-off stores ``job`` and then releases it."""

    __slots__ = ("job", "wake")

    def __init__(self) -> None:
        self.job: _Job | None = None
        self.wake = threading.Lock()
        self.wake.acquire()


# Guards `_idle`, `_backlog`, `_starting` and `_runners`; never held while a
# job runs or a thread starts.
_runners_lock = threading.Lock()
# Runners waiting for a job, the most recently idle last (it gets the next
# job, so the others reach their idle exit and end).
_idle: list[_Runner] = []
# Fired aborts no runner has taken yet, oldest first. Invariant: while it is
# not empty, `_idle` is empty and a runner will take from it: one that is
# starting (`_starting` > 0) or one whose job ends (it looks here before it
# goes idle).
_backlog: collections.deque[_Job] = collections.deque()
# Runner threads started that have not yet looked at the backlog.
_starting = 0
# Runner threads alive, starting, busy or idle (`runner_count`).
_runners = 0


def runner_count() -> int:
    """Abort runner threads alive, busy or idle (diagnostics and tests)."""
    return _runners


def run_on_abort_runner(abort: Callable[[], object]) -> None:
    """Run ``abort()`` on an abort runner, as a fired timer's abort runs:
    callable from any thread, it never runs ``abort`` in the calling thread
    (unless no thread can start, at interpreter shutdown) and never waits
    for it. For a thread that decides an abort but must not run its
    listeners (the timer thread, an event loop's thread): ``abort`` is
    typically ``partial(controller.abort, reason)``. An exception from it
    goes to ``sys.unraisablehook``. Source: docs/contract.md#a15."""
    _hand_off(abort)


def _hand_off(job: _Job) -> None:
    # Any thread (all state under `_runners_lock`). It starts a thread only
    # when no runner is idle and none is starting; the runners start the rest.
    global _starting, _runners
    with _runners_lock:
        if _idle:
            runner = _idle.pop()
            runner.job = job
            runner.wake.release()
            return
        _backlog.append(job)
        if _starting:
            return
        _starting += 1
        _runners += 1
    _start_runners(1)


def _start_runners(count: int) -> None:
    """Start ``count`` runners already counted in ``_starting``/``_runners``.
    When none can start (interpreter shutdown, a thread limit) and no other
    runner is starting, this thread runs the backlog itself: late rather
    than never."""
    global _starting, _runners
    for started in range(count):
        thread = threading.Thread(target=_serve, args=(_Runner(),), name="dshtools-abort", daemon=True)
        try:
            thread.start()
        except RuntimeError:
            with _runners_lock:
                _starting -= count - started
                _runners -= count - started
                orphaned = list(_backlog) if _starting == 0 else []
                if orphaned:
                    _backlog.clear()
            for job in orphaned:
                _run_job(job)
            return


def _run_job(job: _Job) -> None:
    try:
        job()
    except BaseException as exc:  # a runner (and the timer thread) must survive anything
        report_unraisable(exc, "Exception in dshtools timer callback", job)


def _next_job(runner: _Runner) -> tuple[_Job | None, int]:
    """Under the lock: the runner's next job (handed to it, else the oldest
    of the backlog) and how many spares to start before running it."""
    global _starting, _runners
    job, runner.job = runner.job, None
    if job is None and _backlog:
        job = _backlog.popleft()
    if job is None:
        return None, 0
    if _backlog:
        # Aborts still wait: start spares so that they do not wait for this
        # job, whose listeners may block.
        spares = max(0, min(len(_backlog), SPARES_PER_START) - _starting)
    else:
        # Nothing waits, but this took the last idle place: one spare, so
        # the timer thread finds an idle runner for the next abort.
        spares = 0 if (_idle or _starting) else 1
    _starting += spares
    _runners += spares
    return job, spares


def _serve(runner: _Runner) -> None:
    global _starting, _runners
    with _runners_lock:
        _starting -= 1
        job, spares = _next_job(runner)
    while True:
        if job is not None:
            if spares:
                _start_runners(spares)
            _run_job(job)
            del job
        with _runners_lock:
            job, spares = _next_job(runner)
            if job is not None:
                continue
            _idle.append(runner)
        if not runner.wake.acquire(timeout=RUNNER_IDLE_EXIT):
            with _runners_lock:
                if runner in _idle:
                    _idle.remove(runner)
                    _runners -= 1
                    return
            # Handed a job between the timeout and the lock: it is on its way.
            runner.wake.acquire()
        with _runners_lock:
            job, spares = _next_job(runner)


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
        # Hand off outside the lock: the abort runs user code (listeners),
        # which may schedule or cancel other timers.
        if target is not None:
            _hand_off(target._on_timer)
            del target
