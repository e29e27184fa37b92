"""Cancellation across the wire (docs/mcp.md#the-client, docs/contract.md#mcp): the
request is the dispatch; after it, exactly one ``notifications/cancelled``
for that request's id, and ``meta["remote"]`` says whether the server
answered within ``cancel_grace``."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Literal

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed (pip install 'dshtools[mcp]')")

from dshtools import (
    TOOL_ABORTED,
    TOOL_ABORTED_BEFORE_DISPATCH,
    TOOL_TIMEOUT,
    AbortController,
    ApprovalRequest,
    Ask,
    TimeoutPolicy,
    ToolExecution,
    ToolExecutionInput,
    ToolExecutionResult,
    ToolRegistry,
    ToolSuccess,
    execute_batch,
)
from dshtools.mcp import MCPClient
from tests.mcp.client_support import (
    GRACE,
    call,
    call_ids,
    cancels,
    eventually,
    own_client,
    received,
    scripted_server,
    sleep_children,
    value_of,
)


@pytest.mark.timeout(60)
def test_a_call_aborted_before_its_request_is_written_never_reaches_the_server(tmp_path: Path) -> None:
    """Pre-aborted, aborted in approval, and aborted while the server
    restarts: ``ABORTED_BEFORE_DISPATCH`` each time, and the server's record
    holds no ``tools/call`` for any of them."""
    log = tmp_path / "log.jsonl"
    hold = tmp_path / "hold"
    client = MCPClient.stdio(scripted_server(log), env={"SCRIPTED_HOLD": str(hold)}, cancel_grace=GRACE)
    approval = AbortController()

    def approver(request: ApprovalRequest) -> Literal["allowed-once"]:
        approval.abort("aborted during approval")
        return "allowed-once"

    with client, ToolRegistry(approver=approver) as registry:
        client.register_tools(registry)
        controller = AbortController()
        controller.abort("gave up first")
        before = registry.execute(call("ok", {}, controller))
        assert before.code == TOOL_ABORTED_BEFORE_DISPATCH
        assert before.meta is not None and before.meta["reason"] == "gave up first"

        remove = registry.add_pre_execute(lambda execution, next: Ask("check"))
        asked = registry.execute(call("ok", {}, approval))
        assert asked.code == TOOL_ABORTED_BEFORE_DISPATCH
        remove()
        assert call_ids(log) == []

        # The server dies; the next call waits while it starts again, and
        # is withdrawn by its abort before anything is written.
        assert registry.execute(call("die", {})).code == "WORKER_LOST"
        waiting = AbortController()
        outcome: list[ToolExecutionResult] = []
        worker = threading.Thread(target=lambda: outcome.append(registry.execute(call("ok", {}, waiting))))
        worker.start()
        eventually(lambda: sum(m.get("method") == "initialize" for m in received(log)) == 2, what="the restart")
        waiting.abort("not any more")
        worker.join(10)
        assert not worker.is_alive()
        (withdrawn,) = outcome
        assert withdrawn.code == TOOL_ABORTED_BEFORE_DISPATCH
        assert withdrawn.meta is not None and withdrawn.meta["reason"] == "not any more"
        (hold.parent / "hold.go").write_text("go")
        assert value_of(registry.execute(call("ok", {}))) == "ok"
        assert [m["params"]["name"] for m in received(log) if m.get("method") == "tools/call"] == ["die", "ok"]
        assert cancels(log) == []


@pytest.mark.timeout(60)
def test_cancelling_mid_call_aborts_the_server_side_body_with_one_cancel_for_its_id(tmp_path: Path) -> None:
    client, log, records = own_client(tmp_path, cancel_grace=GRACE)
    with client, ToolRegistry() as registry:
        client.register_tools(registry)
        assert value_of(registry.execute(call("echo", {"text": "warm"}))) == "warm"
        controller = AbortController()
        outcome: list[ToolExecutionResult] = []
        worker = threading.Thread(
            target=lambda: outcome.append(registry.execute(call("slow", {"tag": "t"}, controller)))
        )
        worker.start()
        pid = client.server_pid
        assert pid is not None
        eventually(lambda: len(sleep_children(pid)) == 1, what="the remote body's child process")
        controller.abort("the user pressed stop")
        worker.join(10)
        assert not worker.is_alive()
        (result,) = outcome
        assert result.code == TOOL_ABORTED
        assert result.meta is not None
        assert result.meta["reason"] == "the user pressed stop"
        # dshtools' server answers no cancelled request (JSON-RPC: none).
        assert result.meta["remote"] == f"cancelled, no answer in {GRACE:.1f} s"
        eventually(lambda: (records / "t.ended").exists(), what="the server-side body to return")
        seen = json.loads((records / "t.abort").read_text())
        assert "notifications/cancelled" in seen["reason"]
        assert sleep_children(pid) == []
        (slow_id,) = call_ids(log, "slow")
        assert cancels(log) == [slow_id]
        # The connection serves on.
        assert value_of(registry.execute(call("echo", {"text": "after"}))) == "after"
    assert cancels(log) == [slow_id]


@pytest.mark.timeout(60)
def test_a_server_that_ignores_the_cancel_gives_aborted_after_the_grace(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    with MCPClient.stdio(scripted_server(log), cancel_grace=GRACE) as client, ToolRegistry() as registry:
        client.register_tools(registry)
        for tool, remote in (("hang", f"cancelled, no answer in {GRACE:.1f} s"), ("stubborn", "answered")):
            controller = AbortController()
            outcome: list[ToolExecutionResult] = []
            worker = threading.Thread(target=_run_into, args=(registry, call(tool, {}, controller), outcome))
            worker.start()
            eventually(partial(_requested_once, log, tool), what=f"the {tool} request")
            controller.abort("stop")
            worker.join(10)
            assert not worker.is_alive()
            (result,) = outcome
            assert result.code == TOOL_ABORTED, result
            assert result.meta is not None and result.meta["remote"] == remote
        assert cancels(log) == call_ids(log, "hang") + call_ids(log, "stubborn")
        assert value_of(registry.execute(call("ok", {}))) == "ok"


def _requested_once(log: Path, tool: str) -> bool:
    return len(call_ids(log, tool)) == 1


def _run_into(registry: ToolRegistry, execution: ToolExecutionInput, into: list[ToolExecutionResult]) -> None:
    into.append(registry.execute(execution))


@pytest.mark.timeout(120)
def test_fifty_concurrent_calls_half_cancelled_each_get_one_result(tmp_path: Path) -> None:
    client, log, records = own_client(tmp_path, cancel_grace=GRACE)
    published: dict[str, int] = {}
    lock = threading.Lock()

    def observe(execution: ToolExecution, result: ToolExecutionResult) -> None:
        with lock:
            published[execution.call_id] = published.get(execution.call_id, 0) + 1

    with client, ToolRegistry() as registry, ThreadPoolExecutor(50) as pool:
        client.register_tools(registry)
        registry.add_result_observer(observe)
        controllers = [AbortController() for _ in range(25)]
        slow = [
            pool.submit(registry.execute, call("slow", {"tag": f"s{i}"}, controllers[i], call_id=f"slow-{i}"))
            for i in range(25)
        ]
        echo = [pool.submit(registry.execute, call("echo", {"text": f"e{i}"}, call_id=f"echo-{i}")) for i in range(25)]
        pid = client.server_pid
        assert pid is not None
        eventually(lambda: len(sleep_children(pid)) == 25, timeout=60, what="25 remote bodies running")
        for controller in controllers:
            controller.abort("half of them")
        slow_results = [f.result(30) for f in slow]
        echo_results = [f.result(30) for f in echo]
    assert [r.code for r in slow_results] == [TOOL_ABORTED] * 25
    assert all(isinstance(r, ToolSuccess) for r in echo_results)
    assert sorted(value_of(r) for r in echo_results) == sorted(f"e{i}" for i in range(25))
    assert published == {**{f"slow-{i}": 1 for i in range(25)}, **{f"echo-{i}": 1 for i in range(25)}}
    # One cancel per cancelled request, none for the others.
    assert sorted(cancels(log)) == sorted(call_ids(log, "slow"))
    assert len(set(call_ids(log, "slow"))) == 25
    assert all((records / f"s{i}.abort").exists() for i in range(25))


@pytest.mark.timeout(60)
def test_a_zero_grace_returns_without_waiting_and_still_sends_the_cancel(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    with MCPClient.stdio(scripted_server(log), cancel_grace=0) as client, ToolRegistry() as registry:
        client.register_tools(registry)
        controller = AbortController()
        outcome: list[ToolExecutionResult] = []
        worker = threading.Thread(target=_run_into, args=(registry, call("hang", {}, controller), outcome))
        worker.start()
        eventually(partial(_requested_once, log, "hang"), what="the hang request")
        controller.abort("now")
        worker.join(10)
        (result,) = outcome
        assert result.code == TOOL_ABORTED
        assert result.meta is not None and result.meta["remote"] == "cancelled, no answer in 0.0 s"
        # The cancel went out all the same (a later round trip is behind it).
        assert value_of(registry.execute(call("ok", {}))) == "ok"
        assert cancels(log) == call_ids(log, "hang")


@pytest.mark.timeout(60)
def test_a_timeout_policy_and_a_batch_apply_to_remote_calls(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    with MCPClient.stdio(scripted_server(log), cancel_grace=GRACE) as client, ToolRegistry() as registry:
        registry.add_around_dispatch(TimeoutPolicy())
        client.register_tools(registry, timeout=0.2, is_concurrency_safe=lambda args: True)
        timed_out = registry.execute(call("hang", {}))
        assert timed_out.code == TOOL_TIMEOUT
        assert timed_out.meta is not None
        assert timed_out.meta["remote"] == f"cancelled, no answer in {GRACE:.1f} s"
        assert cancels(log) == call_ids(log, "hang")

        batch = execute_batch(
            registry,
            [call("ok", {}, call_id="b1"), call("rpc_error", {}, call_id="b2"), call("ok", {}, call_id="b3")],
            signal=AbortController().signal,
        )
        assert [r.code for r in batch] == [None, "REMOTE_PROTOCOL_ERROR", None]
        assert len(call_ids(log, "ok")) == 2
