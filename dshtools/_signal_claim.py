"""Listener storage, the abort decision and the listener claim: the layer
every signal is built on (docs/contract.md §1; the public surface is
``dshtools._signal``).

Guarantees:

* Of any number of concurrent aborts of one signal exactly one wins: the
  one whose ``dict.setdefault`` inserts ``_ABORTED`` into the listener dict.
* Each listener runs at most once: the dispatch loop, ``remove()`` and a
  late adder all claim it with the same atomic ``dict.pop`` of its key, and
  only the claimer runs it (or, for ``remove()``, makes sure it never
  starts).
* ``ListenerHandle.remove()`` never waits. Once it returns, a listener that
  had not started never will; one that already started on another thread
  may still be running.
* A listener that raises never stops the others: an ``Exception`` goes to
  ``sys.unraisablehook``; a ``KeyboardInterrupt`` or ``SystemExit`` is
  handed back to the caller of the dispatch, which re-raises it after every
  listener ran (decision 0011).

Storage. A signal's listeners live in one dict (an ``int`` key, held by the
listener's handle -> callback, registration order). Aborting inserts the
key ``_ABORTED`` into that dict with ``dict.setdefault``: one atomic step
(the key's hash and equality are C code, no Python code runs inside it), so
of any number of concurrent aborts exactly one inserts it and wins; its
value, a 1-tuple holding the reason, is what every later reader copies. The
winner then stores ``_reason`` and ``_aborted`` (in that order; anyone who
finds the key before ``_aborted`` is set stores the same two values through
``_settle``, so they never disagree) and only then looks at listeners,
dependents and the waiters' ``Event``.

Claiming a listener: the dispatch loop and ``remove()`` both claim a
listener by popping its key from the dict (``dict.pop``, atomic as above).
Whoever pops it owns it: the loop runs it, ``remove()`` makes sure it never
starts. The loop's pops run in C (``map`` over the snapshot), one per
listener, with no lock.

Relies on: ``dict.setdefault`` and ``dict.pop`` being atomic and
sequentially consistent per dict (true with the GIL, and for CPython's
free-threaded dict operations), and on linked signals (``_linked`` True,
defined in ``dshtools._signal``) providing ``_remove_linked`` and
``_on_timer``.

``_LOCK``, the one module lock, is defined here because every layer takes
it: it guards every change to links between signals (dependents, sources,
keep-alive strength), a linked signal's listeners and abort, the creation of
a signal's ``Event``, and the default reason's creation. Why one lock rather
than one per signal: linking a derived signal to N sources and propagating
an abort to M dependents must each be atomic across several signals; one
lock makes those steps atomic and deadlock-free (no lock order to get
wrong), and its critical sections are a few attribute writes - user code
never runs under it. Weakref callbacks never take it (dead links are pruned
lazily), so garbage collection inside a critical section cannot deadlock.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from itertools import count, repeat
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, Protocol

from . import _timer
from ._errors import AbortError, report_unraisable, safe_repr

__all__ = ["ListenerHandle"]

# A listener as this layer stores and calls it; the public, precisely typed
# alias is `dshtools._signal.Listener`.
_Callback = Callable[[Any], object]

_LOCK: Final = threading.Lock()

if hasattr(os, "register_at_fork"):
    # A fork while another thread (the timer thread, say) is inside a
    # critical section would leave the child's copy of _LOCK held forever.
    os.register_at_fork(after_in_child=_LOCK._at_fork_reinit)  # type: ignore[attr-defined]


class _Marker:
    __slots__ = ()

    def __repr__(self) -> str:
        return "<aborted>"


# The key that marks a listener dict as aborted (see the module docstring).
_ABORTED: Final = _Marker()
# The second argument of every claiming pop in the dispatch loop.
_NONES: Final = repeat(None)
# Listener keys: unique ints (one process-wide counter), so the listener
# dict holds no per-listener object besides the callback; the handle holds
# the key.
_next_key: Final = count().__next__


# The reason of an `abort()` given none. Creating the default `AbortError`
# was two thirds of the cost of such an abort, and most aborts are never
# asked why: abort stores this marker, and the first read of `reason`
# creates, under `_LOCK`, the one `AbortError` (kept in `_error`) that every
# later read returns. `_reason` itself never changes once written, so the
# winner and a helper that both store it cannot undo each other. Paths that
# copy a reason to other signals (dependents, a derived signal of an aborted
# input) resolve it first, so they all hold the same object.
_DEFAULT_REASON: Final = object()


class _SignalState(Protocol):
    """What this layer and the link layer read and write on a signal: the
    slots of ``AbortSignal`` (``dshtools._signal``, the only implementation).
    A protocol rather than a base class, so a signal's type stays one level
    deep (each level costs every signal's deallocation a step)."""

    _linked: bool  # True for a linked signal (derived and timeout)
    _aborted: bool
    _reason: object
    _event: threading.Event | None  # created by the first wait()
    # listener key (an int) -> callback, registration order; `_ABORTED` once aborted.
    _listeners: dict[Any, Any]
    # As a source: weak reference to a derived signal -> that signal's
    # anchor; derivation order. None until the first derivation (which also
    # sets `_deps_prune_at`).
    _deps: dict[weakref.ref[_SignalState], list[_SignalState]] | None
    _error: AbortError | None
    # Read only where `_linked` is True (set by `_LinkedSignal.__init__`).
    _sources: tuple[_SignalState, ...]
    _ref: weakref.ref[_SignalState]
    _anchor: list[_SignalState]
    _strong_deps: int
    _timer: _timer.TimerEntry | None
    _timer_code: str
    _timer_seconds: float
    _closed: bool
    _derived: bool
    _aborts_directly: bool
    _deps_prune_at: int

    # A linked signal's listener dispatch (`_dispatch` below, as a method).
    def _dispatch(self, keys: list[Any]) -> BaseException | None: ...

    # Linked signals only (`_linked` True): see `dshtools._signal_links`.
    def _remove_linked(self, key: int | None) -> None: ...

    def _on_timer(self) -> None: ...


def _reason_of(signal: _SignalState) -> object:
    reason = signal._reason
    if reason is _DEFAULT_REASON:
        with _LOCK:
            reason = _resolved_reason_locked(signal)
    return reason


def _resolved_reason_locked(signal: _SignalState) -> object:
    reason = signal._reason
    if reason is _DEFAULT_REASON:
        error: object = getattr(signal, "_error", None)
        if error is None:
            error = signal._error = AbortError()
        return error
    return reason


def _settle(signal: _SignalState, listeners: dict[Any, Any]) -> object:
    """Make ``signal`` read aborted with the reason recorded under
    ``_ABORTED`` (idempotent: every writer stores the same two values)."""
    reason: object = listeners[_ABORTED][0]
    signal._reason = reason
    signal._aborted = True
    return reason


def _pending_keys(listeners: dict[Any, Any]) -> list[Any]:
    """The handles of an aborted signal's listeners, registration order."""
    keys = list(listeners)
    if keys[-1] is _ABORTED:
        del keys[-1]
    else:  # an adder inserted after the abort (it claims its own back)
        keys.remove(_ABORTED)
    return keys


class ListenerHandle:
    """Returned by ``AbortSignal.add_listener``.

    ``registered`` is ``False`` when the signal was already aborted at
    registration (the callback then either ran inline or, with
    ``run_if_aborted=False``, not at all). ``remove()`` is idempotent, never
    blocks, and is also what leaving a ``with`` block does.
    """

    __slots__ = ("_key", "_signal")
    if TYPE_CHECKING:

        @property
        def registered(self) -> bool:
            """``False`` when the signal was already aborted at registration."""

    else:
        # A class attribute: creating a handle is on the add_listener path.
        registered = True

    def __init__(self, signal: _SignalState, key: int | None) -> None:
        self._signal = signal
        self._key = key

    def remove(self) -> None:
        signal = self._signal
        if signal._linked:
            signal._remove_linked(self._key)
        else:
            # A plain signal keeps nothing alive: the claiming pop is all.
            signal._listeners.pop(self._key, None)

    def __enter__(self) -> ListenerHandle:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.remove()

    def __repr__(self) -> str:
        state = "active" if self._key in self._signal._listeners else "detached"
        return f"<ListenerHandle {state} registered={self.registered}>"


class _RefusedHandle(ListenerHandle):
    """The handle of a listener given to an already-aborted signal."""

    __slots__ = ()
    if not TYPE_CHECKING:
        registered = False

    def remove(self) -> None:
        pass


_new_handle: Final = object.__new__


def _dispatch(signal: _SignalState, keys: list[Any]) -> BaseException | None:
    # Each listener is claimed by popping its key, right before it runs;
    # remove() (and a late adder) claim with the same pop. Exactly one pop
    # finds it, so a concurrent remove() either wins (the listener never
    # starts) or loses (it has started) - never both, and it never waits.
    # Returns the first non-Exception BaseException a listener raised (the
    # caller re-raises it once every listener ran), else None.
    interrupt: BaseException | None = None
    for callback in map(signal._listeners.pop, keys, _NONES):
        if callback is None:
            continue  # removed, or claimed by another dispatch
        try:
            callback(signal)
        except Exception as exc:
            report_unraisable(exc, "Exception in abort listener " + safe_repr(callback), signal)
        except BaseException as exc:  # KeyboardInterrupt, SystemExit: kept
            if interrupt is None:
                interrupt = exc
    return interrupt


def _refused(signal: _SignalState, callback: _Callback, run_if_aborted: bool) -> ListenerHandle:
    handle = _new_handle(_RefusedHandle)
    handle._signal = signal
    handle._key = None
    if run_if_aborted:
        _call(callback, signal)
    return handle


def _call(callback: _Callback, signal: _SignalState) -> None:
    # A listener run inline by add_listener(): an Exception is reported, a
    # KeyboardInterrupt/SystemExit propagates to the registering thread.
    try:
        callback(signal)
    except Exception as exc:
        report_unraisable(exc, "Exception in abort listener " + safe_repr(callback), signal)
