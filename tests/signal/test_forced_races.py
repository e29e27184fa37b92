"""Field cases B02, B04, B07, B09, B10, B11 (docs/field-cases.md) at the level of
the signal primitive. Races are forced with barriers, not sleeps; every
thread is a daemon and every barrier wait has a 1 s watchdog, so a deadlock
fails the test instead of hanging the run."""

from __future__ import annotations

import gc
import random
import threading
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import pytest

from dshtools import AbortController, AbortSignal, ListenerHandle, TimeoutReason
from dshtools._signal import timer as _timer
from dshtools._signal.signal import _LinkedSignal
from tests.helpers.cycles import young_heap
from tests.helpers.interleavings import race_in_lockstep
from tests.helpers.waiting import threads_but_abort_runners


def _stamp_to(calls: list[Any], ran: threading.Event) -> Callable[[AbortSignal], None]:
    def listener(s: AbortSignal) -> None:
        calls.append((time.monotonic(), s.reason))
        ran.set()

    return listener


def busy_wait(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


# ---------------------------------------------------------------------- B02


def _b02_trials(n: int, with_listener: bool, mix_in_controller: bool) -> None:
    # Trials run in batches of 20 overlapping ones, so the case takes about a
    # second instead of 200 x (3 full collections + 50 ms): each batch is
    # created, then collected three times well before its timers are due,
    # and every trial is timed from its own creation.
    # young_heap(): the collections below traverse only what was made since,
    # the trials' own signals among it, not the test runner's whole heap
    # (three full collections of it hold the GIL longer than the 0.25 s
    # bound, so the timer thread could not run the listener in time however
    # fast the timer was).
    with young_heap():
        _b02_batches(n, with_listener, mix_in_controller)


def _b02_batches(n: int, with_listener: bool, mix_in_controller: bool) -> None:
    never = AbortController()
    for _ in range(n // 20):
        trials: list[tuple[float, AbortSignal, list[tuple[float, object]], threading.Event]] = []
        for _ in range(20):
            created = time.monotonic()
            sources = [AbortSignal.timeout(0.05)]
            if mix_in_controller:
                sources.append(never.signal)
            fused = AbortSignal.any_of(sources)
            del sources  # the test keeps only `fused`
            calls: list[tuple[float, object]] = []
            ran = threading.Event()
            if with_listener:
                fused.add_listener(_stamp_to(calls, ran))
            trials.append((created, fused, calls, ran))
        del fused
        # On a free-threaded build a collection stops every thread and walks
        # the whole heap, frozen or not: the timer cannot fire during it, so
        # the bound below allows the time the collections took.
        paused = time.monotonic()
        gc.collect()
        gc.collect()
        gc.collect()
        paused = time.monotonic() - paused
        for created, fused, calls, ran in trials:
            assert fused.wait(1.0), "fused timeout signal never aborted (lost to GC?)"
            aborted_at = time.monotonic()
            reason = fused.reason
            assert isinstance(reason, TimeoutReason) and reason.code == "TIMEOUT"
            if with_listener:
                # A waiter may wake while the aborting thread still runs the
                # listeners (the state is published first): on a free-threaded
                # build it does, in parallel.
                assert ran.wait(1.0)
                assert len(calls) == 1
                fired_at, seen = calls[0]
                assert seen is reason
                assert 0.05 <= fired_at - created < 0.25 + paused
            else:
                assert aborted_at - created >= 0.05
    assert never.signal.listener_count == 0


@pytest.mark.timeout(60)
def test_b02_fused_timeout_is_not_lost_to_gc() -> None:
    _b02_trials(200, with_listener=True, mix_in_controller=False)


@pytest.mark.timeout(60)
def test_b02_fused_timeout_mixed_with_a_controller_is_not_lost_to_gc() -> None:
    _b02_trials(200, with_listener=True, mix_in_controller=True)


@pytest.mark.timeout(60)
def test_b02_fused_timeout_without_listener_still_aborts_for_a_waiter() -> None:
    _b02_trials(100, with_listener=False, mix_in_controller=True)


@pytest.mark.timeout(30)
def test_b02_fused_timeout_with_listener_fires_after_the_test_drops_everything() -> None:
    fired = threading.Event()
    reasons: list[object] = []
    fused = AbortSignal.any_of([AbortSignal.timeout(0.05), AbortController().signal])

    def on_abort(s: AbortSignal) -> None:
        reasons.append(s.reason)
        fired.set()

    fused.add_listener(on_abort)
    del fused
    for _ in range(3):
        gc.collect()
    assert fired.wait(1.0)
    assert len(reasons) == 1 and isinstance(reasons[0], TimeoutReason)


# ---------------------------------------------------------------------- B04


def _make_and_drop(count: int, seconds: float, close: bool) -> None:
    """``count`` timeouts of ``seconds``, each subscribed and unsubscribed,
    then closed (``close``) or dropped."""
    signals = [AbortSignal.timeout(seconds) for _ in range(count)]
    for s in signals:
        s.add_listener(lambda s: None).remove()
    if close:
        for s in signals:
            s.close()
    del signals, s


@pytest.mark.timeout(60)
@pytest.mark.parametrize("close", [True, False], ids=["closed", "dropped"])
def test_b04_10000_long_timeouts_are_not_pinned_until_their_deadline(close: bool) -> None:
    gc.collect()
    baseline = _timer.pending_count()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        _make_and_drop(10_000, 3600, close)
        gc.collect()
        # "within 1 s": release is synchronous here, so check at once.
        assert _timer.pending_count() == baseline
        # Trigger the heap's compaction path once more, as any later
        # schedule() would, then measure.
        AbortSignal.timeout(3600).close()
        growth = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert growth < 3 * 1024 * 1024, growth
    assert len(_timer._heap) < 5_000  # dead entries were compacted away


@pytest.mark.timeout(30)
@pytest.mark.parametrize("close", [True, False], ids=["closed", "dropped"])
def test_b04_no_timer_callback_fires_later_for_released_timeouts(close: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    # Shortened sample: 200 timeouts of 0.2 s, subscribed and unsubscribed,
    # then closed or dropped. Count every timer callback that still fires.
    fired: list[int] = []
    original = _LinkedSignal._on_timer

    def counting(self: _LinkedSignal) -> None:
        fired.append(id(self))
        original(self)

    monkeypatch.setattr(_LinkedSignal, "_on_timer", counting)
    _make_and_drop(200, 0.2, close)
    gc.collect()
    # The timer fires in deadline order: once this later sentinel has fired,
    # every one of the 200 would have.
    sentinel = AbortSignal.timeout(0.3)
    assert sentinel.wait(5)
    assert fired == [id(sentinel)]


# ---------------------------------------------------------------------- B07


@pytest.mark.timeout(120)
def test_b07_register_under_a_non_reentrant_lock_never_deadlocks_or_loses_the_listener(
    fast_switching: Any,
) -> None:
    iterations = 10_000
    lock = threading.Lock()
    controllers = [AbortController() for _ in range(iterations)]
    ran = [0] * iterations
    registered = [False] * iterations
    rng = random.Random(7)
    offsets = [rng.uniform(0, 100e-6) for _ in range(iterations)]

    def register(i: int) -> None:
        def listener(s: AbortSignal) -> None:
            with lock:  # would self-deadlock if run inline below
                ran[i] += 1

        with lock:
            registered[i] = controllers[i].signal.add_listener(listener, run_if_aborted=False).registered

    def abort(i: int) -> None:
        busy_wait(offsets[i])
        controllers[i].abort()

    # watchdog: an iteration over 1 s fails
    race_in_lockstep(iterations, register, abort, barrier_timeout=1.0, join=100)
    for i in range(iterations):
        # Exactly one of: the listener ran once, or registration said
        # "already aborted" (and it never ran).
        assert (ran[i], registered[i]) in ((1, True), (0, False)), i
    # Which side wins each round is the scheduler's choice (a quiet machine
    # can give one side every round, as B11 showed in a fresh CI clone); the
    # invariant above holds either way, and each path has a deterministic test.


# ---------------------------------------------------------------------- B09


def test_b09_a_raising_listener_does_not_starve_the_others(unraisable: list[Any]) -> None:
    c = AbortController()
    ran: list[int] = []

    def listener(n: int) -> Callable[[AbortSignal], None]:
        def run(s: AbortSignal) -> None:
            ran.append(n)
            if n == 2:
                raise RuntimeError("listener 2")

        return run

    for n in range(1, 6):
        c.signal.add_listener(listener(n))
    c.abort()  # the error does not escape to the aborting caller
    assert ran == [1, 2, 3, 4, 5]
    assert c.signal.aborted
    assert len(unraisable) == 1  # surfaced once, through sys.unraisablehook
    assert isinstance(unraisable[0].exc_value, RuntimeError)
    assert str(unraisable[0].exc_value) == "listener 2"


# ---------------------------------------------------------------------- B10


@pytest.mark.timeout(120)
def test_b10_cross_unregistering_listeners_never_deadlock(fast_switching: Any) -> None:
    iterations = 5_000
    counts = [[0, 0] for _ in range(iterations)]
    pairs: list[tuple[AbortController, AbortController]] = []
    for i in range(iterations):
        a, b = AbortController(), AbortController()
        handles: dict[str, ListenerHandle] = {}

        def la(s: AbortSignal, i: int = i, handles: dict[str, ListenerHandle] = handles) -> None:
            counts[i][0] += 1
            handles["lb"].remove()

        def lb(s: AbortSignal, i: int = i, handles: dict[str, ListenerHandle] = handles) -> None:
            counts[i][1] += 1
            handles["la"].remove()

        handles["la"] = a.signal.add_listener(la)
        handles["lb"] = b.signal.add_listener(lb)
        pairs.append((a, b))
    before = len(threads_but_abort_runners())
    # watchdog: both abort() calls of a round return within 1 s
    race_in_lockstep(
        len(pairs), lambda i: pairs[i][0].abort(), lambda i: pairs[i][1].abort(), barrier_timeout=1.0, join=100
    )
    assert len(threads_but_abort_runners()) == before
    for la_runs, lb_runs in counts:
        assert la_runs <= 1 and lb_runs <= 1
        # Whichever listener ran first removed the other unless it had
        # already started: at least one always runs.
        assert la_runs + lb_runs >= 1
    assert all(a.signal.listener_count == 0 == b.signal.listener_count for a, b in pairs)


# ---------------------------------------------------------------------- B11


@pytest.mark.timeout(120)
def test_b11_remove_under_a_user_lock_racing_abort_never_deadlocks(fast_switching: Any) -> None:
    # Documented outcome (docs/contract.md#cancellation): remove() never waits. When it
    # returns, the listener has either been committed to run by the aborting
    # thread (it may be running, possibly blocked on the caller's lock, and
    # will finish once the lock is released) or it will never run. In
    # particular, if the signal was not yet aborted when remove() returned,
    # the listener never runs.
    iterations = 10_000
    lock = threading.Lock()
    controllers = [AbortController() for _ in range(iterations)]
    ran = [0] * iterations
    aborted_at_removal = [False] * iterations
    handles: list[ListenerHandle] = []
    for i, c in enumerate(controllers):

        def listener(s: AbortSignal, i: int = i) -> None:
            with lock:
                ran[i] += 1

        handles.append(c.signal.add_listener(listener))

    def remove(i: int) -> None:
        with lock:
            handles[i].remove()
            aborted_at_removal[i] = controllers[i].signal.aborted

    race_in_lockstep(iterations, remove, lambda i: controllers[i].abort(), barrier_timeout=1.0, join=100)
    for i in range(iterations):
        assert ran[i] in (0, 1)
        if not aborted_at_removal[i]:
            assert ran[i] == 0, i
    # Which side wins each race is up to the scheduler (on a quiet machine
    # the aborter may win all 10 000): the test asserts the invariant for
    # whichever outcome happened, never that both happened.


def test_b11_listener_reads_adds_and_removes_on_its_own_signal_without_self_deadlock() -> None:
    c = AbortController()
    log: list[str] = []
    handles: list[ListenerHandle] = []

    def reentrant(s: AbortSignal) -> None:
        log.append(f"aborted={s.aborted}")
        added = s.add_listener(lambda s: log.append("added inline"))
        log.append(f"registered={added.registered}")
        handles[0].remove()  # `later`, not started yet
        log.append(f"count={s.listener_count}")

    c.signal.add_listener(reentrant)
    handles.append(c.signal.add_listener(lambda s: log.append("later")))
    t = threading.Thread(target=c.abort, daemon=True)
    t.start()
    t.join(1.0)
    assert not t.is_alive()
    assert log == ["aborted=True", "added inline", "registered=False", "count=0"]
