"""ConcurrencyLimit, RateLimit and not_dispatched
(docs/policies.md#concurrencylimit-and-ratelimit; docs/contract.md#policies)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import pytest

from dshtools import (
    TOOL_ABORTED,
    TOOL_ABORTED_BEFORE_DISPATCH,
    TOOL_ERROR,
    TOOL_TIMEOUT,
    AbortController,
    ConcurrencyLimit,
    RateLimit,
    TimeoutPolicy,
    ToolExecutionResult,
    ToolRegistry,
    ToolRunContext,
    not_dispatched,
)
from dshtools._registry.limits import _Queue, parse_rate
from tests.helpers.calls import call, error_of, tool, value_of
from tests.helpers.waiting import run_in_thread, wait_until


def _append_and(into: list[Any], item: Any, value: str) -> str:
    into.append(item)
    return value


def _waiting(limit: _Queue, key: object = None) -> int:
    gate = limit._gates.get(key)
    return 0 if gate is None else len(gate.waiters)


class Holder:
    """A body that says it started and returns when released."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()

    def __call__(self, _a: Any, _r: ToolRunContext) -> str:
        self.started.set()
        assert self.release.wait(5)
        return "held"


@pytest.mark.timeout(30)
def test_twenty_threads_on_a_limit_of_two_never_run_more_than_two_bodies(registry: ToolRegistry) -> None:
    lock = threading.Lock()
    active = [0]
    most = [0]
    # Two bodies must be inside at once to pass: the limit is reached, and
    # a third would show in `most`.
    pair = threading.Barrier(2, timeout=5)

    def body(_a: Any, _r: ToolRunContext) -> str:
        with lock:
            active[0] += 1
            most[0] = max(most[0], active[0])
        try:
            pair.wait()
        finally:
            with lock:
                active[0] -= 1
        return "ok"

    registry.register(tool("t", body))
    limit = ConcurrencyLimit(2)
    registry.add_around_dispatch(limit)
    start = threading.Barrier(20, timeout=5)
    results: list[ToolExecutionResult] = []

    def caller(i: int) -> None:
        start.wait()
        results.append(registry.execute(call("t", call_id=f"c{i}")))

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    assert len(results) == 20 and all(value_of(r) == "ok" for r in results)
    assert most[0] == 2
    assert limit._gates == {}  # nothing held, nothing waiting: the key's state is gone


@pytest.mark.timeout(10)
def test_an_aborted_waiter_is_aborted_before_dispatch_and_never_runs(registry: ToolRegistry) -> None:
    holder = Holder()
    runs: list[str] = []
    registry.register(tool("hold", holder))
    registry.register(tool("t", lambda _a, _r: _append_and(runs, "t", "ran")))
    limit = ConcurrencyLimit(1)
    registry.add_around_dispatch(limit)
    first, first_box = run_in_thread(lambda: registry.execute(call("hold")))
    assert holder.started.wait(5)
    waiter = AbortController()
    second, box = run_in_thread(lambda: registry.execute(call("t", signal=waiter.signal, call_id="c2")))
    wait_until(lambda: _waiting(limit) == 1)
    waiter.abort("gave up")
    second.join(5)
    result = box[0]
    assert result.code == TOOL_ABORTED_BEFORE_DISPATCH
    assert result.body_invoked is False
    assert result.meta["reason"] == "gave up"
    assert _waiting(limit) == 0
    holder.release.set()
    first.join(5)
    assert value_of(first_box[0]) == "held"
    assert value_of(registry.execute(call("t", call_id="c3"))) == "ran"  # the slot was not leaked
    assert runs == ["t"]


@pytest.mark.timeout(10)
def test_waiters_get_the_slot_in_the_order_they_came(registry: ToolRegistry) -> None:
    holder = Holder()
    order: list[str] = []
    registry.register(tool("hold", holder))
    registry.register(tool("t", lambda args, _r: _append_and(order, args["who"], "ok")))
    limit = ConcurrencyLimit(1)
    registry.add_around_dispatch(limit)
    first, _ = run_in_thread(lambda: registry.execute(call("hold")))
    assert holder.started.wait(5)
    threads = []
    for i, who in enumerate("ABCDE"):
        thread, _ = run_in_thread(partial(registry.execute, call("t", {"who": who}, call_id=who)))
        threads.append(thread)
        queued = i + 1
        wait_until(lambda: _waiting(limit) == queued)
    holder.release.set()
    for thread in [first, *threads]:
        thread.join(5)
    assert order == list("ABCDE")


@pytest.mark.timeout(10)
def test_the_wait_is_not_charged_to_a_timeout_inside(registry: ToolRegistry) -> None:
    holder = Holder()
    registry.register(tool("hold", holder))
    registry.register(tool("quick", lambda _a, _r: "quick", timeout=0.05))
    limit = ConcurrencyLimit(1)
    registry.add_around_dispatch(limit)
    registry.add_around_dispatch(TimeoutPolicy())  # inside the limit
    first, _ = run_in_thread(lambda: registry.execute(call("hold")))
    assert holder.started.wait(5)
    second, box = run_in_thread(lambda: registry.execute(call("quick", call_id="c2")))
    wait_until(lambda: _waiting(limit) == 1)
    # Elapsed time is the subject here: the waiter waits longer than its
    # 50 ms timeout before it gets the slot.
    threading.Event().wait(0.15)
    holder.release.set()
    second.join(5)
    first.join(5)
    assert value_of(box[0]) == "quick"


@pytest.mark.timeout(10)
def test_a_timeout_outside_ends_the_wait_as_a_timeout_before_it_started(registry: ToolRegistry) -> None:
    holder = Holder()
    runs: list[int] = []
    registry.register(tool("hold", holder))
    registry.register(tool("quick", lambda _a, _r: _append_and(runs, 1, "quick"), timeout=0.05))
    limit = ConcurrencyLimit(1)
    registry.add_around_dispatch(TimeoutPolicy())  # outside the limit
    registry.add_around_dispatch(limit)
    first, _ = run_in_thread(lambda: registry.execute(call("hold")))
    assert holder.started.wait(5)
    result = registry.execute(call("quick", call_id="c2"))
    assert result.code == TOOL_TIMEOUT
    assert result.body_invoked is False
    assert error_of(result).message == "tool call timed out after 50ms before it started"
    assert _waiting(limit) == 0
    holder.release.set()
    first.join(5)
    assert runs == []


@pytest.mark.timeout(10)
@pytest.mark.parametrize("make", [lambda: ConcurrencyLimit(1), lambda: RateLimit("100/second")])
def test_the_bodys_own_outcomes_pass_through_and_free_the_slot(
    registry: ToolRegistry, make: Callable[[], _Queue]
) -> None:
    caller = AbortController()

    def fails(_a: Any, _r: ToolRunContext) -> str:
        raise RuntimeError("boom")

    def aborts(_a: Any, run: ToolRunContext) -> str:
        caller.abort()
        run.signal.throw_if_aborted()
        return "unreachable"

    registry.register(tool("fails", fails))
    registry.register(tool("aborts", aborts))
    registry.register(tool("ok", lambda _a, _r: "ok"))
    limit = make()
    registry.add_around_dispatch(limit)
    assert registry.execute(call("fails")).code == TOOL_ERROR
    assert registry.execute(call("aborts", signal=caller.signal)).code == TOOL_ABORTED
    assert registry.execute(call("ok", signal=caller.signal)).code == TOOL_ABORTED_BEFORE_DISPATCH  # pre-aborted
    assert value_of(registry.execute(call("ok"))) == "ok"


@pytest.mark.timeout(10)
def test_a_key_gives_each_tool_its_own_limit(registry: ToolRegistry) -> None:
    both = threading.Barrier(2, timeout=5)

    def body(_a: Any, _r: ToolRunContext) -> str:
        both.wait()  # passes only when the two tools run at once
        return "ok"

    registry.register(tool("a", body))
    registry.register(tool("b", body))
    registry.add_around_dispatch(ConcurrencyLimit(1, key=lambda e: e.name))
    a, a_box = run_in_thread(lambda: registry.execute(call("a")))
    b, b_box = run_in_thread(lambda: registry.execute(call("b", call_id="c2")))
    a.join(5)
    b.join(5)
    assert value_of(a_box[0]) == "ok" and value_of(b_box[0]) == "ok"


@pytest.mark.timeout(10)
def test_a_rate_window_makes_the_third_call_wait_for_the_first_to_leave_it(registry: ToolRegistry) -> None:
    arrived: list[float] = []  # before the limit
    admitted: list[float] = []  # after it

    def clock(into: list[float]) -> Callable[[Any, Callable[[], ToolExecutionResult]], ToolExecutionResult]:
        def wrapper(_e: Any, nxt: Callable[[], ToolExecutionResult]) -> ToolExecutionResult:
            into.append(time.monotonic())
            return nxt()

        return wrapper

    registry.register(tool("t", lambda _a, _r: "ok"))
    registry.add_around_dispatch(clock(arrived))
    registry.add_around_dispatch(RateLimit("2/0.2 seconds"))
    registry.add_around_dispatch(clock(admitted))
    results = [registry.execute(call("t", call_id=f"c{i}")) for i in range(3)]
    assert all(value_of(r) == "ok" for r in results)
    # A lower bound (the window, not a speed): the third start waited until
    # the first start, made after the first arrival, left the window.
    assert admitted[2] - arrived[0] >= 0.2
    assert admitted[1] - arrived[1] < 0.2  # the second was within the rate


@pytest.mark.timeout(10)
def test_a_call_aborted_while_over_the_rate_never_runs_and_takes_no_place(registry: ToolRegistry) -> None:
    runs: list[str] = []
    registry.register(tool("t", lambda args, _r: _append_and(runs, args["who"], "ok")))
    limit = RateLimit("2/minute")
    registry.add_around_dispatch(limit)
    assert value_of(registry.execute(call("t", {"who": "a"}))) == "ok"
    assert value_of(registry.execute(call("t", {"who": "b"}))) == "ok"
    waiter = AbortController()
    thread, box = run_in_thread(lambda: registry.execute(call("t", {"who": "c"}, waiter.signal)))
    wait_until(lambda: _waiting(limit) == 1)
    waiter.abort()
    thread.join(5)
    assert box[0].code == TOOL_ABORTED_BEFORE_DISPATCH
    assert runs == ["a", "b"]
    gate = limit._gates[None]
    assert len(gate.stamps) == 2 and not gate.waiters


def test_not_dispatched_is_the_registrys_own_result() -> None:
    controller = AbortController()
    controller.abort("stop")
    result = not_dispatched(controller.signal)
    assert result.code == TOOL_ABORTED_BEFORE_DISPATCH
    assert result.body_invoked is False and result.meta["reason"] == "stop"


@pytest.mark.timeout(10)
def test_a_wrapper_returning_not_dispatched_is_published_as_it_is(registry: ToolRegistry) -> None:
    runs: list[int] = []
    registry.register(tool("t", lambda _a, _r: _append_and(runs, 1, "ok")))
    controller = AbortController()

    def gate(execution: Any, nxt: Callable[[], ToolExecutionResult]) -> ToolExecutionResult:
        controller.abort("closed")
        return not_dispatched(execution.signal)

    registry.add_around_dispatch(gate)
    result = registry.execute(call("t", signal=controller.signal))
    assert result.code == TOOL_ABORTED_BEFORE_DISPATCH and result.body_invoked is False
    assert runs == []


@pytest.mark.parametrize(
    ("rate", "expected"),
    [("30/minute", (30, 60.0)), ("5/second", (5, 1.0)), ("100 / hours", (100, 3600.0)), ("1/2 days", (1, 172800.0))],
)
def test_rates_read_as_calls_per_window(rate: str, expected: tuple[int, float]) -> None:
    assert parse_rate(rate) == expected


@pytest.mark.parametrize("rate", ["30", "0/minute", "3/fortnight", "x/second", "3/0 seconds"])
def test_a_rate_that_does_not_read_is_refused(rate: str) -> None:
    with pytest.raises(ValueError):
        RateLimit(rate)


@pytest.mark.parametrize(
    ("make", "error"),
    [
        (lambda: ConcurrencyLimit(0), ValueError),
        (lambda: ConcurrencyLimit(1.5), TypeError),  # type: ignore[arg-type]
        (lambda: ConcurrencyLimit(True), TypeError),
        (lambda: ConcurrencyLimit(1, key="name"), TypeError),  # type: ignore[arg-type]
        (lambda: RateLimit(30), TypeError),  # type: ignore[arg-type]
    ],
)
def test_bad_arguments_are_refused_where_the_limit_is_made(make: Callable[[], object], error: type[Exception]) -> None:
    with pytest.raises(error):
        make()


def test_the_limits_say_what_they_are() -> None:
    assert repr(ConcurrencyLimit(2)) == "ConcurrencyLimit(2)"
    assert repr(RateLimit("30/minute", key=lambda e: e.name)) == "RateLimit('30/minute', key=...)"
