"""``await execute_batch_async(registry, calls, *, signal, ...)`` under
asyncio and trio (docs/contract.md#async, docs/async.md): the results of
``execute_batch`` in model order; a cancelled task aborts the batch
(``TaskCancelled``), joins its started bodies, publishes one result per
call, then re-raises the cancellation; the caller's signals are left
untouched and without listeners."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import anyio
import pytest

from dshtools import (
    TOOL_ABORTED,
    TOOL_ABORTED_BEFORE_DISPATCH,
    AbortController,
    TaskCancelled,
    ToolExecution,
    ToolExecutionResult,
    ToolRegistry,
    ToolRunContext,
    execute_batch_async,
)
from tests.helpers.calls import call, calls, tool, value_of
from tests.helpers.waiting import cancel_during_join

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


class Held:
    """A parallel-safe tool whose body blocks until its signal aborts (then
    until ``release`` when ``ignore_abort``), and what each body saw."""

    def __init__(self, *, ignore_abort: bool = False) -> None:
        self.started = threading.Semaphore(0)
        self.aborted: list[object] = []
        self.finished: list[str] = []
        self.release = threading.Event()
        self.ignore_abort = ignore_abort

    def __call__(self, args: Any, run: ToolRunContext) -> object:
        self.started.release()
        try:
            if run.signal.wait(30):
                self.aborted.append(run.signal.reason)
            if self.ignore_abort:
                self.release.wait(30)
            return args.get("i")
        finally:
            self.finished.append(run.call_id)


@pytest.fixture
def published(registry: ToolRegistry) -> dict[str, list[ToolExecutionResult]]:
    seen: dict[str, list[ToolExecutionResult]] = {}

    def observe(exec: ToolExecution, result: ToolExecutionResult) -> None:
        seen.setdefault(exec.call_id, []).append(result)

    registry.add_result_observer(observe)
    return seen


def register_held(registry: ToolRegistry, held: Held) -> None:
    registry.register(tool("held", held, is_concurrency_safe=lambda args: True))


async def wait_started(held: Held, n: int) -> None:
    for _ in range(n):
        assert await anyio.to_thread.run_sync(held.started.acquire, True, 30)


async def test_results_in_model_order(registry: ToolRegistry) -> None:
    registry.register(tool("double", lambda a, run: a["i"] * 2, is_concurrency_safe=lambda args: True))
    controller = AbortController()
    results = await execute_batch_async(
        registry, [call("double", {"i": i}, call_id=f"c{i}") for i in range(5)], signal=controller.signal
    )
    assert [value_of(r) for r in results] == [0, 2, 4, 6, 8]
    assert controller.signal.listener_count == 0


async def test_misuse_raises_before_anything_runs(registry: ToolRegistry) -> None:
    controller = AbortController()
    with pytest.raises(TypeError, match="signal must be an AbortSignal"):
        await execute_batch_async(registry, [], signal="no")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_parallel"):
        await execute_batch_async(registry, [], signal=controller.signal, max_parallel=0)
    with pytest.raises(TypeError, match="ToolExecutionInput"):
        await execute_batch_async(registry, ["no"], signal=controller.signal)  # type: ignore[list-item]
    registry.close()
    with pytest.raises(RuntimeError, match="closed"):
        await execute_batch_async(registry, [], signal=controller.signal)


async def test_an_aborted_batch_signal_settles_every_call(
    registry: ToolRegistry, published: dict[str, list[ToolExecutionResult]]
) -> None:
    held = Held()
    register_held(registry, held)
    controller = AbortController()
    controller.abort("before")
    results = await execute_batch_async(registry, calls("held", 3, controller.signal), signal=controller.signal)
    assert [r.code for r in results] == [TOOL_ABORTED_BEFORE_DISPATCH] * 3
    assert held.finished == []
    assert controller.signal.listener_count == 0


async def test_a_cancelled_task_aborts_joins_and_publishes_every_call(
    registry: ToolRegistry, published: dict[str, list[ToolExecutionResult]]
) -> None:
    held = Held()
    register_held(registry, held)
    batch_signal, call_signal = AbortController(), AbortController()
    cancelled = anyio.get_cancelled_exc_class()
    finished_at_cancel: list[list[str]] = []
    batch = calls("held", 2, call_signal.signal)

    async def caller() -> None:
        try:
            await execute_batch_async(registry, batch, signal=batch_signal.signal, max_parallel=2)
        except cancelled:
            finished_at_cancel.append(sorted(held.finished))
            raise

    async with anyio.create_task_group() as tg:
        tg.start_soon(caller)
        await wait_started(held, 2)
        tg.cancel_scope.cancel()
    assert finished_at_cancel == [["c0", "c1"]]  # both bodies joined before the caller saw it
    assert len(held.aborted) == 2
    assert all(isinstance(reason, TaskCancelled) for reason in held.aborted)
    assert {k: [r.code for r in v] for k, v in published.items()} == {"c0": [TOOL_ABORTED], "c1": [TOOL_ABORTED]}
    assert not batch_signal.signal.aborted and not call_signal.signal.aborted
    assert batch_signal.signal.listener_count == 0
    assert call_signal.signal.listener_count == 0
    assert registry.statistics().bodies_in_flight == 0


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_plain_asyncio_task_cancel_joins_the_batch(
    registry: ToolRegistry, published: dict[str, list[ToolExecutionResult]]
) -> None:
    held = Held(ignore_abort=True)
    register_held(registry, held)
    controller = AbortController()
    task = asyncio.ensure_future(
        execute_batch_async(registry, calls("held", 3, controller.signal), signal=controller.signal, max_parallel=1)
    )
    await wait_started(held, 1)
    task.cancel()
    await cancel_during_join(task, times=1, turns=20)  # and again: the join goes on
    held.release.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert held.finished == ["c0"]
    assert {k: [r.code for r in v] for k, v in published.items()} == {
        "c0": [TOOL_ABORTED],
        "c1": [TOOL_ABORTED_BEFORE_DISPATCH],
        "c2": [TOOL_ABORTED_BEFORE_DISPATCH],
    }
    assert controller.signal.listener_count == 0
