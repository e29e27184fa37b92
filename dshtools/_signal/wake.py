"""Blocking in ``AbortSignal.wait`` and waking every waiter of an abort
(docs/contract.md#scale, docs/contract.md#cancellation).

Guarantees:

* A waiter off the main thread blocks untimed (or for its own timeout):
  nothing wakes it before the abort, so any number of waiting threads cost
  no CPU. The main thread blocks in slices of ``INTERRUPT_SLICE`` seconds
  so that ``KeyboardInterrupt`` reaches it.
* An abort wakes every waiter of every signal it aborted. The aborting
  thread wakes the main thread's waiter, if any, and then only the first
  waiter of a *chain*: each woken waiter wakes the next one as the first
  thing it does, so the aborting thread does no per-waiter work and the
  woken threads come up one after another instead of all fighting for the
  GIL at once (which, with thousands of waiters, costs more than the
  wake-ups themselves).
* The chain never stalls: a waiter that leaves ``wait`` for any reason
  (woken, timed out, found the signal aborted) takes over the chain if it
  was handed to it; a hand-off to a waiter that already left is taken back
  by the one who handed it.

The record. Each waiting call is a ``Waiter``: a lock held from creation
and released once by the chain, its ``chain`` (a list the hand-off
appends the rest of the chain to; ``None`` for the main thread, which
carries no duty: an interrupt may end its wait at any point) and ``gone``
(set when it leaves, before it looks at ``chain``). A signal's waiters are
a list in the signal's ``_waiters`` slot, made by the first ``wait``.

Atomicity. The hand-off appends the rest to ``chain``, releases the lock
and then reads ``gone``; the leaving waiter sets ``gone`` and then pops
``chain``: if the hand-off read ``gone`` false, the waiter's pop comes
after its append and the waiter continues; otherwise whichever pop gets
the rest continues. ``list.append``/``pop`` are atomic with the GIL and on
free-threaded builds. Registering against the abort is the signal's own
"store, then read ``_aborted``" (``dshtools._signal.state``).
"""

from __future__ import annotations

import threading
from _thread import allocate_lock, get_ident
from collections.abc import Iterable, Iterator
from time import monotonic
from typing import Any

from .._core import interrupts

__all__ = ["Waiter", "wait_on", "wake"]


class Waiter:
    """One thread blocked in ``wait`` on one signal (module docstring)."""

    __slots__ = ("chain", "gone", "lock")

    def __init__(self, main: bool) -> None:
        self.lock = allocate_lock()
        self.lock.acquire()
        self.chain: list[Iterator[Waiter]] | None = None if main else []
        self.gone = False


def wake(lists: Iterable[list[Waiter]]) -> None:
    """Wake every waiter in ``lists`` (the ``_waiters`` of the signals an
    abort marked, after it stored their ``_aborted``): the main thread's at
    once, the others as a chain. Returns after one hand-off."""
    chained: list[Waiter] = []
    for waiters in lists:
        for waiter in list(waiters):  # one atomic copy: waiters come and go
            if waiter.chain is None:
                waiter.lock.release()
            else:
                chained.append(waiter)
    if chained:
        _pass(iter(chained))


def _pass(rest: Iterator[Waiter]) -> None:
    # Release the next waiter of `rest` that is still there and hand it the
    # rest of the chain.
    for waiter in rest:
        chain = waiter.chain
        assert chain is not None
        chain.append(rest)
        waiter.lock.release()
        if not waiter.gone:
            return  # it continues when it leaves
        try:
            chain.pop()
        except IndexError:
            return  # it took the rest on its way out


def wait_on(signal: Any, waiters: list[Waiter], timeout: float | None) -> bool:
    """Block the calling thread until ``signal`` aborted or ``timeout``
    seconds passed (``None``: no limit); ``waiters`` is the signal's
    ``_waiters`` list. Returns ``signal._aborted``."""
    main = get_ident() == interrupts.MAIN_IDENT[0]
    waiter = Waiter(main)
    waiters.append(waiter)
    try:
        if signal._aborted:  # after the append: see `dshtools._signal.state`
            return True
        lock = waiter.lock
        if not main:
            lock.acquire(True, -1 if timeout is None else min(timeout, threading.TIMEOUT_MAX))
            return bool(signal._aborted)
        # The main thread: in slices, so that Ctrl-C gets in.
        deadline = None if timeout is None else monotonic() + timeout
        while True:
            step = interrupts.INTERRUPT_SLICE
            if deadline is not None:
                step = min(step, deadline - monotonic())
                if step <= 0:
                    return bool(signal._aborted)
            if lock.acquire(True, step) or signal._aborted:
                return True
    finally:
        _leave(signal, waiters, waiter)


def _leave(signal: Any, waiters: list[Waiter], waiter: Waiter) -> None:
    waiter.gone = True
    if not signal._aborted:
        # A timed-out wait: a list an abort will snapshot must not keep it
        # (an aborted signal's list is never read again).
        try:
            waiters.remove(waiter)
        except ValueError:
            pass
    chain = waiter.chain
    if chain:
        try:
            rest = chain.pop()
        except IndexError:
            return
        _pass(rest)
