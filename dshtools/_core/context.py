"""The caller's ``contextvars`` context, carried to the thread that does
its work (docs/contract.md#a22). Package-internal.

Guarantees:

* **One mechanism.** Every hand-off of a call's work from the thread that
  asks for it to a thread that does it goes through ``carry``, taken in
  the asking thread: the awaited entry points (``aexecute``, ``aresume``,
  ``execute_batch_async``) carry their whole job from the awaiting task,
  the thread backend each body from the thread that submits it, a batch
  each dispatch. Whatever runs downstream of an entry point runs in the
  context that entry point carried, so every later hand-off copies the
  caller's values again: a body sees them (and so the OpenTelemetry span
  that was current) whichever path and thread led to it.
* **Isolation.** Each ``carry`` takes its own copy (``copy_context`` shares
  the underlying map: O(1)); what the carried work sets is seen neither by
  the caller nor by other work carried from the same context.
* A carried callable is run once: a ``Context`` can be entered by one
  thread at a time (a second concurrent run raises ``RuntimeError``).
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import copy_context
from functools import partial
from typing import ParamSpec, TypeVar

__all__ = ["carry"]

_P = ParamSpec("_P")
_T = TypeVar("_T")


def carry(fn: Callable[_P, _T]) -> Callable[_P, _T]:
    """``fn`` bound to a copy of the calling thread's context, taken now:
    calling the result (in any thread, once) runs ``fn`` with the same
    arguments inside that copy and returns or raises what ``fn`` does."""
    return partial(copy_context().run, fn)
