"""``AbortSignal``: the cancellation primitive
(docs/contract.md#cancellation).

Guarantees:

* Safe to call from any thread. Of many concurrent ``abort()`` calls exactly
  one wins; the rest return at once and do nothing.
* Before any listener runs, the aborted signal **and every signal derived
  from it** read ``aborted`` with the same ``reason`` object. Then listeners
  run once each, in registration order, in the aborting thread, with no lock
  held: the signal's own listeners first, then each dependent's, dependents
  in the order they were derived.
* A listener added after abort runs at once in the registering thread
  (``run_if_aborted=True``) or is refused atomically (``registered is
  False``): no check-then-register window can lose a wake-up.
* A listener that raises never stops the others: an ``Exception`` goes to
  ``sys.unraisablehook``; a ``KeyboardInterrupt`` or ``SystemExit`` is held
  and re-raised from ``abort()`` after every listener ran, so a Ctrl-C is
  never swallowed.
* ``ListenerHandle.remove()`` never waits. Once it returns, a listener that
  had not started never will; one that already started on another thread
  may still be running.
* Derived signals (``any_of``) are flattened onto original sources. Sources
  hold their dependents weakly until a dependent gets a listener; from then
  until it aborts or is closed, its sources keep it alive. Nothing else
  does: there is no global registry.

This module is ``AbortSignal``, its subclasses, and the paths that must
stay one frame deep (add_listener, wait, any_of/derive); ``AbortController``
is in ``dshtools._signal.controller``. The layers under it, each with its
own guarantees and invariants:

* ``state``: ``SignalState``, the record every signal is (its slots),
  listener storage, the abort decision,
  listener dispatch (the boundary), ``ListenerHandle``, the module lock
  ``_LOCK``, and the atomicity assumptions every lock-free step relies on;
* ``links``: ``LinkedState``, the record a linked signal adds (sources,
  anchor, strong dependents, timer entry, and its ``close``), linked
  signals' listeners, keep-alive links, abort propagation to dependents,
  release and pruning;
* ``timer``: the timer thread and the abort runners.

Two kinds of signal. A *plain* signal (a controller's, ``AbortSignal()``,
``already_aborted``) keeps nothing alive, so its listener and abort paths
take no lock. A *linked* signal (``any_of``/``derive`` and timeout signals,
class ``_LinkedSignal``) owns keep-alive links to its sources or a timer
entry; everything that changes those links, and its own abort, runs under
the one lock ``_LOCK``.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Iterable
from itertools import repeat
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Final

import dshtools._signal.timer as _timer

from .._core.errors import AbortError, check_seconds, safe_repr
from .links import (
    LinkedState,
    _add_dep_locked,
    _add_linked,
    _born_aborted,
    _dep_links,
    _keepalive_changed_locked,
    _live,
    _release_sources_locked,
)
from .state import (
    _BOUNDARY,
    _LOCK,
    ListenerHandle,
    SignalState,
    _added_late,
    _listener_dict,
    _pending_count,
    _reason_of,
    _refused,
)
from .wake import wait_on

__all__ = ["AbortSignal", "Listener", "ListenerHandle"]

Listener = Callable[["AbortSignal"], object]

_new_signal: Final = object.__new__


class AbortSignal(SignalState):
    """A one-way flag that says "stop", with listeners.

    Obtain one from ``AbortController().signal`` or the factories
    ``any_of``, ``timeout`` and ``already_aborted``; a bare ``AbortSignal()``
    never aborts. Every method is thread-safe. Source:
    docs/contract.md#cancellation.
    """

    # The slots, with what each holds, are `SignalState`'s.
    __slots__ = ()

    def __init__(self) -> None:
        # The initial state of a plain signal, written here only
        # (`AbortController` and `budget_controller` call this too).
        self._linked = False
        self._aborted = False
        self._armed = True
        self._waiters = None
        self._listeners = None
        self._deps = None
        self._watched = False

    # ------------------------------------------------------------------ state

    if TYPE_CHECKING:

        @property
        def aborted(self) -> bool:
            """``True`` once aborted; never goes back."""

        @property
        def reason(self) -> object:
            """The abort reason (``None`` until aborted; an ``AbortError``
            when aborted without one)."""

    else:
        # Read-only properties whose getter is C code (no Python frame per
        # read): `signal.aborted` is the check a cooperative loop makes on
        # every iteration, so it should cost no more than Event.is_set().
        aborted = property(attrgetter("_aborted"), doc="``True`` once aborted; never goes back.")
        reason = property(
            _reason_of,
            doc="The abort reason (``None`` until aborted; an ``AbortError`` when aborted without one).",
        )

    def throw_if_aborted(self) -> None:
        """Raise a new ``AbortError(self.reason)`` if aborted; else return."""
        if self._aborted:
            raise AbortError(_reason_of(self))

    def wait(self, timeout: float | None = None) -> bool:
        """Block the calling thread until aborted or ``timeout`` seconds
        passed (``None``: no limit). Returns ``aborted``. Wakes within about
        a millisecond of ``abort()`` in another thread (the waiters of one
        abort wake one after another, each woken thread waking the next).
        Off the main thread the wait never wakes before that; on the main
        thread it is sliced so ``KeyboardInterrupt`` is delivered promptly.
        Source: docs/contract.md#scale."""
        if self._aborted:
            return True
        if timeout is not None:
            timeout = check_seconds(timeout, "timeout")
        waiters = self._waiters
        if waiters is None:
            with _LOCK:
                waiters = self._waiters
                if waiters is None:
                    self._watched = True  # before `_waiters`: see `_watched`
                    waiters = self._waiters = []
        # `wait_on` joins the list and then reads `_aborted`; an abort stores
        # `_aborted` before it copies the list (module docstring): one of us
        # sees the other.
        return wait_on(self, waiters, timeout)

    @property
    def listener_count(self) -> int:
        """Listeners not yet run or removed, plus (for a source) links to
        live dependents. Diagnostics and leak tests."""
        with _LOCK:
            listeners = self._listeners
            if self._aborted:
                pending = getattr(self, "_pending", None)
                n = 0 if pending is None else _pending_count(pending)
            else:
                n = 0 if listeners is None else len(listeners) - (_BOUNDARY in listeners)
            deps = self._deps
            if deps:
                n += sum(1 for link in _dep_links(deps) if _live(*link) is not None)
            return n

    @property
    def deadline(self) -> float | None:
        """The earliest ``time.monotonic()`` instant (seconds) at which a
        timer among this signal's sources (or its own, for a timeout signal)
        will abort it; ``None`` when no pending timer can. An aborted or
        closed signal has none. In a ``ProcessBackend`` or ``RayBackend``
        worker, ``run.signal`` reports the caller's timer, re-based on the
        worker's clock. Source: docs/contract.md#a9."""
        if self._aborted:
            return None
        if not self._linked:
            return self._budget_at
        return _deadline_of(self)  # type: ignore[arg-type]  # a `_LinkedSignal`

    def time_left(self) -> float | None:
        """Seconds until ``deadline`` (never negative), ``0.0`` once the
        signal aborted, ``None`` when no timer can abort it: a value to hand
        to a library that only takes a timeout. Source: docs/contract.md#a9."""
        if self._aborted:
            return 0.0
        at = self.deadline
        if at is None:
            return None
        return max(0.0, at - time.monotonic())

    # -------------------------------------------------------------- listeners

    def add_listener(self, callback: Listener, *, run_if_aborted: bool = True) -> ListenerHandle:
        """Call ``callback(self)`` once when this signal aborts.

        Runs in the aborting thread (for a timeout, a library thread that
        is never the caller's), outside any lock. If already aborted: with ``run_if_aborted=True`` the
        callback runs now in this thread; with ``False`` it does not run.
        Either way ``handle.registered`` is ``False``. An ``Exception`` from
        the callback goes to ``sys.unraisablehook`` and the other listeners
        still run; a ``KeyboardInterrupt``/``SystemExit`` does not stop them
        either, and the first one is re-raised by ``abort()`` once they all
        ran (or propagates from ``add_listener`` when run inline). Raises
        ``TypeError`` for a non-callable.
        """
        if not callable(callback):
            raise TypeError(f"listener must be callable, not {type(callback).__name__}")
        if self._linked:
            return _add_linked(self, callback, run_if_aborted)  # type: ignore[arg-type]  # a `_LinkedSignal`
        if self._aborted:
            return _refused(self, callback, run_if_aborted)
        handle = ListenerHandle()
        handle._signal = self
        handle._cb = callback
        listeners = self._listeners
        if listeners is None:
            listeners = _listener_dict(self)
        listeners[handle] = callback
        if not self._aborted:
            return handle  # the abort, when it comes, snapshots it
        # Aborted while we inserted: the dispatch or this thread runs it.
        return _added_late(self, listeners, handle, callback, run_if_aborted)

    # ---------------------------------------------------------------- derived

    def close(self) -> None:
        """Detach a derived signal from its sources and cancel a pending
        timer; afterwards it never aborts. Never aborts, idempotent, and a
        no-op for controller signals. ``with signal:`` closes on exit."""
        # A plain signal has no links to drop; a linked signal's close is
        # `LinkedState.close`.

    def __enter__(self) -> AbortSignal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -------------------------------------------------------------- factories

    @staticmethod
    def any_of(signals: Iterable[AbortSignal]) -> AbortSignal:
        """A signal that aborts when any of ``signals`` aborts, with the
        reason of the first to abort (already aborted at creation: the first
        such in iteration order). Empty input never aborts. Derived inputs
        are flattened onto their original sources. Raises ``TypeError`` for a
        non-signal element (every element is checked)."""
        items = list(signals)
        if not all(map(isinstance, items, _SIGNAL_TYPES)):
            for s in items:
                if not isinstance(s, AbortSignal):
                    raise TypeError(f"any_of() takes AbortSignals, got {type(s).__name__}")
        return derive(items)

    @staticmethod
    def timeout(seconds: float) -> AbortSignal:
        """A signal that aborts after ``seconds`` (>= 0, finite) with
        ``TimeoutReason("TIMEOUT", seconds)``. Listeners run on a library
        thread, never the caller's; one that blocks delays no other timeout.
        ``close()`` cancels the timer. Raises ``TypeError`` for
        a non-number, ``ValueError`` for negative, NaN or infinite."""
        value = check_seconds(seconds)
        if value < 0:
            raise ValueError(f"seconds must be >= 0, got {seconds!r}")
        return _timeout_signal(value, "TIMEOUT")

    @staticmethod
    def already_aborted(reason: object = None) -> AbortSignal:
        """A signal that is aborted from the start (``None`` reason: a
        default ``AbortError``)."""
        signal = AbortSignal()
        del signal._armed  # no abort can win
        signal._reason = AbortError() if reason is None else reason
        signal._aborted = True
        return signal

    def __repr__(self) -> str:
        if self._aborted:
            return f"<AbortSignal aborted reason={safe_repr(_reason_of(self))}>"
        kind = "derived" if isinstance(self, _LinkedSignal) and self._derived else "source"
        return f"<AbortSignal {kind} pending>"


class _PlainSignal(AbortSignal):
    """A controller's signal: an ``AbortSignal`` whose slots
    ``AbortController`` writes itself, so that making one runs no Python
    ``__init__`` (creating a controller is a hot path)."""

    __slots__ = ()
    __init__ = object.__init__


class _BudgetSignal(_PlainSignal):
    """The signal of a body that runs in another process than its caller
    a plain signal, aborted by the caller's abort message
    as any controller's, that reports ``deadline == _budget_at`` (a
    ``time.monotonic()`` instant of this process) while it is pending. It
    owns no timer: the timer that will abort it runs in the caller's
    process."""

    __slots__ = ("_budget_at",)


# The second argument of every isinstance() in any_of's C pass over its inputs.
_SIGNAL_TYPES: Final = repeat(AbortSignal)


class _LinkedSignal(LinkedState, AbortSignal):
    """A derived or timeout signal: it owns keep-alive links to its sources
    (weak until it has listeners or strong dependents) or a timer entry
    (their slots and ``close``: ``LinkedState``, first in the bases so
    that its ``close`` is the one a linked signal runs)."""

    __slots__ = ()

    # Made only by `derive` (a timeout signal is `derive([])`), the one
    # place its slots are first written, without running an `__init__`: a
    # registry call's derive then runs no second Python function.


def _deadline_of(signal: LinkedState) -> float | None:
    """The earliest ``time.monotonic()`` instant (seconds) among the timer
    entry of ``signal`` itself, those of its pending linked sources and the
    carried deadlines of its pending plain sources (a remote body's
    signal), or ``None`` when none can abort it (``AbortSignal.deadline``;
    docs/contract.md#a9). Takes no lock and never blocks: ``_timer`` and
    ``_sources`` are replaced whole, never mutated, so a read without
    ``_LOCK`` sees a consistent value; a stale read only reports a timer
    that just fired."""
    timer = signal._timer
    best = None if timer is None else timer.when
    for source in signal._sources:
        if not source._aborted:
            at = _deadline_of(source) if isinstance(source, LinkedState) else source._budget_at
            if at is not None and (best is None or at < best):
                best = at
    return best


def _timeout_signal(seconds: float, code: str) -> AbortSignal:
    signal = derive([])
    assert isinstance(signal, _LinkedSignal)
    signal._derived = False  # a root: it has a timer, not sources
    signal._timer_code = code
    signal._timer_seconds = seconds
    signal._timer = _timer.schedule(seconds, signal)
    return signal


def timer_fired(signal: AbortSignal) -> bool:
    """``signal`` (a timeout or deadline signal) was aborted by its own
    timer, decided under the lock that decided the abort, before any
    listener ran. Package-internal (``Deadline.timed_out``)."""
    return getattr(signal, "_fired", False)


def deadline_signal(upstream: AbortSignal, seconds: float, code: str) -> AbortSignal:
    """One signal that aborts when ``upstream`` does (with its reason) or
    ``seconds`` from now (``TimeoutReason(code, seconds)``), whichever comes
    first: a signal derived from ``upstream`` that carries its own timer,
    where ``any_of([upstream, timeout])`` would make two signals and two
    sets of links. Signals derived from it link to it as well as to its
    sources (its timer is a direct abort). Package-internal (``Deadline``)."""
    signal = derive([upstream], aborts_directly=True)
    assert isinstance(signal, _LinkedSignal)
    signal._timer_code = code
    signal._timer_seconds = seconds
    with _LOCK:
        # Armed only while pending: an abort of the upstream that won
        # meanwhile leaves no entry behind (an abort clears `_timer` under
        # this lock).
        if not signal._aborted:
            signal._timer = _timer.schedule(seconds, signal)
    return signal


def derive(items: list[AbortSignal], listener: Listener | None = None, *, aborts_directly: bool = False) -> AbortSignal:
    """A signal derived from ``items`` (flattened). With ``listener``, the
    derived signal is born with that listener (unless an input is already
    aborted: then no listener is installed and the result reads aborted),
    under the same lock acquisition as the links: the registry's dispatch
    signal, one lock round trip instead of two and no handle. With
    ``aborts_directly`` the caller may abort the result itself
    (``abort_owned``); signals later derived from it then link to it as well
    as to its sources. Package-internal (the registry's and ``deadline``'s
    seam into this module)."""
    # The initial state of a linked signal, written here only.
    derived = _new_signal(_LinkedSignal)
    derived._linked = True
    derived._aborted = False  # decided under _LOCK: no `_armed`
    derived._reason = None
    derived._waiters = None
    derived._listeners = None
    derived._deps = None
    derived._pending = None
    derived._sources = ()
    ref = derived._ref = weakref.ref(derived)
    anchor: list[LinkedState] = []
    derived._anchor = anchor
    derived._strong_deps = 0
    derived._timer = None
    derived._closed = False
    derived._derived = True
    derived._aborts_directly = aborts_directly
    with _LOCK:
        # Already-aborted inputs win in iteration order (a derived input
        # that aborted counts as itself, before its sources are consulted);
        # the others are flattened onto their original sources, each once,
        # in first-seen order. `_sources` is read under the lock: a
        # concurrent close() of a derived input empties it. Race closed this
        # way: input D is closed while its root R is still pending; without
        # the lock (or if close() left `_sources` in place) the new signal
        # would link to R and abort when R does, although D - its only
        # input - never aborts.
        flat = True
        for s in items:
            if s._aborted:
                _born_aborted(derived, s)
                return derived
            if s._linked:
                flat = False
        roots: list[SignalState] = items  # type: ignore[assignment]  # read only while `flat`
        if not flat:
            roots = []
            for s in items:
                if isinstance(s, _LinkedSignal) and s._derived:
                    roots.extend(s._sources)
                    if s._aborts_directly and s._sources:
                        roots.append(s)  # its direct abort must reach us too
                else:
                    roots.append(s)
        if len(roots) > 1 and len(set(roots)) != len(roots):
            roots = list(dict.fromkeys(roots))
        sources = derived._sources = tuple(roots)
        # One link object per derived signal; a source's first dependent is
        # that object itself (one attribute write), later ones a dict.
        link = derived._link = (ref, anchor)
        for root in sources:
            deps = root._deps
            if deps is None:
                root._watched = True  # before `_deps`: see `_watched`
                root._deps = link
            elif type(deps) is dict and len(deps) + 1 < root._deps_prune_at:
                deps[ref] = anchor  # a source that had dependents before (no prune due)
            else:
                _add_dep_locked(root, deps, link)
            # A plain root's abort takes no lock: it may have stored
            # `_aborted` before our link went in and then found no
            # dependents. Linked, then checked (module docstring), so such
            # an abort is seen here.
            if root._aborted:
                _release_sources_locked(derived)
                _born_aborted(derived, root)
                return derived
        if listener is not None:
            # Never returned, so never removed: it needs no `_signal`, and
            # without one the signal and its handle form no reference cycle
            # (a finished call's dispatch signal is freed at once).
            handle = ListenerHandle()
            handle._cb = listener
            derived._listeners = {handle: listener}
            _keepalive_changed_locked(derived)
    return derived


def _ensure_signal(value: Any, what: str) -> AbortSignal:
    if not isinstance(value, AbortSignal):
        raise TypeError(f"{what} must be an AbortSignal, not {type(value).__name__}")
    return value
