"""Process-wide facts every blocking wait and every piece of process-wide
state shares: how long a wait may block before it lets a pending
``KeyboardInterrupt`` in, and how state is reset in a forked child.

Guarantees:

* ``INTERRUPT_SLICE`` is the longest a library wait blocks in one call on
  the main thread, the one thread CPython raises ``KeyboardInterrupt`` in:
  there a wait is a loop of waits of at most this many seconds, so Ctrl-C
  is seen within it even where the operating system does not interrupt a
  blocked lock acquire (Windows; a process-directed signal delivered to
  another thread). ``interrupt_slice()`` is the timeout each such wait
  passes: ``INTERRUPT_SLICE`` on the main thread, ``None`` (untimed) on
  every other thread, where no interrupt can arrive, so that a waiting
  thread other than the main one never wakes until what it waits for
  happens: thousands of waiting calls cost no CPU
  (docs/contract.md#scale).
* ``after_fork_in_child(fn)`` runs ``fn`` in the child of every later
  ``os.fork()``, before any other code of the child runs; on a platform
  without ``os.register_at_fork`` it does nothing (such a platform cannot
  fork a threaded process either). Handlers run in registration order; one
  that raises is reported through ``sys.unraisablehook`` by CPython and the
  others still run.
"""

from __future__ import annotations

import os
import threading
from _thread import get_ident
from collections.abc import Callable
from typing import Final

__all__ = ["INTERRUPT_SLICE", "MAIN_IDENT", "after_fork_in_child", "interrupt_slice"]

INTERRUPT_SLICE: Final = 0.25
"""Seconds: the longest single blocking wait of a library wait loop on the
main thread."""

MAIN_IDENT: Final[list[int | None]] = [threading.main_thread().ident]
"""``[ident]``: ``get_ident()`` of the thread signal handlers (and so
``KeyboardInterrupt``) run in: the main thread; in a child made by
``os.fork()``, the thread that forked (set at the fork). A one-item list
so that a hot path reads it without a call."""


def interrupt_slice() -> float | None:
    """The timeout, in seconds, of one blocking step of a library wait in
    the calling thread: ``INTERRUPT_SLICE`` on the main thread, ``None``
    (block until woken) on any other. Read at each call, so a test may
    patch ``INTERRUPT_SLICE``."""
    return INTERRUPT_SLICE if get_ident() == MAIN_IDENT[0] else None


def after_fork_in_child(fn: Callable[[], object]) -> None:
    """Run ``fn()`` in the child process after every later ``os.fork()``
    (the thread that forked is the child's only thread then). ``fn`` resets
    state that threads of the parent owned: locks, worker sets, timer
    threads. Returns nothing; registering the same ``fn`` twice runs it
    twice."""
    register = getattr(os, "register_at_fork", None)
    if register is not None:
        register(after_in_child=fn)


def _main_after_fork() -> None:
    MAIN_IDENT[0] = get_ident()


after_fork_in_child(_main_after_fork)
