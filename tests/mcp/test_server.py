"""``python -m dshtools mcp`` against the official MCP SDK's client
(docs/contract.md#more-interop).

Each test starts the server as a subprocess serving ``tests/mcp/mcp_tools.py``
and talks to it through ``mcp.ClientSession`` over the process's pipes. The
transport here is a thin line pump (the SDK's ``stdio_client`` hides the
process, and these tests need its pid, its exit status and its stdin),
``benchmarks/_mcp_session.py``, shared with the MCP benchmark; it records
every message in both directions and fails on any stdout line that is not
JSON-RPC, so stray output would break the test.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed (pip install 'dshtools[mcp]')")

import anyio
import anyio.abc
import mcp_types as types
import psutil
from mcp.client.session import ClientSession

from benchmarks._mcp_session import line_session
from dshtools import AbortController

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parents[1]


class Server:
    """One server process and the client session talking to it."""

    def __init__(self, process: anyio.abc.Process, session: ClientSession, out: Path, stderr: Path) -> None:
        self.process = process
        self.session = session
        self.out = out
        self.stderr = stderr
        self.sent: list[types.JSONRPCMessage] = []
        self.received: list[types.JSONRPCMessage] = []

    def record(self, tag: str, kind: str) -> dict[str, Any] | None:
        path = self.out / f"{tag}.{kind}"
        return json.loads(path.read_text()) if path.exists() else None

    async def sleep_child(self) -> psutil.Process:
        """The ``sleep 60`` a ``slow`` body started (polled for: it runs in
        another process; bounded by the caller's ``fail_after``)."""
        while not (children := _sleeps(self.process.pid)):
            await anyio.sleep(0.01)
        return children[0]

    async def call_into(self, results: list[object], name: str, arguments: dict[str, Any]) -> None:
        """Call ``name`` and append its result to ``results``: the task of a
        call the test cancels or waits for."""
        results.append(await self.session.call_tool(name, arguments))

    async def slow_until_closed(self, tag: str) -> None:
        """A ``slow`` call under ``tag`` that the server's exit ends (the
        connection closes under it, with no answer to read)."""
        try:
            await self.session.call_tool("slow", {"tag": tag})
        except Exception:
            pass

    def call_id(self, name: str) -> types.RequestId:
        for message in self.sent:
            if (
                isinstance(message, types.JSONRPCRequest)
                and message.method == "tools/call"
                and (message.params or {}).get("name") == name
            ):
                return message.id
        raise AssertionError(f"no tools/call {name} was sent")

    def answers_to(self, request_id: types.RequestId) -> list[types.JSONRPCMessage]:
        return [
            m for m in self.received if isinstance(m, types.JSONRPCResponse | types.JSONRPCError) and m.id == request_id
        ]


@asynccontextmanager
async def serving(tmp_path: Path) -> AsyncIterator[Server]:
    out = tmp_path / "records"
    out.mkdir()
    stderr = tmp_path / "server.stderr"
    env = {**os.environ, "DSHTOOLS_MCP_TEST_DIR": str(out), "PYTHONPATH": os.pathsep.join([str(TESTS), str(ROOT)])}
    with stderr.open("wb") as err:
        process = await anyio.open_process(
            [sys.executable, "-m", "dshtools", "mcp", "--tools", "mcp_tools:registry", "--name", "dshtools-test"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            env=env,
        )
    sent: list[types.JSONRPCMessage] = []
    received: list[types.JSONRPCMessage] = []
    try:
        async with line_session(process, sent, received, timeout=10) as session:
            server = Server(process, session, out, stderr)
            server.sent, server.received = sent, received
            yield server
    finally:
        if process.returncode is None:
            process.kill()
        with anyio.CancelScope(shield=True):
            await process.wait()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    """A server of ``mcp_tools.py`` for one async test (run by anyio's
    pytest plugin), killed after it if still running."""
    async with serving(tmp_path) as server:
        yield server


def no_sleep_left(child: psutil.Process) -> bool:
    try:
        return bool(child.status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


@pytest.mark.anyio
@pytest.mark.timeout(20)
async def test_lists_the_tools_calls_them_and_keeps_stdout_clean(server: Server) -> None:
    with anyio.fail_after(10):
        listed = await server.session.list_tools()
        by_name = {tool.name: tool for tool in listed.tools}
        assert sorted(by_name) == ["echo", "note", "slow", "wait"]
        assert by_name["echo"].input_schema == {
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
        }
        assert by_name["slow"].description == "Run sleep 60 in a child process"

        result = await server.session.call_tool("echo", {"text": "hello over MCP"})
        assert result.is_error is False
        assert [(c.type, getattr(c, "text", None)) for c in result.content] == [("text", "hello over MCP")]

        bad = await server.session.call_tool("echo", {"text": 7})
        assert bad.is_error is True
        assert "invalid arguments" in getattr(bad.content[0], "text", "")

        # An unknown tool is an isError result the model can read, not a
        # JSON-RPC error.
        unknown = await server.session.call_tool("no_such_tool", {})
        assert unknown.is_error is True
        assert getattr(unknown.content[0], "text", "") == 'Error: unknown tool "no_such_tool"'
        (answer,) = server.answers_to(server.call_id("no_such_tool"))
        assert isinstance(answer, types.JSONRPCResponse)
    # The body's print and its child's output went to stderr, not into the
    # protocol (pump_out would have failed on a non-JSON line).
    assert server.process.stdin is not None
    await server.process.stdin.aclose()
    with anyio.fail_after(10):
        assert await server.process.wait() == 0
    noise = server.stderr.read_text()
    assert "stray print from a tool body" in noise
    assert "stray output from a child process" in noise


@pytest.mark.anyio
@pytest.mark.timeout(20)
async def test_cancelling_a_call_aborts_its_body_at_once_and_sends_no_response(server: Server) -> None:
    outcome: list[object] = []
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.call_into, outcome, "slow", {"tag": "cancelled"})
            child = await server.sleep_child()
            # The SDK client sends notifications/cancelled when the
            # caller's scope abandons the request.
            cancelled_at = time.time()
            tg.cancel_scope.cancel()
        while server.record("cancelled", "ended") is None:
            await anyio.sleep(0.01)
        # The connection still serves (and this round trip lets any
        # stray answer to the cancelled request arrive first).
        after = await server.session.call_tool("echo", {"text": "still serving"})
    assert after.is_error is False
    assert outcome == []
    sent = [m for m in server.sent if isinstance(m, types.JSONRPCNotification)]
    assert [m.method for m in sent if m.method == "notifications/cancelled"] == ["notifications/cancelled"]
    abort = server.record("cancelled", "abort")
    assert abort is not None
    assert abort["t"] - cancelled_at < 0.1, f"the body saw its signal {abort['t'] - cancelled_at:.3f}s late"
    assert "notifications/cancelled" in abort["reason"]
    assert no_sleep_left(child)
    assert server.answers_to(server.call_id("slow")) == []


@pytest.mark.anyio
@pytest.mark.timeout(20)
async def test_end_of_input_aborts_the_call_in_flight_and_exits_after_joining_it(server: Server) -> None:
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.slow_until_closed, "eof")
            child = await server.sleep_child()
            assert server.process.stdin is not None
            await server.process.stdin.aclose()
            status = await server.process.wait()
            tg.cancel_scope.cancel()
    assert status == 0
    # Joined before exit: the body returned (it records that itself) and
    # the process it started is gone.
    ended, abort = server.record("eof", "ended"), server.record("eof", "abort")
    assert ended is not None and abort is not None
    assert "end of input" in abort["reason"]
    assert no_sleep_left(child)


@pytest.mark.anyio
@pytest.mark.timeout(20)
@pytest.mark.parametrize(("signum", "status"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
async def test_a_stop_signal_aborts_every_call_joins_and_exits_128_plus_signum(
    server: Server, signum: signal.Signals, status: int
) -> None:
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.slow_until_closed, "term-1")
            first = await server.sleep_child()
            tg.start_soon(server.slow_until_closed, "term-2")
            while len(children := _sleeps(server.process.pid)) < 2:
                await anyio.sleep(0.01)
            server.process.send_signal(signum)
            exit_status = await server.process.wait()
            tg.cancel_scope.cancel()
    assert exit_status == 128 + signum == status
    for tag in ("term-1", "term-2"):
        abort = server.record(tag, "abort")
        assert abort is not None and signum.name in abort["reason"]
        assert server.record(tag, "ended") is not None
    assert no_sleep_left(first)
    assert all(no_sleep_left(child) for child in children)


@pytest.mark.anyio
@pytest.mark.timeout(20)
async def test_an_exclusive_call_waits_for_the_call_in_flight(server: Server) -> None:
    noted: list[object] = []
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg, anyio.create_task_group() as slow_group:
            slow_group.start_soon(server.call_into, [], "slow", {"tag": "first"})
            await server.sleep_child()
            tg.start_soon(server.call_into, noted, "note", {"tag": "second"})
            # The server reads requests in order: once this ping is
            # answered, the note call was received and is queued.
            await server.session.send_ping()
            assert server.record("second", "start") is None
            slow_group.cancel_scope.cancel()
    ended, started = server.record("first", "ended"), server.record("second", "start")
    assert ended is not None and started is not None
    assert started["t"] >= ended["t"]
    assert len(noted) == 1


def _sleeps(pid: int) -> list[psutil.Process]:
    found = []
    for child in psutil.Process(pid).children(recursive=True):
        try:
            if child.cmdline() == ["sleep", "60"]:
                found.append(child)
        except psutil.NoSuchProcess:
            pass
    return found


@pytest.mark.timeout(20)
def test_a_bad_tools_spec_is_a_usage_error_with_nothing_on_stdout() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "dshtools", "mcp", "--tools", "no_such_module_here:registry"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=15,
    )
    assert proc.returncode == 2
    assert proc.stdout == b""
    assert b"no_such_module_here" in proc.stderr


@pytest.mark.timeout(20)
def test_the_traceback_the_usage_error_offers_is_there() -> None:
    # The error says "--traceback shows where"; mcp accepts it as replay does.
    command = [sys.executable, "-m", "dshtools", "mcp", "--tools", "no_such_module_here:registry"]
    plain = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, timeout=15)
    assert b"--traceback shows where" in plain.stderr
    proc = subprocess.run([*command, "--traceback"], stdin=subprocess.DEVNULL, capture_output=True, timeout=15)
    assert proc.returncode == 2
    assert proc.stdout == b""
    assert b"Traceback (most recent call last)" in proc.stderr
    assert b"ModuleNotFoundError: No module named 'no_such_module_here'" in proc.stderr


# --------------------------------------------------------------- scheduling


@pytest.mark.timeout(10)
def test_exclusive_calls_never_overlap_and_admission_is_first_come() -> None:
    from dshtools._mcp.admission import Gate

    gate = Gate()
    signal_ = AbortController().signal
    a, b = gate.enqueue(False), gate.enqueue(False)
    x = gate.enqueue(True)
    c = gate.enqueue(False)
    # Two parallel calls overlap; the exclusive one waits for both, and the
    # parallel one behind it waits for the exclusive one.
    assert (a.admitted, b.admitted, x.admitted, c.admitted) == (True, True, False, False)
    admitted = threading.Event()

    def wait_x() -> None:
        assert gate.wait(x, signal_)
        admitted.set()

    waiter = threading.Thread(target=wait_x)
    waiter.start()
    gate.leave(a)
    assert not admitted.wait(0.05)
    gate.leave(b)
    assert admitted.wait(5)
    assert not c.admitted
    gate.leave(x)
    assert c.admitted
    waiter.join()
    gate.leave(c)


@pytest.mark.timeout(10)
def test_a_call_cancelled_while_queued_is_withdrawn_and_unblocks_the_queue() -> None:
    from dshtools._mcp.admission import Gate

    gate = Gate()
    running = gate.enqueue(True)
    controller = AbortController()
    queued = gate.enqueue(True)
    behind = gate.enqueue(False)
    result: list[bool] = []
    waiter = threading.Thread(target=lambda: result.append(gate.wait(queued, controller.signal)))
    waiter.start()
    controller.abort("cancelled while queued")
    waiter.join(5)
    assert result == [False]
    assert not behind.admitted  # the running exclusive call still holds the gate
    gate.leave(running)
    assert behind.admitted
    gate.leave(behind)


@pytest.mark.timeout(10)
def test_a_dropped_ticket_frees_its_place_admitted_or_not() -> None:
    from dshtools._mcp.admission import Gate

    gate = Gate()
    first = gate.enqueue(True)
    second = gate.enqueue(True)
    third = gate.enqueue(False)
    gate.drop(second)  # queued: withdrawn
    assert not third.admitted
    gate.drop(first)  # admitted: left
    assert third.admitted
    gate.leave(third)
    assert gate.enqueue(True).admitted
