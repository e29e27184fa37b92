"""Progress from a running body to the registry's progress observers
(docs/policies.md#progress).

``run.report_progress(...)`` in the body's thread hands the update to one
delivery thread per process, ``dshtools-progress``, which calls the
observers; the body never waits for them.

Guarantees:

* The body's ``run.report_progress`` (``ToolRunContext.report_progress``)
  stores the common case itself (a registry's run, no call observer,
  exact ``int``/``float``/``str`` values), one Python frame from the body
  to the store, and calls ``enqueue`` when the call is not queued;
  everything else goes to ``post`` (``Run.report_progress``), which does
  the same with the full checks.
* Neither blocks on an observer nor raises. They check the values (an
  update that is not a number is dropped), store them as the call's
  latest update (``run.progress_latest``, replacing one not yet
  delivered: a slow observer sees coalesced updates, always the latest)
  and, only when the call is not already queued for delivery
  (``run.progress_queued``), queue it and wake the delivery thread. The
  common case, a call already queued, is one attribute store and one
  attribute read, no lock: the delivery thread takes a call off the queue
  (clears ``progress_queued``) *before* it reads the call's latest
  update, and the body stores its update *before* it reads
  ``progress_queued``, so an update is either read by a delivery under way
  or queues the call again: never lost. Never delivered twice either: the
  delivery thread keeps the update it last handed out
  (``run.progress_sent``) and skips a call whose latest update is that
  same object (each report is a new tuple, kept alive there). Each of
  those steps is one atomic attribute operation.
* A call observer's watch (``run.watch``) sees every accepted update, in
  the body's thread.
* Each call's updates reach the observers in the order they were
  reported, the last one included; updates of one call are delivered one
  at a time, by the delivery thread, as a ``ProgressUpdate`` built there.
* An observer's exception goes to ``sys.unraisablehook``; the other
  observers still run.
* ``flush(timeout)`` waits (at most ``timeout`` seconds) until every update
  posted before it was handed to the observers: a caller that must not let
  a call's last update come after its result (an MCP server answering the
  request) flushes once the call returned.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from typing import Any, Final

from .._core.errors import report_unraisable, safe_repr
from .._core.interrupts import after_fork_in_child
from .._types.hooks import ProgressObserver, ProgressUpdate
from .._types.tools import ProgressRun
from .observer import watch_progress

__all__ = ["enqueue", "flush", "post"]

_log: Final = logging.getLogger("dshtools")

_Entry = tuple[float, "float | None", "str | None"]
"""``(progress, total, message)``: a call's latest update."""

_queue: deque[ProgressRun] = deque()
"""Calls waiting for delivery, in the order they were queued; under ``_COND``."""
_COND = threading.Condition(_lock := threading.Lock())
_DELIVERED = threading.Condition(_lock)
"""Wakes the flushers after a delivery (same lock as ``_COND``)."""
_thread: threading.Thread | None = None
_taken = 0
"""How many calls the delivery thread took off ``_queue`` (under ``_COND``)."""
_done = 0
"""How many of those it finished delivering (or skipped; under ``_COND``)."""
_flushing = 0
"""How many threads wait in ``flush`` (under ``_COND``)."""
_IDLE_S: Final = 30.0
"""Seconds the delivery thread stays with nothing to deliver before it ends."""


def _after_fork_in_child() -> None:
    # The delivery thread does not exist in the child, and its lock may
    # have been held (docs/contract.md#a10).
    global _COND, _DELIVERED, _thread, _taken, _done, _flushing
    lock = threading.Lock()
    _COND = threading.Condition(lock)
    _DELIVERED = threading.Condition(lock)
    _queue.clear()
    _thread = None
    _taken = _done = _flushing = 0


after_fork_in_child(_after_fork_in_child)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(value)


def _valid(progress: object, total: object, message: object) -> bool:
    """The full check (subclasses of ``int``/``float``/``str`` included);
    ``False`` for anything it cannot check (an ``int`` too large for a
    float, a subclass whose methods raise)."""
    try:
        return (
            _is_number(progress)
            and (total is None or _is_number(total))
            and (message is None or isinstance(message, str))
        )
    except Exception:
        return False


def post(run: ProgressRun, progress: object, total: object, message: object) -> None:
    """``Run.report_progress``: queue the update ``(progress, total,
    message)`` of the call ``run`` for its progress observers
    (``run.hooks.progress``, snapshotted when the call started; without one
    it returns at once) in the body's thread; dropped, with a debug log
    line, when ``progress`` or ``total`` (unless ``None``) is not a number
    or ``message`` is neither a ``str`` nor ``None``. A call observer's
    watch (``run.watch``) sees every update, in this thread."""
    observers = run.hooks.progress
    watch = run.watch
    if not observers and watch is None:
        return
    if not _valid(progress, total, message):
        _log.debug("a tool reported progress that is not a number (dropped): %s", safe_repr((progress, total, message)))
        return
    if watch is not None:
        _watch(watch, run, progress, total, message)
        if not observers:
            return
    run.progress_latest = (progress, total, message)
    if not run.progress_queued:
        enqueue(run)


def enqueue(run: ProgressRun) -> None:
    """Queue ``run`` for delivery unless it is queued, and wake (or start)
    the delivery thread."""
    global _thread
    with _COND:
        if run.progress_queued:
            return
        run.progress_queued = True
        _queue.append(run)
        if _thread is None:
            _thread = threading.Thread(target=_deliver, name="dshtools-progress", daemon=True)
            _thread.start()
        else:
            _COND.notify()


def _watch(watch: Any, run: ProgressRun, progress: Any, total: Any, message: Any) -> None:
    """Every update to the call observer's watch, in the body's thread (it
    keeps its own bounded record: docs/observability.md)."""
    try:
        update = ProgressUpdate(float(progress), None if total is None else float(total), message)
    except (OverflowError, ValueError, TypeError):
        return
    watch_progress(watch, update, run.call)


def flush(timeout: float) -> bool:
    """Wait until every update posted before this call has been handed to
    its observers, at most ``timeout`` seconds; ``True`` when it was. Never
    call it from an observer (the delivery thread would wait for itself)."""
    global _flushing
    deadline = time.monotonic() + timeout
    with _COND:
        # A posted update's call is queued or being delivered; the queue is
        # FIFO, so those calls are the next ``len(_queue)`` the thread
        # takes, and the one it is delivering was counted in ``_taken``.
        owed = _taken + len(_queue)
        _flushing += 1
        try:
            while _done < owed:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                _DELIVERED.wait(left)
        finally:
            _flushing -= 1
    return True


def _deliver() -> None:
    global _thread, _taken, _done
    delivered = False
    while True:
        with _COND:
            if delivered:
                delivered = False
                _done += 1
                if _flushing:
                    _DELIVERED.notify_all()
            while not _queue:
                if not _COND.wait(_IDLE_S) and not _queue:
                    _thread = None
                    return
            run = _queue.popleft()
            _taken += 1
            delivered = True  # counted done when this round ends
            run.progress_queued = False  # first: a later post queues the call again
            entry: _Entry | None = run.progress_latest
            if entry is None or entry is run.progress_sent:
                continue
            run.progress_sent = entry
        progress, total, message = entry
        try:
            update = ProgressUpdate(float(progress), None if total is None else float(total), message)
        except (OverflowError, ValueError, TypeError):  # an int too large for a float: dropped
            _log.debug("a tool reported progress that is not a float (dropped): %s", safe_repr(entry))
            continue
        execution: Any = run.view
        observers: tuple[ProgressObserver, ...] = run.hooks.progress
        for observer in observers:
            try:
                observer(execution, update)
            except BaseException as exc:
                report_unraisable(exc, "Exception in progress observer " + safe_repr(observer), update)
