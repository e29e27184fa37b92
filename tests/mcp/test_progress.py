"""MCP progress (docs/mcp.md#progress, contract §14 and §16): dshtools'
server sends ``notifications/progress`` for a call whose request carries
``_meta.progressToken`` (that token, ``progress``, ``total``, ``message``;
coalesced, the last update before the response, nothing for a request that
did not ask), and ``MCPClient`` reports a server's progress as the call's
own progress, which the registry's progress observers see.

The server side is read as raw JSON-RPC lines (``test_wire.RawServer``);
the client side runs against the same server through the SDK.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed (pip install 'dshtools[mcp]')")

from dshtools import ProgressUpdate, ToolExecution, ToolRegistry
from dshtools.mcp import MCPClient
from tests.mcp.client_support import call, env_for, value_of
from tests.mcp.test_wire import RawServer, raw_server

pytestmark = pytest.mark.timeout(60)

TOOLS = "progress_tools:registry"


def progress_of(server: RawServer, token: object) -> list[dict[str, Any]]:
    """The params of every ``notifications/progress`` sent for ``token``
    (matched by type and value), in order."""
    with server._cond:
        return [
            m["params"]
            for m in server.messages
            if m.get("method") == "notifications/progress"
            and type(m["params"]["progressToken"]) is type(token)
            and m["params"]["progressToken"] == token
        ]


def index_of_answer(server: RawServer, request_id: object) -> int:
    answer = server.answer(request_id)
    with server._cond:
        return next(i for i, m in enumerate(server.messages) if m is answer)


def last_progress_index(server: RawServer, token: object) -> int:
    with server._cond:
        return max(
            i
            for i, m in enumerate(server.messages)
            if m.get("method") == "notifications/progress" and m["params"]["progressToken"] == token
        )


def test_a_request_with_a_progress_token_gets_its_progress_in_order_and_the_last_before_the_answer(
    tmp_path: Path,
) -> None:
    n = 2000
    with raw_server(tmp_path, TOOLS) as server:
        server.request(1, "tools/call", {"name": "count", "arguments": {"n": n}, "_meta": {"progressToken": "tok-1"}})
        answered_at = index_of_answer(server, 1)
        sent = progress_of(server, "tok-1")
        assert sent, "no progress notification was sent"
        assert sent[-1] == {"progressToken": "tok-1", "progress": n - 1, "total": n, "message": f"step {n - 1}"}
        assert last_progress_index(server, "tok-1") < answered_at, "the last update came after the answer"
        steps = [p["progress"] for p in sent]
        assert steps == sorted(steps) and len(set(steps)) == len(steps)
        assert len(sent) < n  # coalesced, not one notification per report
        assert server.answer(1)["result"]["content"] == [{"type": "text", "text": f"counted {n}"}]
        assert server.finish() == 0


def test_only_requests_that_asked_get_progress_each_under_its_own_token_as_sent(tmp_path: Path) -> None:
    with raw_server(tmp_path, TOOLS) as server:
        server.call(3, "count", {"n": 50})  # no token: no progress
        server.request(4, "tools/call", {"name": "count", "arguments": {"n": 5}, "_meta": {"progressToken": "other"}})
        # An integer token comes back as an integer; unset fields are left out.
        server.request(5, "tools/call", {"name": "vague", "arguments": {"n": 3}, "_meta": {"progressToken": 7}})
        answered_at = index_of_answer(server, 5)
        server.answer(3)
        server.answer(4)
        assert server.finish() == 0
        sent = progress_of(server, 7)
        assert sent and sent[-1] == {"progressToken": 7, "progress": 2}
        assert last_progress_index(server, 7) < answered_at
        assert progress_of(server, "7") == []
        assert progress_of(server, "other")[-1] == {
            "progressToken": "other",
            "progress": 4,
            "total": 5,
            "message": "step 4",
        }
        with server._cond:
            tokens = {
                m["params"]["progressToken"] for m in server.messages if m.get("method") == "notifications/progress"
            }
        assert tokens == {"other", 7}


def test_our_client_reports_our_servers_progress_to_the_registrys_observers(tmp_path: Path) -> None:
    n = 500
    seen: list[tuple[str, ProgressUpdate]] = []
    last = threading.Event()

    def observer(execution: ToolExecution, update: ProgressUpdate) -> None:
        seen.append((execution.call_id, update))
        if update.progress == n - 1:
            last.set()

    command = [sys.executable, "-m", "dshtools", "mcp", "--tools", TOOLS]
    with MCPClient.stdio(command, env=env_for(tmp_path)) as client, ToolRegistry() as registry:
        client.register_tools(registry, prefix="remote_")
        remove = registry.add_progress_observer(observer)
        try:
            result = registry.execute(call("remote_count", {"n": n}, call_id="model-1"))
            assert value_of(result) == f"counted {n}"
            assert last.wait(10), f"the last update never reached the observer: {seen[-3:]}"
        finally:
            remove()
    assert {cid for cid, _ in seen} == {"model-1"}
    steps = [u.progress for _, u in seen]
    assert steps == sorted(steps)
    assert seen[-1][1] == ProgressUpdate(n - 1, n, f"step {n - 1}")
