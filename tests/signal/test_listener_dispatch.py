"""The dispatch of a plain signal's listeners without a claim per listener
(docs/decisions/0040, docs/contract.md#cancellation): the boundary an abort inserts
splits its listener dict between the dispatch and adders racing it, a
removed listener never starts, an interrupted dispatch of a linked signal is
finished by ``abort_owned`` without running a listener twice, and the
default reason shared with dependents is one object whichever is read first.

The interleavings an abort can land in are forced deterministically: a dict
subclass installed as the signal's listener dict aborts the signal from
inside the adder's insertion, just before or just after it.
"""

from __future__ import annotations

import gc
import threading
import weakref
from collections.abc import Callable
from typing import Any

import pytest

from dshtools import AbortController, AbortError, AbortSignal, ListenerHandle
from dshtools._signal import abort_owned, derive
from dshtools._signal import links as _links
from dshtools._signal import signal as _signal_surface
from dshtools._signal import state as _signal_claim


class _AbortOnInsert(dict[Any, Any]):
    """A listener dict that aborts ``controller`` once, from inside the next
    insertion: ``before`` it goes in, or after."""

    def __init__(self, items: dict[Any, Any], controller: AbortController, *, before: bool) -> None:
        super().__init__(items)
        self.controller: AbortController | None = controller
        self.before = before

    def __setitem__(self, key: Any, value: Any) -> None:
        controller, self.controller = self.controller, None
        if controller is not None and self.before:
            controller.abort("stop")
        super().__setitem__(key, value)
        if controller is not None and not self.before:
            controller.abort("stop")


def _appender(log: list[Any], item: object) -> Callable[[AbortSignal], None]:
    def listener(_s: AbortSignal) -> None:
        log.append(item)

    return listener


def _with_hook(c: AbortController, *, before: bool) -> None:
    signal = c.signal
    listeners = signal._listeners
    assert listeners is not None
    signal._listeners = _AbortOnInsert(listeners, c, before=before)


@pytest.mark.parametrize("others", [1, 3])
def test_a_listener_inserted_before_the_abort_decided_runs_once_in_the_dispatch(others: int) -> None:
    c = AbortController()
    log: list[str] = []
    for i in range(others):
        c.signal.add_listener(_appender(log, f"early{i}"))
    _with_hook(c, before=False)
    handle = c.signal.add_listener(lambda s: log.append(f"late@{threading.get_ident()}"))
    # The abort ran inside the insertion, after it: the late handle sits
    # before the boundary, so the dispatch ran it, in registration order,
    # and add_listener did not run it again.
    assert log == [f"early{i}" for i in range(others)] + [f"late@{threading.get_ident()}"]
    assert handle.registered is True
    assert c.signal.aborted and c.signal.reason == "stop"
    assert c.signal.listener_count == 0


@pytest.mark.parametrize("run_if_aborted", [True, False])
@pytest.mark.parametrize("others", [1, 3])
def test_a_listener_inserted_after_the_boundary_is_the_adders_to_run_or_refuse(
    others: int, run_if_aborted: bool
) -> None:
    c = AbortController()
    log: list[str] = []
    for i in range(others):
        c.signal.add_listener(_appender(log, f"early{i}"))
    _with_hook(c, before=True)
    handle = c.signal.add_listener(lambda s: log.append("late"), run_if_aborted=run_if_aborted)
    # The abort ran (and dispatched) before the insertion: the late handle
    # lands after the boundary, the dispatch never saw it, the adder claims
    # it back and runs it inline - or, with run_if_aborted=False, refuses it.
    assert log == [f"early{i}" for i in range(others)] + (["late"] if run_if_aborted else [])
    assert handle.registered is False
    assert c.signal.listener_count == 0
    handle.remove()  # a refused handle's remove() is a no-op


def test_a_listener_dict_made_while_the_abort_is_decided_has_no_boundary_and_the_adder_runs_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    c = AbortController()
    log: list[str] = []
    make = _signal_claim._listener_dict

    def abort_then_make(signal: Any) -> dict[Any, Any]:
        c.abort("stop")  # found no listener dict: no boundary, nothing to run
        return make(signal)

    monkeypatch.setattr(_signal_surface, "_listener_dict", abort_then_make)
    handle = c.signal.add_listener(lambda s: log.append("late"))
    assert log == ["late"]
    assert handle.registered is False


def test_a_handle_after_the_boundary_is_claimed_by_exactly_one_pop() -> None:
    # Both sides of the race, in each order, on the claim functions
    # themselves: the dispatch of a dict with no boundary, and the adder.
    for dispatch_first in (True, False):
        signal = AbortController().signal
        log: list[str] = []
        handle = _signal_claim.ListenerHandle()
        handle._signal = signal
        handle._cb = callback = lambda s: log.append("ran")
        listeners = {handle: callback}
        signal._listeners = listeners
        signal._reason = "stop"
        signal._aborted = True
        if dispatch_first:
            assert _signal_claim._dispatch_plain(signal, listeners) is None
            returned = _signal_claim._added_late(signal, listeners, handle, callback, True)
            assert returned is handle  # the dispatch claimed it: registered
        else:
            returned = _signal_claim._added_late(signal, listeners, handle, callback, True)
            assert returned.registered is False  # the adder claimed it and ran it
            assert _signal_claim._dispatch_plain(signal, listeners) is None
        assert log == ["ran"], dispatch_first


def test_remove_during_the_dispatch_stops_every_listener_not_yet_started() -> None:
    c = AbortController()
    log: list[int] = []
    handles: list[ListenerHandle] = []

    def first(_s: AbortSignal) -> None:
        log.append(0)
        handles[2].remove()
        handles[4].remove()

    handles.append(c.signal.add_listener(first))
    for i in range(1, 6):
        handles.append(c.signal.add_listener(_appender(log, i)))
    c.abort()
    assert log == [0, 1, 3, 5]
    assert c.signal.listener_count == 0


def test_listener_count_during_the_dispatch_is_the_listeners_not_yet_started_nor_removed() -> None:
    c = AbortController()
    seen: list[int] = []
    handles: list[ListenerHandle] = []

    def count(s: AbortSignal) -> None:
        seen.append(s.listener_count)

    def remove_next(s: AbortSignal) -> None:
        handles[3].remove()

    handles.append(c.signal.add_listener(count))  # 3 pending after it
    handles.append(c.signal.add_listener(remove_next))
    handles.append(c.signal.add_listener(count))  # 1 pending (3 removed), then 4
    handles.append(c.signal.add_listener(count))
    handles.append(c.signal.add_listener(count))
    c.abort()
    assert seen == [4, 1, 0]


@pytest.mark.timeout(10)
def test_abort_owned_finishes_a_dispatch_an_interrupt_cut_short_and_runs_no_listener_twice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    c = AbortController()
    fused = derive([c.signal], aborts_directly=True)
    log: list[int] = []
    for i in range(4):

        def listener(_s: AbortSignal, i: int = i) -> None:
            log.append(i)

        fused.add_listener(listener)
    dispatch = _links._dispatch
    cut = [True]

    def run_one_then_interrupt(signal: AbortSignal, pending: Any) -> Any:
        if cut and signal is fused:
            cut.clear()
            next(pending)._cb(signal)  # one listener starts and finishes ...
            raise KeyboardInterrupt  # ... then a Ctrl-C lands in the loop
        return dispatch(signal, pending)

    # The documented hook: every linked signal's listeners run through
    # `links._dispatch`.
    monkeypatch.setattr(_links, "_dispatch", run_one_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        abort_owned(fused, KeyboardInterrupt())
    assert log == [0] and fused.aborted
    assert fused.listener_count == 3
    abort_owned(fused, KeyboardInterrupt())  # the registry's second call
    assert log == [0, 1, 2, 3]
    abort_owned(fused, KeyboardInterrupt())  # nothing left: runs nothing
    assert log == [0, 1, 2, 3]
    assert fused.listener_count == 0


def test_a_default_reason_shared_with_dependents_is_one_object_whichever_is_read_first() -> None:
    for read_dependent_first in (True, False):
        c = AbortController()
        d1 = AbortSignal.any_of([c.signal])
        d2 = AbortSignal.any_of([d1, AbortController().signal])
        c.abort()
        if read_dependent_first:
            reasons = [d2.reason, d1.reason, c.signal.reason]
        else:
            reasons = [c.signal.reason, d1.reason, d2.reason]
        assert isinstance(reasons[0], AbortError)
        assert all(r is reasons[0] for r in reasons), read_dependent_first
        born = AbortSignal.any_of([c.signal])  # born aborted: the same object
        assert born.reason is reasons[0]


def test_an_aborted_signal_keeps_no_listener_a_handle_removes_or_a_late_adder_ran() -> None:
    # Memory: after the abort a plain signal still holds the listeners it
    # ran (until it goes or their handles are removed); late listeners run
    # inline and are never stored.
    class Callback:
        def __call__(self, _s: AbortSignal) -> None:
            pass

    c = AbortController()
    kept, removed = Callback(), Callback()
    c.signal.add_listener(kept)
    handle = c.signal.add_listener(removed)
    c.abort()
    listeners = c.signal._listeners
    assert listeners is not None
    size = len(listeners)
    for _ in range(100):
        c.signal.add_listener(Callback())
    assert len(listeners) == size
    ref_removed, ref_kept = weakref.ref(removed), weakref.ref(kept)
    del removed, kept
    handle.remove()
    gc.collect()
    assert ref_removed() is None
    assert ref_kept() is not None
    del c, handle, listeners
    gc.collect()
    assert ref_kept() is None
