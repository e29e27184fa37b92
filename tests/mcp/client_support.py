"""Commands and checks shared by the MCP client tests
(``tests/mcp/test_client_*.py``): the servers of ``client_servers.py`` and
dshtools' own, each behind a ``tee`` that records what the server received."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil

from dshtools import AbortController, ToolExecutionInput, ToolExecutionResult, ToolSuccess
from dshtools.mcp import MCPClient

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parents[1]
SERVERS = str(TESTS / "client_servers.py")
# the ``cancel_grace`` of the clients that test what a cancel leaves: long
# enough for a server that answers at once, short enough to wait out
GRACE = 0.3


def env_for(records: Path) -> dict[str, str]:
    """What a test server needs: this checkout first on its path, and where
    ``mcp_tools`` bodies write their records."""
    return {"PYTHONPATH": os.pathsep.join([str(TESTS), str(ROOT)]), "DSHTOOLS_MCP_TEST_DIR": str(records)}


def teed(log: Path, command: list[str]) -> list[str]:
    return [sys.executable, SERVERS, "tee", str(log), "--", *command]


def own_server(log: Path) -> list[str]:
    """dshtools' own server (``mcp_tools:registry``) behind a recorder."""
    return teed(log, [sys.executable, "-m", "dshtools", "mcp", "--tools", "mcp_tools:registry"])


def own_client(tmp_path: Path, **options: Any) -> tuple[MCPClient, Path, Path]:
    """``(client, log, records)``: an ``MCPClient.stdio`` (``options`` passed
    on) of dshtools' own server behind a recorder; ``log`` holds what the
    server received, ``records`` (created) what its bodies wrote."""
    records = tmp_path / "records"
    records.mkdir()
    log = tmp_path / "log.jsonl"
    return MCPClient.stdio(own_server(log), env=env_for(records), **options), log, records


@contextmanager
def http_server_command(tools: str, env: dict[str, str], cwd: Path | None = None) -> Iterator[tuple[str, str]]:
    """``python -m dshtools mcp --http 127.0.0.1:0 --tools tools`` as a
    subprocess; yields ``(its ready line, its URL)``. On leaving the block
    the server gets ``SIGTERM``; when the block did not raise, it must have
    exited by that signal (after joining any call) within 20 seconds."""
    server = subprocess.Popen(
        [sys.executable, "-m", "dshtools", "mcp", "--http", "127.0.0.1:0", "--tools", tools],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=cwd,
    )
    try:
        assert server.stderr is not None
        ready = server.stderr.readline()
        assert "serving MCP on http://127.0.0.1:" in ready, ready
        yield ready, ready.split(" on ", 1)[1].split(" ", 1)[0]
    finally:
        server.send_signal(signal.SIGTERM)
        status = server.wait(20)
    assert status == 128 + signal.SIGTERM


def fast_server(log: Path) -> list[str]:
    return teed(log, [sys.executable, SERVERS, "fast"])


def scripted_server(log: Path) -> list[str]:
    return [sys.executable, SERVERS, "scripted", str(log)]


def received(log: Path) -> list[dict[str, Any]]:
    """The JSON-RPC messages the server received, in order."""
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def cancels(log: Path) -> list[Any]:
    """The request ids of every ``notifications/cancelled`` received."""
    return [m["params"]["requestId"] for m in received(log) if m.get("method") == "notifications/cancelled"]


def call_ids(log: Path, tool: str | None = None) -> list[Any]:
    return [
        m["id"]
        for m in received(log)
        if m.get("method") == "tools/call" and (tool is None or m["params"]["name"] == tool)
    ]


def eventually(check: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
    """Wait (bounded) for a fact another process establishes: a record file,
    a process. Not a synchronization of this process's threads."""
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        pause.wait(0.01)


def sleep_children(pid: int) -> list[psutil.Process]:
    """The live ``sleep`` processes below ``pid``."""
    try:
        below = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    out = []
    for proc in below:
        try:
            if proc.name() == "sleep" and proc.status() != psutil.STATUS_ZOMBIE:
                out.append(proc)
        except psutil.NoSuchProcess:
            pass
    return out


def session_alive(sid: int) -> list[int]:
    """Pids of live processes of session ``sid``."""
    alive = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if os.getsid(proc.pid) == sid and proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(proc.pid)
        except (psutil.NoSuchProcess, ProcessLookupError, PermissionError):
            pass
    return alive


def call(
    name: str, arguments: object, controller: AbortController | None = None, call_id: str = "c"
) -> ToolExecutionInput:
    return ToolExecutionInput(call_id, name, arguments, (controller or AbortController()).signal)


def client_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("dshtools-mcp-client")]


def value_of(result: ToolExecutionResult) -> Any:
    """The value of a success (an ``AssertionError`` naming a failure)."""
    assert isinstance(result, ToolSuccess), result
    return result.value
