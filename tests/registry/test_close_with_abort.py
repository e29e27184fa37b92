"""``registry.close(abort=reason)`` ends all work with one call
(docs/contract.md#a31): every call in flight — from threads, from
``execute_batch``, from ``aexecute`` — is aborted with the reason and
joined, and a call that reaches its dispatch afterwards ends
``ABORTED_BEFORE_DISPATCH`` with it; nothing is left running."""

from __future__ import annotations

import asyncio
import functools
import threading
from typing import Any

import pytest

from dshtools import (
    TOOL_ABORTED,
    TOOL_ABORTED_BEFORE_DISPATCH,
    AbortController,
    ToolDefinition,
    ToolExecutionInput,
    ToolExecutionResult,
    ToolRegistry,
    execute_batch,
)
from tests.helpers.waiting import run_in_thread, tool_threads


def _waits_for_its_signal(barrier: threading.Barrier) -> Any:
    """A cooperative body: it meets the test at ``barrier``, then returns
    once its signal aborts (10 s at most)."""

    def body(_args: Any, run: Any) -> str:
        barrier.wait(10)
        run.signal.wait(10)
        return "stopped"

    return body


def _registry(barrier: threading.Barrier) -> ToolRegistry:
    registry = ToolRegistry(max_workers=8)
    registry.register(
        ToolDefinition(
            "wait", "", {"type": "object"}, _waits_for_its_signal(barrier), is_concurrency_safe=lambda _a: True
        )
    )
    registry.register(ToolDefinition("alone", "", {"type": "object"}, lambda _a, _r: "ran"))
    return registry


def _call(name: str, call_id: str) -> ToolExecutionInput:
    return ToolExecutionInput(call_id, name, {}, AbortController().signal)


def _ended_by(result: ToolExecutionResult, reason: object, code: str = TOOL_ABORTED) -> None:
    assert result.code == code, result
    assert result.meta["reason"] is reason, result.meta


@pytest.mark.timeout(30)
def test_close_with_a_reason_aborts_the_calls_of_every_thread_and_joins_them() -> None:
    barrier = threading.Barrier(5)
    registry = _registry(barrier)
    callers = [run_in_thread(functools.partial(registry.execute, _call("wait", f"c{i}"))) for i in range(4)]
    barrier.wait(10)  # every body runs
    reason = "shutting down"
    registry.close(abort=reason)
    assert registry.statistics().bodies_in_flight == 0
    for thread, box in callers:
        thread.join(10)
        (result,) = box
        _ended_by(result, reason)
    assert tool_threads() == []


@pytest.mark.timeout(30)
def test_close_with_a_reason_aborts_a_batch_and_its_queued_call_ends_before_dispatch() -> None:
    barrier = threading.Barrier(3)
    registry = _registry(barrier)
    batch = [_call("wait", "p1"), _call("wait", "p2"), _call("alone", "x")]  # `alone` waits for both
    thread, box = run_in_thread(lambda: execute_batch(registry, batch, signal=AbortController().signal))
    barrier.wait(10)
    reason = RuntimeError("the server is stopping")
    registry.close(abort=reason)
    thread.join(10)
    (results,) = box
    _ended_by(results[0], reason)
    _ended_by(results[1], reason)
    _ended_by(results[2], reason, TOOL_ABORTED_BEFORE_DISPATCH)
    assert tool_threads() == []


@pytest.mark.timeout(30)
def test_close_with_a_reason_aborts_awaited_calls() -> None:
    barrier = threading.Barrier(4)
    registry = _registry(barrier)

    async def agent() -> list[ToolExecutionResult]:
        return list(await asyncio.gather(*(registry.aexecute(_call("wait", f"a{i}")) for i in range(3))))

    thread, box = run_in_thread(lambda: asyncio.run(agent()))
    barrier.wait(10)
    reason = "lifespan shutdown"
    registry.close(abort=reason)
    thread.join(10)
    (results,) = box
    for result in results:
        _ended_by(result, reason)
    assert registry.statistics().bodies_in_flight == 0
    assert tool_threads() == []


def test_a_call_after_close_with_a_reason_is_refused_as_after_any_close() -> None:
    registry = _registry(threading.Barrier(1))
    registry.close(abort="bye")
    with pytest.raises(RuntimeError, match="closed"):
        registry.execute(_call("alone", "late"))
