"""Linked signals: their listeners, their links to other signals
(keep-alive, abort propagation, release) and their abort
(docs/contract.md#cancellation; the public surface is
``dshtools._signal``).

A *linked* signal (``any_of``/``derive`` and timeout signals) owns
keep-alive links to its sources or a timer entry. Guarantees:

* Sources hold their dependents weakly until a dependent gets a listener
  (or a strong dependent of its own); from then until it aborts or is
  closed, its sources (or its timer entry) keep it alive. Nothing else
  does: there is no global registry.
* Before any listener runs, the aborted signal **and every signal derived
  from it** read ``aborted`` with the same ``reason`` object. Then
  listeners run once each, in registration order, in the aborting thread,
  with no lock held: the signal's own listeners first, then each
  dependent's, dependents in the order they were derived. A
  ``KeyboardInterrupt`` or ``SystemExit`` from a listener is re-raised
  after all of them ran.
* An aborted or closed derived signal pins no source and is pinned by none;
  the weak entries it leaves in its sources' dependent dicts are pruned in
  amortised O(1), so a long-lived source's memory follows its live
  dependents.

Invariants relied on: every ``*_locked`` function runs with ``_LOCK`` held,
and so does everything that changes ``_deps``, ``_sources``, ``_anchor``,
``_strong_deps`` or a linked signal's ``_listeners``/abort state. Every
source's entry for a derived signal is that signal's one shared ``_anchor``
list, so the links turn strong or weak in one step. Weakref callbacks never
take ``_LOCK``.

Test hook: every linked signal's listeners run through this module's
``_dispatch`` name (``dshtools._signal.state._dispatch``, looked up here at
each call), so a test that replaces ``links._dispatch`` can land an
interrupt at the entry of a linked signal's listener dispatch.
"""

from __future__ import annotations

import weakref
from typing import Any

import dshtools._signal.timer as _timer

from .._core.errors import TimeoutReason
from .state import (
    _LOCK,
    ListenerHandle,
    SignalState,
    _Callback,
    _dispatch,
    _dispatch_plain,
    _refused,
    _removed,
    _shared_reason_locked,
)
from .wake import wake

# `_dispatch` is listed as the documented test hook (module docstring).
__all__ = ["LinkedState", "_dispatch", "abort_owned"]


class LinkedState(SignalState):
    """The links of a linked signal (derived and timeout signals), on top of
    the state every signal has: its sources, its anchor, its strong
    dependents and its timer entry, declared once with what each slot
    holds. This module's functions read and write them; ``_LinkedSignal``
    (``dshtools._signal.signal``) is this record with the public API. Its
    only creator, ``derive``, writes its initial state.

    Code that holds a ``SignalState`` and finds ``_linked`` true holds one
    of these."""

    __slots__ = (
        "_aborts_directly",
        "_anchor",
        "_closed",
        "_derived",
        "_fired",
        "_link",
        "_ref",
        "_sources",
        "_strong_deps",
        "_timer",
        "_timer_code",
        "_timer_seconds",
    )
    _sources: tuple[SignalState, ...]  # original sources (flattened)
    _ref: weakref.ref[LinkedState]  # a weak reference to itself
    _link: tuple[weakref.ref[LinkedState], list[LinkedState]]  # its entry in a source's `_deps`
    _anchor: list[LinkedState]  # [itself] while its sources must keep it alive, else []
    _strong_deps: int  # a timeout source: dependents that need it kept alive
    _timer: _timer.TimerEntry | None  # its pending timer entry
    _timer_code: str  # the `TimeoutReason` its timer aborts it with
    _timer_seconds: float
    _fired: bool  # aborted by its own timer (set only then)
    _closed: bool
    _derived: bool  # False for a timeout signal (a root)
    # Its owner may abort it directly (`abort_owned`): signals derived from
    # it link to it as well as to its sources.
    _aborts_directly: bool

    def _on_timer(self) -> None:
        # Its timer is due (`timer`, on an abort runner).
        _abort_linked(self, TimeoutReason(self._timer_code, self._timer_seconds), from_timer=True)

    def close(self) -> None:
        """``AbortSignal.close`` of a linked signal: drop the links that
        keep it alive and its sources' links to it, and cancel its timer
        entry. Never aborts; idempotent."""
        if self._aborted and not self._sources and self._timer is None:
            # The abort released every link, and an aborted signal's links
            # and timer never come back: nothing to take the lock for (the
            # woken calls of a shared abort close theirs all at once).
            self._closed = True
            return
        with _LOCK:
            timer = self._timer
            sources = self._sources
            if self._closed and timer is None and not sources:
                return
            # Each strong link goes in one step, first: the timer entry's (a
            # timeout signal), every source's at once through the anchor (a
            # derived signal). So an interrupt (Ctrl-C) at any point of this
            # block leaves either the signal untouched or no strong link to it -
            # at most weak entries, pruned once it is gone - and close() again
            # finishes the job.
            if timer is not None:
                timer.strong = None
            _release_sources_locked(self)
            self._closed = True
            self._timer = None
            for source in sources:
                deps = source._deps
                if deps is self._link:
                    source._deps = None
                elif type(deps) is dict:
                    deps.pop(self._ref, None)
        if timer is not None:
            _timer.cancel(timer)


class _LinkedHandle(ListenerHandle):
    """The handle of a listener of a linked signal: removing it takes
    ``_LOCK``, and the last one's removal weakens the signal's links."""

    __slots__ = ()

    def remove(self) -> None:
        self._cb = _removed  # a dispatch that has not read it never runs it
        signal: LinkedState = self._signal  # type: ignore[assignment]  # made by `_add_linked`
        with _LOCK:
            listeners = signal._listeners
            if listeners is None or listeners.pop(self, None) is None:
                return  # removed before, or the signal aborted
            if not listeners:
                _keepalive_changed_locked(signal)


def _add_linked(self: LinkedState, callback: _Callback, run_if_aborted: bool) -> ListenerHandle:
    with _LOCK:
        if not self._aborted:
            handle = _LinkedHandle()
            handle._signal = self
            handle._cb = callback
            listeners = self._listeners
            if listeners is None:
                listeners = self._listeners = {}
            listeners[handle] = callback
            if len(listeners) == 1:
                _keepalive_changed_locked(self)
            return handle
    return _refused(self, callback, run_if_aborted)


def _keepalive_changed_locked(self: LinkedState) -> None:
    """Listener/strong-dependent presence changed on a linked signal:
    make the links that keep it alive strong or weak accordingly.

    Every source's entry for this signal is its one shared ``_anchor``
    list: holding ``[self]`` makes all those links strong, an empty one
    all weak, in one step. So an interrupt between two steps of a
    detach can never leave some sources pinning a closed signal."""
    needed = bool(self._listeners) or self._strong_deps > 0
    timer = self._timer
    if timer is not None:
        timer.strong = self if needed else None
    anchor = self._anchor
    if needed is bool(anchor):
        return
    if needed:
        anchor.append(self)
    else:
        anchor.clear()
    # Timeout sources count their strong dependents (their timer entry
    # must then keep them alive).
    for source in self._sources:
        if source._linked:
            linked: LinkedState = source  # type: ignore[assignment]  # `_linked` is True
            linked._strong_deps += 1 if needed else -1
            if linked._strong_deps == (1 if needed else 0):
                _keepalive_changed_locked(linked)


def _abort_linked(self: LinkedState, reason: object, *, from_timer: bool = False) -> None:
    # `reason` is never None: a linked signal is aborted by its timer (a
    # `TimeoutReason`) or by its owner with a reason (`abort_owned`).
    with _LOCK:
        if self._aborted:
            return
        if from_timer and self._closed:
            # The timer thread took this signal's entry off its heap and
            # handed `_on_timer` to a runner, and close() ran meanwhile,
            # found nothing left to cancel and returned. Checking `_closed`
            # here, under the lock close() sets it under, makes "after
            # close() returns, the signal never aborts" hold for that
            # interleaving too.
            return
        if from_timer:
            self._fired = True  # before any listener runs (Deadline.timed_out)
        _mark_aborted_locked(self, reason)
        won, batches = _mark_dependents_locked(self, reason)
    _finish(won, batches, None)


def _mark_aborted_locked(self: LinkedState, reason: object) -> None:
    # Linked signals only (their every abort path holds _LOCK).
    self._reason = reason
    self._aborted = True
    self._strong_deps = 0
    timer = self._timer
    if timer is not None:
        timer.strong = None
        # The entry may be the one firing now; a late cancel is harmless.
        timer.cancelled = True
        self._timer = None
    if self._anchor:
        _release_sources_locked(self)
    else:
        self._sources = ()


def _release_sources_locked(self: LinkedState) -> None:
    # An aborted derived signal no longer needs its sources to keep it
    # alive, nor pins them. Its (weak) entries in the sources' dependent
    # dicts are left for their amortised prune: that is what makes an
    # any_of's abort cost nothing per source.
    sources = self._sources
    anchor = self._anchor
    if not anchor:
        self._sources = ()
        return
    anchor.clear()  # every source's link is weak from here on
    self._sources = ()
    for source in sources:
        if source._linked:
            linked: LinkedState = source  # type: ignore[assignment]  # `_linked` is True
            linked._strong_deps -= 1
            if linked._strong_deps == 0:
                _keepalive_changed_locked(linked)


def _mark_dependents_locked(signal: SignalState, reason: object) -> tuple[list[SignalState], list[Any]]:
    """Mark every live dependent of ``signal`` aborted with ``reason``;
    return the signals to wake (``signal`` first) and the listener batches
    of the linked ones to run, in order: ``(signal, iterator of handles)``,
    the iterator also stored as the signal's ``_pending``. Snapshots are
    taken under the lock that set ``aborted``: from then on a linked
    signal's add_listener sees it and runs inline."""
    won = [signal]
    deps = signal._deps
    if deps:
        signal._deps = None
        for link in _dep_links(deps):
            dep = _live(*link)
            if dep is not None:
                _mark_aborted_locked(dep, reason)
                won.append(dep)
    batches = []
    for s in won:
        listeners = s._listeners
        if listeners and s._linked:
            s._listeners = None
            # Frozen from here: removers and adders see `_listeners` None.
            pending = s._pending = iter(listeners)
            batches.append((s, pending))
    return won, batches


def _finish(won: list[SignalState], batches: list[Any], plain: dict[Any, Any] | None) -> None:
    # Every affected signal now reads aborted. Wake waiters, then run
    # listeners: own first (`plain`: the listener dict of a plain signal,
    # `won[0]`), dependents in derivation order.
    wake([waiters for signal in won if (waiters := signal._waiters) is not None])
    first = _dispatch_plain(won[0], plain) if plain else None
    for signal, pending in batches:
        interrupt = _dispatch(signal, pending)
        if first is None:
            first = interrupt
    if first is not None:
        # A Ctrl-C (or SystemExit) raised inside a listener must not be
        # swallowed; it is re-raised here, after every listener -
        # dependents' too - has run.
        raise first


def _won_plain_with_deps(signal: SignalState) -> None:
    # The rest of a plain signal's abort that won, once `_aborted` is
    # stored, when it has dependents.
    with _LOCK:
        won, batches = _mark_dependents_locked(signal, _shared_reason_locked(signal))
    _finish(won, batches, signal._listeners)


def _dep_links(deps: Any) -> Any:
    """A source's links to its dependents, each ``(weak reference, anchor)``:
    ``_deps`` is None, one derived signal's ``_link`` (a source's first
    dependent costs one attribute write), or a dict weak reference ->
    anchor in derivation order (from the second; its prune point in
    ``_deps_prune_at``)."""
    return (deps,) if type(deps) is tuple else deps.items()


def _live(ref: Any, anchor: list[Any]) -> LinkedState | None:
    # The dependent behind a link (a derived signal), if it can still abort.
    dep: LinkedState | None = anchor[0] if anchor else ref()
    if dep is not None and not dep._aborted and dep._sources:
        return dep
    return None


def _add_dep_locked(root: SignalState, deps: Any, link: tuple[Any, list[LinkedState]]) -> None:
    # A link to one more dependent of `root`, whose `_deps` is `deps` (not None).
    if type(deps) is tuple:
        if _live(*deps) is None:
            root._deps = link  # the one link there was is spent
            return
        deps = root._deps = {deps[0]: deps[1]}
        root._deps_prune_at = 32
    deps[link[0]] = link[1]
    if len(deps) >= root._deps_prune_at:
        _prune_deps_locked(root)


def _born_aborted(derived: SignalState, source: SignalState) -> None:
    # Under _LOCK. `source` aborted: `derived` reads aborted with its reason.
    derived._reason = _shared_reason_locked(source)
    derived._aborted = True


def _prune_deps_locked(signal: SignalState) -> None:
    # Amortised O(1): drop links to released, aborted and closed dependents
    # once the dict has doubled since the last prune, so a long-lived
    # parent's memory follows its live dependents, not every signal ever
    # derived from it.
    deps = signal._deps
    assert deps is not None
    live = {}
    for ref, anchor in deps.items():
        if _live(ref, anchor) is not None:
            live[ref] = anchor
    signal._deps = live
    signal._deps_prune_at = max(32, 2 * len(live))


def abort_owned(signal: SignalState, reason: object) -> None:
    """Abort ``signal``, a signal ``derive``d with ``aborts_directly=True``
    by the caller that owns it (the registry's dispatch signal on
    ``KeyboardInterrupt``), with ``reason`` (not ``None``). If it is already aborted, run the listeners it
    still has pending: a second interrupt may have landed inside the first
    abort, after the signal was marked but before its listeners ran, and a
    body woken only by a listener would then never wake. Both dispatches
    draw from the one iterator the abort made (``_pending``), so none runs
    twice. Package-internal."""
    if not signal._aborted:
        _abort_linked(signal, reason)  # type: ignore[arg-type]  # derived: a `LinkedState`
        return
    pending = signal._pending
    if pending is not None:
        interrupt = _dispatch(signal, pending)
        if interrupt is not None:
            raise interrupt
