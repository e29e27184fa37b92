"""AbortController / AbortSignal semantics (docs/contract.md#cancellation, "Semantics" and
"Precise points"). Timeouts live in test_timeouts.py, deadlines in
test_deadlines.py, field cases in test_forced_races.py."""

from __future__ import annotations

import gc
import statistics
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

import pytest

from dshtools import AbortController, AbortError, AbortSignal, ListenerHandle, TimeoutReason
from tests.helpers.interleavings import race_in_lockstep
from tests.helpers.waiting import Gate, blocked_in_wait, run_in_thread, wait_until


def _derived_of_each(rounds: int) -> tuple[list[AbortController], list[AbortSignal], list[int]]:
    """``rounds`` controllers, a signal derived from each one's signal
    alone (``any_of``), and a count per round at zero."""
    controllers = [AbortController() for _ in range(rounds)]
    return controllers, [AbortSignal.any_of([c.signal]) for c in controllers], [0] * rounds


def _counter(counts: list[int], i: int) -> Callable[[AbortSignal], None]:
    """A listener that counts its runs in ``counts[i]``."""

    def listener(_s: AbortSignal) -> None:
        counts[i] += 1

    return listener


def _appender(log: list[Any], value: object) -> Callable[[AbortSignal], None]:
    """A listener that appends ``value`` to ``log``."""

    def listener(_s: AbortSignal) -> None:
        log.append(value)

    return listener


def _thread_and_reason_to(log: list[Any]) -> Callable[[AbortSignal], None]:
    def listener(s: AbortSignal) -> None:
        log.append((threading.get_ident(), s.reason))

    return listener


def wait_until_blocked(thread: threading.Thread) -> None:
    """Until ``thread`` is parked inside threading's wait (observed through
    its frame, not a sleep used as synchronisation)."""
    wait_until(lambda: blocked_in_wait(thread))


def _woken(wait: Callable[[], bool], abort: Callable[[], object]) -> list[bool]:
    """What ``wait()`` returned in another thread, once it blocked and then
    ``abort()`` ran here (empty if it had not returned 5 s later)."""
    result: list[bool] = []
    t = threading.Thread(target=lambda: result.append(wait()), daemon=True)
    t.start()
    wait_until_blocked(t)
    abort()
    t.join(5)
    return result


# ---------------------------------------------------------------- state, reason


def test_new_signal_is_pending_with_no_reason() -> None:
    c = AbortController()
    assert c.signal.aborted is False
    assert c.signal.reason is None
    assert isinstance(c.signal, AbortSignal)


def test_abort_sets_aborted_and_keeps_the_reason_object() -> None:
    c = AbortController()
    reason = object()
    c.abort(reason)
    assert c.signal.aborted is True
    assert c.signal.reason is reason


def test_first_abort_wins_and_later_calls_do_nothing() -> None:
    c = AbortController()
    calls: list[object] = []
    c.signal.add_listener(lambda s: calls.append(s.reason))
    c.abort("first")
    c.abort("second")
    c.abort()
    assert c.signal.reason == "first"
    assert calls == ["first"]


def test_default_reason_is_a_fresh_abort_error() -> None:
    c = AbortController()
    c.abort()
    assert isinstance(c.signal.reason, AbortError)
    assert c.signal.reason.reason is None
    c.abort(None)  # still the same reason object
    assert isinstance(c.signal.reason, AbortError)


@pytest.mark.parametrize("reason", [0, "", False, 0.0, (), []], ids=repr)
def test_only_none_means_default_reason_falsy_reasons_are_kept(reason: object) -> None:
    c = AbortController()
    c.abort(reason)
    assert c.signal.reason is reason
    with pytest.raises(AbortError) as info:
        c.signal.throw_if_aborted()
    assert info.value.reason is reason
    assert AbortSignal.already_aborted(reason).reason is reason


def test_already_aborted_signal() -> None:
    s = AbortSignal.already_aborted("why")
    assert s.aborted and s.reason == "why"
    assert s.wait(0) is True
    default = AbortSignal.already_aborted()
    assert isinstance(default.reason, AbortError)


def test_bare_signal_never_aborts_and_close_is_harmless() -> None:
    s = AbortSignal()
    s.close()
    assert s.aborted is False and s.wait(0) is False


# ---------------------------------------------------------------- AbortError


def test_throw_if_aborted_is_silent_while_pending() -> None:
    AbortController().signal.throw_if_aborted()


def test_throw_if_aborted_raises_a_new_abort_error_each_time() -> None:
    c = AbortController()
    c.abort("stop")
    errors = []
    for _ in range(2):
        with pytest.raises(AbortError) as info:
            c.signal.throw_if_aborted()
        errors.append(info.value)
    assert errors[0] is not errors[1]
    assert all(e.reason == "stop" for e in errors)


def test_abort_error_carries_reason_and_exception_reason_is_the_cause() -> None:
    cause = ValueError("boom")
    c = AbortController()
    c.abort(cause)
    with pytest.raises(AbortError) as info:
        c.signal.throw_if_aborted()
    assert info.value.reason is cause
    assert info.value.__cause__ is cause
    plain = AbortError("text")
    assert plain.reason == "text" and plain.__cause__ is None
    assert AbortError().reason is None
    assert AbortError(reason=3).reason == 3
    assert issubclass(AbortError, Exception)


def test_default_reason_abort_error_is_the_cause_of_the_raised_error() -> None:
    c = AbortController()
    c.abort()
    with pytest.raises(AbortError) as info:
        c.signal.throw_if_aborted()
    assert info.value.reason is c.signal.reason
    assert info.value.__cause__ is c.signal.reason


def test_timeout_reason_takes_code_and_seconds_positionally() -> None:
    r = TimeoutReason("TOOL_TIMEOUT", 1.5)
    assert r.code == "TOOL_TIMEOUT"
    assert r.seconds == 1.5
    assert isinstance(r, TimeoutError)
    assert isinstance(TimeoutReason("X", 2).seconds, float)


# ---------------------------------------------------------------- wait()


def test_wait_returns_true_at_once_when_aborted() -> None:
    c = AbortController()
    c.abort()
    assert c.signal.wait() is True
    assert c.signal.wait(0) is True


def test_wait_with_timeout_returns_false_when_still_pending() -> None:
    s = AbortController().signal
    start = time.monotonic()
    assert s.wait(0.02) is False
    assert time.monotonic() - start >= 0.015


@pytest.mark.timeout(30)
def test_wait_accepts_a_huge_finite_timeout() -> None:
    # Regression: Event.wait() raised OverflowError past threading.TIMEOUT_MAX.
    c = AbortController()
    assert _woken(lambda: c.signal.wait(1e300), c.abort) == [True]


def test_wait_rejects_a_non_number_timeout() -> None:
    with pytest.raises(TypeError):
        AbortController().signal.wait("1")  # type: ignore[arg-type]


@pytest.mark.timeout(30)
def test_untimed_wait_returns_true_when_another_thread_aborts() -> None:
    c = AbortController()
    ready = threading.Event()
    result: list[bool] = []

    def waiter() -> None:
        ready.set()
        result.append(c.signal.wait())

    t = threading.Thread(target=waiter)
    t.start()
    ready.wait()
    c.abort()
    t.join(5)
    assert result == [True]


@pytest.mark.timeout(60)
def test_wait_wakes_within_a_few_ms_of_abort_from_another_thread() -> None:
    # A correctness bound (the wake-up is an Event, not polling), not a
    # benchmark: the median over 50 tries must be under 5 ms.
    latencies: list[float] = []
    for _ in range(50):
        c = AbortController()
        ready = threading.Event()
        woke: list[float] = []

        def waiter() -> None:
            ready.set()
            c.signal.wait(10)
            woke.append(time.monotonic())

        t = threading.Thread(target=waiter)
        t.start()
        ready.wait()
        wait_until_blocked(t)
        aborted_at = time.monotonic()
        c.abort()
        t.join(5)
        latencies.append(woke[0] - aborted_at)
    assert statistics.median(latencies) < 0.005, latencies


# ---------------------------------------------------------------- listeners


def test_listeners_run_once_each_in_registration_order() -> None:
    c = AbortController()
    order: list[int] = []
    for i in range(10):
        c.signal.add_listener(_appender(order, i))
    c.abort()
    c.abort()
    assert order == list(range(10))
    assert c.signal.listener_count == 0


def test_listener_receives_the_signal_already_aborted_with_its_reason() -> None:
    c = AbortController()
    seen: list[tuple[AbortSignal, bool, object]] = []
    c.signal.add_listener(lambda s: seen.append((s, s.aborted, s.reason)))
    c.abort("r")
    assert seen == [(c.signal, True, "r")]


@pytest.mark.timeout(30)
def test_waiters_see_the_abort_while_listeners_still_run() -> None:
    # "abort() sets aborted/reason first, then runs listeners": a thread
    # blocked in wait() is released although the listener has not returned.
    c = AbortController()
    release = threading.Event()
    woke = threading.Event()

    def waiter() -> None:
        if c.signal.wait(30):
            woke.set()

    t = threading.Thread(target=waiter, daemon=True)
    t.start()
    wait_until_blocked(t)
    # The waiter's own wait is far longer than the listener's, so only the
    # abort (not its timeout) can wake it in time.
    c.signal.add_listener(lambda s: release.set() if woke.wait(2) else None)
    c.abort()
    t.join(5)
    assert release.is_set()


@pytest.mark.timeout(30)
def test_listeners_run_in_the_aborting_thread() -> None:
    c = AbortController()
    threads: list[int] = []
    c.signal.add_listener(lambda s: threads.append(threading.get_ident()))
    t, _ = run_in_thread(c.abort)
    t.join(5)
    assert threads == [t.ident]


@pytest.mark.timeout(30)
def test_listener_added_after_abort_runs_immediately_in_the_registering_thread() -> None:
    c = AbortController()
    t, _ = run_in_thread(c.abort)
    t.join(5)
    threads: list[int] = []
    handle = c.signal.add_listener(lambda s: threads.append(threading.get_ident()))
    assert threads == [threading.get_ident()]  # ran before add_listener returned
    assert handle.registered is False
    handle.remove()  # harmless
    assert c.signal.listener_count == 0


def test_run_if_aborted_false_on_an_aborted_signal_does_not_run_and_is_not_registered() -> None:
    c = AbortController()
    c.abort()
    calls: list[AbortSignal] = []
    handle = c.signal.add_listener(calls.append, run_if_aborted=False)
    assert handle.registered is False
    assert calls == []
    assert c.signal.listener_count == 0


def test_run_if_aborted_false_on_a_pending_signal_registers_and_runs_on_abort() -> None:
    c = AbortController()
    calls: list[AbortSignal] = []
    handle = c.signal.add_listener(calls.append, run_if_aborted=False)
    assert handle.registered is True
    c.abort()
    assert calls == [c.signal]


@pytest.mark.parametrize("bad", [None, 1, "callback", object()], ids=repr)
def test_add_listener_rejects_a_non_callable(bad: Any) -> None:
    s = AbortController().signal
    with pytest.raises(TypeError):
        s.add_listener(bad)
    assert s.listener_count == 0


def test_listener_that_raises_is_reported_and_the_others_still_run(unraisable: list[Any]) -> None:
    c = AbortController()
    ran: list[int] = []
    err = RuntimeError("listener 2")

    def bad(s: AbortSignal) -> None:
        ran.append(2)
        raise err

    c.signal.add_listener(lambda s: ran.append(1))
    c.signal.add_listener(bad)
    c.signal.add_listener(lambda s: ran.append(3))
    c.abort()  # does not raise
    assert ran == [1, 2, 3]
    assert len(unraisable) == 1
    assert unraisable[0].exc_value is err
    assert unraisable[0].exc_type is RuntimeError
    assert unraisable[0].object is c.signal


def test_listener_raising_when_run_inline_after_abort_is_reported(unraisable: list[Any]) -> None:
    c = AbortController()
    c.abort()

    def bad(s: AbortSignal) -> None:
        raise ValueError("inline")

    c.signal.add_listener(bad)  # does not raise
    assert [type(u.exc_value) for u in unraisable] == [ValueError]


# ----------------------------------------------- re-entrancy: listeners call back


@pytest.mark.timeout(30)
def test_listener_may_abort_add_remove_and_abort_again_without_deadlock() -> None:
    a = AbortController()
    b = AbortController()
    calls: dict[str, int] = {}

    def count(name: str) -> None:
        calls[name] = calls.get(name, 0) + 1

    b.signal.add_listener(lambda s: count("b"))

    def aborts_other(s: AbortSignal) -> None:
        count("aborts_other")
        b.abort("from a")
        assert b.signal.aborted  # b's listeners ran nested, in this thread
        assert calls["b"] == 1

    added_handles: list[ListenerHandle] = []

    def adds(s: AbortSignal) -> None:
        count("adds")
        # Same signal, already aborted: runs inline, here.
        added_handles.append(s.add_listener(lambda s: count("added")))
        assert calls["added"] == 1

    def removes_later(s: AbortSignal) -> None:
        count("removes_later")
        later.remove()

    def aborts_again(s: AbortSignal) -> None:
        count("aborts_again")
        a.abort("again")  # no-op, no re-run, no deadlock

    a.signal.add_listener(aborts_other)
    a.signal.add_listener(adds)
    a.signal.add_listener(removes_later)
    later = a.signal.add_listener(lambda s: count("later"))
    a.signal.add_listener(aborts_again)
    assert a.signal.listener_count == 5
    a.abort("first")
    assert calls == {
        "aborts_other": 1,
        "b": 1,
        "adds": 1,
        "added": 1,
        "removes_later": 1,
        "aborts_again": 1,
    }
    assert a.signal.reason == "first" and b.signal.reason == "from a"
    assert added_handles[0].registered is False
    assert a.signal.listener_count == 0


def test_listener_may_read_state_and_count_listeners_of_its_signal() -> None:
    c = AbortController()
    seen: list[tuple[bool, int]] = []
    c.signal.add_listener(lambda s: seen.append((s.aborted, s.listener_count)))
    c.signal.add_listener(lambda s: None)
    c.abort()
    # The second listener has not run yet when the first reads the count.
    assert seen == [(True, 1)]


def test_remove_from_inside_the_running_listener_is_a_no_op() -> None:
    c = AbortController()
    calls: list[int] = []
    handles: list[ListenerHandle] = []

    def self_removing(s: AbortSignal) -> None:
        handles[0].remove()
        calls.append(1)

    handles.append(c.signal.add_listener(self_removing))
    c.abort()
    assert calls == [1]


# ---------------------------------------------------------------- remove()


def test_removed_listener_never_runs_and_remove_is_idempotent() -> None:
    c = AbortController()
    calls: list[str] = []
    h = c.signal.add_listener(lambda s: calls.append("removed"))
    c.signal.add_listener(lambda s: calls.append("kept"))
    assert h.registered is True
    assert c.signal.listener_count == 2
    h.remove()
    h.remove()
    assert c.signal.listener_count == 1
    c.abort()
    h.remove()
    assert calls == ["kept"]


def test_listener_handle_is_a_context_manager_that_removes() -> None:
    c = AbortController()
    calls: list[int] = []
    with c.signal.add_listener(lambda s: calls.append(1)) as handle:
        assert isinstance(handle, ListenerHandle)
        assert c.signal.listener_count == 1
    assert c.signal.listener_count == 0
    c.abort()
    assert calls == []


@pytest.mark.timeout(30)
def test_remove_does_not_wait_for_a_listener_running_on_another_thread() -> None:
    c = AbortController()
    gate = Gate()
    finished = threading.Event()

    def slow(s: AbortSignal) -> None:
        gate.hold()
        finished.set()

    handle = c.signal.add_listener(slow)
    t, _ = run_in_thread(c.abort)
    assert gate.entered.wait(5)
    t0 = time.monotonic()
    handle.remove()  # must return while `slow` is still blocked
    assert time.monotonic() - t0 < 1.0
    assert not finished.is_set()
    gate.opened.set()
    t.join(5)
    assert finished.is_set()


@pytest.mark.timeout(30)
def test_once_remove_returns_a_listener_that_had_not_started_never_starts() -> None:
    # The aborting thread runs `first`, which blocks until the main thread has
    # removed `second` - so `second` has certainly not started yet.
    c = AbortController()
    removed = Gate()
    ran: list[str] = []

    def first(s: AbortSignal) -> None:
        ran.append("first")
        removed.hold()

    c.signal.add_listener(first)
    second = c.signal.add_listener(lambda s: ran.append("second"))
    c.signal.add_listener(lambda s: ran.append("third"))
    t, _ = run_in_thread(c.abort)
    assert removed.entered.wait(5)
    second.remove()
    removed.opened.set()
    t.join(5)
    assert ran == ["first", "third"]


# ---------------------------------------------------------------- concurrency


@pytest.mark.timeout(120)
@pytest.mark.parametrize("dependents", [0, 2], ids=["plain", "with-dependents"])
def test_concurrent_abort_from_16_threads_one_reason_wins_every_listener_once(
    fast_switching: Any, dependents: int
) -> None:
    n_threads, rounds = 16, 1000
    n_listeners = 3 + dependents
    controllers = [AbortController() for _ in range(rounds)]
    runs: list[list[tuple[int, object]]] = [[] for _ in range(rounds)]
    derived: list[AbortSignal] = []
    for i, c in enumerate(controllers):
        targets = [c.signal] * 3
        for _ in range(dependents):
            d = AbortSignal.any_of([c.signal, AbortController().signal])
            derived.append(d)  # (kept alive by its listener anyway)
            targets.append(d)
        for target in targets:
            target.add_listener(_thread_and_reason_to(runs[i]))
    barrier = threading.Barrier(n_threads)
    reasons: dict[int, object] = {}
    errors: list[BaseException] = []

    def worker(k: int) -> None:
        reason = f"thread {k}"
        reasons[threading.get_ident()] = reason
        try:
            for c in controllers:
                barrier.wait(timeout=10)
                c.abort(reason)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(100)
    assert not errors
    winners = set()
    for c, log in zip(controllers, runs, strict=False):
        assert c.signal.aborted
        assert len(log) == n_listeners  # every listener exactly once
        idents = {ident for ident, _ in log}
        assert len(idents) == 1  # all ran in one thread: the winner's
        winner = idents.pop()
        winners.add(winner)
        # The reason is the winner's, seen identically by every listener.
        assert {r for _, r in log} == {reasons[winner]} == {c.signal.reason}
    assert len(winners) > 1  # the race really was a race


@pytest.mark.timeout(60)
def test_add_listener_racing_abort_runs_the_listener_exactly_once(fast_switching: Any) -> None:
    rounds = 2000
    controllers = [AbortController() for _ in range(rounds)]
    counts = [0] * rounds
    registered = [False] * rounds

    def register(i: int) -> None:
        def listener(s: AbortSignal) -> None:
            counts[i] += 1

        registered[i] = controllers[i].signal.add_listener(listener).registered

    race_in_lockstep(rounds, register, lambda i: controllers[i].abort())
    assert counts == [1] * rounds
    # Which side wins each round is the scheduler's choice (a quiet machine
    # can give one side every round, as B11 showed in a fresh CI clone); the
    # invariant above holds either way, and each path has a deterministic test.


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["plain", "derived"])
def test_many_threads_adding_and_removing_while_one_aborts(fast_switching: Any, kind: str) -> None:
    # 8 threads add listeners to one signal and remove every other one while
    # a 9th aborts midway. Every listener runs at most once; one never removed
    # runs exactly once (by the abort or inline at registration); one removed
    # before the signal read aborted never runs.
    rounds, n_threads, per_thread = 20, 8, 200
    registrations: set[bool] = set()
    for _ in range(rounds):
        c = AbortController()
        signal = c.signal if kind == "plain" else AbortSignal.any_of([c.signal])
        counts = [[0] * per_thread for _ in range(n_threads)]
        removed_before_abort = [[False] * per_thread for _ in range(n_threads)]
        removed = [[False] * per_thread for _ in range(n_threads)]
        barrier = threading.Barrier(n_threads + 1)

        def worker(k: int) -> None:
            barrier.wait(timeout=10)
            for i in range(per_thread):
                h = signal.add_listener(_counter(counts[k], i))
                registrations.add(h.registered)
                if i % 2:
                    h.remove()
                    removed[k][i] = True
                    removed_before_abort[k][i] = not signal.aborted

        def aborter() -> None:
            barrier.wait(timeout=10)
            while sum(map(sum, counts)) == 0 and not any(map(any, removed)):
                pass  # wait until the workers are under way
            c.abort()

        threads = [threading.Thread(target=worker, args=(k,)) for k in range(n_threads)]
        threads.append(threading.Thread(target=aborter))
        for t in threads:
            t.start()
        for t in threads:
            t.join(50)
        assert signal.aborted
        for k in range(n_threads):
            for i in range(per_thread):
                n = counts[k][i]
                if not removed[k][i]:
                    assert n == 1, (k, i)
                elif removed_before_abort[k][i]:
                    assert n == 0, (k, i)
                else:
                    assert n in (0, 1), (k, i)
        assert signal.listener_count == 0
        assert c.signal.listener_count == 0
    assert registrations == {True, False}  # the abort landed midway


@pytest.mark.timeout(60)
def test_add_listener_on_a_derived_signal_racing_the_source_abort_runs_exactly_once(
    fast_switching: Any,
) -> None:
    rounds = 2000
    controllers, derived, counts = _derived_of_each(rounds)
    race_in_lockstep(rounds, lambda i: derived[i].add_listener(_counter(counts, i)), lambda i: controllers[i].abort())
    assert counts == [1] * rounds


@pytest.mark.timeout(60)
def test_remove_on_a_derived_signal_racing_the_source_abort(fast_switching: Any) -> None:
    # Once remove() has returned on a signal that was not aborted yet, the
    # listener never runs; otherwise it runs at most once.
    rounds = 2000
    controllers, derived, counts = _derived_of_each(rounds)
    handles = [d.add_listener(_counter(counts, i)) for i, d in enumerate(derived)]
    aborted_at_removal = [False] * rounds

    def remove(i: int) -> None:
        handles[i].remove()
        aborted_at_removal[i] = derived[i].aborted

    race_in_lockstep(rounds, remove, lambda i: controllers[i].abort())
    for i in range(rounds):
        assert counts[i] in (0, 1)
        if not aborted_at_removal[i]:
            assert counts[i] == 0
        assert controllers[i].signal.listener_count == 0


@pytest.mark.timeout(60)
def test_any_of_created_while_its_source_aborts_ends_aborted_with_that_reason(
    fast_switching: Any,
) -> None:
    # The "already aborted?" check and the linking are one step against
    # abort(): the derived signal is either created aborted or linked in time.
    rounds = 2000
    controllers = [AbortController() for _ in range(rounds)]
    derived: list[AbortSignal | None] = [None] * rounds
    counts = [0] * rounds

    def create(i: int) -> None:
        d = AbortSignal.any_of([AbortController().signal, controllers[i].signal])
        d.add_listener(_counter(counts, i))
        derived[i] = d

    race_in_lockstep(rounds, create, lambda i: controllers[i].abort(i))
    for i, d in enumerate(derived):
        assert d is not None and d.aborted and d.reason == i
        assert counts[i] == 1
        assert controllers[i].signal.listener_count == 0


def test_dependent_listener_may_close_signals_and_remove_other_dependents_listeners() -> None:
    x = AbortController()
    d1 = AbortSignal.any_of([x.signal])
    d2 = AbortSignal.any_of([x.signal])
    ran: list[str] = []
    handles: list[ListenerHandle] = []

    def first(s: AbortSignal) -> None:
        ran.append("d1")
        d1.close()  # closing an aborted signal keeps it aborted
        d2.close()
        handles[0].remove()  # d2's first listener has not started: it never will
        ran.append(f"any_of={AbortSignal.any_of([x.signal]).aborted}")

    d1.add_listener(first)
    handles.append(d2.add_listener(lambda s: ran.append("d2 removed")))
    d2.add_listener(lambda s: ran.append("d2 kept"))
    x.abort("r")
    assert ran == ["d1", "any_of=True", "d2 kept"]
    assert d1.reason == d2.reason == "r"


# ---------------------------------------------------------------- any_of


def test_any_of_aborts_with_the_reason_of_the_first_source_to_abort() -> None:
    a, b = AbortController(), AbortController()
    d = AbortSignal.any_of([a.signal, b.signal])
    assert d.aborted is False
    b.abort("b")
    assert d.aborted and d.reason == "b"
    a.abort("a")
    assert d.reason == "b"


def test_any_of_default_reason_is_the_same_object_as_the_source_reason() -> None:
    a = AbortController()
    d = AbortSignal.any_of([a.signal])
    a.abort()
    assert isinstance(d.reason, AbortError)
    assert d.reason is a.signal.reason


@pytest.mark.timeout(20)
def test_default_reason_is_one_object_for_every_first_reader() -> None:
    # The default AbortError is created on the first read of `reason`
    # (decision 0015): concurrent first readers - of the signal and of a
    # dependent - must all get the same object, in every round.
    readers = 8
    for _ in range(200):
        controller = AbortController()
        derived = AbortSignal.any_of([controller.signal])
        controller.abort()
        barrier = threading.Barrier(readers)
        seen: list[object] = []

        def read(signal: AbortSignal) -> None:
            barrier.wait()
            seen.append(signal.reason)

        threads = [
            threading.Thread(target=read, args=(derived if i % 2 else controller.signal,)) for i in range(readers)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(seen) == readers
        assert isinstance(seen[0], AbortError) and seen[0].reason is None
        assert all(r is seen[0] for r in seen)
        with pytest.raises(AbortError) as info:
            derived.throw_if_aborted()
        assert info.value.reason is seen[0]


def test_any_of_with_already_aborted_sources_takes_the_first_in_iteration_order() -> None:
    pending = AbortController().signal
    first = AbortSignal.already_aborted("first")
    second = AbortController()
    second.abort("second")
    d = AbortSignal.any_of([pending, first, second.signal])
    assert d.aborted and d.reason == "first"
    d2 = AbortSignal.any_of([pending, second.signal, first])
    assert d2.reason == "second"
    assert pending.listener_count == 0  # no link made for an already-aborted result


def test_any_of_empty_never_aborts() -> None:
    d = AbortSignal.any_of([])
    calls: list[AbortSignal] = []
    d.add_listener(calls.append)
    assert d.aborted is False
    assert d.wait(0.01) is False
    assert calls == []
    assert d.listener_count == 1
    d.close()


def test_any_of_accepts_any_iterable_of_signals() -> None:
    a = AbortController()
    d = AbortSignal.any_of(s for s in [a.signal])
    a.abort("x")
    assert d.reason == "x"


@pytest.mark.parametrize("bad", [None, "signal", 1, AbortController()], ids=repr)
def test_any_of_rejects_a_non_signal(bad: Any) -> None:
    with pytest.raises(TypeError):
        AbortSignal.any_of([AbortController().signal, bad])


def test_any_of_validates_every_element_even_after_an_aborted_one() -> None:
    with pytest.raises(TypeError):
        AbortSignal.any_of([AbortSignal.already_aborted("x"), "not a signal"])  # type: ignore[list-item]


def test_any_of_wait_wakes_when_a_source_aborts() -> None:
    a = AbortController()
    d = AbortSignal.any_of([a.signal])
    assert _woken(lambda: d.wait(10), a.abort) == [True]


def test_any_of_is_flattened_nested_chains_link_directly_to_the_source() -> None:
    x = AbortController()
    outer = AbortSignal.any_of([AbortSignal.any_of([AbortSignal.any_of([x.signal])])])
    # The intermediate signals are gone; x holds exactly one link: to `outer`.
    assert x.signal.listener_count == 1
    x.abort("r")
    assert outer.aborted and outer.reason == "r"


def test_any_of_chain_built_in_a_loop_never_grows() -> None:
    x, y = AbortController(), AbortController()
    s = AbortSignal.any_of([x.signal])
    for _ in range(5000):  # recursion would blow the stack if chains grew
        s = AbortSignal.any_of([s, y.signal])
    gc.collect()
    assert x.signal.listener_count == 1
    assert y.signal.listener_count == 1
    x.abort("deep")
    assert s.reason == "deep"


def test_any_of_links_each_source_once_even_if_repeated() -> None:
    x = AbortController()
    d1 = AbortSignal.any_of([x.signal])
    d = AbortSignal.any_of([x.signal, d1, x.signal])
    assert x.signal.listener_count == 2  # d1 and d
    calls: list[AbortSignal] = []
    d.add_listener(calls.append)
    x.abort()
    assert calls == [d]


def test_source_and_all_dependents_are_aborted_before_any_listener_runs() -> None:
    x = AbortController()
    d1 = AbortSignal.any_of([x.signal])
    d2 = AbortSignal.any_of([AbortController().signal, x.signal])
    snapshots: list[tuple[bool, bool, bool]] = []

    def snap(s: AbortSignal) -> None:
        snapshots.append((x.signal.aborted, d1.aborted, d2.aborted))

    x.signal.add_listener(snap)
    d1.add_listener(snap)
    d2.add_listener(snap)
    x.abort("r")
    assert snapshots == [(True, True, True)] * 3
    assert x.signal.reason is d1.reason is d2.reason


def test_own_listeners_run_first_then_dependents_in_derivation_order() -> None:
    x = AbortController()
    order: list[str] = []
    d1 = AbortSignal.any_of([x.signal])
    d2 = AbortSignal.any_of([x.signal])
    d3 = AbortSignal.any_of([x.signal])
    # Register in an order different from derivation order.
    d3.add_listener(lambda s: order.append("d3"))
    d1.add_listener(lambda s: order.append("d1a"))
    x.signal.add_listener(lambda s: order.append("x1"))
    d2.add_listener(lambda s: order.append("d2"))
    d1.add_listener(lambda s: order.append("d1b"))
    x.signal.add_listener(lambda s: order.append("x2"))
    x.abort()
    assert order == ["x1", "x2", "d1a", "d1b", "d2", "d3"]


def test_listener_count_of_source_counts_listeners_and_live_dependent_links() -> None:
    x = AbortController()
    x.signal.add_listener(lambda s: None)
    d1 = AbortSignal.any_of([x.signal])
    d2 = AbortSignal.any_of([x.signal])
    d2.add_listener(lambda s: None)
    d2.add_listener(lambda s: None)
    assert x.signal.listener_count == 3
    assert d1.listener_count == 0  # a derived signal counts its own listeners only
    assert d2.listener_count == 2
    del d1
    gc.collect()
    assert x.signal.listener_count == 2
    x.abort()
    assert x.signal.listener_count == 0
    assert d2.listener_count == 0


# ------------------------------------------------------------ lifetime, close()


def test_signals_support_weakref() -> None:
    timeout = AbortSignal.timeout(60)
    kinds = [
        AbortController().signal,
        AbortSignal.any_of([]),
        AbortSignal.already_aborted(),
        timeout,
        AbortSignal(),
    ]
    for s in kinds:
        assert weakref.ref(s)() is s
    timeout.close()


def test_dropped_derived_signal_without_listeners_is_released_without_close() -> None:
    x = AbortController()
    d = AbortSignal.any_of([x.signal])
    ref = weakref.ref(d)
    assert x.signal.listener_count == 1
    del d
    gc.collect()
    assert ref() is None
    assert x.signal.listener_count == 0


@pytest.mark.timeout(30)
def test_derived_signal_with_a_listener_stays_alive_after_its_creator_drops_it() -> None:
    x = AbortController()
    calls: list[object] = []
    d = AbortSignal.any_of([x.signal, AbortController().signal])
    d.add_listener(lambda s: calls.append(s.reason))
    ref = weakref.ref(d)
    del d
    gc.collect()
    assert ref() is not None
    x.abort("late")
    assert calls == ["late"]
    gc.collect()
    assert ref() is None  # aborted: no longer pinned by the source


def test_derived_signal_is_released_once_its_last_listener_is_removed() -> None:
    x = AbortController()
    d = AbortSignal.any_of([x.signal])
    h1 = d.add_listener(lambda s: None)
    h2 = d.add_listener(lambda s: None)
    ref = weakref.ref(d)
    del d
    h1.remove()
    gc.collect()
    assert ref() is not None
    h2.remove()
    del h1, h2  # a handle refers to its signal
    gc.collect()
    assert ref() is None
    assert x.signal.listener_count == 0


def test_derived_signal_with_listener_is_kept_alive_by_its_sources_and_nothing_else() -> None:
    x = AbortController()
    d = AbortSignal.any_of([x.signal])
    d.add_listener(lambda s: None)
    ref = weakref.ref(d)
    del d, x  # the source can no longer abort: nothing may keep `d` alive
    gc.collect()
    assert ref() is None


def test_close_detaches_at_once_and_never_aborts() -> None:
    x = AbortController()
    d = AbortSignal.any_of([x.signal])
    calls: list[AbortSignal] = []
    d.add_listener(calls.append)
    gc.disable()
    try:
        d.close()
        assert x.signal.listener_count == 0
        d.close()  # idempotent
    finally:
        gc.enable()
    assert d.aborted is False
    x.abort()
    assert d.aborted is False
    assert d.wait(0) is False
    assert calls == []


def test_with_block_returns_the_signal_and_closes_it() -> None:
    x = AbortController()
    with AbortSignal.any_of([x.signal]) as d:
        assert isinstance(d, AbortSignal)
        assert x.signal.listener_count == 1
    assert x.signal.listener_count == 0
    x.abort()
    assert d.aborted is False


def test_with_block_closes_on_exception_and_does_not_swallow_it() -> None:
    x = AbortController()
    with pytest.raises(KeyError), AbortSignal.any_of([x.signal]):
        raise KeyError("k")
    assert x.signal.listener_count == 0


def test_close_of_a_controller_signal_is_a_no_op() -> None:
    c = AbortController()
    with c.signal as s:
        assert s is c.signal
    c.signal.close()
    c.abort("still works")
    assert c.signal.reason == "still works"


def test_close_after_abort_keeps_the_aborted_state() -> None:
    x = AbortController()
    d = AbortSignal.any_of([x.signal])
    x.abort("r")
    d.close()
    assert d.aborted and d.reason == "r"


def test_any_of_over_a_closed_derived_signal_never_aborts() -> None:
    # A closed derived signal has no sources left, so flattening it links to
    # nothing (regression: it used to link to the closed signal's old source
    # and abort although its only input never does).
    x = AbortController()
    d = AbortSignal.any_of([x.signal])
    d.close()
    e = AbortSignal.any_of([d])
    assert x.signal.listener_count == 0
    x.abort()
    assert d.aborted is False
    assert e.aborted is False


def test_any_of_over_a_closed_derived_whose_source_aborted_leaves_no_link() -> None:
    x = AbortController()
    d = AbortSignal.any_of([x.signal])
    d.close()
    x.abort()
    e = AbortSignal.any_of([d])
    assert e.aborted is False
    assert x.signal.listener_count == 0


def test_closing_an_intermediate_does_not_detach_signals_flattened_from_it() -> None:
    # Flattening links `outer` to x itself; closing `inner` afterwards only
    # detaches `inner` (docs/contract.md#cancellation: links to the original sources).
    x = AbortController()
    inner = AbortSignal.any_of([x.signal])
    outer = AbortSignal.any_of([inner])
    inner.close()
    x.abort("r")
    assert inner.aborted is False
    assert outer.reason == "r"


@pytest.mark.timeout(60)
def test_close_racing_a_source_abort_either_aborts_or_never_does(fast_switching: Any) -> None:
    rounds = 2000
    xs, ds, counts = _derived_of_each(rounds)
    for i, d in enumerate(ds):
        d.add_listener(_counter(counts, i))
    race_in_lockstep(rounds, lambda i: ds[i].close(), lambda i: xs[i].abort())
    for d, n, x in zip(ds, counts, xs, strict=False):
        assert n == (1 if d.aborted else 0)
        assert x.signal.listener_count == 0


# ---------------------------------------------------------------- leaks


@pytest.mark.timeout(120)
def test_100k_dropped_any_of_signals_are_released_from_a_long_lived_parent() -> None:
    import tracemalloc

    long_lived = AbortController().signal
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(100_000):
            fresh = AbortController().signal
            AbortSignal.any_of([long_lived, fresh])  # dropped, never closed
        gc.collect()
        growth = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert long_lived.listener_count == 0
    assert growth < 5 * 1024 * 1024, growth


@pytest.mark.timeout(120)
def test_100k_closed_any_of_signals_detach_without_gc() -> None:
    long_lived = AbortController().signal
    # Keep every derived signal alive so only close() can detach them.
    kept = []
    gc.disable()
    try:
        for _ in range(100_000):
            d = AbortSignal.any_of([long_lived, AbortController().signal])
            d.close()
            kept.append(d)
        assert long_lived.listener_count == 0
    finally:
        gc.enable()
    assert len(kept) == 100_000
