"""A worker killed with SIGKILL mid-body (docs/temporal.md#crashes): with a
journal on the workers, Temporal's retry finds the claim and the workflow
gets ``OUTCOME_UNKNOWN``, the side effect having happened once; Temporal's
own path runs the side-effecting activity again. Both in one run, printed
for the side-by-side table (docs/temporal.md#side-by-side)."""

from __future__ import annotations

import concurrent.futures
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest

from dshtools import OUTCOME_UNKNOWN

temporalio = pytest.importorskip("temporalio")
from temporalio.client import Client  # noqa: E402
from temporalio.worker import Worker  # noqa: E402

from dshtools import temporal as dtemporal  # noqa: E402
from tests.helpers.journals import STORES, journal_spec  # noqa: E402
from tests.temporal import worker_process  # noqa: E402
from tests.temporal.test_execute_tool import read_pid  # noqa: E402
from tests.temporal.workflows import CallTool, PeerAppend  # noqa: E402

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

ROOT = Path(__file__).resolve().parents[2]


def _worker(target: str, queue: str, mode: str, *extra: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    argv = [sys.executable, "-m", "tests.temporal.worker_process", target, queue, mode, *extra]
    return subprocess.Popen(argv, cwd=ROOT, env=env)


async def _killed_mid_body(
    client: Client,
    target: str,
    tmp_path: Path,
    mode: str,
    workflow: Any,
    request: dict[str, Any],
    journal: str | None = None,
) -> dict[str, Any]:
    """Start the workflow, its activity worker in another process; SIGKILL
    that worker once the body announced itself, let an activity worker in
    this process take the retry, and return the workflow's result, how long after the
    kill it came and how many times the side effect happened. ``journal``:
    the spec of the journal both dshtools workers share."""
    queue, activities_queue = f"q-{uuid.uuid4()}", f"a-{uuid.uuid4()}"
    tmp_path.mkdir()
    fifo, effects = tmp_path / "started", tmp_path / "effects"
    os.mkfifo(fifo)
    body_args = {"path": str(effects), "fifo": str(fifo), "key": "c1"}
    request = {**request, "arguments": body_args} if mode == "dshtools" else {**request, **body_args}
    request["task_queue"] = activities_queue
    process = _worker(target, activities_queue, mode, *([journal] if journal else []))
    try:
        # the workflows run in this process throughout; only the activity worker dies
        async with Worker(client, task_queue=queue, workflows=[CallTool, PeerAppend]):
            handle = await client.start_workflow(workflow, request, id=f"wf-{uuid.uuid4()}", task_queue=queue)
            pid = await anyio.to_thread.run_sync(read_pid, fifo)
            assert pid == process.pid
            os.kill(process.pid, signal.SIGKILL)
            process.wait()
            killed_at = time.monotonic()
            local = worker_process.registry(journal)
            activities: list[Any] = (
                [dtemporal.tool_activity(local)] if mode == "dshtools" else [worker_process.peer_append]
            )
            with local, concurrent.futures.ThreadPoolExecutor(4) as executor:
                async with Worker(
                    client, task_queue=activities_queue, activities=activities, activity_executor=executor
                ):
                    result = await handle.result()
        return {
            "result": result,
            "learned_s": round(time.monotonic() - killed_at, 2),
            "runs": effects.read_text().split(),
        }
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


@pytest.mark.parametrize("store", STORES)
async def test_a_killed_workers_retry_finds_the_claim_and_never_runs_the_body_again(
    temporal_target: str, tmp_path: Path, store: str
) -> None:
    """The two workers share one journal: the SQLite file of one machine,
    or PostgreSQL as workers on several machines would."""
    client = await Client.connect(temporal_target)
    request = {"name": "append", "call_id": "c1", "attempts": 3, "heartbeat": 1}
    journal = journal_spec(store, tmp_path)
    ours = await _killed_mid_body(
        client, temporal_target, tmp_path / "ours", "dshtools", CallTool.run, request, journal
    )
    print(f"\nworker killed mid-body: dshtools + {store} journal {ours}")
    assert ours["result"]["code"] == OUTCOME_UNKNOWN
    assert ours["result"]["body_invoked"] is True
    assert ours["runs"] == ["c1"]


async def test_a_killed_workers_retry_runs_an_idempotent_tool_again(temporal_target: str, tmp_path: Path) -> None:
    """The same kill with a tool declared idempotent: the retry takes the
    dead worker's claim over and runs the body again, and the result says
    it took two attempts."""
    client = await Client.connect(temporal_target)
    request = {"name": "append_idempotent", "call_id": "c1", "attempts": 3, "heartbeat": 1}
    journal = journal_spec("postgres", tmp_path)
    ours = await _killed_mid_body(
        client, temporal_target, tmp_path / "ours", "dshtools", CallTool.run, request, journal
    )
    assert ours["result"]["code"] is None, ours["result"]
    assert ours["result"]["value"] == "done"
    assert ours["result"]["meta"]["attempts"] == 2
    assert ours["runs"] == ["c1", "c1"]


async def test_temporals_own_path_runs_the_side_effect_again_after_the_worker_died(
    temporal_target: str, tmp_path: Path
) -> None:
    client = await Client.connect(temporal_target)
    theirs = await _killed_mid_body(
        client, temporal_target, tmp_path / "peer", "peer", PeerAppend.run, {"attempts": 3, "timeout": 3}
    )
    print(f"\nworker killed mid-body: temporal activity_as_tool path {theirs}")
    assert theirs["result"] == {"value": "done"}
    assert theirs["runs"] == ["c1", "c1"]
