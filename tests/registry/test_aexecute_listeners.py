"""A cancelled awaited call never runs its abort's listeners on the event
loop (docs/contract.md#async, docs/contract.md#a15, docs/async.md).

The defect this guards against: the task's cancellation aborted the call's
signal on the loop's thread, so a listener a body added to ``run.signal``
(a cleanup, a blocking HTTP call) blocked every task of the loop, the same
kind as a timer waiting on listeners (A15). What must hold, under asyncio
and trio, for ``aexecute`` and ``execute_batch_async``: while that
listener blocks, other tasks of the loop run (proved by a thread hand-off
the loop has to complete, then a step another task takes); the
cancellation reaches the caller only after the body returned and the
listener finished; the listener ran on a library thread with the
``TaskCancelled`` reason. An abort of the caller's own signal made on the
loop runs its listeners there: that is the caller's doing, as with any
abort.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest

from dshtools import (
    TOOL_ABORTED,
    AbortController,
    TaskCancelled,
    ToolRegistry,
    ToolRunContext,
    execute_batch_async,
)
from tests.helpers.calls import call, tool
from tests.helpers.recorders import HookRecorder
from tests.helpers.waiting import cancel_during_join

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


class BlockingCleanup:
    """A body that adds a listener to ``run.signal`` which blocks until the
    test sets ``release`` (at most ``limit`` seconds), then waits for its
    signal and returns."""

    def __init__(self, limit: float = 5.0) -> None:
        self.limit = limit
        self.started = threading.Event()
        self.listener_started = threading.Event()
        self.listener_done = threading.Event()
        self.release = threading.Event()
        self.returned = threading.Event()
        self.listener_thread: threading.Thread | None = None
        self.reason: object = None

    def listener(self, signal: Any) -> None:
        self.listener_thread = threading.current_thread()
        self.reason = signal.reason
        self.listener_started.set()
        try:
            self.release.wait(self.limit)
        finally:
            self.listener_done.set()

    def __call__(self, args: Any, run: ToolRunContext) -> object:
        run.signal.add_listener(self.listener)
        self.started.set()
        try:
            run.signal.wait(30)
            return "stopped"
        finally:
            self.returned.set()


async def cancel_while_listener_blocks(
    registry: ToolRegistry, body: BlockingCleanup, awaited: Callable[[], Awaitable[object]]
) -> None:
    """Run ``awaited`` in a scope, cancel it once the body started, and
    check the loop goes on while the listener blocks."""
    published = HookRecorder()
    registry.add_result_observer(published.observer)
    loop_thread = threading.current_thread()
    scope = anyio.CancelScope()
    outcome: list[tuple[str, bool, bool]] = []
    cancelled = anyio.get_cancelled_exc_class()

    async def caller() -> None:
        with scope:
            try:
                await awaited()
            except cancelled:
                outcome.append(("cancelled", body.returned.is_set(), body.listener_done.is_set()))
                raise
            outcome.append(("returned", body.returned.is_set(), body.listener_done.is_set()))

    async with anyio.create_task_group() as tg:
        tg.start_soon(caller)
        assert await anyio.to_thread.run_sync(body.started.wait, 5)
        scope.cancel()
        # A thread hand-off the loop itself must complete: its result is
        # delivered by the loop, which a listener blocking on it would stop.
        assert await anyio.to_thread.run_sync(body.listener_started.wait, 5)
        stepped = anyio.Event()

        async def step() -> None:
            stepped.set()

        tg.start_soon(step)
        await stepped.wait()
        # Both happened while the listener still blocks, before the caller
        # saw its cancellation.
        assert not body.listener_done.is_set()
        assert outcome == []
        body.release.set()
    assert outcome == [("cancelled", True, True)]
    assert scope.cancelled_caught
    assert isinstance(body.reason, TaskCancelled)
    assert body.listener_thread is not None and body.listener_thread is not loop_thread
    assert body.listener_thread.name.startswith("dshtools-abort")
    assert [r.code for _e, r in published.results] == [TOOL_ABORTED]
    assert registry.statistics().bodies_in_flight == 0


async def test_aexecute_a_blocking_listener_does_not_block_the_loop(registry: ToolRegistry) -> None:
    body = BlockingCleanup()
    registry.register(tool("cleanup", body))
    signal = AbortController().signal
    await cancel_while_listener_blocks(registry, body, lambda: registry.aexecute(call("cleanup", signal=signal)))
    assert not signal.aborted and signal.listener_count == 0


async def test_execute_batch_async_a_blocking_listener_does_not_block_the_loop(registry: ToolRegistry) -> None:
    body = BlockingCleanup()
    registry.register(tool("cleanup", body))
    signal = AbortController().signal
    await cancel_while_listener_blocks(
        registry, body, lambda: execute_batch_async(registry, [call("cleanup", signal=signal)], signal=signal)
    )
    assert not signal.aborted and signal.listener_count == 0


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_plain_asyncio_cancel_waits_for_the_listener(registry: ToolRegistry) -> None:
    """A native ``task.cancel()``, repeated while the listener blocks: the
    task still ends only once the body returned and the listener finished."""
    import asyncio

    body = BlockingCleanup()
    registry.register(tool("cleanup", body))
    task = asyncio.ensure_future(registry.aexecute(call("cleanup")))
    assert await asyncio.get_running_loop().run_in_executor(None, body.started.wait, 5)
    task.cancel()
    assert await asyncio.get_running_loop().run_in_executor(None, body.listener_started.wait, 5)
    await cancel_during_join(task, times=3, turns=10)
    body.release.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert body.returned.is_set() and body.listener_done.is_set()
    assert body.listener_thread is not None and body.listener_thread is not threading.current_thread()


async def test_the_callers_own_abort_runs_listeners_where_it_is_made(registry: ToolRegistry) -> None:
    """Documented, not a defect: aborting the caller's signal on the loop
    runs the abort's listeners on the loop, as any ``abort`` runs them in
    its thread (docs/async.md). The call returns its ``ABORTED`` result."""
    body = BlockingCleanup(limit=0)  # the listener does not block here
    body.release.set()
    registry.register(tool("cleanup", body))
    controller = AbortController()
    codes: list[str | None] = []

    async def caller() -> None:
        codes.append((await registry.aexecute(call("cleanup", signal=controller.signal))).code)

    async with anyio.create_task_group() as tg:
        tg.start_soon(caller)
        assert await anyio.to_thread.run_sync(body.started.wait, 5)
        controller.abort("stop")
    assert body.listener_thread is threading.current_thread()
    assert codes == [TOOL_ABORTED]
    assert body.reason == "stop"
