"""``dshtools.temporal`` against a real Temporal dev server
(docs/contract.md#temporal): a cancelled workflow learns the real outcome
after the body was joined and its ``sleep`` child is gone; a call cancelled
before its activity started was never dispatched; a worker's shutdown
aborts and joins the call in flight; timeouts come back as coded results."""

from __future__ import annotations

import concurrent.futures
import os
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest

from dshtools import (
    TOOL_ABORTED,
    TOOL_ABORTED_BEFORE_DISPATCH,
    TOOL_TIMEOUT,
    ToolRegistry,
)

temporalio = pytest.importorskip("temporalio")
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle  # noqa: E402
from temporalio.exceptions import CancelledError  # noqa: E402
from temporalio.worker import Worker  # noqa: E402

from dshtools import temporal as dtemporal  # noqa: E402
from tests.temporal.tools import Bodies  # noqa: E402
from tests.temporal.workflows import AgentToolCall, CallTool, RunnerLikeToolTask  # noqa: E402

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]


@pytest.fixture
async def client(temporal_target: str) -> Client:
    return await Client.connect(temporal_target)


@asynccontextmanager
async def worker(client: Client, registry: ToolRegistry, *, queue: str, grace: float = 5.0) -> AsyncIterator[Worker]:
    with concurrent.futures.ThreadPoolExecutor(8) as executor:
        async with Worker(
            client,
            task_queue=queue,
            workflows=[CallTool, AgentToolCall, RunnerLikeToolTask],
            activities=[dtemporal.tool_activity(registry)],
            activity_executor=executor,
            graceful_shutdown_timeout=timedelta(seconds=grace),
        ) as running:
            yield running


async def start(client: Client, queue: str, **request: Any) -> WorkflowHandle[Any, Any]:
    return await client.start_workflow(CallTool.run, request, id=f"wf-{uuid.uuid4()}", task_queue=queue)


def read_pid(fifo: Path) -> int:
    with open(fifo, encoding="ascii") as f:  # blocks until the child writes it
        return int(f.readline())


async def test_a_successful_call_returns_the_result_as_json(client: Client, tools: ToolRegistry) -> None:
    queue = f"q-{uuid.uuid4()}"
    async with worker(client, tools, queue=queue):
        handle = await start(client, queue, name="add", arguments={"a": 2, "b": 3}, call_id="call_1")
        result = await handle.result()
    assert result["code"] is None
    assert result["value"] == 5
    assert result["text"] == "5"
    assert result["body_invoked"] is True


async def test_a_cancelled_workflow_learns_aborted_after_the_sleep_child_is_gone(
    client: Client, tools: ToolRegistry, bodies: Bodies, tmp_path: Path
) -> None:
    queue = f"q-{uuid.uuid4()}"
    fifo = tmp_path / "pid"
    os.mkfifo(fifo)
    async with worker(client, tools, queue=queue):
        handle = await start(client, queue, name="sleep_child", arguments={"fifo": str(fifo)}, call_id="call_1")
        pid = await anyio.to_thread.run_sync(read_pid, fifo)
        assert psutil.pid_exists(pid)
        cancelled_at = time.monotonic()
        await handle.cancel()
        result = await handle.result()
        learned_after = time.monotonic() - cancelled_at
        gone = not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert result["code"] == TOOL_ABORTED
    assert result["body_invoked"] is True
    assert gone, "the workflow learned the outcome while the tool's sleep was still running"
    assert bodies.runs == ["call_1"]
    assert result["meta"]["reason"] == dtemporal.WORKFLOW_CANCELLED
    assert learned_after < 10, learned_after


@pytest.mark.parametrize("when", ["scheduled", "at_start"])
async def test_a_call_cancelled_before_its_activity_started_was_never_dispatched(
    client: Client, tools: ToolRegistry, bodies: Bodies, when: str
) -> None:
    queue, nobody = f"q-{uuid.uuid4()}", f"idle-{uuid.uuid4()}"
    async with worker(client, tools, queue=queue):
        # the activity goes to a task queue no worker polls: it is scheduled, never started
        handle = await start(client, queue, name="wait_for_abort", arguments={}, call_id="call_1", task_queue=nobody)
        if when == "scheduled":
            async for event in handle.fetch_history_events(wait_new_event=True):
                if event.HasField("activity_task_scheduled_event_attributes"):
                    break
        await handle.cancel()
        result = await handle.result()
    assert result["code"] == TOOL_ABORTED_BEFORE_DISPATCH
    assert result["body_invoked"] is False
    assert bodies.runs == []


async def test_a_worker_shutdown_aborts_the_call_in_flight_and_joins_it(
    client: Client, tools: ToolRegistry, bodies: Bodies
) -> None:
    queue = f"q-{uuid.uuid4()}"
    async with worker(client, tools, queue=queue, grace=10) as running:
        handle = await start(client, queue, name="wait_for_abort", arguments={}, call_id="call_1")
        assert await anyio.to_thread.run_sync(bodies.started.wait, 30)
        await running.shutdown()
    assert bodies.reasons == [dtemporal.WORKER_SHUTDOWN]  # the body returned before shutdown() did
    async with worker(client, tools, queue=queue):
        result = await handle.result()
    assert result["code"] == TOOL_ABORTED
    assert result["body_invoked"] is True
    assert result["meta"]["reason"] == dtemporal.WORKER_SHUTDOWN


async def test_an_attempt_that_times_out_is_a_coded_result(client: Client, tools: ToolRegistry, bodies: Bodies) -> None:
    queue = f"q-{uuid.uuid4()}"
    async with worker(client, tools, queue=queue):
        handle = await start(client, queue, name="wait_for_abort", arguments={}, call_id="call_1", timeout=1)
        result = await handle.result()
    assert result["code"] == TOOL_TIMEOUT
    assert result["body_invoked"] is True


async def test_the_openai_agents_tool_runs_the_call_through_the_activity(client: Client, tools: ToolRegistry) -> None:
    queue = f"q-{uuid.uuid4()}"
    parameters = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}
    async with worker(client, tools, queue=queue):
        sent = await client.execute_workflow(
            AgentToolCall.run,
            {"name": "add", "parameters": parameters, "call_id": "call_7", "arguments": '{"a": 40, "b": 2}'},
            id=f"wf-{uuid.uuid4()}",
            task_queue=queue,
        )
        refused = await client.execute_workflow(
            AgentToolCall.run,
            {"name": "add", "parameters": parameters, "call_id": "call_8", "arguments": '{"a": 40, "b": "two"}'},
            id=f"wf-{uuid.uuid4()}",
            task_queue=queue,
        )
    assert sent == "42"
    assert refused.startswith("Error: ") and "b" in refused


async def finished_before_the_cancelled_end(
    client: Client, run: Any, request: dict[str, Any], *, queue: str, bodies: Bodies
) -> bool:
    """Start workflow ``run`` with ``request``, cancel it once its tool's
    body runs, wait (30 s at most) until it has ended cancelled, and return
    whether the body had finished by then; then release a ``held`` body."""
    handle = await client.start_workflow(run, request, id=f"wf-{uuid.uuid4()}", task_queue=queue)
    assert await anyio.to_thread.run_sync(bodies.started.wait, 30)
    await handle.cancel()
    with anyio.fail_after(30), pytest.raises(WorkflowFailureError) as failure:
        await handle.result()
    finished = bodies.finished.is_set()
    bodies.release.set()
    assert isinstance(failure.value.cause, CancelledError)
    return finished


@pytest.mark.parametrize(("body", "join"), [("held", False), ("wait_for_abort", True)])
async def test_a_runner_that_drops_its_cancelled_tool_task_ends_before_the_body_unless_it_joins_the_tool_calls(
    client: Client, tools: ToolRegistry, bodies: Bodies, body: str, join: bool
) -> None:
    """Without ``join_tool_calls()`` the workflow ends while a ``held`` body
    still runs; with it, only after a body that honours its abort has
    returned."""
    queue = f"q-{uuid.uuid4()}"
    request = {"name": body, "call_id": "c1", "join": join}
    async with worker(client, tools, queue=queue):
        finished = await finished_before_the_cancelled_end(
            client, RunnerLikeToolTask.run, request, queue=queue, bodies=bodies
        )
    assert finished is join
    assert bodies.runs == ["c1"]
    if join:
        assert bodies.reasons == [dtemporal.WORKFLOW_CANCELLED]
