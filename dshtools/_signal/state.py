"""Listener storage, the abort decision and listener dispatch: the layer
every signal is built on (docs/contract.md §1; the public surface is
``dshtools._signal``).

Guarantees:

* Of any number of concurrent aborts of one signal exactly one wins.
* Each listener runs at most once, and exactly once unless it was removed
  before it started.
* ``ListenerHandle.remove()`` never waits. Once it returns, a listener that
  had not started never will; one that already started on another thread
  may still be running.
* A listener that raises never stops the others: an ``Exception`` goes to
  ``sys.unraisablehook``; a ``KeyboardInterrupt`` or ``SystemExit`` is
  handed back to the caller of the dispatch, which re-raises it after every
  listener ran (decision 0011).

Storage (docs/decisions/0040). A signal's listeners live in one dict, made
by the first ``add_listener``: the listener's handle -> its callback, in
registration order; the handle also holds the callback (``_cb``). Removing
a listener replaces the handle's callback with ``_removed`` (a no-op) and
pops the handle from the dict: O(1), no lock on a plain signal.

The abort decision. A plain signal is born with its ``_armed`` slot set;
the abort that deletes it wins (``del`` of an empty slot raises, and the
check and the store are one step: C code, no Python code runs inside it).
A linked signal decides under ``_LOCK``.

Dispatch without a claim per listener. The winner of a plain signal's abort
first inserts the key ``_ABORTED`` into its listener dict, if that holds a
listener: the *boundary*. Then it stores ``_reason`` and
``_aborted`` (in that order), and only then snapshots the dict. Every
handle before the boundary is the dispatch's: it runs ``handle._cb(signal)``
for each, reading the callback right before the call, so a ``remove()``
that replaced it first wins and one that comes later finds the listener
started. A handle after the boundary, or in a dict without one (added
while the abort was being decided), is claimed by an atomic ``dict.pop``
that the dispatch, ``remove()`` and a late adder all make: the one that
pops it owns it. An adder that reads ``_aborted`` and finds its
handle before the boundary leaves it to the dispatch. A plain signal keeps
its dict after the abort (the callbacks go with the signal or with their
handle's ``remove()``): the abort frees nothing.

Relies on: the slot deletion, ``dict.pop`` and ``list(dict)`` being atomic
and sequentially consistent per object (true with the GIL; CPython's
free-threaded build makes the dict steps atomic too), and on linked signals
(``_linked`` True, defined in ``dshtools._signal.signal``) providing
``_remove_linked``, ``_dispatch`` and ``_on_timer``.

``_LOCK``, the one module lock, is defined here because every layer takes
it: it guards every change to links between signals (dependents, sources,
keep-alive strength), a linked signal's listeners and abort, the creation of
a signal's ``Event`` and listener dict, and the default reason's creation.
Why one lock rather than one per signal: linking a derived signal to N
sources and propagating an abort to M dependents must each be atomic across
several signals; one lock makes those steps atomic and deadlock-free (no
lock order to get wrong), and its critical sections are a few attribute
writes - user code never runs under it. Weakref callbacks never take it
(dead links are pruned lazily), so garbage collection inside a critical
section cannot deadlock.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, Protocol

from .._core.errors import AbortError, report_unraisable, safe_repr
from . import timer as _timer

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


# The boundary key a plain signal's abort inserts into its listener dict
# (see the module docstring).
_ABORTED: Final = _Marker()


# The reason of an `abort()` given none. Creating the default `AbortError`
# was two thirds of the cost of such an abort, and most aborts are never
# asked why: abort stores this marker, and the first read of `reason`
# replaces it, under `_LOCK`, with the one `AbortError` every later read
# returns. Paths that copy such a reason to other signals (dependents, a
# derived signal of an aborted input) first replace it with a
# `_DefaultReason` they all share, so that they all read the same object.
_DEFAULT_REASON: Final = object()


class _DefaultReason:
    """A default reason shared by several signals: the one ``AbortError``
    they all read, made (under ``_LOCK``) when the first of them is asked."""

    __slots__ = ("error",)

    def __init__(self) -> None:
        self.error: AbortError | None = None


class _SignalState(Protocol):
    """What this layer and the link layer read and write on a signal: the
    slots of ``AbortSignal`` and ``_LinkedSignal``
    (``dshtools._signal.signal``, the only implementations)."""

    _linked: bool  # True for a linked signal (derived and timeout)
    _aborted: bool
    _reason: object
    _event: threading.Event | None  # created by the first wait()
    _watched: bool  # plain signals: set once `_event` or `_deps` was written
    # Plain signals: set until the abort that deletes it wins.
    _armed: bool
    # handle -> callback, registration order (plus `_ABORTED` on a plain
    # signal whose abort began); None until the first listener.
    _listeners: dict[Any, Any] | None
    # As a source: its links to derived signals (`_signal_links._dep_links`).
    _deps: Any
    _deps_prune_at: int
    # Plain signals: the deadline a remote body's signal carries (decision
    # 0047); `None` on every other signal.
    _budget_at: float | None
    # Only on linked signals (`_linked` True, `_LinkedSignal.__init__`).
    _sources: tuple[_SignalState, ...]
    _ref: weakref.ref[_SignalState]
    _link: tuple[weakref.ref[_SignalState], list[_SignalState]]
    _anchor: list[_SignalState]
    _strong_deps: int
    _timer: _timer.TimerEntry | None
    _timer_code: str
    _timer_seconds: float
    _fired: bool  # aborted by its own timer (set only then)
    _closed: bool
    _derived: bool
    _aborts_directly: bool
    # The dispatch of an aborted signal's listeners: the iterator of handles
    # it draws from (for a linked signal each dispatch draws from it, so
    # that one cut short by an interrupt can be finished by `abort_owned`
    # and no listener runs twice). Unset (plain) or None (linked) before.
    _pending: Any

    # A linked signal's listener dispatch (`_dispatch` below, as a method).
    def _dispatch(self, handles: Iterable[Any]) -> BaseException | None: ...

    # Linked signals only (`_linked` True): see `dshtools._signal.links`.
    def _remove_linked(self, handle: ListenerHandle) -> None: ...

    def _on_timer(self) -> None: ...


def _reason_of(signal: _SignalState) -> object:
    if not signal._aborted:
        return None  # `_reason` is written by the abort, before `_aborted`
    reason = signal._reason
    if reason is _DEFAULT_REASON or type(reason) is _DefaultReason:
        with _LOCK:
            reason = _resolved_reason_locked(signal)
    return reason


def _resolved_reason_locked(signal: _SignalState) -> object:
    # Each replacement happens once, under `_LOCK`, after the abort stored
    # the marker (the reader saw it), so no write undoes another.
    reason = signal._reason
    if reason is _DEFAULT_REASON:
        reason = signal._reason = AbortError()
    elif type(reason) is _DefaultReason:
        if reason.error is None:
            reason.error = AbortError()
        reason = signal._reason = reason.error
    return reason


def _shared_reason_locked(signal: _SignalState) -> object:
    """``signal``'s reason (it aborted), as other signals copy it: a
    default reason not yet made becomes one they share."""
    reason = signal._reason
    if reason is _DEFAULT_REASON:
        reason = signal._reason = _DefaultReason()
    return reason


def _removed(_signal: object) -> None:
    """The callback of a removed handle: a dispatch that reads it does nothing."""


def _listener_dict(signal: _SignalState) -> dict[Any, Any]:
    """``signal``'s listener dict, made by the first caller (under
    ``_LOCK``: two first adders must not make two)."""
    with _LOCK:
        listeners = signal._listeners
        if listeners is None:
            listeners = signal._listeners = {}
    return listeners


class ListenerHandle:
    """Returned by ``AbortSignal.add_listener``.

    ``registered`` is ``False`` when the signal was already aborted at
    registration (the callback then either ran inline or, with
    ``run_if_aborted=False``, not at all). ``remove()`` is idempotent, never
    blocks, and is also what leaving a ``with`` block does.
    """

    __slots__ = ("_cb", "_signal")
    if TYPE_CHECKING:

        @property
        def registered(self) -> bool:
            """``False`` when the signal was already aborted at registration."""

    else:
        # A class attribute: creating a handle is on the add_listener path.
        registered = True

    # No __init__: `ListenerHandle()` then two slot writes is the cheapest
    # way to make one (add_listener is a hot path).
    _signal: _SignalState
    _cb: _Callback

    def remove(self) -> None:
        signal = self._signal
        if signal._linked:
            signal._remove_linked(self)
            return
        # A plain signal keeps nothing alive. First the callback (a dispatch
        # that has not read it yet never runs it), then the entry; a
        # dispatch's claiming pop of a late entry and this pop: one wins.
        self._cb = _removed
        try:
            del signal._listeners[self]  # type: ignore[union-attr]  # made before this handle went in
        except KeyError:
            pass  # removed before, or claimed by a dispatch

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
        signal = self._signal
        listeners = signal._listeners
        active = not signal._aborted and listeners is not None and self in listeners
        return f"<ListenerHandle {'active' if active else 'detached'} registered={self.registered}>"


class _RefusedHandle(ListenerHandle):
    """The handle of a listener given to an already-aborted signal."""

    __slots__ = ()
    if not TYPE_CHECKING:
        registered = False

    def remove(self) -> None:
        pass


def _dispatch(signal: _SignalState, handles: Iterable[Any]) -> BaseException | None:
    # Each handle's callback is read right before it runs; remove() replaces
    # it with `_removed` first, so it either wins (the listener never
    # starts) or finds it started - and never waits. Returns the first
    # non-Exception BaseException a listener raised (the caller re-raises it
    # once every listener ran), else None.
    interrupt: BaseException | None = None
    for handle in handles:
        callback = handle._cb
        try:
            callback(signal)
        except Exception as exc:
            report_unraisable(exc, "Exception in abort listener " + safe_repr(callback), signal)
        except BaseException as exc:  # KeyboardInterrupt, SystemExit: kept
            if interrupt is None:
                interrupt = exc
    return interrupt


def _pending_count(pending: Any) -> int:
    """How many listeners a dispatch (its iterator of handles) has yet to
    start, less the removed ones. Read through the iterator's pickle state,
    which copies nothing it would not copy anyway: diagnostics only."""
    state = pending.__reduce__()
    rest = state[1][0]
    if len(state) > 2:
        rest = rest[state[2] :]
    return sum(1 for handle in rest if handle._cb is not _removed)


def _pending(signal: _SignalState, handles: list[Any]) -> Any:
    """The iterator a plain signal's dispatch draws ``handles`` from, kept
    for ``listener_count``."""
    pending = signal._pending = iter(handles)
    return pending


def _dispatch_plain(signal: _SignalState, listeners: dict[Any, Any]) -> BaseException | None:
    """Run an aborted plain signal's listeners (the module docstring's
    boundary rule); called once, by the abort that won, after it stored
    ``_aborted``."""
    handles = list(listeners)
    if handles and handles[-1] is _ABORTED:
        del handles[-1]
        return _dispatch(signal, _pending(signal, handles))
    return _dispatch_split(signal, listeners, handles)


def _dispatch_split(signal: _SignalState, listeners: dict[Any, Any], handles: list[Any]) -> BaseException | None:
    # Some handles were added while the abort was being decided (after the
    # boundary, or into a dict that had none): each is claimed by the pop
    # its adder makes too.
    if _ABORTED in handles:
        at = handles.index(_ABORTED)
        late = handles[at + 1 :]
        del handles[at:]
    else:
        late, handles = handles, []
    first = _dispatch(signal, _pending(signal, handles))
    for handle in late:
        callback = listeners.pop(handle, None)
        if callback is None:
            continue  # removed, or claimed by its adder
        try:
            callback(signal)
        except Exception as exc:
            report_unraisable(exc, "Exception in abort listener " + safe_repr(callback), signal)
        except BaseException as exc:
            if first is None:
                first = exc
    return first


def _added_late(
    signal: _SignalState, listeners: dict[Any, Any], handle: ListenerHandle, callback: _Callback, run_if_aborted: bool
) -> ListenerHandle:
    """``handle`` went into a plain signal's ``listeners``, then the adder
    read ``_aborted``: decide who runs it (module docstring)."""
    if _ABORTED in listeners:  # inserted before `_aborted` was stored
        handles = list(listeners)
        if handle in handles and handles.index(handle) < handles.index(_ABORTED):
            return handle  # before the boundary: the dispatch runs it
    if listeners.pop(handle, None) is None:
        return handle  # the dispatch claimed it
    handle._cb = _removed
    return _refused(signal, callback, run_if_aborted)


def _refused(signal: _SignalState, callback: _Callback, run_if_aborted: bool) -> ListenerHandle:
    handle = _RefusedHandle()
    handle._signal = signal
    handle._cb = _removed
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
