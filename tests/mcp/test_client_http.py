"""``MCPClient.http`` against an ``MCPServer`` over streamable HTTP
(docs/mcp.md#the-client): calls through the registry, and a refused token
surfaces as an error naming the HTTP status."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed (pip install 'dshtools[mcp]')")
pytest.importorskip("httpx2", reason="the SDK's HTTP transport needs httpx2")
pytest.importorskip("uvicorn", reason="the test server needs uvicorn")

from dshtools import (
    TOOL_ABORTED,
    AbortController,
    ToolExecutionResult,
    ToolRegistry,
    thaw,
)
from dshtools.mcp import MCPClient
from tests.mcp.client_support import SERVERS, call, client_threads, eventually, value_of


@contextmanager
def http_server(token: str, records: Path | None = None) -> Iterator[str]:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    port = listener.getsockname()[1]
    env = {**os.environ, "HTTP_RECORDS": str(records or ".")}
    server = subprocess.Popen(
        [sys.executable, SERVERS, "http", str(listener.fileno()), token], pass_fds=[listener.fileno()], env=env
    )
    listener.close()
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        server.terminate()
        server.wait(10)


@pytest.mark.timeout(60)
def test_calls_over_streamable_http_with_a_bearer_token() -> None:
    with http_server("s3cret") as url:
        with MCPClient.http(url, headers={"Authorization": "Bearer s3cret"}) as client, ToolRegistry() as registry:
            assert [t["name"] for t in client.list_tools()] == ["add", "slow"]
            assert client.server_pid is None
            client.register_tools(registry, prefix="http_")
            assert thaw(value_of(registry.execute(call("http_add", {"a": 20, "b": 22})))) == {"total": 42}
        assert client_threads() == []


@pytest.mark.timeout(60)
def test_a_refused_token_is_an_error_naming_the_http_status() -> None:
    with http_server("s3cret") as url:
        with pytest.raises(ConnectionError, match="HTTP 401 Unauthorized"):
            MCPClient.http(url, headers={"Authorization": "Bearer wrong"})
        with pytest.raises(ConnectionError, match="HTTP 401"):
            MCPClient.http(url)
    assert client_threads() == []
    with pytest.raises(ValueError, match="http"):
        MCPClient.http("ftp://example.invalid/mcp")


@pytest.mark.timeout(60)
def test_cancelling_over_http_stops_the_server_side_call(tmp_path: Path) -> None:
    with (
        http_server("", tmp_path) as url,
        MCPClient.http(url, cancel_grace=1.0) as client,
        ToolRegistry() as registry,
    ):
        client.register_tools(registry)
        controller = AbortController()
        outcome: list[ToolExecutionResult] = []
        worker = threading.Thread(target=lambda: outcome.append(registry.execute(call("slow", {}, controller))))
        worker.start()
        eventually(lambda: (tmp_path / "slow.started").exists(), what="the server-side call")
        controller.abort("stop")
        worker.join(10)
        (result,) = outcome
        assert result.code == TOOL_ABORTED
        assert result.meta is not None and result.meta["remote"] in ("answered", "cancelled, no answer in 1.0 s")
        eventually(lambda: (tmp_path / "slow.cancelled").exists(), what="the server to cancel the call")
        assert thaw(value_of(registry.execute(call("add", {"a": 1, "b": 2})))) == {"total": 3}
