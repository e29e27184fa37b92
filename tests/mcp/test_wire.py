"""Raw JSON-RPC over ``python -m dshtools mcp``'s stdio: every request with
an id gets exactly one response or, when cancelled, none
(docs/contract.md#a19; field cases N12, B52, B54).

The tests write lines to a server's stdin byte for byte (no SDK client,
which would refuse to send most of them), and read every line of its
stdout; the cases of one line each share one server (``transcript``).
"No response" is checked at the end of the transcript: closing stdin makes
the server abort and join every call and exit, after which nothing more
can come, so the full list of answers per id is known.
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


def _answers_to(message: dict[str, Any], request_id: object) -> bool:
    """``message`` is a response under ``request_id``, matched by type and
    value (``1`` is not ``"1"``)."""
    return (
        "id" in message
        and type(message["id"]) is type(request_id)
        and message["id"] == request_id
        and "method" not in message
    )


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
            return [m for m in self.messages if _answers_to(m, request_id)]

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
#
# Every case of this section is one line sent to one server that all of
# them share (``transcript``): the server reads the cases' lines in turn,
# each followed by a ping named after its case once the answer it expects
# has come, then end of input. Lines are served in order, so the answers
# between two pings belong to the case between them; and the tests read
# the transcript after the server exited, when nothing more can come.

NULL_ID_LINES = {
    "not-json": (b"not json", -32700),
    "truncated": (b'{"jsonrpc": "2.0", "id": 7, "method": "ping"', -32700),
    "not-utf8": (b"\xff\xfe{}", -32700),
    "empty-batch": (b"[]", -32600),
    "a-number": (b"42", -32600),
    "a-string": (b'"ping"', -32600),
    "fractional-id": (b'{"jsonrpc": "2.0", "id": 4.5, "method": "ping"}', -32600),
    "boolean-id": (b'{"jsonrpc": "2.0", "id": true, "method": "ping"}', -32600),
    "null-id": (b'{"jsonrpc": "2.0", "id": null, "method": "ping"}', -32600),
    "array-id": (b'{"jsonrpc": "2.0", "id": [1], "method": "ping"}', -32600),
}

# Each request goes out under an id of its own (``request_ids``).
BAD_ENVELOPES: dict[str, tuple[dict[str, Any], int]] = {
    "params-string": ({"jsonrpc": "2.0", "method": "tools/call", "params": "echo"}, -32600),
    "params-array": ({"jsonrpc": "2.0", "method": "tools/call", "params": ["echo", {}]}, -32602),
    "params-number": ({"jsonrpc": "2.0", "method": "tools/call", "params": 3}, -32600),
    "params-boolean": ({"jsonrpc": "2.0", "method": "tools/call", "params": True}, -32600),
    "arguments-string": (
        {"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "echo", "arguments": "x"}},
        -32602,
    ),
    "no-name": ({"jsonrpc": "2.0", "method": "tools/call", "params": {"arguments": {}}}, -32602),
    "method-number": ({"jsonrpc": "2.0", "method": 7}, -32600),
    "jsonrpc-1.0": ({"jsonrpc": "1.0", "method": "ping"}, -32600),
    "no-jsonrpc": ({"method": "ping"}, -32600),
    "unknown-method": ({"jsonrpc": "2.0", "method": "no/such/method"}, -32601),
}

SURROGATE_ARGUMENTS = {
    "lone-high-in-a-value": b'{"text": "\\ud800"}',
    "lone-low-in-a-value": b'{"text": "ok \\udfff end"}',
    "lone-in-a-key": b'{"te\\ud800xt": "a"}',
}

DEPTHS = (300, 5000)

BATCH = [
    {"jsonrpc": "2.0", "id": "b1", "method": "ping"},
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
    {"jsonrpc": "2.0", "id": "b2", "method": "tools/list"},
]


def _tool_call_line(request_id: int, arguments: bytes) -> bytes:
    head = b'{"jsonrpc": "2.0", "id": %d, "method": "tools/call", "params": {"name": "echo", "arguments": ' % request_id
    return head + arguments + b"}}"


def _cases() -> dict[str, tuple[bytes, list[object]]]:
    """case -> (the line sent, the ids whose answers come before the case's ping)."""
    cases: dict[str, tuple[bytes, list[object]]] = {}
    ids = iter(range(1, 1000))
    for name, (line, _) in NULL_ID_LINES.items():
        cases[f"null-id:{name}"] = (line, [])
    for name, (message, _) in BAD_ENVELOPES.items():
        request_id = next(ids)
        cases[f"envelope:{name}"] = (json.dumps({**message, "id": request_id}).encode(), [request_id])
    for name, arguments in SURROGATE_ARGUMENTS.items():
        request_id = next(ids)
        cases[f"surrogate:{name}"] = (_tool_call_line(request_id, arguments), [request_id])
    for depth in DEPTHS:
        request_id = next(ids)
        nested = b"[" * depth + b"]" * depth
        cases[f"depth:{depth}"] = (_tool_call_line(request_id, b'{"text": ' + nested + b"}"), [request_id])
    cases["batch"] = (json.dumps(BATCH).encode(), ["b1", "b2"])
    cases["surrogate-id"] = (b'{"jsonrpc": "2.0", "id": "r\\ud800", "method": "ping"}', ["r\ud800"])
    return cases


CASES = _cases()


class Transcript:
    """What the shared server sent, read after it exited with ``status``."""

    def __init__(self, server: RawServer, status: int) -> None:
        self.server = server
        self.status = status

    def request_ids(self, case: str) -> list[object]:
        return CASES[case][1]

    def answers(self, case: str, request_id: object) -> list[dict[str, Any]]:
        """The answers under ``request_id`` sent after the previous case's
        ping and before ``case``'s own."""
        names = list(CASES)
        position = names.index(case)
        start = 0 if position == 0 else self._ping(names[position - 1]) + 1
        part = self.server.messages[start : self._ping(case)]
        return [m for m in part if _answers_to(m, request_id)]

    def _ping(self, case: str) -> int:
        (index,) = [i for i, m in enumerate(self.server.messages) if _answers_to(m, case)]
        return index


@pytest.fixture(scope="module")
def transcript(tmp_path_factory: pytest.TempPathFactory) -> Transcript:
    with raw_server(tmp_path_factory.mktemp("wire")) as server:
        for case, (line, request_ids) in CASES.items():
            server.send(line)
            for request_id in request_ids:
                server.answer(request_id)
            server.request(case, "ping")
            server.answer(case)
        status = server.finish()
    return Transcript(server, status)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("case", list(NULL_ID_LINES))
def test_a_line_whose_id_cannot_be_read_is_answered_once_with_id_null(transcript: Transcript, case: str) -> None:
    """N12, A19: malformed JSON → -32700; JSON that is not a request with a
    usable id → -32600; both under id null (JSON-RPC 2.0 §5), before the
    next line is served."""
    nulls = transcript.answers(f"null-id:{case}", None)
    assert [error_code(m) for m in nulls] == [NULL_ID_LINES[case][1]]
    assert transcript.status == 0


@pytest.mark.timeout(30)
@pytest.mark.parametrize("case", list(BAD_ENVELOPES))
def test_a_request_with_a_bad_envelope_is_answered_once_under_its_id(transcript: Transcript, case: str) -> None:
    """N12, A19: a wrong ``params`` type (a string, a list) → -32600/-32602
    under the request's own id; the client is never left waiting."""
    name = f"envelope:{case}"
    (request_id,) = transcript.request_ids(name)
    (answer,) = transcript.answers(name, request_id)
    assert error_code(answer) == BAD_ENVELOPES[case][1]
    assert transcript.status == 0
    assert len(transcript.server.answers(request_id)) == 1
    assert transcript.answers(name, None) == []


@pytest.mark.timeout(30)
def test_a_batch_is_refused_once_for_each_request_in_it(transcript: Transcript) -> None:
    (b1,) = transcript.answers("batch", "b1")
    (b2,) = transcript.answers("batch", "b2")
    assert error_code(b1) == error_code(b2) == -32600
    assert transcript.status == 0
    assert len(transcript.server.answers("b1")) == len(transcript.server.answers("b2")) == 1
    assert transcript.answers("batch", None) == []


@pytest.mark.timeout(30)
@pytest.mark.parametrize("case", list(SURROGATE_ARGUMENTS))
def test_lone_surrogates_in_arguments_are_an_invalid_args_result(transcript: Transcript, case: str) -> None:
    """N12, A19: arguments holding a lone surrogate escape get an
    ``isError`` result with the INVALID_ARGS text (as A11), and the body
    never runs."""
    name = f"surrogate:{case}"
    (request_id,) = transcript.request_ids(name)
    (answer,) = transcript.answers(name, request_id)
    assert answer["result"]["isError"] is True
    (block,) = answer["result"]["content"]
    assert block["text"].startswith("Error: invalid arguments: arguments are not valid text:")
    assert "lone surrogate" in block["text"]
    assert transcript.status == 0
    assert len(transcript.server.answers(request_id)) == 1
    # No case of the transcript runs the echo body, which prints this.
    assert "stray print from a tool body" not in transcript.server.noise


@pytest.mark.timeout(30)
def test_a_string_id_with_a_lone_surrogate_comes_back_exactly(transcript: Transcript) -> None:
    (answer,) = transcript.answers("surrogate-id", "r\ud800")
    assert answer["result"] == {}
    assert transcript.status == 0


@pytest.mark.timeout(30)
@pytest.mark.parametrize("depth", DEPTHS)
def test_deeply_nested_arguments_are_answered_once(transcript: Transcript, depth: int) -> None:
    """The SDK's own parser stops at 200 levels and answered nothing; a
    value within A11's 1 000 levels reaches the registry (INVALID_ARGS from
    the schema), a deeper one is refused -32602 under its id."""
    name = f"depth:{depth}"
    (request_id,) = transcript.request_ids(name)
    (answer,) = transcript.answers(name, request_id)
    if depth <= 1000:
        assert answer["result"]["isError"] is True
        assert answer["result"]["content"][0]["text"].startswith("Error: invalid arguments")
    else:
        assert error_code(answer) == -32602
    assert transcript.status == 0
    assert len(transcript.server.answers(request_id)) == 1


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
