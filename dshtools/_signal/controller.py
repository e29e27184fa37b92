"""``AbortController``: the owner of a signal and of the right to abort it
(docs/contract.md#cancellation).

Guarantees: of many concurrent ``abort()`` calls exactly one wins and the
rest return at once; the winner makes the signal (and, through
``dshtools._signal.links``, every signal derived from it) read aborted
before any listener runs, then runs the listeners in the calling thread,
each once; a ``KeyboardInterrupt``/``SystemExit`` from a listener is
re-raised after every listener ran.

``AbortController.abort`` is the abort of every plain signal (a
controller's, and a remote body's ``budget_controller``): the lock-free
abort decision of ``dshtools._signal.state`` (deleting ``_armed`` wins;
the boundary splits the listeners between the dispatch and late adders),
in the order that module's "Atomicity" section relies on: insert the
boundary, store ``_reason`` and ``_aborted``, and only then read the
dependents, the waiters and the listeners.

The claim. With the GIL, ``del signal._armed`` is one step: the check "is
the slot set?" and the deletion run in C with no other thread in between,
so the first deletion wins and every later one raises. On a free-threaded
build (``sys._is_gil_enabled()`` false when this module is imported) the
check runs before the object's critical section is entered, so two
deletions can both pass it and both succeed; there ``abort`` first claims
under ``_CLAIM_LOCK`` (``_claimed_under_lock``): the claimant turns
``_armed`` from ``True`` to ``False`` under the lock, every later caller
finds it not ``True`` and returns, and the claimant's own deletion then
runs alone. The GIL build's ``abort`` is not wrapped and runs exactly as
written (docs/atomicity.md).
"""

from __future__ import annotations

import functools
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from .._core.errors import report_unraisable, safe_repr
from .._core.interrupts import after_fork_in_child
from .links import _won_plain_with_deps
from .signal import AbortSignal, _BudgetSignal, _PlainSignal
from .state import _BOUNDARY, _DEFAULT_REASON, _dispatch_plain
from .wake import wake

__all__ = ["AbortController", "budget_controller"]


class AbortController:
    """Owns an ``AbortSignal`` and the right to abort it.

    ``abort(reason=None)``: the first call wins and sets ``signal.reason``
    (``None`` means a default ``AbortError()``; ``0``, ``""``, ``False`` are
    kept as given); later calls do nothing. Listeners run in the calling
    thread before ``abort`` returns. Source: docs/contract.md#cancellation.
    """

    __slots__ = ("signal",)

    def __init__(self) -> None:
        # `AbortSignal.__init__` inlined: calling it costs more than 5 % of
        # creating a controller (benchmarks.signal_instructions "create"),
        # and so does making the signal with a Python `__new__`;
        # tests/signal/test_inlined_steps.py compares the two.
        signal = _PlainSignal()
        signal._linked = False
        signal._aborted = False
        signal._armed = True
        signal._waiters = None
        signal._listeners = None
        signal._deps = None
        signal._watched = False
        self.signal: Final[AbortSignal] = signal

    def abort(self, reason: object = None) -> None:
        """Abort the signal with ``reason`` (``None``: a default
        ``AbortError()``); only the first call of any thread does anything.
        The signal and every signal derived from it read aborted before any
        listener runs; then the listeners run once each, in registration
        order, in this thread, outside any lock, before ``abort`` returns.
        A listener's ``Exception`` goes to ``sys.unraisablehook``; the first
        ``KeyboardInterrupt``/``SystemExit`` a listener raises is re-raised
        here once every listener ran. Source: docs/contract.md#cancellation."""
        signal = self.signal
        try:
            del signal._armed
        except AttributeError:
            return  # an abort won before: this call does nothing
        listeners = signal._listeners
        if listeners is not None:
            listeners[_BOUNDARY] = None
        signal._reason = _DEFAULT_REASON if reason is None else reason  # the AbortError is made when first read
        signal._aborted = True
        if signal._watched:  # a waiter or a dependent came: one read for both
            if signal._deps:
                _won_plain_with_deps(signal)
                return
            waiters = signal._waiters
            if waiters is not None:
                wake((waiters,))
        listeners = signal._listeners  # again: the first adder may have made it
        if not listeners:
            return
        if len(listeners) == 2:
            # The boundary and one handle? If that handle comes first, it is
            # the one listener before the boundary (anything added from here
            # on was added after `_aborted` and is claimed by its adder): run
            # it here, `_dispatch_plain` (snapshot, split) and `_dispatch`
            # (the listener call with its containment) inlined. Calling them
            # costs a third more of an abort with one listener
            # (benchmarks.signal_instructions "abort_1");
            # tests/signal/test_inlined_steps.py compares the two. An
            # interrupt it raises propagates as it is (it is the only one).
            try:
                handle = next(iter(listeners))
            except (RuntimeError, StopIteration):  # changed meanwhile
                handle = _BOUNDARY
            if handle is not _BOUNDARY and _BOUNDARY in listeners:
                callback = handle._cb
                try:
                    callback(signal)
                except Exception as exc:
                    report_unraisable(exc, "Exception in abort listener " + safe_repr(callback), signal)
                return
        interrupt = _dispatch_plain(signal, listeners)
        if interrupt is not None:
            raise interrupt

    def __repr__(self) -> str:
        return f"<AbortController signal={self.signal!r}>"


# Guards the free-threaded claim of a plain abort (module docstring): held
# while one `abort` reads `_armed` and, finding `True`, stores `False`.
# Nothing else runs under it.
_CLAIM_LOCK: Final = threading.Lock()
after_fork_in_child(_CLAIM_LOCK._at_fork_reinit)  # type: ignore[attr-defined]

_Abort = Callable[[AbortController, object], None]


def _claimed_under_lock(abort: _Abort) -> _Abort:
    """``abort`` preceded by a claim that is atomic without the GIL: only
    the caller that turns ``_armed`` from ``True`` to ``False`` under
    ``_CLAIM_LOCK`` goes on to ``abort`` (whose deletion of ``_armed`` then
    succeeds); every other caller returns at once, as a losing abort does."""

    def claimed_abort(self: AbortController, reason: object = None) -> None:
        signal = self.signal
        with _CLAIM_LOCK:
            if getattr(signal, "_armed", False) is not True:
                return  # an abort won before: this call does nothing
            signal._armed = False
        abort(self, reason)

    return functools.update_wrapper(claimed_abort, abort)


GIL_AT_IMPORT: Final[bool] = getattr(sys, "_is_gil_enabled", lambda: True)()
"""Whether the GIL was on when this module was imported: ``False`` only on a
free-threaded build running without it, where ``abort`` claims under a lock."""

if not TYPE_CHECKING and not GIL_AT_IMPORT:
    AbortController.abort = _claimed_under_lock(AbortController.abort)


def budget_controller(deadline: float) -> AbortController:
    """An ``AbortController`` whose signal also reports ``deadline`` (a
    ``time.monotonic()`` instant of this process, seconds) as its
    ``deadline`` until it aborts; its ``time_left()`` counts down to it and
    stays ``0.0`` past it. It owns no timer and never aborts by itself: the
    timer that aborts it runs in another process, whose abort arrives as a
    message. Package-internal: the worker side of
    ``ProcessBackend`` and ``RayBackend`` (``dshtools._backends.remote``)."""
    signal = _BudgetSignal()
    _init_plain(signal)
    signal._budget_at = deadline
    controller = AbortController.__new__(AbortController)
    # `signal` is a slot written once, as `__init__` writes it; `__init__`
    # itself stays the plain controller's, free of this branch.
    _SIGNAL_SLOT.__set__(controller, signal)
    return controller


_SIGNAL_SLOT: Final = AbortController.__dict__["signal"]
_init_plain: Final = AbortSignal.__init__
