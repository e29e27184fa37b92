"""The server's life under ``MCPClient`` (docs/mcp.md#the-client, docs/contract.md#mcp): a server that dies mid-call is ``WORKER_LOST`` and is started again by
the next call (unless ``restart=False``); ``close()`` ends the calls in
flight and leaves no process, thread or event loop behind."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import psutil
import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed (pip install 'dshtools[mcp]')")

from dshtools import (
    TOOL_ABORTED_BEFORE_DISPATCH,
    WORKER_LOST,
    AbortController,
    ToolExecutionResult,
    ToolFailure,
    ToolRegistry,
)
from dshtools.mcp import MCPClient
from tests.helpers.waiting import threads_but_abort_runners
from tests.mcp.client_support import (
    GRACE,
    call,
    cancels,
    client_threads,
    eventually,
    own_client,
    scripted_server,
    session_alive,
    sleep_children,
    value_of,
)


@pytest.mark.timeout(60)
def test_a_server_that_dies_mid_call_is_worker_lost_and_restarts_on_the_next_call(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    with MCPClient.stdio(scripted_server(log), cancel_grace=GRACE) as client, ToolRegistry() as registry:
        client.register_tools(registry)
        first = client.server_pid
        assert first is not None
        lost = registry.execute(call("die", {}))
        assert isinstance(lost, ToolFailure)
        assert lost.code == WORKER_LOST
        assert lost.error.info is not None and lost.error.info.name == "WorkerLost"
        assert "closed the connection" in lost.content[0]["text"]
        eventually(lambda: session_alive(first) == [], what="the dead server's session to empty")
        assert value_of(registry.execute(call("ok", {}))) == "ok"
        second = client.server_pid
        assert second is not None and second != first


def three_slow_calls(
    client: MCPClient, registry: ToolRegistry, prefix: str
) -> tuple[list[threading.Thread], list[ToolExecutionResult], int]:
    """``(workers, outcomes, server pid)``: three ``slow`` calls (tags
    ``prefix0`` ... ``prefix2``) started on threads, returned once the
    server runs all three bodies; each thread appends its result."""
    outcomes: list[ToolExecutionResult] = []
    workers = [
        threading.Thread(target=lambda i=i: outcomes.append(registry.execute(call("slow", {"tag": f"{prefix}{i}"}))))
        for i in range(3)
    ]
    for worker in workers:
        worker.start()
    pid = client.server_pid
    assert pid is not None
    eventually(lambda: len(sleep_children(pid)) == 3, what="three remote bodies")
    return workers, outcomes, pid


def assert_joined(workers: list[threading.Thread]) -> None:
    for worker in workers:
        worker.join(10)
        assert not worker.is_alive()


@pytest.mark.timeout(60)
def test_a_killed_server_loses_every_call_in_flight_and_restart_false_refuses(tmp_path: Path) -> None:
    client, _, _ = own_client(tmp_path, cancel_grace=GRACE, restart=False)
    with client, ToolRegistry() as registry:
        client.register_tools(registry)
        workers, outcomes, pid = three_slow_calls(client, registry, "k")
        os.killpg(pid, signal.SIGKILL)
        assert_joined(workers)
        assert [r.code for r in outcomes] == [WORKER_LOST] * 3
        refused = registry.execute(call("echo", {"text": "again"}))
        assert refused.code == TOOL_ABORTED_BEFORE_DISPATCH
        assert refused.meta is not None and "restart=False" in str(refused.meta["reason"])
        assert client.server_pid is None
        with pytest.raises(ConnectionError, match="restart=False"):
            client.list_tools()


@pytest.mark.timeout(60)
def test_close_with_calls_in_flight_cancels_them_and_leaves_nothing_running(tmp_path: Path) -> None:
    threads_before = threads_but_abort_runners()
    client, log, records = own_client(tmp_path, cancel_grace=GRACE)
    registry = ToolRegistry()
    client.register_tools(registry)
    workers, outcomes, pid = three_slow_calls(client, registry, "c")
    server_tree = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    client.close()
    assert_joined(workers)
    assert [r.code for r in outcomes] == [WORKER_LOST] * 3
    assert all(r.meta is not None and r.meta["remote"] == f"cancelled, no answer in {GRACE:.1f} s" for r in outcomes)
    assert len(cancels(log)) == 3
    # Every server-side body saw its cancel (before the group was stopped).
    assert all((records / f"c{i}.abort").exists() for i in range(3))
    assert session_alive(pid) == []
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in server_tree)
    assert client_threads() == []
    assert threads_but_abort_runners() <= threads_before
    # Closed: idempotent, and calls are refused before dispatch.
    client.close()
    assert registry.execute(call("echo", {"text": "late"})).code == TOOL_ABORTED_BEFORE_DISPATCH
    with pytest.raises(RuntimeError, match="closed"):
        client.list_tools()
    registry.close()


@pytest.mark.timeout(60)
def test_a_client_left_to_its_context_manager_stops_its_server(tmp_path: Path) -> None:
    with MCPClient.stdio(scripted_server(tmp_path / "log.jsonl")) as client:
        pid = client.server_pid
        assert pid is not None
        assert client_threads() != []
    assert session_alive(pid) == []
    assert client_threads() == []
    controller = AbortController()
    assert not controller.signal.aborted


@pytest.mark.timeout(60)
def test_a_forked_child_finds_the_client_closed_and_leaves_the_parents_server_alone(tmp_path: Path) -> None:
    with MCPClient.stdio(scripted_server(tmp_path / "log.jsonl")) as client, ToolRegistry() as registry:
        client.register_tools(registry)
        pid = client.server_pid
        child = os.fork()
        if child == 0:  # pragma: no cover - runs in the child
            code = 0
            try:
                if registry.execute(call("ok", {})).code != TOOL_ABORTED_BEFORE_DISPATCH:
                    code = 1
                try:
                    client.list_tools()
                    code = 2
                except RuntimeError:
                    pass
                client.close()
            except BaseException:
                code = 3
            os._exit(code)
        _, status = os.waitpid(child, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert client.server_pid == pid
        assert value_of(registry.execute(call("ok", {}))) == "ok"
