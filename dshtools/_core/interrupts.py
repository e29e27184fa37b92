"""Process-wide facts every blocking wait and every piece of process-wide
state shares: how long a wait may block before it lets a pending
``KeyboardInterrupt`` in, and how state is reset in a forked child.

Guarantees:

* ``INTERRUPT_SLICE`` is the longest a library wait blocks in one call on a
  thread that may receive ``KeyboardInterrupt`` (a main thread): a wait is
  a loop of waits of at most this many seconds, so Ctrl-C is seen within it.
  A lock or event wait that CPython interrupts by itself needs no slice.
* ``after_fork_in_child(fn)`` runs ``fn`` in the child of every later
  ``os.fork()``, before any other code of the child runs; on a platform
  without ``os.register_at_fork`` it does nothing (such a platform cannot
  fork a threaded process either). Handlers run in registration order; one
  that raises is reported through ``sys.unraisablehook`` by CPython and the
  others still run.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Final

__all__ = ["INTERRUPT_SLICE", "after_fork_in_child"]

INTERRUPT_SLICE: Final = 0.25
"""Seconds: the longest single blocking wait of a library wait loop."""


def after_fork_in_child(fn: Callable[[], object]) -> None:
    """Run ``fn()`` in the child process after every later ``os.fork()``
    (the thread that forked is the child's only thread then). ``fn`` resets
    state that threads of the parent owned: locks, worker sets, timer
    threads. Returns nothing; registering the same ``fn`` twice runs it
    twice."""
    register = getattr(os, "register_at_fork", None)
    if register is not None:
        register(after_in_child=fn)
