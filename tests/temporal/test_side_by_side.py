"""dshtools' tool path and Temporal's own (``activity_as_tool``'s
``TRY_CANCEL`` over a plain synchronous activity, tests/temporal/peer.py),
side by side in one run against one dev server (docs/temporal.md#side-by-side):
a cancelled workflow whose tool runs ``sleep 30``, and a body that ignores
its cancellation. For each: when the workflow learned the outcome, whether
the tool was still running then, whether the result says the body ran, and
how many times the body started (counted once the worker has stopped).
The figures are printed (``-s``) and quoted in docs/temporal.md."""

from __future__ import annotations

import concurrent.futures
import os
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest

from dshtools import TOOL_ABORTED, ToolRegistry

temporalio = pytest.importorskip("temporalio")
from temporalio.client import Client  # noqa: E402
from temporalio.worker import Worker  # noqa: E402

from dshtools import temporal as dtemporal  # noqa: E402
from tests.temporal import peer  # noqa: E402
from tests.temporal.test_execute_tool import read_pid  # noqa: E402
from tests.temporal.tools import Bodies, tool_registry  # noqa: E402
from tests.temporal.workflows import CallTool  # noqa: E402

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]


@pytest.fixture
def registry() -> Iterator[ToolRegistry]:
    with tool_registry(Bodies()) as r:
        yield r


def _alive(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


async def _cancelled(client: Client, workflow: Any, request: dict[str, Any], queue: str, fifo: Path) -> dict[str, Any]:
    """Start ``workflow``, wait until its tool runs (it writes a pid to
    ``fifo``), cancel the workflow and return what it learned, how long
    after the cancel, and whether that pid was alive at that moment (the
    worker's own pid, for a body on the worker's thread, is not checked)."""
    handle = await client.start_workflow(workflow, request, id=f"wf-{uuid.uuid4()}", task_queue=queue)
    pid = await anyio.to_thread.run_sync(read_pid, fifo)
    cancelled_at = time.monotonic()
    await handle.cancel()
    result = await handle.result()
    learned = time.monotonic() - cancelled_at
    alive = _alive(pid) if pid != os.getpid() else None
    return {"result": result, "learned_s": round(learned, 3), "alive": alive, "pid": pid}


def _both_sides(
    client: Client,
    queue: str,
    registry: ToolRegistry,
    peer_activity: Callable[..., Any],
    executor: concurrent.futures.Executor,
    **options: Any,
) -> Worker:
    """One worker hosting both sides of a scenario: our activity with
    ``CallTool``, and the peer's ``peer_activity`` with ``PeerCallTool``."""
    return Worker(
        client,
        task_queue=queue,
        workflows=[CallTool, peer.PeerCallTool],
        activities=[dtemporal.tool_activity(registry), peer_activity],
        activity_executor=executor,
        **options,
    )


def _runs(fifo: Path) -> int:
    """How many times a body started: each start appends a line to
    ``<fifo>.runs`` (tests/temporal/tools.py, tests/temporal/peer.py)."""
    return len(Path(f"{fifo}.runs").read_text(encoding="ascii").splitlines())


def _fifo(tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    os.mkfifo(path)
    return path


async def test_a_cancelled_workflow_with_a_sleep_child(
    temporal_target: str, registry: ToolRegistry, tmp_path: Path
) -> None:
    client = await Client.connect(temporal_target)
    queue = f"q-{uuid.uuid4()}"
    ours_fifo, peer_fifo = _fifo(tmp_path, "ours"), _fifo(tmp_path, "peer")
    with concurrent.futures.ThreadPoolExecutor(8) as executor:
        async with _both_sides(client, queue, registry, peer.sleep_child, executor):
            ours_request = {"name": "sleep_child", "arguments": {"fifo": str(ours_fifo)}, "call_id": "c1"}
            ours = await _cancelled(client, CallTool.run, ours_request, queue, ours_fifo)
            peer_request = {"activity": "peer.sleep_child", "argument": str(peer_fifo)}
            theirs = await _cancelled(client, peer.PeerCallTool.run, peer_request, queue, peer_fifo)
            psutil.Process(theirs["pid"]).kill()  # so the peer's activity can end and the worker stop
    ours["runs"], theirs["runs"] = _runs(ours_fifo), _runs(peer_fifo)
    print(f"\nsleep child, cancelled: dshtools {ours}\nsleep child, cancelled: temporal TRY_CANCEL {theirs}")
    assert ours["result"]["code"] == TOOL_ABORTED and ours["result"]["body_invoked"] is True
    assert ours["alive"] is False
    assert theirs["result"] == {"error": "ActivityError", "cause": "CancelledError"}
    assert theirs["alive"] is True
    assert ours["runs"] == theirs["runs"] == 1, "a cancelled workflow's tool started more than once"


async def test_a_body_that_ignores_its_cancellation(
    temporal_target: str, registry: ToolRegistry, tmp_path: Path
) -> None:
    client = await Client.connect(temporal_target)
    queue = f"q-{uuid.uuid4()}"
    ours_fifo, peer_fifo = _fifo(tmp_path, "ours"), _fifo(tmp_path, "peer")
    peer.IGNORING_FINISHED.clear()
    with concurrent.futures.ThreadPoolExecutor(8) as executor:
        async with _both_sides(
            client, queue, registry, peer.ignore_cancel, executor, graceful_shutdown_timeout=timedelta(seconds=10)
        ):
            ours_request = {
                "name": "ignore_signal",
                "arguments": {"seconds": 30, "fifo": str(ours_fifo)},
                "call_id": "c1",
            }
            ours = await _cancelled(client, CallTool.run, ours_request, queue, ours_fifo)
            theirs = await _cancelled(
                client,
                peer.PeerCallTool.run,
                {"activity": "peer.ignore_cancel", "argument": str(peer_fifo)},
                queue,
                peer_fifo,
            )
            theirs["alive"] = not peer.IGNORING_FINISHED.is_set()
    ours["runs"], theirs["runs"] = _runs(ours_fifo), _runs(peer_fifo)
    print(f"\nignoring body, cancelled: dshtools {ours}\nignoring body, cancelled: temporal TRY_CANCEL {theirs}")
    assert ours["result"]["code"] == TOOL_ABORTED and ours["result"]["killed"] is True
    assert ours["alive"] is False
    assert theirs["result"] == {"error": "ActivityError", "cause": "CancelledError"}
    assert theirs["alive"] is True, "Temporal's path reported the cancellation only after the body ended"
    assert ours["runs"] == theirs["runs"] == 1, "a cancelled workflow's tool started more than once"
