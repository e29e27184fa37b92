"""Progress from a running body to the registry's progress observers
(docs/policies.md#progress).

``run.report_progress(...)`` in the body's thread hands the update to one
delivery thread per process, ``dshtools-progress``, which calls the
observers; the body never waits for them.

Guarantees:

* ``post`` never blocks on an observer and never raises: it stores the
  update under the call's token (replacing an update not yet delivered:
  a slow observer sees coalesced updates, always the latest) and wakes
  the delivery thread. It takes one module lock for a dict store.
* Each call's updates reach the observers in the order they were
  reported, the last one included; updates of one call are delivered one
  at a time, by the delivery thread.
* An observer's exception goes to ``sys.unraisablehook``; the other
  observers still run.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from .._core.errors import report_unraisable, safe_repr
from .._core.interrupts import after_fork_in_child
from .._types.hooks import ProgressObserver, ProgressUpdate

if TYPE_CHECKING:
    from .._types.tools import ToolExecution

__all__ = ["post"]

# The updates not yet delivered, by call token, in first-reported order;
# guarded by _COND's lock.
_COND = threading.Condition(threading.Lock())
_pending: dict[object, tuple[Callable[[], ToolExecution], tuple[ProgressObserver, ...], ProgressUpdate]] = {}
_thread: threading.Thread | None = None
_IDLE_S: Final = 30.0
"""Seconds the delivery thread stays with nothing to deliver before it ends."""


def _after_fork_in_child() -> None:
    # The delivery thread does not exist in the child, and its lock may
    # have been held (docs/contract.md#a10).
    global _COND, _thread
    _COND = threading.Condition(threading.Lock())
    _pending.clear()
    _thread = None


after_fork_in_child(_after_fork_in_child)


def post(
    token: object, view: Callable[[], ToolExecution], observers: tuple[ProgressObserver, ...], update: ProgressUpdate
) -> None:
    """Queue ``update`` of the call ``token`` for ``observers``."""
    global _thread
    with _COND:
        _pending[token] = (view, observers, update)
        if _thread is None:
            _thread = threading.Thread(target=_deliver, name="dshtools-progress", daemon=True)
            _thread.start()
        else:
            _COND.notify()


def _deliver() -> None:
    global _thread
    while True:
        with _COND:
            while not _pending:
                if not _COND.wait(_IDLE_S) and not _pending:
                    _thread = None
                    return
            token = next(iter(_pending))
            view, observers, update = _pending.pop(token)
        execution: Any = view()
        for observer in observers:
            try:
                observer(execution, update)
            except BaseException as exc:
                report_unraisable(exc, "Exception in progress observer " + safe_repr(observer), update)
