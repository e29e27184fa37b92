"""What ``notifications/cancelled`` and a closed connection do to a sync MCP
tool that runs ``sleep 60`` in a child process: the official SDK's own
``MCPServer`` against ``python -m dshtools mcp``, driven by the SDK's
``ClientSession`` over the server's pipes (docs/mcp.md cites the numbers).

    python -m benchmarks.mcp_cancel [--runs N] [--eof-wait S]

Per server and run, two scenarios on a fresh server process:

* cancel: one call; once its ``sleep 60`` is running, the client abandons
  the request (the SDK client sends ``notifications/cancelled``). Measured:
  seconds until that ``sleep`` is gone (``None``: still running after
  ``--eof-wait`` seconds), and whether a response for the cancelled request
  arrived anyway.
* close: two calls; once both ``sleep`` processes run, the client closes the
  server's stdin. Measured: seconds until the server exited (``None``: still
  running after ``--eof-wait`` seconds) and how many ``sleep`` processes
  were still alive at that point.

Everything this script starts is killed before it exits. Not part of
``python -m benchmarks``: it takes about ``2 * runs * eof_wait`` seconds for
the SDK server, which never finishes on its own.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import mcp_types as types
import psutil
from mcp.client.session import ClientSession

from ._mcp_session import line_session
from ._timing import median_of_all

SDK_SERVER = '''
import subprocess
from mcp.server.mcpserver import MCPServer

server = MCPServer("sdk-baseline")


@server.tool()
def slow(tag: str) -> str:
    """Run sleep 60 in a child process."""
    subprocess.run(["sleep", "60"], check=False)
    return "slept"


server.run("stdio")
'''

DSHTOOLS_TOOLS = """
from dshtools import ToolDefinition, ToolRegistry
from dshtools.io import run_process

registry = ToolRegistry()


def slow(args, run):
    run_process(["sleep", "60"], run.signal)
    return "slept"


registry.register(ToolDefinition("slow", "Run sleep 60 in a child process",
    {"type": "object", "properties": {"tag": {"type": "string"}}}, slow, is_concurrency_safe=lambda a: True))
"""


class Connection:
    def __init__(self, process: anyio.abc.Process, session: ClientSession) -> None:
        self.process = process
        self.session = session
        self.received: list[types.JSONRPCMessage] = []
        self.sent: list[types.JSONRPCMessage] = []
        self.started: list[int] = []  # every sleep pid seen, for the final cleanup

    def sleeps(self) -> list[psutil.Process]:
        found = []
        try:
            children = psutil.Process(self.process.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []
        for child in children:
            try:
                if child.cmdline() == ["sleep", "60"]:
                    found.append(child)
                    if child.pid not in self.started:
                        self.started.append(child.pid)
            except psutil.NoSuchProcess:
                pass
        return found


def alive(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


@asynccontextmanager
async def connect(argv: list[str], cwd: str) -> AsyncIterator[Connection]:
    process = await anyio.open_process(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=cwd
    )
    box: list[Connection] = []
    sent: list[types.JSONRPCMessage] = []
    received: list[types.JSONRPCMessage] = []
    try:
        async with line_session(process, sent, received, timeout=30) as session:
            box.append(Connection(process, session))
            box[0].sent, box[0].received = sent, received
            yield box[0]
    finally:
        for pid in box[0].started if box else []:
            try:
                psutil.Process(pid).kill()
            except psutil.NoSuchProcess:
                pass
        if process.returncode is None:
            process.kill()
        with anyio.CancelScope(shield=True):
            await process.wait()


async def _call(conn: Connection, tag: str) -> None:
    try:
        await conn.session.call_tool("slow", {"tag": tag})
    except Exception:
        pass  # the connection closed under the call


async def _wait_sleeps(conn: Connection, n: int) -> list[psutil.Process]:
    with anyio.fail_after(30):
        while len(found := conn.sleeps()) < n:
            await anyio.sleep(0.005)
    return found


async def cancel_scenario(argv: list[str], cwd: str, wait: float) -> dict[str, Any]:
    async with connect(argv, cwd) as conn:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_call, conn, "cancel")
            (child,) = await _wait_sleeps(conn, 1)
            t0 = time.monotonic()
            tg.cancel_scope.cancel()
        gone: float | None = None
        while time.monotonic() - t0 < wait:
            if not alive(child.pid):
                gone = time.monotonic() - t0
                break
            await anyio.sleep(0.002)
        # A round trip after the stop lets a late answer arrive first.
        await conn.session.send_ping()
        call_ids = [m.id for m in conn.sent if isinstance(m, types.JSONRPCRequest) and m.method == "tools/call"]
        answered = any(
            isinstance(m, types.JSONRPCResponse | types.JSONRPCError) and m.id in call_ids for m in conn.received
        )
        return {"sleep_gone_s": gone, "response_sent": answered}


async def close_scenario(argv: list[str], cwd: str, wait: float) -> dict[str, Any]:
    async with connect(argv, cwd) as conn:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_call, conn, "close-1")
            tg.start_soon(_call, conn, "close-2")
            children = await _wait_sleeps(conn, 2)
            assert conn.process.stdin is not None
            t0 = time.monotonic()
            await conn.process.stdin.aclose()
            exited: float | None = None
            with anyio.move_on_after(wait):
                await conn.process.wait()
                exited = time.monotonic() - t0
            left = sum(alive(c.pid) for c in children)
            tg.cancel_scope.cancel()
        return {
            "exited_s": exited,
            "exit_status": conn.process.returncode if exited is not None else None,
            "sleeps_left": left,
        }


async def measure(runs: int, wait: float) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="dshtools-mcp-bench-") as tmp:
        Path(tmp, "sdk_server.py").write_text(SDK_SERVER)
        Path(tmp, "bench_tools.py").write_text(DSHTOOLS_TOOLS)
        servers = {
            "sdk_mcpserver": [sys.executable, "sdk_server.py"],
            "dshtools_mcp": [sys.executable, "-m", "dshtools", "mcp", "--tools", "bench_tools:registry"],
        }
        for label, argv in servers.items():
            cancels = [await cancel_scenario(argv, tmp, wait) for _ in range(runs)]
            closes = [await close_scenario(argv, tmp, wait) for _ in range(runs)]
            out[label] = {
                "cancel_runs": cancels,
                "close_runs": closes,
                "cancel_sleep_gone_median_s": median_of_all([c["sleep_gone_s"] for c in cancels]),
                "close_exit_median_s": median_of_all([c["exited_s"] for c in closes]),
                "close_sleeps_left_max": max(c["sleeps_left"] for c in closes),
            }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.mcp_cancel", description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--eof-wait", type=float, default=10.0, help="seconds to wait for a stop (default 10)")
    ns = parser.parse_args(argv)
    results = anyio.run(measure, ns.runs, ns.eof_wait)
    json.dump(results, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
