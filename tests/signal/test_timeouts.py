"""``AbortSignal.timeout`` and the one shared timer thread (docs/contract.md#cancellation)."""

from __future__ import annotations

import gc
import math
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

import pytest

from dshtools import AbortController, AbortSignal, TimeoutReason, deadline
from dshtools._signal import timer as _timer
from dshtools._signal.signal import _LinkedSignal
from tests.helpers.processes import fork_while_held, run_python
from tests.helpers.waiting import Gate


def pending_baseline() -> int:
    gc.collect()
    return _timer.pending_count()


def _record(order: list[float], value: float, done: threading.Event) -> Callable[[AbortSignal], None]:
    def listener(_s: AbortSignal) -> None:
        order.append(value)
        if len(order) == 3:
            done.set()

    return listener


def _counter(counts: list[int], i: int) -> Callable[[AbortSignal], None]:
    def listener(_s: AbortSignal) -> None:
        counts[i] += 1

    return listener


@pytest.mark.timeout(30)
def test_timeout_aborts_with_a_timeout_reason_after_the_duration() -> None:
    start = time.monotonic()
    s = AbortSignal.timeout(0.05)
    assert s.aborted is False
    assert s.wait(5) is True
    elapsed = time.monotonic() - start
    assert 0.045 <= elapsed < 1.0
    assert isinstance(s.reason, TimeoutReason)
    assert isinstance(s.reason, TimeoutError)
    assert s.reason.code == "TIMEOUT"
    assert s.reason.seconds == 0.05


@pytest.mark.timeout(30)
def test_timeout_zero_aborts_almost_at_once() -> None:
    start = time.monotonic()
    s = AbortSignal.timeout(0)
    assert s.wait(5) is True
    assert time.monotonic() - start < 0.5
    assert isinstance(s.reason, TimeoutReason) and s.reason.seconds == 0.0


def test_timeout_accepts_an_int_number_of_seconds() -> None:
    s = AbortSignal.timeout(60)
    try:
        assert s.aborted is False
    finally:
        s.close()


@pytest.mark.parametrize("bad", [-1, -0.001, math.nan, math.inf, -math.inf], ids=repr)
def test_timeout_rejects_negative_nan_and_infinite_with_value_error(bad: float) -> None:
    with pytest.raises(ValueError):
        AbortSignal.timeout(bad)


@pytest.mark.parametrize("bad", [True, False, None, "1", b"1", [1]], ids=repr)
def test_timeout_rejects_bool_none_and_strings_with_type_error(bad: Any) -> None:
    with pytest.raises(TypeError):
        AbortSignal.timeout(bad)


@pytest.mark.timeout(30)
def test_timeout_listeners_run_on_a_library_thread_never_the_callers() -> None:
    """docs/contract.md#cancellation and docs/contract.md#a15: the timer thread decides, an abort runner
    (a library thread) runs the listeners."""
    idents: list[int] = []
    names: list[str] = []
    done = threading.Event()

    def record(s: AbortSignal) -> None:
        idents.append(threading.get_ident())
        names.append(threading.current_thread().name)
        if len(idents) == 2:
            done.set()

    a = AbortSignal.timeout(0.01)
    b = AbortSignal.timeout(0.02)
    a.add_listener(record)
    b.add_listener(record)
    assert done.wait(5)
    assert threading.get_ident() not in idents
    assert names == ["dshtools-abort"] * 2


@pytest.mark.timeout(30)
def test_derived_signal_of_a_timeout_aborts_with_its_reason_and_its_listeners_run_on_a_library_thread() -> None:
    t = AbortSignal.timeout(0.01)
    d = AbortSignal.any_of([AbortController().signal, t])
    threads: list[str] = []
    ran = threading.Event()
    d.add_listener(lambda s: (threads.append(threading.current_thread().name), ran.set()))  # type: ignore[func-returns-value]
    assert d.wait(5)
    assert d.reason is t.reason
    assert ran.wait(5)  # the waiter may wake before the listener runs
    assert threads == ["dshtools-abort"]


@pytest.mark.timeout(60)
def test_10000_pending_timeouts_add_at_most_one_thread() -> None:
    baseline_threads = threading.active_count()
    baseline_pending = pending_baseline()
    signals = [AbortSignal.timeout(60) for _ in range(10_000)]
    assert threading.active_count() - baseline_threads <= 1
    assert _timer.pending_count() - baseline_pending == 10_000
    for s in signals:
        s.close()
    assert _timer.pending_count() == baseline_pending
    assert threading.active_count() - baseline_threads <= 1


@pytest.mark.timeout(30)
def test_timeouts_fire_in_deadline_order_not_creation_order() -> None:
    order: list[float] = []
    done = threading.Event()
    durations = (0.3, 0.1, 0.2)  # 100 ms apart: robust to a slow machine
    signals = [AbortSignal.timeout(d) for d in durations]
    for s, d in zip(signals, durations, strict=False):
        s.add_listener(_record(order, d, done))
    assert done.wait(5)
    assert order == [0.1, 0.2, 0.3]


@pytest.mark.timeout(30)
def test_an_earlier_timeout_scheduled_after_a_long_one_still_fires_on_time() -> None:
    # The timer thread is parked until the 30 s deadline; a new, earlier entry
    # must wake it.
    long = AbortSignal.timeout(30)
    try:
        start = time.monotonic()
        short = AbortSignal.timeout(0.05)
        assert short.wait(5)
        assert time.monotonic() - start < 1.0
        assert long.aborted is False
    finally:
        long.close()


@pytest.mark.timeout(30)
def test_timer_thread_survives_a_raising_listener(unraisable: list[Any]) -> None:
    first = AbortSignal.timeout(0)
    err = RuntimeError("listener on the timer thread")

    def bad(s: AbortSignal) -> None:
        raise err

    first.add_listener(bad)
    assert first.wait(5)
    second = AbortSignal.timeout(0.01)
    ran: list[str] = []
    done = threading.Event()
    second.add_listener(lambda s: (ran.append(threading.current_thread().name), done.set()))  # type: ignore[func-returns-value]
    assert done.wait(5)
    assert ran == ["dshtools-abort"]
    assert [u.exc_value for u in unraisable] == [err]


@pytest.mark.timeout(30)
def test_timer_thread_survives_a_failing_timer_callback(unraisable: list[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    original = _LinkedSignal._on_timer
    doomed: list[AbortSignal] = []

    def on_timer(self: _LinkedSignal) -> None:
        if self in doomed:
            raise MemoryError("simulated failure inside the timer callback")
        original(self)

    monkeypatch.setattr(_LinkedSignal, "_on_timer", on_timer)
    doomed.append(AbortSignal.timeout(0))
    ok = AbortSignal.timeout(0.02)
    assert ok.wait(5)
    assert [type(u.exc_value) for u in unraisable] == [MemoryError]
    assert doomed[0].aborted is False


def test_closed_timeout_never_fires_and_its_timer_is_dropped() -> None:
    baseline = pending_baseline()
    s = AbortSignal.timeout(60)
    calls: list[AbortSignal] = []
    s.add_listener(calls.append)
    assert _timer.pending_count() == baseline + 1
    s.close()
    s.close()
    assert _timer.pending_count() == baseline
    assert s.aborted is False and calls == []


def test_released_timeout_timer_is_dropped() -> None:
    baseline = pending_baseline()
    s = AbortSignal.timeout(60)
    ref = weakref.ref(s)
    assert _timer.pending_count() == baseline + 1
    del s
    gc.collect()
    assert ref() is None
    assert _timer.pending_count() == baseline


def test_timeout_whose_listener_was_removed_is_released() -> None:
    baseline = pending_baseline()
    s = AbortSignal.timeout(60)
    with s.add_listener(lambda s: None):
        pass
    ref = weakref.ref(s)
    del s
    gc.collect()
    assert ref() is None
    assert _timer.pending_count() == baseline


@pytest.mark.timeout(30)
def test_dropped_timeout_with_a_listener_stays_armed_and_fires() -> None:
    fired = threading.Event()
    s = AbortSignal.timeout(0.05)
    s.add_listener(lambda s: fired.set())
    del s
    gc.collect()
    assert fired.wait(5)


@pytest.mark.timeout(30)
def test_timeout_that_fired_is_no_longer_pending() -> None:
    baseline = pending_baseline()
    s = AbortSignal.timeout(0)
    assert s.wait(5)
    assert _timer.pending_count() == baseline


@pytest.mark.timeout(30)
def test_close_while_the_timer_is_firing_means_the_signal_never_aborts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Regression. Interleaving forced: the timer thread has popped the entry
    # and is about to call _on_timer when close() runs and returns.
    original = _LinkedSignal._on_timer
    gate = Gate()
    done = threading.Event()

    def gated(self: _LinkedSignal) -> None:
        gate.hold()
        try:
            original(self)
        finally:
            done.set()

    monkeypatch.setattr(_LinkedSignal, "_on_timer", gated)
    s = AbortSignal.timeout(0)
    calls: list[AbortSignal] = []
    s.add_listener(calls.append)
    assert gate.entered.wait(5)
    s.close()
    gate.opened.set()
    assert done.wait(5)
    assert s.aborted is False
    assert calls == []


@pytest.mark.timeout(60)
def test_close_racing_the_timer_either_fires_once_or_never() -> None:
    for _ in range(300):
        s = AbortSignal.timeout(0)
        calls: list[int] = []
        s.add_listener(lambda s: calls.append(1))
        s.close()
        aborted_after_close = s.aborted
        # A sentinel scheduled later fires later: once it has, any firing of
        # `s` would have happened.
        assert AbortSignal.timeout(0).wait(5)
        assert s.aborted is aborted_after_close
        assert calls == ([1] if aborted_after_close else [])


@pytest.mark.timeout(30)
def test_a_timeout_listener_may_arm_the_next_timeout_from_the_timer_thread() -> None:
    # schedule() called on the timer thread itself, while it is awake and
    # firing, must not be lost or deadlock.
    done = threading.Event()
    fired: list[int] = []
    keep: list[AbortSignal] = []

    def chain(s: AbortSignal) -> None:
        fired.append(len(fired))
        if len(fired) < 20:
            nxt = AbortSignal.timeout(0.001)
            keep.append(nxt)
            nxt.add_listener(chain)
        else:
            done.set()

    first = AbortSignal.timeout(0)
    first.add_listener(chain)
    assert done.wait(10)
    assert fired == list(range(20))


@pytest.mark.timeout(120)
def test_many_threads_creating_and_dropping_timeouts_while_short_ones_fire() -> None:
    # Released entries are compacted from weakref callbacks in whatever
    # thread drops the last reference, concurrently with the timer thread
    # popping due entries: every short timeout must still fire exactly once
    # and no entry may be left behind.
    baseline = pending_baseline()
    n_threads, per_thread = 4, 5000
    counts: list[list[int]] = [[0] * (per_thread // 50) for _ in range(n_threads)]
    short_signals: list[list[AbortSignal]] = [[] for _ in range(n_threads)]
    barrier = threading.Barrier(n_threads)
    errors: list[BaseException] = []

    def worker(k: int) -> None:
        try:
            barrier.wait(timeout=10)
            for i in range(per_thread):
                AbortSignal.timeout(3600)  # dropped at once
                if i % 50 == 0:
                    j = i // 50
                    s = AbortSignal.timeout(0.001)
                    s.add_listener(_counter(counts[k], j))
                    short_signals[k].append(s)
                if i % 7 == 0:
                    with AbortSignal.timeout(3600):  # closed at once
                        pass
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        threads = [threading.Thread(target=worker, args=(k,)) for k in range(n_threads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(100)
    finally:
        sys.setswitchinterval(old)
    assert not errors
    for signals in short_signals:
        for s in signals:
            assert s.wait(5)
    assert counts == [[1] * (per_thread // 50)] * n_threads
    del signals
    short_signals.clear()
    assert pending_baseline() == baseline


@pytest.mark.timeout(30)
def test_a_huge_finite_timeout_does_not_kill_the_shared_timer_thread() -> None:
    # Regression: the timer thread slept with Condition.wait(delay), which
    # raises OverflowError past threading.TIMEOUT_MAX; the thread died and no
    # timeout in the process fired again.
    huge = AbortSignal.timeout(1e300)
    try:
        # The short one fires first; then the thread sleeps towards `huge`.
        assert AbortSignal.timeout(0.01).wait(5)
        assert AbortSignal.timeout(0.01).wait(5)
        assert _timer._thread is not None and _timer._thread.is_alive()
        assert huge.aborted is False
    finally:
        huge.close()
    with deadline(AbortController().signal, 1e12, "T") as late:
        assert AbortSignal.timeout(0.01).wait(5)
        assert late.signal.aborted is False


# Run by a fresh interpreter (pytest itself must never fork: it is threaded).
# The parent's timer thread is running and holds the timer lock at the
# moment of the fork; the child must get a working timer of its own.
_FORK_TIMERS = fork_while_held(
    "_timer._lock",
    setup="""
    from dshtools import AbortController, AbortSignal, deadline
    from dshtools._signal import timer as _timer

    assert AbortSignal.timeout(0).wait(5)  # the parent's timer thread runs
    inherited = AbortSignal.timeout(0.2)
    """,
    child="""
    fresh = AbortSignal.timeout(0.01)
    armed = deadline(AbortController().signal, 0.01, "CHILD")
    ok = fresh.wait(5) and inherited.wait(5) and armed.signal.wait(5) and armed.timed_out
    ok = ok and _timer._thread is not None and _timer._thread.is_alive()
    code = 0 if ok else 3
    """,
    after="assert inherited.wait(5)  # and the parent's timer is unaffected",
)


@pytest.mark.timeout(60)
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_timeouts_fire_in_a_forked_child() -> None:
    # docs/contract.md#a10. Regression: fork() copied `_thread` (a thread
    # that does not exist in the child), so no timeout ever fired in a forked
    # worker. A timer inherited from the parent, a new one and a deadline's
    # must all fire in the child, even if the fork landed while the parent's
    # timer lock was held.
    run_python(_FORK_TIMERS)
