"""The call-observer seam: what watches every call of a registry, whatever
its outcome (package-internal, used by ``dshtools.otel``).

Owns the ``CallObserver``/``CallWatch`` protocols, ``set_call_observer``,
and the guarded ``enter``/``exit`` of a watch around a call's dispatch
(``ToolRegistry._dispatch``). The registry itself calls ``started`` (in
``_begin``) and ``finished`` (in ``_complete``); without an observer the
call path never enters this module.
"""

from __future__ import annotations

import threading
from typing import Protocol

from .._core.errors import report_unraisable, safe_repr
from .._types.calls import ToolExecutionInput, ToolExecutionResult
from .._types.hooks import ToolDefinition

__all__ = ["CallObserver", "CallWatch", "enter_watch", "exit_watch", "set_call_observer"]


class CallWatch(Protocol):
    """One call as a ``CallObserver`` watches it. The registry calls
    ``enter()`` in the thread that dispatches the call, before its body is
    submitted, and ``exit(token)`` with what it returned in the same thread
    once the dispatch settled (the body joined); then ``finished(result)``
    exactly once, in the thread that published the call's one result, after
    the result observers. Exceptions from these are reported as unraisable;
    they never change the result."""

    def enter(self) -> object: ...

    def exit(self, token: object) -> None: ...

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
