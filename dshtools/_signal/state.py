"""Listener storage, the abort decision and listener dispatch: the layer
every signal is built on (docs/contract.md#cancellation; the
public surface is ``dshtools._signal``).

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
  listener ran, so a Ctrl-C is never swallowed. ``_dispatch`` is the one
  place a listener is called.

Storage. A signal's listeners live in one dict, made by the first
``add_listener``: the listener's handle -> its callback, in registration
order; the handle also holds the callback (``_cb``). Removing a listener
replaces the handle's callback with ``_removed`` (a no-op) and pops the
handle from the dict: O(1), no lock on a plain signal.

The abort decision. A *plain* signal (a controller's) is born with its
``_armed`` slot set; the abort that deletes it wins (``del`` of an empty
slot raises; with the GIL the check and the store are one step, C code
with no Python code inside it; a free-threaded build checks before it
locks, so there ``AbortController.abort`` claims under a lock first:
``dshtools._signal.controller``). A *linked* signal (derived and timeout
signals, ``dshtools._signal.links``) decides under ``_LOCK``.

Dispatch without a claim per listener. The winner of a plain signal's abort
first inserts the key ``_BOUNDARY`` into its listener dict, if that holds a
listener. Then it stores ``_reason`` and ``_aborted`` (in that order), and
only then snapshots the dict. Every handle before the boundary is the
dispatch's: it runs ``handle._cb(signal)`` for each, reading the callback
right before the call, so a ``remove()`` that replaced it first wins and one
that comes later finds the listener started. A handle after the boundary,
or in a dict without one (added while the abort was being decided), is
claimed by an atomic ``dict.pop`` that the dispatch, ``remove()`` and a late
adder all make: the one that pops it owns it. An adder that reads
``_aborted`` and finds its handle before the boundary leaves it to the
dispatch. A plain signal keeps its dict after the abort (the callbacks go
with the signal or with their handle's ``remove()``): the abort frees
nothing.

Atomicity (docs/atomicity.md lists every such place with its test). Each
of these is a pair of "write, then read" steps that must not both miss the
other. They hold with the GIL, under which every bytecode and every C call
on one object is sequentially consistent. Without the GIL (free-threaded
CPython) every slot store and every dict operation runs inside the
object's critical section, whose release is a full barrier, and a slot
load is an atomic load, so a store followed by a load is never reordered
and the pairs hold there too:

* abort vs ``add_listener`` on a plain signal: the adder inserts its handle
  and then reads ``_aborted``; the aborter inserts the boundary, stores
  ``_aborted`` and then snapshots the handles. An adder that reads
  ``False`` is in the snapshot; one that reads ``True`` finds its handle
  before the boundary (the dispatch runs it) or after it (it and the
  dispatch both claim it with ``dict.pop``: one wins).
* abort vs ``wait()``: the first waiter stores ``_watched`` and then the
  waiter list; every waiter appends itself to the list and then reads
  ``_aborted``; the aborter stores ``_aborted`` and then reads ``_watched``
  and ``_waiters`` and copies the list (``dshtools._signal.wake``). A
  waiter that found the list made therefore found ``_watched`` stored
  before it: if it reads ``_aborted`` false, the abort reads both after.
* abort vs ``derive``: ``derive`` (under ``_LOCK``) sets ``_watched``,
  links to a source and then reads ``_aborted``; a plain source's aborter
  stores ``_reason``, then ``_aborted``, and then reads ``_watched`` and
  its dependents, propagating under ``_LOCK``. Marking a dependent aborted
  is itself under ``_LOCK`` and checked first, so a dependent both sides
  reach is marked once.

``_LOCK``, the one module lock, is defined here because every layer takes
it: it guards every change to links between signals (dependents, sources,
keep-alive strength), a linked signal's listeners and abort, the creation of
a signal's waiter list and listener dict, and the default reason's creation.
Why one lock rather than one per signal: linking a derived signal to N
sources and propagating an abort to M dependents must each be atomic across
several signals; one lock makes those steps atomic and deadlock-free (no
lock order to get wrong), and its critical sections are a few attribute
writes - user code never runs under it. Weakref callbacks never take it
(dead links are pruned lazily), so garbage collection inside a critical
section cannot deadlock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Final

from .._core.errors import AbortError, report_unraisable, safe_repr
from .._core.interrupts import after_fork_in_child

__all__ = ["ListenerHandle", "SignalState"]

# A listener as this layer stores and calls it; the public, precisely typed
# alias is `dshtools._signal.Listener`.
_Callback = Callable[[Any], object]

_LOCK: Final = threading.Lock()

# A fork while another thread (the timer thread, say) is inside a critical
# section would leave the child's copy of _LOCK held forever.
after_fork_in_child(_LOCK._at_fork_reinit)  # type: ignore[attr-defined]


class SignalState:
    """The state every signal has - its listeners, its abort and its
    dependents - declared once with what each slot holds. This layer's
    functions read and write it;
    ``dshtools._signal.links.LinkedState`` adds a linked signal's links, and
    ``AbortSignal`` (``dshtools._signal.signal``) is this record with the
    public API.

    Invariants: ``_aborted`` never goes back and ``_reason`` is stored
    before it; a plain signal's ``_armed`` is deleted by the abort that
    wins (without the GIL first turned ``False`` by its claim); a linked signal's links and abort change only under ``_LOCK``
    (module docstring, ``dshtools._signal.links``)."""

    # A slot costs every signal's creation and deallocation a step, written
    # or not, so a plain signal allocates only these.
    __slots__ = (
        "__weakref__",
        "_aborted",
        "_armed",
        "_deps",
        "_deps_prune_at",
        "_linked",
        "_listeners",
        "_pending",
        "_reason",
        "_waiters",
        "_watched",
    )
    _linked: bool  # True for a `_LinkedSignal` (derived and timeout signals)
    _aborted: bool  # never goes back; `_reason` is stored before it
    _armed: bool  # plain signals: deleted by the abort that wins
    _reason: object  # written by the abort (read only once aborted)
    _waiters: list[Any] | None  # the threads in wait() (`wake.Waiter`), made by the first wait()
    # handle -> callback, registration order (plus the boundary on a plain
    # signal whose abort began); None until the first listener.
    _listeners: dict[Any, Any] | None
    # As a source: its links to derived signals (`links._dep_links`), and
    # the size at which a dict of them is pruned next.
    _deps: Any
    _deps_prune_at: int
    # Plain signals: set (under `_LOCK`) right before `_waiters` or `_deps`
    # is first written, and never cleared: a plain abort reads this one slot
    # after storing `_aborted`, and `_waiters` and `_deps` only if it is set
    # ("Atomicity" above). Before, not after: a waiter that finds another's
    # list joins it without the lock, and must know the abort will look.
    _watched: bool
    # The dispatch of an aborted signal's listeners: the iterator of handles
    # it draws from (for a linked signal each dispatch draws from it, so that
    # one cut short by an interrupt can be finished by `abort_owned` and no
    # listener runs twice). Unset (plain) or None (linked) before.
    _pending: Any
    # The deadline a plain signal reports without a timer of its own: a
    # slot of `_BudgetSignal` only; a class attribute here, so that every
    # other signal reads `None` at no cost to its creation.
    _budget_at: float | None = None


class _Boundary:
    """The key a plain signal's abort inserts into its listener dict: the
    handles before it are the dispatch's, those after it are claimed by a
    pop (module docstring)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<boundary>"


_BOUNDARY: Final = _Boundary()


# The reason of an `abort()` given none. Most aborts are never asked why, so
# abort stores this marker instead of making an `AbortError`, and the first
# read of `reason` replaces it, under `_LOCK`, with the one `AbortError`
# every later read returns. Paths that copy such a reason to other signals (dependents, a
# derived signal of an aborted input) first replace it with a
# `_DefaultReason` they all share, so that they all read the same object.
_DEFAULT_REASON: Final = object()


class _DefaultReason:
    """A default reason shared by several signals: the one ``AbortError``
    they all read, made (under ``_LOCK``) when the first of them is asked."""

    __slots__ = ("error",)

    def __init__(self) -> None:
        self.error: AbortError | None = None


def _reason_of(signal: SignalState) -> object:
    if not signal._aborted:
        return None  # `_reason` is written by the abort, before `_aborted`
    reason = signal._reason
    if reason is _DEFAULT_REASON or type(reason) is _DefaultReason:
        with _LOCK:
            reason = _resolved_reason_locked(signal)
    return reason


def _resolved_reason_locked(signal: SignalState) -> object:
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


def _shared_reason_locked(signal: SignalState) -> object:
    """``signal``'s reason (it aborted), as other signals copy it: a
    default reason not yet made becomes one they share."""
    reason = signal._reason
    if reason is _DEFAULT_REASON:
        reason = signal._reason = _DefaultReason()
    return reason


def _removed(_signal: object) -> None:
    """The callback of a removed handle: a dispatch that reads it does nothing."""


def _listener_dict(signal: SignalState) -> dict[Any, Any]:
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
    _signal: SignalState
    _cb: _Callback

    def remove(self) -> None:
        # A plain signal's handle (a linked signal's is a `_LinkedHandle`,
        # `dshtools._signal.links`): the signal keeps nothing alive. First
        # the callback (a dispatch that has not read it yet never runs it),
        # then the entry; a dispatch's claiming pop of a late entry and this
        # pop: one wins.
        signal = self._signal
        self._cb = _removed
        try:
            del signal._listeners[self]  # type: ignore[union-attr]  # made before this handle went in
        except KeyError:
            pass  # removed before, or claimed by a dispatch

    def __enter__(self) -> ListenerHandle:
        return self

    def __exit__(self, *exc: object) -> None:
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


def _dispatch(signal: SignalState, handles: Iterable[Any]) -> BaseException | None:
    """Call each handle's callback with ``signal``: the one place a listener
    runs. The callback is read right before the call; ``remove()`` replaces
    it with ``_removed`` first, so it either wins (the listener never
    starts) or finds it started - and never waits. An ``Exception`` is
    reported; returns the first other ``BaseException`` a listener raised
    (the caller re-raises it once every listener ran), else ``None``."""
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


def _pending(signal: SignalState, handles: list[Any]) -> Iterator[Any]:
    """The iterator a plain signal's dispatch draws ``handles`` from, kept
    for ``listener_count``."""
    pending = signal._pending = iter(handles)
    return pending


def _dispatch_plain(signal: SignalState, listeners: dict[Any, Any]) -> BaseException | None:
    """Run an aborted plain signal's listeners (the module docstring's
    boundary rule); called once, by the abort that won, after it stored
    ``_aborted``. Returns what ``_dispatch`` returns."""
    # One atomic copy: the dict may change size under us (late adders,
    # removers on other threads), so it is never iterated directly.
    handles = list(listeners)
    if handles and handles[-1] is _BOUNDARY:
        del handles[-1]
        return _dispatch(signal, _pending(signal, handles))
    # Some handles were added while the abort was being decided (after the
    # boundary, or into a dict that had none): each is claimed by the pop
    # its adder makes too.
    if _BOUNDARY in handles:
        at = handles.index(_BOUNDARY)
        late = handles[at + 1 :]
        del handles[at:]
    else:
        late, handles = handles, []
    first = _dispatch(signal, _pending(signal, handles))
    later = _dispatch(signal, _claimed(listeners, late))
    return later if first is None else first


def _claimed(listeners: dict[Any, Any], handles: list[Any]) -> Iterator[Any]:
    # The handles of `handles` this dispatch wins with its pop (the others
    # were removed, or claimed by their adder).
    for handle in handles:
        if listeners.pop(handle, None) is not None:
            yield handle


def _added_late(
    signal: SignalState, listeners: dict[Any, Any], handle: ListenerHandle, callback: _Callback, run_if_aborted: bool
) -> ListenerHandle:
    """``handle`` went into a plain signal's ``listeners``, then the adder
    read ``_aborted``: decide who runs it (module docstring)."""
    if _BOUNDARY in listeners:  # inserted before `_aborted` was stored
        handles = list(listeners)
        if handle in handles and handles.index(handle) < handles.index(_BOUNDARY):
            return handle  # before the boundary: the dispatch runs it
    if listeners.pop(handle, None) is None:
        return handle  # the dispatch claimed it
    handle._cb = _removed
    return _refused(signal, callback, run_if_aborted)


def _refused(signal: SignalState, callback: _Callback, run_if_aborted: bool) -> ListenerHandle:
    """The handle of a listener given to an aborted signal; with
    ``run_if_aborted`` the listener runs first, in this thread: an
    ``Exception`` is reported, a ``KeyboardInterrupt``/``SystemExit``
    propagates to the registering caller."""
    handle = _RefusedHandle()
    handle._signal = signal
    if run_if_aborted:
        handle._cb = callback
        interrupt = _dispatch(signal, (handle,))
        handle._cb = _removed
        if interrupt is not None:
            raise interrupt
    else:
        handle._cb = _removed
    return handle
