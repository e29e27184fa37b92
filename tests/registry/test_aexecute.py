"""``await registry.aexecute(call)`` under asyncio and trio
(docs/contract.md#async, docs/async.md).

What must hold: the result of a call whose task is not cancelled; a task
cancelled while the body runs aborts the body's signal (``TaskCancelled``),
joins it (its ``finally`` ran before the cancellation reached the caller)
and re-raises the cancellation; a queued call cancelled never runs its
body; a second cancellation during the join does not abandon it; a plain
``asyncio`` ``task.cancel()`` (no anyio scope) behaves the same; 1 000
concurrent calls with random cancellations keep one result per call on
bounded threads and leave no listener behind.
"""

from __future__ import annotations

import asyncio
import contextvars
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import anyio
import anyio.abc
import pytest

from dshtools import (
    TOOL_ABORTED,
    TOOL_ABORTED_BEFORE_DISPATCH,
    AbortController,
    AbortSignal,
    TaskCancelled,
    TimeoutPolicy,
    ToolExecution,
    ToolExecutionResult,
    ToolFailure,
    ToolRegistry,
    ToolRunContext,
    ToolSuccess,
)
from tests.helpers.calls import call, error_of, tool, value_of
from tests.helpers.cycles import reference_cycles
from tests.helpers.processes import run_python
from tests.helpers.waiting import cancel_during_join, threads_but_abort_runners, wait_until

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


class Published:
    """What the registry's result observer saw, per call id."""

    def __init__(self, registry: ToolRegistry) -> None:
        self.results: dict[str, list[ToolExecutionResult]] = {}
        self._lock = threading.Lock()
        registry.add_result_observer(self)

    def __call__(self, exec: ToolExecution, result: ToolExecutionResult) -> None:
        with self._lock:
            self.results.setdefault(exec.call_id, []).append(result)

    def one(self, call_id: str = "c1") -> ToolExecutionResult:
        (result,) = self.results[call_id]
        return result


class Blocking:
    """A body that blocks until its signal aborts (or ``release`` is set
    with ``ignore_abort``), recording what it saw."""

    def __init__(self, *, ignore_abort: bool = False) -> None:
        self.started = threading.Event()
        self.aborted = threading.Event()
        self.release = threading.Event()
        self.finished = threading.Event()
        self.ignore_abort = ignore_abort
        self.reason: object = None
        self.thread: threading.Thread | None = None

    def __call__(self, args: Any, run: ToolRunContext) -> object:
        self.thread = threading.current_thread()
        self.started.set()
        try:
            if run.signal.wait(30):
                self.reason = run.signal.reason
                self.aborted.set()
            if self.ignore_abort:
                self.release.wait(30)
            return "done"
        finally:
            self.finished.set()


async def wait_event(event: threading.Event) -> None:
    """Wait for a thread's event without blocking the loop."""
    assert await anyio.to_thread.run_sync(event.wait, 30)


async def test_a_result_is_returned(registry: ToolRegistry) -> None:
    published = Published(registry)
    registry.register(tool("add", lambda a, run: a["x"] + 1))
    result = await registry.aexecute(call("add", {"x": 41}))
    assert isinstance(result, ToolSuccess)
    assert value_of(result) == 42
    assert published.one() is result


async def test_a_failure_is_a_result(registry: ToolRegistry) -> None:
    def broken(args: Any, run: ToolRunContext) -> object:
        raise ValueError("no")

    registry.register(tool("broken", broken))
    result = await registry.aexecute(call("broken"))
    assert isinstance(result, ToolFailure)
    assert error_of(result).message == "no"


async def test_the_loop_runs_other_tasks_while_hooks_and_body_run(registry: ToolRegistry) -> None:
    """A pre-execute hook and the body each wait for a task of the same
    loop: they could not return if the loop were blocked by the call."""
    hook_may_go, body_may_go = threading.Event(), threading.Event()
    hook_waiting, body_waiting = threading.Event(), threading.Event()
    loop_thread = threading.current_thread()
    threads: list[threading.Thread] = []

    def hook(exec: ToolExecution, next: Callable[[], object]) -> object:
        threads.append(threading.current_thread())
        hook_waiting.set()
        assert hook_may_go.wait(30)
        return next()

    def body(args: Any, run: ToolRunContext) -> object:
        threads.append(threading.current_thread())
        body_waiting.set()
        assert body_may_go.wait(30)
        return "done"

    registry.add_pre_execute(hook)  # type: ignore[arg-type]
    registry.register(tool("t", body))

    async def release() -> None:
        await wait_event(hook_waiting)
        hook_may_go.set()
        await wait_event(body_waiting)
        body_may_go.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(release)
        assert value_of(await registry.aexecute(call("t"))) == "done"
    assert len(threads) == 2 and loop_thread not in threads


async def test_misuse_raises_as_execute_does(registry: ToolRegistry) -> None:
    with pytest.raises(TypeError, match="ToolExecutionInput"):
        await registry.aexecute("not a call")  # type: ignore[arg-type]
    registry.close()
    with pytest.raises(RuntimeError, match="closed"):
        await registry.aexecute(call("anything"))


async def test_the_body_sees_the_tasks_context(registry: ToolRegistry) -> None:
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")
    registry.register(tool("read", lambda a, run: var.get()))
    var.set("the task's")
    assert value_of(await registry.aexecute(call("read"))) == "the task's"


async def test_an_aborted_caller_signal_settles_without_a_thread(registry: ToolRegistry) -> None:
    ran: list[object] = []
    registry.register(tool("t", lambda a, run: ran.append(a)))
    controller = AbortController()
    controller.abort("stop")
    result = await registry.aexecute(call("t", signal=controller.signal))
    assert isinstance(result, ToolFailure)
    assert result.code == TOOL_ABORTED_BEFORE_DISPATCH
    assert result.meta["reason"] == "stop"
    assert ran == []
    assert controller.signal.listener_count == 0


async def test_cancelled_while_running_aborts_joins_and_reraises(registry: ToolRegistry) -> None:
    published = Published(registry)
    body = Blocking()
    registry.register(tool("slow", body))
    controller = AbortController()
    seen_at_cancel: list[bool] = []
    cancelled = anyio.get_cancelled_exc_class()

    async def caller() -> None:
        try:
            await registry.aexecute(call("slow", signal=controller.signal))
        except cancelled:
            seen_at_cancel.append(body.finished.is_set())
            raise
        raise AssertionError("the cancellation was not re-raised")  # pragma: no cover

    async with anyio.create_task_group() as tg:
        tg.start_soon(caller)
        await wait_event(body.started)
        tg.cancel_scope.cancel()
    assert seen_at_cancel == [True]  # the body's finally ran before the caller saw the cancellation
    assert isinstance(body.reason, TaskCancelled)
    assert body.reason.library in {"asyncio", "trio"}
    result = published.one()
    assert isinstance(result, ToolFailure)
    assert result.code == TOOL_ABORTED
    assert result.meta["reason"] is body.reason
    assert not controller.signal.aborted  # the caller's signal is the caller's
    assert controller.signal.listener_count == 0
    assert registry.statistics().bodies_in_flight == 0


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_plain_asyncio_task_cancel_joins_the_body() -> None:
    """The case anyio's own ``to_thread.run_sync(abandon_on_cancel=False)``
    gets wrong under a native ``task.cancel()``: the cancellation must not
    reach the caller before the body returned, however often it comes."""
    with ToolRegistry() as registry:
        body = Blocking(ignore_abort=True)
        registry.register(tool("slow", body))
        controller = AbortController()
        task = asyncio.ensure_future(registry.aexecute(call("slow", signal=controller.signal)))
        await wait_event(body.started)
        task.cancel()
        await wait_event(body.aborted)
        await cancel_during_join(task, times=3, turns=10)  # again, during the join
        body.release.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert body.finished.is_set()
        assert isinstance(body.reason, TaskCancelled)
        assert body.reason.library == "asyncio"
        assert controller.signal.listener_count == 0
        assert registry.statistics().bodies_in_flight == 0


async def test_a_second_cancellation_does_not_abandon_the_join() -> None:
    """The inner scope is cancelled, then the outer one during the join."""
    with ToolRegistry() as registry:
        body = Blocking(ignore_abort=True)
        registry.register(tool("slow", body))
        done: list[bool] = []
        cancelled = anyio.get_cancelled_exc_class()
        outer, inner = anyio.CancelScope(), anyio.CancelScope()

        async def caller() -> None:
            with outer, inner:
                try:
                    await registry.aexecute(call("slow"))
                except cancelled:
                    done.append(body.finished.is_set())
                    raise

        async with anyio.create_task_group() as tg:
            tg.start_soon(caller)
            await wait_event(body.started)
            inner.cancel()
            await wait_event(body.aborted)
            outer.cancel()
            for _ in range(20):  # checkpoints in which an abandoning wait would have ended
                await anyio.lowlevel.checkpoint()
            assert done == []
            body.release.set()
        assert done == [True]
        assert outer.cancel_called
        assert registry.statistics().bodies_in_flight == 0


async def queue_behind(
    tg: anyio.abc.TaskGroup,
    registry: ToolRegistry,
    holder: Blocking,
    queued: str,
    results: dict[str, ToolExecutionResult],
) -> AbortController:
    """Start ``hold`` (the ``holder`` body) in ``tg`` and, once it runs,
    ``queued`` behind it; return when ``queued`` is submitted (``aexecute``
    submits before its first checkpoint, in the same step that entered
    it). Each result lands in ``results`` under its tool's name; the
    returned controller's abort releases the holder."""
    holder_signal = AbortController()
    entered: list[str] = []

    async def run_one(name: str, signal: AbortSignal) -> None:
        entered.append(name)
        results[name] = await registry.aexecute(call(name, signal=signal, call_id=name))

    tg.start_soon(run_one, "hold", holder_signal.signal)
    await wait_event(holder.started)
    tg.start_soon(run_one, queued, AbortController().signal)
    while queued not in entered:
        await anyio.lowlevel.checkpoint()
    return holder_signal


class TestQueued:
    """``max_workers=1`` and a body holding the one worker: the next call
    waits in the pool's queue."""

    @pytest.fixture
    def registry_options(self) -> dict[str, Any]:
        return {"max_workers": 1}

    async def test_cancelled_while_queued_never_runs(self, registry: ToolRegistry) -> None:
        published = Published(registry)
        holder = Blocking()
        ran: list[str] = []
        registry.register(tool("hold", holder))
        registry.register(tool("queued", lambda a, run: ran.append("ran")))
        holder_signal = AbortController()
        results: list[ToolExecutionResult] = []

        async def hold() -> None:
            results.append(await registry.aexecute(call("hold", signal=holder_signal.signal, call_id="h")))

        async with anyio.create_task_group() as tg:
            tg.start_soon(hold)
            await wait_event(holder.started)
            with anyio.CancelScope() as scope:
                scope.cancel()
                await registry.aexecute(call("queued", call_id="q"))
            assert scope.cancelled_caught
            # Settled while the holder still holds the only worker.
            assert not holder.finished.is_set()
            queued = published.one("q")
            assert isinstance(queued, ToolFailure)
            assert queued.code == TOOL_ABORTED_BEFORE_DISPATCH
            assert isinstance(queued.meta["reason"], TaskCancelled)
            assert queued.body_invoked is False
            holder_signal.abort("done holding")
        assert ran == []
        assert [r.body_invoked for r in results] == [True]

    async def test_the_callers_abort_withdraws_a_queued_call(self, registry: ToolRegistry) -> None:
        holder = Blocking()
        registry.register(tool("hold", holder))
        registry.register(tool("queued", lambda a, run: "ran"))
        holder_signal = AbortController()
        controller = AbortController()
        async with anyio.create_task_group() as tg:
            tg.start_soon(registry.aexecute, call("hold", signal=holder_signal.signal, call_id="h"))
            await wait_event(holder.started)

            async def abort_soon() -> None:
                await anyio.lowlevel.checkpoint()
                controller.abort("no longer needed")

            tg.start_soon(abort_soon)
            result = await registry.aexecute(call("queued", signal=controller.signal, call_id="q"))
            assert not holder.finished.is_set()
            holder_signal.abort("done holding")
        assert isinstance(result, ToolFailure)
        assert result.code == TOOL_ABORTED_BEFORE_DISPATCH
        assert result.meta["reason"] == "no longer needed"
        assert controller.signal.listener_count == 0

    async def test_a_close_while_queued_settles_the_call(self, registry: ToolRegistry) -> None:
        """``close()`` waits for the running body, then the queued call is
        settled (one result per call), its body never run."""
        holder = Blocking()
        ran: list[str] = []
        registry.register(tool("hold", holder))
        registry.register(tool("queued", lambda a, run: ran.append("ran")))
        results: dict[str, ToolExecutionResult] = {}
        async with anyio.create_task_group() as tg:
            holder_signal = await queue_behind(tg, registry, holder, "queued", results)
            closing = threading.Thread(target=registry.close)
            closing.start()
            await anyio.to_thread.run_sync(lambda: wait_until(lambda: registry.statistics().closed))
            holder_signal.abort("done holding")
            await anyio.to_thread.run_sync(closing.join, 30)
        assert results["hold"].body_invoked is True
        assert results["queued"].code == TOOL_ABORTED_BEFORE_DISPATCH
        assert ran == []

    async def test_the_wait_for_a_worker_is_not_charged_to_the_timeout(self, registry: ToolRegistry) -> None:
        """The queued call's timer starts when a worker takes it: waiting
        longer than its timeout for the worker is not a ``TOOL_TIMEOUT``."""
        registry.add_around_dispatch(TimeoutPolicy())
        holder = Blocking()
        registry.register(tool("hold", holder))
        registry.register(tool("quick", lambda a, run: "in time", timeout=0.2))
        results: dict[str, ToolExecutionResult] = {}
        async with anyio.create_task_group() as tg:
            holder_signal = await queue_behind(tg, registry, holder, "quick", results)
            queued_at = time.monotonic()
            await anyio.sleep(0.4)  # time passing in the queue, twice the timeout
            holder_signal.abort("done holding")
        assert time.monotonic() - queued_at >= 0.4
        assert value_of(results["quick"]) == "in time"

    async def test_a_body_awaiting_a_nested_call_runs_it_inline(self, registry: ToolRegistry) -> None:
        """A body running its own loop on the only worker: the nested call
        cannot queue behind it."""
        registry.register(tool("inner", lambda a, run: "inner"))

        def outer(args: Any, run: ToolRunContext) -> object:
            result = asyncio.run(registry.aexecute(call("inner", signal=run.signal)))
            return value_of(result)

        registry.register(tool("outer", outer))
        assert value_of(await registry.aexecute(call("outer"))) == "inner"


class _Refusing(ThreadPoolExecutor):
    def submit(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("refused")


async def test_an_executor_that_refuses_gives_what_execute_gives() -> None:
    """The call goes to a thread of its own; its dispatch meets the same
    refusal ``execute``'s does (docs/contract.md#a5)."""
    executor = _Refusing(max_workers=1)
    with ToolRegistry(executor=executor) as registry:
        registry.register(tool("t", lambda a, run: "ran"))
        expected = registry.execute(call("t"))
        result = await registry.aexecute(call("t"))
    executor.shutdown()
    assert result.code == expected.code == TOOL_ABORTED_BEFORE_DISPATCH
    assert str(result.meta["reason"]) == "refused"
    assert result.body_invoked is False
    # A16: ``meta`` is a read-only mapping on this path too. A non-empty one
    # is a mapping proxy (it holds the exception, not a JSON value, so it is
    # not a ``FrozenDict``: docs/decisions/0054), from both ways of calling.
    for meta in (result.meta, expected.meta):
        assert isinstance(meta, Mapping) and type(meta) is type(result.meta)
        with pytest.raises(TypeError):
            meta["reason"] = None  # type: ignore[index]


async def test_a_thousand_concurrent_calls_with_random_cancellations(anyio_backend: str) -> None:
    """Field case: one loop, many callers, some cancelled at random points
    (seeded): one published result per call, the result of every task not
    cancelled is the published one, threads stay bounded, no listener is
    left on the shared caller signal."""
    rng = random.Random(26)
    n = 1000
    with ToolRegistry(max_workers=16) as registry:
        published = Published(registry)
        starts: list[int] = []  # list.append is atomic: bodies run on many threads
        threads_seen: list[int] = []
        body_threads: set[str] = set()

        def body(args: Any, run: ToolRunContext) -> object:
            starts.append(args["i"])
            threads_seen.append(len(threads_but_abort_runners()))
            body_threads.add(threading.current_thread().name)
            run.signal.wait(0.005 * (args["i"] % 3))
            return args["i"]

        registry.register(tool("t", body))
        controller = AbortController()
        baseline = len(threads_but_abort_runners())
        returned: dict[str, ToolExecutionResult] = {}
        cancelled_ids: set[str] = set()
        cancelled = anyio.get_cancelled_exc_class()

        # A cancellation fires when a random number of calls has finished
        # (before its call began, while it is queued or running, or after).
        thresholds: list[tuple[int, int]] = sorted((rng.randrange(n), i) for i in range(n) if rng.random() < 0.3)
        scopes = [anyio.CancelScope() for _ in range(n)]
        finished = 0

        def finish_one() -> None:
            nonlocal finished
            finished += 1
            while thresholds and thresholds[0][0] <= finished:
                scopes[thresholds.pop(0)[1]].cancel()

        async def one(i: int) -> None:
            with scopes[i]:
                try:
                    returned[f"c{i}"] = await registry.aexecute(call("t", {"i": i}, controller.signal, call_id=f"c{i}"))
                except cancelled:
                    cancelled_ids.add(f"c{i}")
                    raise
                finally:
                    finish_one()

        async with anyio.create_task_group() as tg:
            for i in range(n):
                tg.start_soon(one, i)
        started = Counter(starts)
        assert set(published.results) == {f"c{i}" for i in range(n)}
        assert all(len(r) == 1 for r in published.results.values())
        assert set(returned) | cancelled_ids == set(published.results)
        assert not set(returned) & cancelled_ids
        for call_id, result in returned.items():
            assert published.one(call_id) is result
        for call_id in cancelled_ids:
            result = published.one(call_id)
            if isinstance(result, ToolFailure) and result.code == TOOL_ABORTED_BEFORE_DISPATCH:
                assert started[int(call_id[1:])] == 0
        assert all(count == 1 for count in started.values())
        # A cancellation found its call queued (never ran), running (aborted
        # and joined) or already settled (the task was cancelled after the
        # result was ready); how many of each depends on the machine's load,
        # and the queued case is pinned by its own test above.
        codes = Counter(published.one(c).code for c in cancelled_ids)
        assert set(codes) <= {TOOL_ABORTED_BEFORE_DISPATCH, TOOL_ABORTED, None}, codes
        # Bodies ran on the registry's 16 workers, and no thread was started
        # per call (a little room for the loop library's own helper threads).
        assert len(body_threads) <= 16
        assert all(name.startswith("dshtools-tool") for name in body_threads)
        assert max(threads_seen) <= baseline + 16 + 4
        assert controller.signal.listener_count == 0
        assert registry.statistics().bodies_in_flight == 0


async def test_an_awaited_call_leaves_no_reference_cycle(registry: ToolRegistry) -> None:
    """Its objects are freed by reference counting, as ``execute``'s are
    (no event-loop task is made, so nothing of the loop's is counted)."""
    registry.register(tool("ok", lambda a, run: 42))
    signal = AbortController().signal
    for _ in range(3):  # pools, caches and the loop's own one-time objects
        await registry.aexecute(call("ok", signal=signal))
    with reference_cycles() as cycles:
        for _ in range(10):
            await registry.aexecute(call("ok", signal=signal))
    assert cycles.count == 0, cycles.kinds


_WITHOUT_ANYIO = """\
import asyncio, sys, threading
sys.modules["anyio"] = None  # as if not installed
import dshtools

started, finished = threading.Event(), threading.Event()

def slow(args, run):
    started.set()
    try:
        run.signal.wait(30)
    finally:
        finished.set()

async def main():
    with dshtools.ToolRegistry() as registry:
        registry.register(dshtools.ToolDefinition("slow", "", {"type": "object"}, slow))
        registry.register(dshtools.ToolDefinition("ok", "", {"type": "object"}, lambda a, run: 42))
        signal = dshtools.AbortController().signal
        assert (await registry.aexecute(dshtools.ToolExecutionInput("c0", "ok", {}, signal))).value == 42
        task = asyncio.ensure_future(registry.aexecute(dshtools.ToolExecutionInput("c1", "slow", {}, signal)))
        await asyncio.to_thread(started.wait, 30)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            assert finished.is_set()
        else:
            raise AssertionError("not cancelled")

asyncio.run(main())
assert "trio" not in sys.modules
"""


def test_awaiting_a_call_does_not_need_anyio() -> None:
    """anyio is an extra: ``import dshtools`` does not import it (nor trio),
    and plain asyncio awaits and cancels a call without it."""
    run_python(_WITHOUT_ANYIO)


def test_outside_an_event_loop_is_a_runtime_error(registry: ToolRegistry) -> None:
    coroutine = registry.aexecute(call("anything"))
    with pytest.raises(RuntimeError, match="asyncio or trio event loop"):
        coroutine.send(None)
    coroutine.close()
