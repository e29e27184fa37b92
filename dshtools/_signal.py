"""``AbortController`` / ``AbortSignal``: the cancellation primitive (docs/contract.md §1).

Guarantees:

* Safe to call from any thread. ``abort()`` is decided by one module lock
  (``_LOCK``): of many concurrent callers exactly one wins; the rest return
  at once and do nothing.
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
  never swallowed (decision 0011).
* ``ListenerHandle.remove()`` never waits. Once it returns, a listener that
  had not started never will; one that already started on another thread
  may still be running.
* Derived signals (``any_of``) are flattened onto original sources. Sources
  hold their dependents weakly until a dependent gets a listener; from then
  until it aborts or is closed, its sources keep it alive. Nothing else
  does: there is no global registry.

Why a single module lock rather than one per signal: linking a derived
signal to N sources and propagating an abort to M dependents must each be
atomic across several signals. One lock makes those multi-signal steps
trivially atomic and deadlock-free (no lock ordering to get wrong), and the
critical sections are a few attribute writes: the lock is never held while
user code runs. Weakref callbacks never take it (dead links are pruned
lazily), so garbage collection inside a critical section cannot deadlock.

Claiming a listener: a signal keeps its listeners in a dict from a unique
``int`` key (one process-wide counter) to the callback; the handle holds the
key. The dispatch loop and ``remove()`` both claim a listener by popping its
key (``dict.pop`` is one atomic step: an ``int``'s hash and equality are C
code, so no Python code runs inside it). Whoever pops it owns it: the loop runs it, ``remove()`` makes
sure it never starts. The loop pops without taking ``_LOCK`` (one lock round
trip per listener was most of the cost of ``abort()``), which is safe
because nothing is ever *inserted* after ``aborted`` is set, and the
snapshot of keys to run is taken under the lock that set it.
``remove()`` takes the lock only when the signal has keep-alive links to
update (derived and timeout signals); on a plain signal the pop is all of
it. Inserting (``add_listener``) always takes the lock: its "not aborted
yet" check and the insert must be one step against ``abort()``'s snapshot.
"""

from __future__ import annotations

import itertools
import os
import threading
import weakref
from collections.abc import Callable, Iterable
from operator import attrgetter
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final

from . import _timer
from ._errors import AbortError, TimeoutReason, check_seconds, report_unraisable, safe_repr

__all__ = ["AbortController", "AbortSignal", "Listener", "ListenerHandle"]

Listener = Callable[["AbortSignal"], object]

_LOCK: Final = threading.Lock()

if hasattr(os, "register_at_fork"):
    # A fork while another thread (the timer thread, say) is inside a
    # critical section would leave the child's copy of _LOCK held forever.
    os.register_at_fork(after_in_child=_LOCK._at_fork_reinit)  # type: ignore[attr-defined]

# Marks "not in the listener dict" for the claiming pop (see the module
# docstring): a listener is pending exactly while its key is in the dict.
_MISSING: Final = object()
# Listener keys: unique ints, so that the listener dict holds no per-listener
# object besides the callback (and its handle, held by the caller).
_next_key: Final = itertools.count().__next__

# Slice for untimed waits, so that a KeyboardInterrupt reaches a thread
# blocked in wait() promptly on every platform (B19).
_WAIT_SLICE: Final = 0.25


# The reason of an `abort()` given none, until it is first read. Creating the
# default `AbortError` was two thirds of the cost of such an abort, and most
# aborts are never asked why: the plain-signal path stores this marker, and
# the first read of `reason` replaces it, under `_LOCK`, with the one
# `AbortError` every later read returns. Paths that copy a reason to other
# signals (dependents, a derived signal of an aborted input) resolve it first,
# so they all hold the same object.
_DEFAULT_REASON: Final = object()


def _reason_of(signal: AbortSignal) -> object:
    reason = signal._reason
    if reason is _DEFAULT_REASON:
        with _LOCK:
            reason = _resolved_reason_locked(signal)
    return reason


def _resolved_reason_locked(signal: AbortSignal) -> object:
    reason = signal._reason
    if reason is _DEFAULT_REASON:
        reason = signal._reason = AbortError()
    return reason


class _Link:
    """A source's link to one derived signal. ``ref`` is the derived signal's
    (shared) weak reference; ``strong`` is set while it has listeners."""

    __slots__ = ("ref", "strong")

    def __init__(self, ref: weakref.ref[AbortSignal]) -> None:
        self.ref = ref
        self.strong: AbortSignal | None = None

    def get(self) -> AbortSignal | None:
        s = self.strong
        return s if s is not None else self.ref()


class ListenerHandle:
    """Returned by ``AbortSignal.add_listener``.

    ``registered`` is ``False`` when the signal was already aborted at
    registration (the callback then either ran inline or, with
    ``run_if_aborted=False``, not at all). ``remove()`` is idempotent, never
    blocks, and is also what leaving a ``with`` block does.
    """

    __slots__ = ("_key", "_signal", "registered")

    def __init__(self, signal: AbortSignal, key: int | None, registered: bool) -> None:
        self._signal = signal
        self._key = key
        self.registered: Final = registered

    def remove(self) -> None:
        key = self._key
        if key is None:
            return
        self._key = None
        self._signal._remove(key)

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
        state = "active" if self._key is not None else "detached"
        return f"<ListenerHandle {state} registered={self.registered}>"


class AbortSignal:
    """A one-way flag that says "stop", with listeners.

    Obtain one from ``AbortController().signal`` or the factories
    ``any_of``, ``timeout`` and ``already_aborted``; a bare ``AbortSignal()``
    never aborts. Every method is thread-safe. Source: docs/contract.md §1.
    """

    __slots__ = (
        "__weakref__",
        "_aborted",
        "_aborts_directly",
        "_closed",
        "_deps",
        "_deps_prune_at",
        "_event",
        "_links",
        "_listeners",
        "_reason",
        "_sources",
        "_strong_deps",
        "_timer",
        "_timer_code",
        "_timer_seconds",
    )
    _timer_code: str  # timeout signals only
    _timer_seconds: float

    def __init__(self) -> None:
        self._aborted = False
        self._reason: object = None
        self._event: threading.Event | None = None  # created lazily by wait()
        self._listeners: dict[int, Listener] = {}  # key -> callback, registration order
        # As a source: links to derived signals, in derivation order.
        self._deps: dict[_Link, None] = {}
        self._deps_prune_at = 32
        self._strong_deps = 0
        # As a derived signal: its original sources and the links it owns.
        self._sources: tuple[AbortSignal, ...] | None = None
        self._links: list[tuple[AbortSignal, _Link]] | tuple[()] = ()  # a list once derived
        # As a timeout signal: the pending timer entry (and `_timer_code`,
        # `_timer_seconds`, set only on timeout signals: creating a
        # controller is a hot path too).
        self._timer: _timer.TimerEntry | None = None
        self._closed = False
        # A derived signal its owner may also abort directly (the registry's
        # dispatch signal, on KeyboardInterrupt): signals derived from it link
        # to it as well as to its sources, so that abort reaches them too.
        self._aborts_directly = False

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
        a millisecond of ``abort()`` in another thread; an untimed wait is
        sliced so ``KeyboardInterrupt`` is delivered promptly."""
        if self._aborted:
            return True
        if timeout is not None:
            timeout = check_seconds(timeout, "timeout")
        event = self._event
        if event is None:
            with _LOCK:
                if self._aborted:
                    return True
                event = self._event
                if event is None:
                    event = self._event = threading.Event()
        if timeout is not None:
            # Clamp: Event.wait() raises OverflowError past
            # threading.TIMEOUT_MAX (~292 years); a longer wait is the same.
            return event.wait(min(timeout, threading.TIMEOUT_MAX)) or self._aborted
        while not event.wait(_WAIT_SLICE):
            pass
        return True

    @property
    def listener_count(self) -> int:
        """Listeners not yet run or removed, plus (for a source) links to
        live dependents. Diagnostics and leak tests."""
        with _LOCK:
            n = len(self._listeners)
            for link in self._deps:
                if link.get() is not None:
                    n += 1
            return n

    # -------------------------------------------------------------- listeners

    def add_listener(self, callback: Listener, *, run_if_aborted: bool = True) -> ListenerHandle:
        """Call ``callback(self)`` once when this signal aborts.

        Runs in the aborting thread (the timer thread for timeouts), outside
        any lock. If already aborted: with ``run_if_aborted=True`` the
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
        key = _next_key()
        with _LOCK:
            if not self._aborted:
                listeners = self._listeners
                listeners[key] = callback
                # Keep-alive links exist only on derived and timeout signals.
                if len(listeners) == 1 and (self._sources is not None or self._timer is not None):
                    self._keepalive_changed_locked()
                return ListenerHandle(self, key, True)
        if run_if_aborted:
            _call(callback, self)
        return ListenerHandle(self, None, False)

    def _remove(self, key: int) -> None:
        listeners = self._listeners
        if self._sources is None and self._timer is None:
            # A plain (controller) signal keeps nothing alive, so the
            # claiming pop is all there is to do, and it needs no lock (see
            # the module docstring). `_sources` is never set after creation;
            # a stale non-None `_timer` only sends us down the locked path.
            listeners.pop(key, None)
            return
        with _LOCK:
            if listeners.pop(key, _MISSING) is _MISSING:
                return  # already claimed by a dispatch loop (it ran or runs)
            if not listeners and (self._sources is not None or self._timer is not None):
                self._keepalive_changed_locked()

    def _keepalive_changed_locked(self) -> None:
        """Listener/strong-dependent presence changed: make the links that
        keep this signal alive strong or weak accordingly."""
        needed = bool(self._listeners) or self._strong_deps > 0
        if self._sources is not None:
            for source, link in self._links:
                if needed and link.strong is None:
                    link.strong = self
                    source._strong_deps += 1
                    if source._strong_deps == 1 and (source._timer is not None or source._sources is not None):
                        source._keepalive_changed_locked()
                elif not needed and link.strong is not None:
                    link.strong = None
                    source._strong_deps -= 1
                    if source._strong_deps == 0 and (source._timer is not None or source._sources is not None):
                        source._keepalive_changed_locked()
        timer = self._timer
        if timer is not None:
            timer.strong = self if needed else None

    # ------------------------------------------------------------------ abort

    def _abort(self, reason: object, *, from_timer: bool = False) -> None:
        if self._aborted:  # fast path; re-checked under the lock
            return
        if reason is None:
            reason = _DEFAULT_REASON  # the AbortError is made when first read
        with _LOCK:
            if self._aborted:
                return
            if from_timer and self._closed:
                # Race: the timer thread popped this signal's entry and is
                # about to call _on_timer (outside the timer lock) when
                # another thread calls close(); close() finds nothing left to
                # cancel and returns. Checking `_closed` here, under the same
                # lock close() sets it under, makes "after close() returns,
                # the signal never aborts" hold for that interleaving too.
                return
            if not self._deps and self._sources is None and self._timer is None:
                # A plain signal with no dependents (a controller's, the
                # common case): mark it and snapshot its listeners.
                self._aborted = True
                self._reason = reason
                listeners = self._listeners
                entries = list(listeners) if listeners else None
                single = True
            else:
                if reason is _DEFAULT_REASON:
                    reason = AbortError()  # shared with dependents: made now
                self._mark_aborted_locked(reason)
                self._strong_deps = 0
                deps = self._deps
                single = not deps
                # The listeners to run, in registration order. Taken under the
                # lock that set `aborted`: from here on add_listener() sees
                # `aborted` and runs its callback inline, so no listener can be
                # missed by this snapshot or run twice.
                if single:
                    # No dependents: only this (derived or timeout) signal.
                    entries = list(self._listeners) if self._listeners else None
                else:
                    won = [self]
                    # Snapshot: marking a dependent detaches it from every
                    # source, this one included.
                    for link in list(deps):
                        dep = link.get()
                        if dep is not None and not dep._aborted:
                            dep._mark_aborted_locked(reason)
                            won.append(dep)
                    deps.clear()
                    batches = [(signal, list(signal._listeners)) for signal in won if signal._listeners]
        # Every affected signal now reads aborted with `reason`. Wake waiters,
        # then run listeners: own first, dependents in derivation order.
        if single:
            event = self._event
            if event is not None:
                event.set()
            if entries is not None:
                interrupt = self._dispatch(entries)
                if interrupt is not None:
                    raise interrupt
            return
        for signal in won:
            event = signal._event
            if event is not None:
                event.set()
        first: BaseException | None = None
        for signal, entries in batches:
            interrupt = signal._dispatch(entries)
            if first is None:
                first = interrupt
        if first is not None:
            # A Ctrl-C (or SystemExit) raised inside a listener must not be
            # swallowed (B16's "several interrupts needed"); it is re-raised
            # here, after every listener - dependents' too - has run.
            raise first

    def _mark_aborted_locked(self, reason: object) -> None:
        self._aborted = True
        self._reason = reason
        if self._sources is not None:
            self._detach_locked()
        timer = self._timer
        if timer is not None:
            timer.strong = None
            # The entry may be the one firing now; a late cancel is harmless.
            timer.cancelled = True
            self._timer = None

    def _dispatch(self, keys: list[int]) -> BaseException | None:
        # Each listener is claimed by popping its key, right before it runs;
        # remove() claims with the same pop. Exactly one pop finds it, so a
        # concurrent remove() either wins (the listener never starts) or
        # loses (it has started) - never both, and it never waits.
        # Returns the first non-Exception BaseException a listener raised
        # (the caller re-raises it once every listener ran), else None.
        interrupt: BaseException | None = None
        pop = self._listeners.pop
        for key in keys:
            callback = pop(key, None)  # never None while pending: add_listener checks callable()
            if callback is None:
                continue
            try:  # _call(), inlined: this loop is the cost of abort()
                callback(self)
            except Exception as exc:
                report_unraisable(exc, "Exception in abort listener " + safe_repr(callback), self)
            except BaseException as exc:  # KeyboardInterrupt, SystemExit: kept
                if interrupt is None:
                    interrupt = exc
        return interrupt

    # ---------------------------------------------------------------- derived

    def _detach_locked(self) -> None:
        for source, link in self._links:
            if link.strong is not None:
                link.strong = None
                source._strong_deps -= 1
                if source._strong_deps == 0:
                    source._keepalive_changed_locked()
            source._deps.pop(link, None)
        self._links = ()
        # A detached (closed or aborted) derived signal has no sources left:
        # any_of() over it flattens to nothing, and it no longer pins its
        # sources (or their timers) in memory.
        self._sources = ()

    def _prune_deps_locked(self) -> None:
        # Amortised O(1): drop links to released dependents once the dict has
        # doubled since the last prune, so a long-lived parent's memory
        # follows its live dependents, not every signal ever derived from it.
        self._deps = {link: None for link in self._deps if link.get() is not None}
        self._deps_prune_at = max(32, 2 * len(self._deps))

    def close(self) -> None:
        """Detach a derived signal from its sources and cancel a pending
        timer; afterwards it never aborts. Never aborts, idempotent, and a
        no-op for controller signals. ``with signal:`` closes on exit."""
        with _LOCK:
            if self._closed:
                return
            self._closed = True
            if self._sources is not None:
                self._detach_locked()
            timer = self._timer
            self._timer = None
            if timer is not None:
                timer.strong = None
        if timer is not None:
            _timer.cancel(timer)

    def __enter__(self) -> AbortSignal:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _on_timer(self) -> None:
        self._abort(TimeoutReason(self._timer_code, self._timer_seconds), from_timer=True)

    # -------------------------------------------------------------- factories

    @staticmethod
    def any_of(signals: Iterable[AbortSignal]) -> AbortSignal:
        """A signal that aborts when any of ``signals`` aborts, with the
        reason of the first to abort (already aborted at creation: the first
        such in iteration order). Empty input never aborts. Derived inputs
        are flattened onto their original sources. Raises ``TypeError`` for a
        non-signal element (every element is checked)."""
        items = list(signals)
        for s in items:
            if not isinstance(s, AbortSignal):
                raise TypeError(f"any_of() takes AbortSignals, got {type(s).__name__}")
        return derive(items)

    @staticmethod
    def timeout(seconds: float) -> AbortSignal:
        """A signal that aborts after ``seconds`` (>= 0, finite) with
        ``TimeoutReason("TIMEOUT", seconds)``. Listeners run on the shared
        timer thread. ``close()`` cancels the timer. Raises ``TypeError`` for
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
        signal._aborted = True
        signal._reason = AbortError() if reason is None else reason
        return signal

    def __repr__(self) -> str:
        if self._aborted:
            return f"<AbortSignal aborted reason={_reason_of(self)!r}>"
        kind = "derived" if self._sources is not None else "source"
        return f"<AbortSignal {kind} pending>"


def _timeout_signal(seconds: float, code: str) -> AbortSignal:
    signal = AbortSignal()
    signal._timer_code = code
    signal._timer_seconds = seconds
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
    derived = AbortSignal()
    derived._aborts_directly = aborts_directly
    with _LOCK:
        # Already-aborted inputs win in iteration order (a derived input that
        # aborted counts as itself, before its sources are consulted).
        for s in items:
            if s._aborted:
                derived._aborted = True
                derived._reason = _resolved_reason_locked(s)
                derived._sources = ()
                return derived
        # Flatten: link to original sources only, each once, in first-seen
        # order. Read under the lock: a concurrent close() of a derived input
        # empties its `_sources`. Race closed this way: input D is closed
        # while its root R is still pending; without the lock (or if close()
        # left `_sources` in place) the new signal would link to R and abort
        # when R does, although D - its only input - never aborts; and if R
        # had already aborted, the link would sit in R's dependents forever.
        roots: tuple[AbortSignal, ...]
        if len(items) == 1 and items[0]._sources is None:
            # One root (the registry's dispatch signal when no wrapper
            # replaced the caller's): nothing to flatten or de-duplicate.
            roots = (items[0],)
        else:
            unique: dict[AbortSignal, None] = {}
            for s in items:
                sources = s._sources
                if sources is None:
                    unique[s] = None
                else:
                    for root in sources:
                        unique[root] = None
                    if s._aborts_directly and sources:
                        unique[s] = None  # its direct abort must reach us too
            roots = tuple(unique)
        derived._sources = roots
        ref = weakref.ref(derived)
        links: list[tuple[AbortSignal, _Link]] = []
        derived._links = links
        for root in roots:
            link = _Link(ref)
            deps = root._deps
            deps[link] = None
            links.append((root, link))
            if len(deps) >= root._deps_prune_at:
                root._prune_deps_locked()
        if listener is not None:
            derived._listeners[_next_key()] = listener
            derived._keepalive_changed_locked()
    return derived


def abort_owned(signal: AbortSignal, reason: object) -> None:
    """Abort ``signal``, a signal ``derive``d with ``aborts_directly=True``
    by the caller that owns it (the registry's dispatch signal on
    ``KeyboardInterrupt``). If it is already aborted, run the listeners it
    still has pending: a second interrupt may have landed inside the first
    abort, after the signal was marked but before its listeners ran, and a
    body woken only by a listener would then never wake. Each listener is
    claimed by one atomic pop, so none runs twice. Package-internal."""
    if not signal._aborted:
        signal._abort(reason)
    elif signal._listeners:
        interrupt = signal._dispatch(list(signal._listeners))
        if interrupt is not None:
            raise interrupt


def _call(callback: Listener, signal: AbortSignal) -> None:
    # A listener run inline by add_listener(): an Exception is reported, a
    # KeyboardInterrupt/SystemExit propagates to the registering thread.
    try:
        callback(signal)
    except Exception as exc:
        report_unraisable(exc, "Exception in abort listener " + safe_repr(callback), signal)


class AbortController:
    """Owns an ``AbortSignal`` and the right to abort it.

    ``abort(reason=None)``: the first call wins and sets ``signal.reason``
    (``None`` means a default ``AbortError()``; ``0``, ``""``, ``False`` are
    kept as given); later calls do nothing. Listeners run in the calling
    thread before ``abort`` returns. Source: docs/contract.md §1.
    """

    __slots__ = ("signal",)

    def __init__(self) -> None:
        self.signal: Final = AbortSignal()

    def abort(self, reason: object = None) -> None:
        self.signal._abort(reason)

    def __repr__(self) -> str:
        return f"<AbortController signal={self.signal!r}>"


def _ensure_signal(value: Any, what: str) -> AbortSignal:
    if not isinstance(value, AbortSignal):
        raise TypeError(f"{what} must be an AbortSignal, not {type(value).__name__}")
    return value
