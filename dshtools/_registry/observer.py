"""The call-observer seam: what watches every call of a registry, whatever
its outcome (package-internal, used by ``dshtools.otel``).

Owns the ``CallObserver``/``CallWatch`` protocols, ``set_call_observer``,
and the guarded ``enter``/``exit`` of a watch around a call's dispatch
(``ToolRegistry._dispatch``), of its ``aborted`` (``run._Attempt``, when
a dispatch signal aborts) and of its ``progress`` (``Run.report_progress``).
The registry itself calls ``started`` (in ``_begin``) and, through
``notify_published``, ``finished`` (in ``_complete``); without an observer the call path never enters this module.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Protocol

from .._core.errors import report_unraisable, safe_repr
from .._signal import AbortSignal
from .._types.calls import ToolExecutionInput, ToolExecutionResult
from .._types.hooks import ProgressUpdate, ResultObserver, ToolDefinition
from .._types.tools import ToolExecution

__all__ = [
    "CallObserver",
    "CallWatch",
    "enter_watch",
    "exit_watch",
    "notify_published",
    "set_call_observer",
    "watch_aborted",
    "watch_progress",
]


class CallWatch(Protocol):
    """One call as a ``CallObserver`` watches it. The registry calls
    ``enter()`` in the thread that dispatches the call, before its body is
    submitted, and ``exit(token)`` with what it returned in the same thread
    once the dispatch settled (the body joined); then ``finished(result)``
    exactly once, in the thread that published the call's one result, after
    the result observers. In between, ``aborted(signal)`` when a dispatch
    signal of the call (the signal its body sees) aborts, in the aborting
    thread, at most once per attempt and never after its attempt settled;
    and ``progress(update)`` for each update the body reports, in the
    body's thread (or a thread of its own), while the call is in flight.
    Exceptions from these are reported as unraisable; they never change
    the result."""

    def enter(self) -> object: ...

    def exit(self, token: object) -> None: ...

    def aborted(self, signal: AbortSignal) -> None: ...

    def progress(self, update: ProgressUpdate) -> None: ...

    def finished(self, result: ToolExecutionResult) -> None: ...


class CallObserver(Protocol):
    """Sees every call of a registry, whatever its outcome (package-internal:
    ``dshtools.otel``). ``started(call, definition)`` runs at the start of
    ``execute`` (or of a batch call's first phase) in the caller's thread,
    with the caller's ``contextvars`` context current; ``definition`` is
    ``None`` for an unknown tool. Returns the call's ``CallWatch``, or
    ``None`` to leave this call unwatched. An exception from it is reported
    as unraisable and the call is unwatched."""

    def started(self, call: ToolExecutionInput, definition: ToolDefinition | None) -> CallWatch | None: ...


class Observed(Protocol):
    """What ``set_call_observer`` touches of a registry (``ToolRegistry``
    implements it; this module never imports the registry): ``_observer``,
    replaced under ``_lock``."""

    _lock: threading.Lock
    _observer: CallObserver | None


def set_call_observer(registry: Observed, observer: CallObserver | None) -> CallObserver | None:
    """Install ``observer`` on ``registry`` (``None`` removes it) and return
    the one it replaces. Calls already started keep the watch they got."""
    with registry._lock:
        previous = registry._observer
        registry._observer = observer
    return previous


def enter_watch(watch: CallWatch, call: ToolExecutionInput) -> object:
    """``watch.enter()``, its exception reported as unraisable (then ``None``)."""
    try:
        return watch.enter()
    except Exception as exc:
        report_unraisable(exc, "Exception in call observer " + safe_repr(watch), call)
        return None


def exit_watch(watch: CallWatch, token: object, call: ToolExecutionInput) -> None:
    """``watch.exit(token)``, its exception reported as unraisable."""
    try:
        watch.exit(token)
    except Exception as exc:
        report_unraisable(exc, "Exception in call observer " + safe_repr(watch), call)


def watch_aborted(watch: CallWatch, signal: AbortSignal, call: ToolExecutionInput) -> None:
    """``watch.aborted(signal)``, its exception reported as unraisable."""
    try:
        watch.aborted(signal)
    except Exception as exc:
        report_unraisable(exc, "Exception in call observer " + safe_repr(watch), call)


def watch_progress(watch: CallWatch, update: ProgressUpdate, call: ToolExecutionInput) -> None:
    """``watch.progress(update)``, its exception reported as unraisable."""
    try:
        watch.progress(update)
    except Exception as exc:
        report_unraisable(exc, "Exception in call observer " + safe_repr(watch), call)


def notify_published(
    observers: Sequence[ResultObserver],
    view: ToolExecution | None,
    watch: CallWatch | None,
    result: ToolExecutionResult,
) -> KeyboardInterrupt | None:
    """Tell a published ``result`` to the result ``observers`` (each with
    ``view``; none is told without a view), then to
    ``watch.finished``, in the publishing thread. An exception from one is
    reported as unraisable and the rest still run; the first
    ``KeyboardInterrupt`` is returned for the caller to raise after
    publication (docs/policies.md#post-execute-hooks-and-observers)."""
    interrupt: KeyboardInterrupt | None = None
    if view is not None:
        for observer in observers:
            try:
                observer(view, result)
            except KeyboardInterrupt as ki:
                interrupt = interrupt or ki
            except BaseException as exc:
                report_unraisable(exc, "Exception in result observer " + safe_repr(observer), result)
    if watch is not None:
        try:
            watch.finished(result)
        except KeyboardInterrupt as ki:
            interrupt = interrupt or ki
        except BaseException as exc:
            report_unraisable(exc, "Exception in call observer " + safe_repr(watch), result)
    return interrupt
