"""Faults stay contained whatever the objects do (docs/contract.md#a4), and
a Ctrl-C landing inside ``close()`` leaves no strong link behind (field case
B16's kind: an interrupt between two steps of a multi-step update)."""

from __future__ import annotations

import gc
import sys
import threading
import weakref
from typing import Any

import pytest

from dshtools import AbortController, AbortSignal
from dshtools._signal import links as _links
from dshtools._signal import state as _signal_claim
from tests.helpers.cycles import young_heap
from tests.helpers.faults import Unprintable, Unrepresentable
from tests.helpers.interleavings import interrupt_at, interruption_points


def _check_report(seen: list[Any]) -> None:
    assert len(seen) == 1
    report = seen[0]
    assert isinstance(report.exc_value, Unprintable)
    assert "repr failed" in report.err_msg


@pytest.mark.timeout(10)
def test_raising_bound_listener_of_unrepresentable_object_is_contained_on_abort(unraisable: list[Any]) -> None:
    log: list[str] = []
    c = AbortController()
    c.signal.add_listener(Unrepresentable(log).raising_listener)
    c.signal.add_listener(lambda _s: log.append("next"))
    c.abort(Unrepresentable(log))  # a reason whose repr raises, too
    assert log == ["listener ran", "next"]
    _check_report(unraisable)
    assert "repr failed" in repr(c.signal)


@pytest.mark.timeout(10)
def test_raising_bound_listener_is_contained_when_run_at_registration(unraisable: list[Any]) -> None:
    log: list[str] = []
    signal = AbortSignal.already_aborted("done")
    handle = signal.add_listener(Unrepresentable(log).raising_listener)
    assert handle.registered is False
    assert log == ["listener ran"]
    _check_report(unraisable)


@pytest.mark.timeout(10)
def test_raising_bound_listener_of_a_dependent_is_contained(unraisable: list[Any]) -> None:
    log: list[str] = []
    c = AbortController()
    derived = AbortSignal.any_of([c.signal])
    derived.add_listener(Unrepresentable(log).raising_listener)
    derived.add_listener(lambda _s: log.append("next"))
    c.abort()
    assert log == ["listener ran", "next"]
    _check_report(unraisable)


@pytest.mark.timeout(10)
def test_raising_bound_listener_of_a_timeout_is_contained_on_the_timer_thread(unraisable: list[Any]) -> None:
    log: list[str] = []
    done = threading.Event()
    signal = AbortSignal.timeout(0)
    signal.add_listener(Unrepresentable(log).raising_listener)
    signal.add_listener(lambda _s: done.set())
    assert done.wait(5)
    assert log == ["listener ran"]
    _check_report(unraisable)


@pytest.mark.timeout(10)
def test_report_reaches_stderr_through_the_builtin_hook(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The built-in hook rejects any argument object but its own; the report
    # must still be written, with every foreign object guarded.
    monkeypatch.setattr(sys, "unraisablehook", sys.__unraisablehook__)
    log: list[str] = []
    c = AbortController()
    c.signal.add_listener(Unrepresentable(log).raising_listener)
    c.signal.add_listener(lambda _s: log.append("next"))
    c.abort()
    assert log == ["listener ran", "next"]
    err = capsys.readouterr().err
    assert "Exception in abort listener" in err
    assert "repr failed" in err
    assert "Unprintable" in err and "str() failed" in err


# ------------------------------------------------------ Ctrl-C inside close()


_CLOSE_CODES = {
    AbortSignal.close.__code__,
    _links.LinkedState.close.__code__,
    _links._release_sources_locked.__code__,
    _links._keepalive_changed_locked.__code__,
}


@pytest.mark.timeout(60)
def test_ctrl_c_at_any_bytecode_of_close_leaves_no_strong_link_behind() -> None:
    """At every bytecode of close() (and what it calls) a KeyboardInterrupt
    either lands before close() changed anything - the signal is still fully
    linked: its source's abort still reaches its listener - or leaves no
    strong link: dropped, the signal is released. Sources: a controller and
    a timeout (whose timer entry must keep strong dependents alive)."""
    with young_heap():
        step = _interrupt_close_at_every_step()
    # The probe really walked close(), on every interpreter: each point of an
    # uninterrupted close() was interrupted once.
    timer = AbortSignal.timeout(3600)
    assert step == _points_of_close(timer) > 5
    timer.close()


def _points_of_close(other_source: AbortSignal) -> int:
    derived = AbortSignal.any_of([AbortController().signal, other_source])
    derived.add_listener(lambda _s: None)
    return interruption_points(derived.close, _CLOSE_CODES)


def _interrupt_close_at_every_step() -> int:
    step = 0
    while True:
        x = AbortController()
        timer = AbortSignal.timeout(3600)
        ran: list[int] = []
        derived = AbortSignal.any_of([x.signal, timer])
        handle = derived.add_listener(lambda _s: ran.append(1))
        ref = weakref.ref(derived)
        fired = interrupt_at(step, derived.close, _CLOSE_CODES)
        assert not _signal_claim._LOCK.locked()
        del handle, derived
        gc.collect()
        if ref() is not None:
            # Pinned: only allowed if close() had not detached anything.
            x.abort()
            assert ran == [1], f"interrupt at step {step}: a closed signal is still pinned"
            gc.collect()
        assert ref() is None, f"interrupt at step {step}"
        timer.close()
        if not fired:
            return step
        step += 1


@pytest.mark.timeout(60)
def test_close_again_after_an_interrupted_close_detaches_completely() -> None:
    step = 0
    while True:
        x = AbortController()
        derived = AbortSignal.any_of([x.signal, AbortController().signal])
        derived.add_listener(lambda _s: None)
        fired = interrupt_at(step, derived.close, _CLOSE_CODES)
        derived.close()
        assert x.signal.listener_count == 0
        x.abort()
        assert derived.aborted is False, f"interrupt at step {step}"
        if not fired:
            break
        step += 1
    assert step == _points_of_close(AbortController().signal) > 5
