"""Every wait of ``MCPClient`` has a bound (docs/mcp.md#bounds,
docs/contract.md#a23): a restart whose server never finishes its handshake
holds neither the call nor ``close()``; a live server's JSON-RPC error is
its answer, not its death (docs/contract.md#a26)."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import psutil
import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed (pip install 'dshtools[mcp]')")

from dshtools import (
    TOOL_ABORTED_BEFORE_DISPATCH,
    WORKER_LOST,
    AbortController,
    RetryPolicy,
    ToolFailure,
    ToolRegistry,
)
from dshtools.mcp import REMOTE_PROTOCOL_ERROR, MCPClient
from tests.mcp.client_support import (
    GRACE,
    call,
    call_ids,
    client_threads,
    eventually,
    received,
    scripted_server,
    session_alive,
)


@pytest.mark.timeout(60)
def test_close_during_a_restart_that_never_answers_initialize_returns_within_its_bounds(tmp_path: Path) -> None:
    """B65: the server dies mid-call, its next start reads ``initialize``
    and never answers; the call that started it is aborted at 0.3 s (a
    deadline on a timer) and then ``close()`` must not wait for the
    handshake."""
    log = tmp_path / "log.jsonl"
    hold = tmp_path / "hold"  # no hold.go ever: the restart never answers
    client = MCPClient.stdio(scripted_server(log), env={"SCRIPTED_HOLD": str(hold)}, cancel_grace=GRACE)
    registry = ToolRegistry()
    try:
        client.register_tools(registry)
        first = client.server_pid
        assert first is not None
        assert registry.execute(call("die", {})).code == WORKER_LOST

        controller = AbortController()
        deadline = threading.Timer(0.3, controller.abort, args=("the caller gave up",))
        started = time.monotonic()
        deadline.start()
        withdrawn = registry.execute(call("ok", {}, controller))
        waited = time.monotonic() - started
        deadline.join()
        assert withdrawn.code == TOOL_ABORTED_BEFORE_DISPATCH
        assert waited < 1.0, f"the aborted call returned after {waited:.2f} s"
        restarted = client.server_pid
        assert restarted is not None and restarted != first
        eventually(lambda: [m.get("method") for m in received(log)].count("initialize") == 2, what="the restart")

        closing = time.monotonic()
        client.close()
        took = time.monotonic() - closing
    finally:
        client.close()
        registry.close()
    assert took < GRACE + 2.0, f"close() took {took:.2f} s"
    assert session_alive(first) == [] and session_alive(restarted) == []
    assert not psutil.pid_exists(restarted) or psutil.Process(restarted).status() == psutil.STATUS_ZOMBIE
    assert client_threads() == []
    assert call_ids(log, "ok") == []


@pytest.mark.timeout(60)
def test_a_live_servers_error_is_a_protocol_error_that_is_not_retried_and_the_server_stays(tmp_path: Path) -> None:
    """N16: a server answering ``tools/call`` with ``-32000 "backend
    busy"`` and staying up."""
    log = tmp_path / "log.jsonl"
    with MCPClient.stdio(scripted_server(log), cancel_grace=GRACE) as client, ToolRegistry() as registry:
        registry.add_around_dispatch(RetryPolicy(attempts=3, backoff=0.0))
        # idempotent: a WORKER_LOST here would be re-sent by default
        client.register_tools(registry, idempotent=True)
        pid = client.server_pid
        busy = registry.execute(call("busy", {}))
        assert isinstance(busy, ToolFailure)
        assert busy.code == REMOTE_PROTOCOL_ERROR
        assert "-32000" in busy.content[0]["text"] and "backend busy" in busy.content[0]["text"]
        assert busy.meta["attempts"] == 1
        assert len(call_ids(log, "busy")) == 1
        again = registry.execute(call("busy", {}))
        assert again.code == REMOTE_PROTOCOL_ERROR
        assert len(call_ids(log, "busy")) == 2
        assert client.server_pid == pid


@pytest.mark.timeout(60)
def test_a_server_that_never_answers_initialize_fails_the_start_within_its_bounds() -> None:
    """``connect_timeout`` bounds the handshake; a server that ignores
    SIGTERM is killed ``kill_grace`` later, and nothing is left."""
    silent = "import signal, sys; signal.signal(signal.SIGTERM, signal.SIG_IGN); sys.stdin.readline(); signal.pause()"
    started = time.monotonic()
    with pytest.raises(ConnectionError, match=r"no answer to initialize in 0\.5 s"):
        MCPClient.stdio([sys.executable, "-c", silent], connect_timeout=0.5, kill_grace=0.5)
    took = time.monotonic() - started
    assert took < 0.5 + 0.5 + 2.0, f"the start failed after {took:.2f} s"
    assert [p.pid for p in psutil.Process().children(recursive=True) if "signal.pause" in _command_line(p)] == []
    assert client_threads() == []


def _command_line(process: psutil.Process) -> str:
    """``process``'s command line; empty for one that already ended (a
    zombie not yet reaped has none to read)."""
    try:
        return " ".join(process.cmdline())
    except psutil.Error:
        return ""


@pytest.mark.parametrize(
    ("option", "value", "error"),
    [
        ("connect_timeout", "30", TypeError),
        ("kill_grace", True, TypeError),
        ("cancel_grace", -1.0, ValueError),
        ("kill_grace", float("nan"), ValueError),
        ("connect_timeout", 0, ValueError),
    ],
)
def test_a_bound_that_is_not_a_finite_number_of_seconds_is_refused(option: str, value: object, error: type) -> None:
    with pytest.raises(error, match=option):
        MCPClient.stdio(["true"], **{option: value})  # type: ignore[arg-type]  # the wrong types are the test
    assert client_threads() == []


@pytest.mark.timeout(60)
def test_a_listing_the_server_never_answers_ends_at_connect_timeout(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    with MCPClient.stdio(scripted_server(log), env={"SCRIPTED_UNLISTED": "1"}, connect_timeout=0.5) as client:
        started = time.monotonic()
        with pytest.raises(TimeoutError, match=r"did not list its tools in 0\.5 s"):
            client.list_tools()
        took = time.monotonic() - started
        assert took < 0.5 + 2.0, f"the listing failed after {took:.2f} s"
        assert client.server_pid is not None  # the server stays: it is only slow to list


@contextmanager
def http_server_that_never_ends_a_session() -> Iterator[str]:
    """A streamable-HTTP endpoint that answers ``initialize`` (session
    ``s1``), takes notifications, has no GET stream, and holds every
    ``DELETE`` (the request that ends a session) until the block is left."""
    release = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            message = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if message.get("method") != "initialize":
                self.send_response(202)
                self.end_headers()
                return
            result = {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "never-ends", "version": "0"},
            }
            body = json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Mcp-Session-Id", "s1")
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            self.send_response(405)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_DELETE(self) -> None:
            release.wait(30)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    serving = threading.Thread(target=server.serve_forever)
    serving.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/mcp"
    finally:
        release.set()
        server.shutdown()
        serving.join()
        server.server_close()


@pytest.mark.timeout(60)
def test_closing_an_http_client_whose_server_never_ends_the_session_returns_after_kill_grace() -> None:
    with http_server_that_never_ends_a_session() as url:
        client = MCPClient.http(url, kill_grace=0.5)
        started = time.monotonic()
        client.close()
        took = time.monotonic() - started
    assert took < 0.5 + 1.5, f"close() took {took:.2f} s"
    assert client_threads() == []
