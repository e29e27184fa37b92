"""Raw JSON-RPC over ``python -m dshtools mcp``'s stdio with messages far
past asyncio's 64 KiB line limit, and with a cancellation that arrives while
other calls run (docs/contract.md#a19): the reader is not a serial
read → dispatch → respond loop, and a line's length is not limited.

The tools are written into ``tmp_path`` as ``wire_tools`` (``TOOLS``); the
server is started as in ``test_wire.py``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.mcp.test_wire import raw_server

TOOLS = """\
import os
import sys
import threading
from pathlib import Path

from dshtools import ToolDefinition, ToolRegistry

OUT = Path(os.environ["DSHTOOLS_MCP_TEST_DIR"])


def _parallel(_args):
    return True


def _big(args, run):
    return "x" * args["n"]


def _size(args, run):
    return len(args["s"])


def _stubborn(args, run):
    print("started stubborn", flush=True)
    threading.Event().wait(4.0)  # the scenario: 4 s of work that ignores its signal
    print("stubborn finishing", flush=True)
    return "stubborn done"


def _wait(args, run):
    print("started wait", flush=True)
    run.signal.wait()
    print("aborted wait", flush=True)
    return "wait stopped"


def _small(args, run):
    return "small"


registry = ToolRegistry()
for name, body, parameters in [
    ("big", _big, {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}),
    ("size", _size, {"type": "object", "properties": {"s": {"type": "string"}}, "required": ["s"]}),
    ("stubborn", _stubborn, {"type": "object"}),
    ("wait", _wait, {"type": "object"}),
    ("small", _small, {"type": "object"}),
]:
    registry.register(ToolDefinition(name, name + " tool", parameters, body, is_concurrency_safe=_parallel))
"""

MIB = 1024 * 1024


def _write_tools(tmp_path: Path) -> str:
    (tmp_path / "wire_tools.py").write_text(TOOLS, encoding="utf-8")
    return "wire_tools:registry"


def _text(answer: dict[str, object]) -> str:
    result = answer["result"]
    assert isinstance(result, dict) and result.get("isError") is False, answer
    (block,) = result["content"]
    text: str = block["text"]
    return text


@pytest.mark.timeout(60)
def test_messages_longer_than_64_kib_on_one_line_arrive_whole(tmp_path: Path) -> None:
    """B53: results of 70 000 bytes and 3 MiB each arrive whole (exact
    length, only ``x``); an argument of 2 MiB of two-byte UTF-8 text on one
    line comes back with its exact length; ``tools/list`` still answers
    afterwards; exit 0 at end of input."""
    with raw_server(tmp_path, _write_tools(tmp_path)) as server:
        for request_id, n in ((1, 70_000), (2, 3 * MIB)):
            server.call(request_id, "big", {"n": n})
            text = _text(server.answer(request_id))
            assert len(text) == n
            assert set(text) == {"x"}

        s = "é" * MIB  # two bytes each in UTF-8: 2 MiB of text
        line = json.dumps(
            {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "size", "arguments": {"s": s}}},
            ensure_ascii=False,
        ).encode("utf-8")
        assert len(line) > 2 * MIB and b"\\u" not in line  # raw UTF-8, one line
        server.send(line)
        assert _text(server.answer(3)) == str(MIB)

        server.request(4, "tools/list")
        names = [t["name"] for t in server.answer(4)["result"]["tools"]]
        assert names == ["big", "size", "stubborn", "wait", "small"]

        assert server.finish() == 0
        assert [len(server.answers(i)) for i in (1, 2, 3, 4)] == [1, 1, 1, 1]


@pytest.mark.timeout(60)
def test_a_cancel_and_new_requests_are_served_while_a_stubborn_call_runs(tmp_path: Path) -> None:
    """B55: ``stubborn`` (id 1, ignores its signal for 4 s) and ``wait``
    (id 2, waits on its signal) run; the cancel for id 2 reaches its body
    within 1 s of the notification; ``tools/list`` (id 3) and a small call
    (id 4) are answered within 2 s while ``stubborn`` still runs; id 1 is
    answered ``stubborn done`` at its end; id 2 never gets a response."""
    with raw_server(tmp_path, _write_tools(tmp_path)) as server:
        server.call(1, "stubborn", {})
        server.said("started stubborn")
        server.call(2, "wait", {})
        server.said("started wait")

        cancelled = time.monotonic()
        server.cancel(2)
        server.said("aborted wait")
        assert time.monotonic() - cancelled < 1.0

        sent = time.monotonic()
        server.request(3, "tools/list")
        server.call(4, "small", {})
        assert "stubborn" in [t["name"] for t in server.answer(3)["result"]["tools"]]
        assert _text(server.answer(4)) == "small"
        assert time.monotonic() - sent < 2.0
        # ... while stubborn is still running: it has neither finished nor been answered.
        assert "stubborn finishing" not in server.noise
        assert server.answers(1) == []

        assert _text(server.answer(1)) == "stubborn done"
        assert "stubborn finishing" in server.noise  # answered at its end

        assert server.finish() == 0
        assert server.answers(2) == []
        assert [len(server.answers(i)) for i in (1, 3, 4)] == [1, 1, 1]
