"""Raw JSON-RPC over ``python -m dshtools mcp``'s stdio: every request with
an id gets exactly one response or, when cancelled, none
(docs/contract.md §13 A19; field cases N12, B52, B54).

Each test writes lines to the server's stdin byte for byte (no SDK client,
which would refuse to send most of them), and reads every line of its
stdout. "No response" is checked at the end of the transcript: closing
stdin makes the server abort and join every call and exit, after which
nothing more can come, so the full list of answers per id is known.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed (pip install 'dshtools[mcp]')")

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parents[1]
WAIT = 10.0  # seconds any one expected line may take on a loaded machine


class RawServer:
    """A server process, its stdout read as JSON lines and its stderr as
    text lines, each into a list a test waits on (one condition for both)."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self.process = process
        self.messages: list[dict[str, Any]] = []
        self.noise: list[str] = []
        self._cond = threading.Condition()
        self._readers = [
            threading.Thread(target=self._pump, args=(process.stdout, True), daemon=True),
            threading.Thread(target=self._pump, args=(process.stderr, False), daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    def _pump(self, stream: Any, protocol: bool) -> None:
        for raw in stream:
            with self._cond:
                if protocol:
                    # Anything but one JSON object per line fails the test.
                    self.messages.append(json.loads(raw))
                else:
                    self.noise.append(raw.decode("utf-8", "replace").rstrip("\n"))
                self._cond.notify_all()

    def send(self, line: bytes | dict[str, Any]) -> None:
        data = line if isinstance(line, bytes) else json.dumps(line).encode()
        assert self.process.stdin is not None
        self.process.stdin.write(data + b"\n")
        self.process.stdin.flush()

    def request(self, request_id: object, method: str, params: object = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)

    def call(self, request_id: object, name: str, arguments: object) -> None:
        self.request(request_id, "tools/call", {"name": name, "arguments": arguments})

    def cancel(self, request_id: object) -> None:
        self.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": request_id}})

    def until(self, found: Callable[[], bool], what: str) -> None:
        with self._cond:
            assert self._cond.wait_for(found, WAIT), f"{what}: not within {WAIT}s"

    def answers(self, request_id: object) -> list[dict[str, Any]]:
        """The responses sent under ``request_id``, matched by type and value
        (``1`` is not ``"1"``)."""
        with self._cond:
            return [
                m
                for m in self.messages
                if "id" in m and type(m["id"]) is type(request_id) and m["id"] == request_id and "method" not in m
            ]

    def answer(self, request_id: object) -> dict[str, Any]:
        self.until(lambda: bool(self.answers(request_id)), f"an answer to {request_id!r}")
        (only,) = self.answers(request_id)
        return only

    def said(self, text: str) -> None:
        self.until(lambda: text in self.noise, f"{text!r} on stderr")

    def finish(self) -> int:
        """Close stdin, wait for the exit and for both pipes to end."""
        assert self.process.stdin is not None
        self.process.stdin.close()
        status = self.process.wait(WAIT)
        for reader in self._readers:
            reader.join(WAIT)
        return status


@contextmanager
def raw_server(tmp_path: Path, tools: str = "mcp_tools:registry") -> Iterator[RawServer]:
    """The server of ``tools`` (a ``MODULE:registry`` found in ``tests/mcp``
    or in ``tmp_path``), initialized; killed on the way out if still running."""
    path = os.pathsep.join([str(tmp_path), str(TESTS), str(ROOT)])
    env = {**os.environ, "DSHTOOLS_MCP_TEST_DIR": str(tmp_path), "PYTHONPATH": path}
    process = subprocess.Popen(
        [sys.executable, "-m", "dshtools", "mcp", "--tools", tools],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    server = RawServer(process)
    try:
        server.request(
            0,
            "initialize",
            {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}},
        )
        server.answer(0)
        server.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        yield server
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        for stream in (process.stdin, process.stdout, process.stderr):
            if stream is not None:
                stream.close()


def error_code(answer: dict[str, Any]) -> int:
    assert "error" in answer, answer
    code: int = answer["error"]["code"]
    return code


# ------------------------------------------------------ one answer per line


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("line", "code"),
    [
        pytest.param(b"not json", -32700, id="not-json"),
        pytest.param(b'{"jsonrpc": "2.0", "id": 7, "method": "ping"', -32700, id="truncated"),
        pytest.param(b"\xff\xfe{}", -32700, id="not-utf8"),
        pytest.param(b"[]", -32600, id="empty-batch"),
        pytest.param(b"42", -32600, id="a-number"),
        pytest.param(b'"ping"', -32600, id="a-string"),
        pytest.param(b'{"jsonrpc": "2.0", "id": 4.5, "method": "ping"}', -32600, id="fractional-id"),
        pytest.param(b'{"jsonrpc": "2.0", "id": true, "method": "ping"}', -32600, id="boolean-id"),
        pytest.param(b'{"jsonrpc": "2.0", "id": null, "method": "ping"}', -32600, id="null-id"),
        pytest.param(b'{"jsonrpc": "2.0", "id": [1], "method": "ping"}', -32600, id="array-id"),
    ],
)
def test_a_line_whose_id_cannot_be_read_is_answered_once_with_id_null(tmp_path: Path, line: bytes, code: int) -> None:
    """N12, A19: malformed JSON → -32700; JSON that is not a request with a
    usable id → -32600; both under id null (JSON-RPC 2.0 §5), before the
    next line is served."""
    with raw_server(tmp_path) as server:
        server.send(line)
        server.request("after", "ping")
        server.answer("after")
        nulls = server.answers(None)
        assert [error_code(m) for m in nulls] == [code]
        assert server.finish() == 0
        assert len(server.answers(None)) == 1


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("message", "code"),
    [
        pytest.param({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": "echo"}, -32600, id="params-string"),
        pytest.param(
            {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": ["echo", {}]}, -32602, id="params-array"
        ),
        pytest.param({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": 3}, -32600, id="params-number"),
        pytest.param({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": True}, -32600, id="params-boolean"),
        pytest.param(
            {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "echo", "arguments": "x"}},
            -32602,
            id="arguments-string",
        ),
        pytest.param(
            {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"arguments": {}}}, -32602, id="no-name"
        ),
        pytest.param({"jsonrpc": "2.0", "id": 2, "method": 7}, -32600, id="method-number"),
        pytest.param({"jsonrpc": "1.0", "id": 2, "method": "ping"}, -32600, id="jsonrpc-1.0"),
        pytest.param({"id": 2, "method": "ping"}, -32600, id="no-jsonrpc"),
        pytest.param({"jsonrpc": "2.0", "id": 2, "method": "no/such/method"}, -32601, id="unknown-method"),
    ],
)
def test_a_request_with_a_bad_envelope_is_answered_once_under_its_id(
    tmp_path: Path, message: dict[str, Any], code: int
) -> None:
    """N12, A19: a wrong ``params`` type (a string, a list) → -32600/-32602
    under the request's own id; the client is never left waiting."""
    with raw_server(tmp_path) as server:
        server.send(message)
        assert error_code(server.answer(2)) == code
        server.request("after", "ping")
        server.answer("after")
        assert server.finish() == 0
        assert len(server.answers(2)) == 1
        assert server.answers(None) == []


@pytest.mark.timeout(30)
def test_a_batch_is_refused_once_for_each_request_in_it(tmp_path: Path) -> None:
    with raw_server(tmp_path) as server:
        batch = [
            {"jsonrpc": "2.0", "id": "b1", "method": "ping"},
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "id": "b2", "method": "tools/list"},
        ]
        server.send(json.dumps(batch).encode())
        assert error_code(server.answer("b1")) == error_code(server.answer("b2")) == -32600
        assert server.finish() == 0
        assert len(server.answers("b1")) == len(server.answers("b2")) == 1
        assert server.answers(None) == []


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "arguments",
    [
        pytest.param(b'{"text": "\\ud800"}', id="lone-high-in-a-value"),
        pytest.param(b'{"text": "ok \\udfff end"}', id="lone-low-in-a-value"),
        pytest.param(b'{"te\\ud800xt": "a"}', id="lone-in-a-key"),
    ],
)
def test_lone_surrogates_in_arguments_are_an_invalid_args_result(tmp_path: Path, arguments: bytes) -> None:
    """N12, A19: arguments holding a lone surrogate escape get an
    ``isError`` result with the INVALID_ARGS text (as A11), and the body
    never runs."""
    with raw_server(tmp_path) as server:
        line = (
            b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "echo", "arguments": '
            + arguments
            + b"}}"
        )
        server.send(line)
        answer = server.answer(1)
        assert answer["result"]["isError"] is True
        (block,) = answer["result"]["content"]
        assert block["text"].startswith("Error: invalid arguments: arguments are not valid text:")
        assert "lone surrogate" in block["text"]
        assert server.finish() == 0
        assert len(server.answers(1)) == 1
        assert "stray print from a tool body" not in server.noise


@pytest.mark.timeout(30)
def test_a_string_id_with_a_lone_surrogate_comes_back_exactly(tmp_path: Path) -> None:
    with raw_server(tmp_path) as server:
        server.send(b'{"jsonrpc": "2.0", "id": "r\\ud800", "method": "ping"}')
        assert server.answer("r\ud800")["result"] == {}
        assert server.finish() == 0


@pytest.mark.timeout(30)
@pytest.mark.parametrize("depth", [300, 5000])
def test_deeply_nested_arguments_are_answered_once(tmp_path: Path, depth: int) -> None:
    """The SDK's own parser stops at 200 levels and answered nothing; a
    value within A11's 1 000 levels reaches the registry (INVALID_ARGS from
    the schema), a deeper one is refused -32602 under its id."""
    with raw_server(tmp_path) as server:
        nested = b"[" * depth + b"]" * depth
        server.send(
            b'{"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": '
            + nested
            + b"}}}"
        )
        answer = server.answer(3)
        if depth <= 1000:
            assert answer["result"]["isError"] is True
            assert answer["result"]["content"][0]["text"].startswith("Error: invalid arguments")
        else:
            assert error_code(answer) == -32602
        assert server.finish() == 0
        assert len(server.answers(3)) == 1


# ------------------------------------------------------------- exact ids


@pytest.mark.timeout(30)
def test_a_cancel_names_its_request_by_type_and_value(tmp_path: Path) -> None:
    """B52, B54, A19: ``10`` and ``"1_0"``, ``1`` and ``"1"`` are four
    requests (the SDK alone folds them with ``int()``). Each cancel aborts
    the one request it names and none other; a cancelled request gets no
    response, every other one exactly one."""
    with raw_server(tmp_path) as server:
        ids: list[object] = [10, "1_0", 1, "1"]
        for request_id in ids:
            server.call(request_id, "wait", {"tag": repr(request_id)})
        for request_id in ids:
            server.said(f"started {request_id!r}")

        server.cancel("10")  # names no request in flight: a string, not 10
        server.cancel(10)
        server.said("aborted 10: the MCP client cancelled the request (notifications/cancelled)")
        server.cancel("1")
        server.said("aborted '1': the MCP client cancelled the request (notifications/cancelled)")
        # The reader serves lines in order: once this ping is answered, both
        # cancels were read; only their two requests were aborted.
        server.request("sync", "ping")
        server.answer("sync")
        aborted = [line for line in server.noise if line.startswith("aborted")]
        assert sorted(aborted) == [
            "aborted '1': the MCP client cancelled the request (notifications/cancelled)",
            "aborted 10: the MCP client cancelled the request (notifications/cancelled)",
        ]

        assert server.finish() == 0
        assert server.answers(10) == [] and server.answers("1") == []
        # End of input stopped the other two; each was answered exactly once.
        assert len(server.answers("1_0")) == 1 and len(server.answers(1)) == 1
        assert server.answers("10") == []


@pytest.mark.timeout(30)
def test_an_id_still_in_flight_is_refused_and_the_first_request_keeps_it(tmp_path: Path) -> None:
    with raw_server(tmp_path) as server:
        server.call(5, "wait", {"tag": "first"})
        server.said("started first")
        server.call(5, "echo", {"text": "second"})
        assert error_code(server.answer(5)) == -32600
        # The cancel for 5 still reaches the first request.
        server.cancel(5)
        server.said("aborted first: the MCP client cancelled the request (notifications/cancelled)")
        # Once answered (or cancelled) an id may be used again.
        server.call(5, "echo", {"text": "third"})
        server.until(lambda: len(server.answers(5)) == 2, "the answer to the third request")
        assert server.answers(5)[1]["result"]["content"][0]["text"] == "third"
        assert server.finish() == 0
        assert len(server.answers(5)) == 2


@pytest.mark.timeout(30)
def test_the_call_id_the_registry_sees_is_the_client_request_id(tmp_path: Path) -> None:
    with raw_server(tmp_path) as server:
        server.call("abc", "wait", {"tag": "named"})
        server.said("started named")
        server.cancel("abc")
        server.said("aborted named: the MCP client cancelled the request (notifications/cancelled)")
        assert server.finish() == 0
    assert (tmp_path / "named.call_id").read_text() == "mcp:abc"
