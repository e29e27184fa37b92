"""Links between signals: keep-alive, abort propagation and release
(docs/contract.md §1; the public surface is ``dshtools._signal``).

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
"""

from __future__ import annotations

from typing import Any

from ._errors import AbortError, TimeoutReason
from ._signal_claim import (
    _ABORTED,
    _DEFAULT_REASON,
    _LOCK,
    ListenerHandle,
    _Callback,
    _dispatch,
    _new_handle,
    _next_key,
    _pending_keys,
    _refused,
    _resolved_reason_locked,
    _settle,
    _SignalState,
)

__all__: list[str] = []


def _add_linked(self: _SignalState, callback: _Callback, run_if_aborted: bool) -> ListenerHandle:
    with _LOCK:
        if not self._aborted:
            handle = _new_handle(ListenerHandle)
            handle._signal = self
            handle._key = key = _next_key()
            listeners = self._listeners
            listeners[key] = callback
            if len(listeners) == 1:
                _keepalive_changed_locked(self)
            return handle
    return _refused(self, callback, run_if_aborted)


def _remove_linked(self: _SignalState, key: int | None) -> None:
    listeners = self._listeners
    with _LOCK:
        if listeners.pop(key, None) is None:
            return  # removed before, or claimed by a dispatch loop
        if not listeners:
            _keepalive_changed_locked(self)


def _keepalive_changed_locked(self: _SignalState) -> None:
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
            source._strong_deps += 1 if needed else -1
            if source._strong_deps == (1 if needed else 0):
                _keepalive_changed_locked(source)


def _abort_linked(self: _SignalState, reason: object, *, from_timer: bool = False) -> None:
    if reason is None:
        reason = _DEFAULT_REASON
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
        if reason is _DEFAULT_REASON and self._deps:
            reason = AbortError()  # shared with dependents: made now
        _mark_aborted_locked(self, reason)
        won, batches = _mark_dependents_locked(self, reason)
    _finish(won, batches)


def _on_timer(self: _SignalState) -> None:
    _abort_linked(self, TimeoutReason(self._timer_code, self._timer_seconds), from_timer=True)


def _mark_aborted_locked(self: _SignalState, reason: object) -> None:
    # Linked signals only (their every abort path holds _LOCK).
    self._listeners[_ABORTED] = (reason,)
    self._reason = reason
    self._aborted = True
    self._strong_deps = 0
    timer = self._timer
    if timer is not None:
        timer.strong = None
        # The entry may be the one firing now; a late cancel is harmless.
        timer.cancelled = True
        self._timer = None
    _release_sources_locked(self)


def _release_sources_locked(self: _SignalState) -> None:
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
            source._strong_deps -= 1
            if source._strong_deps == 0:
                _keepalive_changed_locked(source)


def _mark_dependents_locked(signal: _SignalState, reason: object) -> tuple[list[_SignalState], list[Any]]:
    """Mark every live dependent of ``signal`` aborted with ``reason``;
    return the signals to wake (``signal`` first) and the listener batches to
    run, in order. Snapshots are taken under the lock that set ``aborted``:
    from then on a linked signal's add_listener sees it and runs inline."""
    won = [signal]
    deps = signal._deps
    if deps:
        signal._deps = None
        for ref, anchor in deps.items():
            dep = anchor[0] if anchor else ref()
            if dep is not None and not dep._aborted and dep._sources:
                _mark_aborted_locked(dep, reason)
                won.append(dep)
    batches = [(s, _pending_keys(s._listeners)) for s in won if len(s._listeners) > 1]
    return won, batches


def _finish(won: list[_SignalState], batches: list[Any]) -> None:
    # Every affected signal now reads aborted. Wake waiters, then run
    # listeners: own first, dependents in derivation order.
    for signal in won:
        event = signal._event
        if event is not None:
            event.set()
    first: BaseException | None = None
    for signal, keys in batches:
        interrupt = signal._dispatch(keys) if signal._linked else _dispatch(signal, keys)
        if first is None:
            first = interrupt
    if first is not None:
        # A Ctrl-C (or SystemExit) raised inside a listener must not be
        # swallowed (B16's "several interrupts needed"); it is re-raised
        # here, after every listener - dependents' too - has run.
        raise first


def _won_plain(signal: _SignalState, listeners: dict[Any, Any], token: tuple[object]) -> None:
    # The rest of a plain signal's abort, once its `setdefault` won.
    signal._reason = token[0]
    signal._aborted = True
    if signal._deps:
        with _LOCK:
            reason = _resolved_reason_locked(signal)
            won, batches = _mark_dependents_locked(signal, reason)
        _finish(won, batches)
        return
    event = signal._event
    if event is not None:
        event.set()
    if len(listeners) > 1:
        interrupt = _dispatch(signal, _pending_keys(listeners))
        if interrupt is not None:
            raise interrupt


def _born_aborted(derived: _SignalState, source: _SignalState) -> None:
    # Under _LOCK. `source` aborted (possibly still settling, if plain):
    # `derived`, not yet linked to anything, reads aborted with its reason.
    if not source._aborted:
        _settle(source, source._listeners)
    reason = _resolved_reason_locked(source)
    derived._listeners[_ABORTED] = (reason,)
    derived._reason = reason
    derived._aborted = True


def _prune_deps_locked(signal: _SignalState) -> None:
    # Amortised O(1): drop links to released, aborted and closed dependents
    # once the dict has doubled since the last prune, so a long-lived
    # parent's memory follows its live dependents, not every signal ever
    # derived from it.
    deps = signal._deps
    assert deps is not None
    live = {}
    for ref, anchor in deps.items():
        dep = anchor[0] if anchor else ref()
        if dep is not None and not dep._aborted and dep._sources:
            live[ref] = anchor
    signal._deps = live
    signal._deps_prune_at = max(32, 2 * len(live))
