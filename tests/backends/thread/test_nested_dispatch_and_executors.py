"""Regressions found by the adversarial review: nested work from helper
threads and nested batches cannot deadlock a full pool; an executor that
drops queued work or a close() during admission/batch never hangs a call or
loses its result; wrappers cannot leave a dispatch running past settlement;
the timeout text never uses an exponent."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from dshtools import (
    TOOL_ABORTED_BEFORE_DISPATCH,
    AbortController,
    ToolDefinition,
    ToolDispatchExecution,
    ToolExecutionResult,
    ToolRegistry,
    ToolRunContext,
    execute_batch,
)
from dshtools._registry.policies import _format_ms
from dshtools._types.calls import failure
from tests.helpers.calls import OBJECT, call, value_of


@pytest.mark.timeout(20)
def test_nested_dispatch_from_a_helper_thread_of_the_body_runs_with_one_worker() -> None:
    def outer(_a: Any, run: ToolRunContext) -> Any:
        box: list[ToolExecutionResult] = []
        t = threading.Thread(target=lambda: box.append(run.dispatch("inner", {})))
        t.start()
        t.join(10)
        return value_of(box[0]) if box else "hung"

    with ToolRegistry(max_workers=1) as r:
        r.register(ToolDefinition("inner", "d", OBJECT, lambda _a, _r: "inner ok"))
        r.register(ToolDefinition("outer", "d", OBJECT, outer))
        result = r.execute(call("outer"))
    assert value_of(result) == "inner ok"


@pytest.mark.timeout(20)
def test_execute_batch_inside_a_body_runs_with_one_worker() -> None:
    def sub_agent(_a: Any, run: ToolRunContext) -> Any:
        calls = [call("leaf", signal=run.signal, call_id=f"s{i}") for i in range(4)]
        return [value_of(r) for r in execute_batch(r_holder[0], calls, signal=run.signal)]

    r_holder: list[ToolRegistry] = []
    with ToolRegistry(max_workers=1) as r:
        r_holder.append(r)
        r.register(ToolDefinition("leaf", "d", OBJECT, lambda _a, _r: "leaf", is_concurrency_safe=lambda _a: True))
        r.register(ToolDefinition("agent", "d", OBJECT, sub_agent))
        result = r.execute(call("agent"))
    assert value_of(result) == ("leaf",) * 4


@pytest.mark.timeout(20)
def test_executor_dropping_a_queued_call_does_not_hang_execute() -> None:
    queued = threading.Event()

    class SignallingExecutor(ThreadPoolExecutor):
        def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
            fut = super().submit(fn, *args, **kwargs)
            queued.set()
            return fut

    executor = SignallingExecutor(max_workers=1)
    started, release = threading.Event(), threading.Event()
    ran: list[str] = []

    def body(args: Any, _r: ToolRunContext) -> str:
        ran.append(args["who"])
        if args["who"] == "first":
            started.set()
            release.wait(10)
        return "ok"

    r = ToolRegistry(executor=executor)
    r.register(ToolDefinition("t", "d", OBJECT, body))
    first: list[ToolExecutionResult] = []
    t = threading.Thread(target=lambda: first.append(r.execute(call("t", {"who": "first"}, call_id="a"))))
    t.start()
    assert started.wait(5)
    queued.clear()
    second: list[ToolExecutionResult] = []
    t2 = threading.Thread(target=lambda: second.append(r.execute(call("t", {"who": "second"}, call_id="b"))))
    t2.start()
    assert queued.wait(5)  # the second call now waits in the queue behind the first
    executor.shutdown(wait=False, cancel_futures=True)
    t2.join(5)
    assert not t2.is_alive(), "execute hung on a dropped work item"
    assert second[0].code == TOOL_ABORTED_BEFORE_DISPATCH
    release.set()
    t.join(5)
    assert first[0].code is None and ran == ["first"]
    r.close()


@pytest.mark.timeout(20)
def test_close_during_admission_settles_the_call_without_running_it() -> None:
    in_gate, go_on = threading.Event(), threading.Event()
    ran: list[int] = []

    def gate(_e: Any, nxt: Callable[[], Any]) -> Any:
        in_gate.set()
        go_on.wait(10)
        return nxt()

    r = ToolRegistry()
    r.add_pre_execute(gate)
    r.register(ToolDefinition("t", "d", OBJECT, lambda _a, _r: ran.append(1)))
    box: list[ToolExecutionResult] = []
    t = threading.Thread(target=lambda: box.append(r.execute(call("t"))))
    t.start()
    assert in_gate.wait(5)
    r.close()  # no body in flight: returns at once
    go_on.set()
    t.join(5)
    assert box[0].code == TOOL_ABORTED_BEFORE_DISPATCH
    assert ran == []


@pytest.mark.timeout(20)
def test_close_during_a_batch_still_publishes_one_result_per_call() -> None:
    seen: list[str] = []
    r = ToolRegistry()
    r.add_result_observer(lambda e, _res: seen.append(e.call_id))

    def closer(_a: Any, _r: ToolRunContext) -> str:
        threading.Thread(target=r.close).start()  # close() from a body would wait for itself
        return "closing"

    r.register(ToolDefinition("x", "d", OBJECT, closer))
    r.register(ToolDefinition("p", "d", OBJECT, lambda _a, _r: "p", is_concurrency_safe=lambda _a: True))
    sig = AbortController().signal
    calls = [call("x", signal=sig, call_id="c0")] + [call("p", signal=sig, call_id=f"c{i}") for i in range(1, 5)]
    results = execute_batch(r, calls, signal=sig)
    assert len(results) == 5 and value_of(results[0]) == "closing"
    assert seen == [f"c{i}" for i in range(5)]
    assert all(res.code in (None, TOOL_ABORTED_BEFORE_DISPATCH) for res in results)


@pytest.mark.timeout(20)
def test_a_registry_used_and_closed_inside_another_registrys_body() -> None:
    def body(_a: Any, _r: ToolRunContext) -> Any:
        with ToolRegistry() as sub:
            sub.register(ToolDefinition("leaf", "d", OBJECT, lambda _a, _r: "leaf"))
            return value_of(sub.execute(call("leaf")))

    with ToolRegistry() as r:
        r.register(ToolDefinition("t", "d", OBJECT, body))
        assert value_of(r.execute(call("t"))) == "leaf"


@pytest.mark.timeout(20)
def test_a_closed_registry_refuses_calls_from_another_registrys_worker() -> None:
    closed = ToolRegistry()
    closed.register(ToolDefinition("leaf", "d", OBJECT, lambda _a, _r: "ran"))
    closed.close()

    def body(_a: Any, _r: ToolRunContext) -> str:
        try:
            closed.execute(call("leaf"))
        except RuntimeError as exc:
            return f"refused: {exc}"
        return "ran on a closed registry"

    with ToolRegistry() as r:
        r.register(ToolDefinition("t", "d", OBJECT, body))
        assert str(value_of(r.execute(call("t")))).startswith("refused")


@pytest.mark.timeout(20)
def test_a_wrapper_that_returns_early_cannot_leave_the_body_running() -> None:
    body_started, release = threading.Event(), threading.Event()
    state = {"running": False}

    def body(_a: Any, _r: ToolRunContext) -> str:
        state["running"] = True
        body_started.set()
        release.wait(10)
        state["running"] = False
        return "late"

    def racing(execution: ToolDispatchExecution, nxt: Callable[[], ToolExecutionResult]) -> ToolExecutionResult:
        threading.Thread(target=nxt).start()
        body_started.wait(5)
        threading.Timer(0.05, release.set).start()
        return failure("gave up waiting", name="Impatient", code="IMPATIENT")

    caller = AbortController()
    with ToolRegistry() as r:
        r.add_around_dispatch(racing)
        r.register(ToolDefinition("t", "d", OBJECT, body))
        result = r.execute(call("t", signal=caller.signal))
        assert state["running"] is False  # joined before the result was reported
    assert result.code == "IMPATIENT"
    assert caller.signal.listener_count == 0


@pytest.mark.timeout(20)
def test_next_and_run_dispatch_after_settlement_are_refused() -> None:
    stored: list[Callable[[], ToolExecutionResult]] = []
    runs: list[ToolRunContext] = []
    ran: list[int] = []

    def keep(execution: ToolDispatchExecution, nxt: Callable[[], ToolExecutionResult]) -> ToolExecutionResult:
        stored.append(nxt)
        return nxt()

    def body(_a: Any, run: ToolRunContext) -> str:
        ran.append(1)
        runs.append(run)
        return "ok"

    with ToolRegistry() as r:
        r.add_around_dispatch(keep)
        r.register(ToolDefinition("t", "d", OBJECT, body))
        assert value_of(r.execute(call("t"))) == "ok"
        with pytest.raises(RuntimeError, match="settled"):
            stored[0]()
        with pytest.raises(RuntimeError, match="settled"):
            runs[0].dispatch("t", {})
    assert ran == [1]


def test_timeout_text_is_plain_milliseconds() -> None:
    assert _format_ms(0.05) == "50"
    assert _format_ms(1000) == "1000000"
    assert _format_ms(3600) == "3600000"
    assert _format_ms(1234.5678) == "1234567.8"
    assert _format_ms(0.0005) == "0.5"
