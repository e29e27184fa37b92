"""``dshtools.mcp.serve_stdio`` at the edges of its stdio (docs/contract.md#more-interop): started without a standard error and without ``sys.stdout``, stray
output of a tool goes to the null device and the protocol stream stays
clean; blank lines are skipped, a
line that is not JSON-RPC is answered -32700 and does not stop the server (every malformed
shape and its answer: tests/mcp/test_wire.py), and end of input
returns 0. The result
texts: a non-text block becomes its JSON text, and a call the server could
not run is an ``isError`` result naming the exception.

The server runs in a child process speaking raw JSON-RPC lines (no SDK
client), so the test controls every byte of its input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest

from dshtools._core.freeze import freeze
from dshtools._mcp.content import mcp_blocks, text_block
from dshtools.mcp import _tool_result

ROOT = Path(__file__).resolve().parents[2]

TOOLS = """\
import os
from dshtools import ToolDefinition, ToolRegistry

def _shout(args, run):
    print("stray print from a tool body", flush=True)
    os.write(1, b"stray write to fd 1\\n")
    return str(args["text"]).upper()

registry = ToolRegistry()
registry.register(ToolDefinition("shout", "Upper-case the text.", {"type": "object"}, _shout))
"""

# fd 2 closed and no sys.stdout object (as under pythonw) before the server
# starts: it has no stderr to point fd 1 at and no stream of its own to flush
LAUNCH = (
    "import os, sys; os.close(2); sys.stdout = None; from dshtools.__main__ import main; sys.exit(main(sys.argv[1:]))"
)


def _message(**fields: Any) -> bytes:
    return json.dumps({"jsonrpc": "2.0", **fields}).encode()


def _reply(proc: subprocess.Popen[bytes]) -> dict[str, Any]:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, "the server closed its output"
    reply: dict[str, Any] = json.loads(line)  # only JSON-RPC on stdout
    return reply


@pytest.mark.timeout(60)
def test_without_stderr_or_stdout_object_the_server_serves_a_clean_stream_and_returns_0_at_end_of_input(
    tmp_path: Path,
) -> None:
    (tmp_path / "stdio_tools.py").write_text(TOOLS)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)]))
    proc = subprocess.Popen(
        [sys.executable, "-c", LAUNCH, "mcp", "--tools", "stdio_tools:registry"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=tmp_path,
        env=env,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:

        def send(*lines: bytes) -> None:
            assert proc.stdin is not None
            proc.stdin.write(b"".join(line + b"\n" for line in lines))
            proc.stdin.flush()

        init = {
            "protocolVersion": types.LATEST_PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"},
        }
        send(_message(id=1, method="initialize", params=init))
        assert _reply(proc)["id"] == 1
        send(_message(method="notifications/initialized"), b"   ", b"this is not JSON-RPC")
        refused = _reply(proc)  # the blank line is skipped; the other is answered (docs/contract.md#a19)
        assert refused["id"] is None and refused["error"]["code"] == -32700, refused
        send(_message(id=2, method="tools/call", params={"name": "shout", "arguments": {"text": "hi"}}))
        called = _reply(proc)
        assert called["id"] == 2, called
        assert called["result"]["content"] == [{"type": "text", "text": "HI"}]
        assert called["result"]["isError"] is False
        send(_message(id=3, method="tools/list"))
        listed = _reply(proc)
        assert listed["id"] == 3 and [tool["name"] for tool in listed["result"]["tools"]] == ["shout"]
        proc.stdin.close()
        assert proc.stdout.read() == b""  # the stray output went to the null device
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()


def test_a_block_without_an_mcp_form_is_sent_as_its_json_text() -> None:
    """An image goes out as an image (tests/mcp/test_content.py); a block
    type MCP does not have, as its JSON text."""
    (image,) = mcp_blocks([freeze({"type": "image", "data": "aGk=", "mimeType": "image/png"})])
    assert image.model_dump(by_alias=True, exclude_none=True) == {
        "type": "image",
        "data": "aGk=",
        "mimeType": "image/png",
    }
    (other,) = mcp_blocks([freeze({"type": "thinking", "thought": "hm"})])
    assert other.type == "text" and json.loads(other.text) == {"type": "thinking", "thought": "hm"}
    assert text_block(freeze({"type": "text", "text": "lone \ud800"})).text == "lone ?"


def test_a_call_the_server_could_not_run_is_an_error_result_naming_the_exception() -> None:
    result = _tool_result(RuntimeError("can't start new thread"))
    assert result.is_error is True
    assert [block.model_dump() for block in result.content] == [
        {
            "type": "text",
            "text": "Error: the server could not run the call: RuntimeError: can't start new thread",
            "annotations": None,
            "meta": None,
        }
    ]
