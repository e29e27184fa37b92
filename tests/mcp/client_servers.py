"""MCP servers the client tests (``tests/mcp/test_client_*.py``) talk to, run
as ``python tests/mcp/client_servers.py MODE ...``:

* ``tee LOG -- COMMAND...`` -- runs ``COMMAND`` as the real server and
  appends every line the client sends to ``LOG`` (flushed per line) before
  passing it on: the record of what the server received.
* ``fast`` -- an ``MCPServer`` (the SDK's FastMCP) with ``add`` (structured
  output), ``picture`` (an image and an embedded resource) and ``fail``
  (raises: an ``isError`` result).
* ``http FD TOKEN`` -- ``add`` over streamable HTTP on the listening
  socket ``FD``, requiring ``Authorization: Bearer TOKEN`` unless TOKEN is
  empty.
* ``scripted LOG`` -- a hand-written JSON-RPC server for what a good server
  never does; logs every received line to ``LOG``. Its tools: ``hang``
  (never answers, ignores cancellation), ``stubborn`` (answers even after a
  cancel, once it was cancelled), ``die`` (exits mid-call), ``garbage``
  (writes a line that is not JSON, then a result that is not a
  ``CallToolResult``), ``rpc_error`` (a JSON-RPC error), ``busy`` (JSON-RPC error ``-32000
  "backend busy"``, and the server stays up), ``ok`` (answers ``"ok"``). With ``$SCRIPTED_HOLD`` set, every start after the first
  waits for the file ``$SCRIPTED_HOLD.go`` before it answers ``initialize``.
  With ``$SCRIPTED_UNLISTED`` set, ``tools/list`` is never answered.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any


def tee(log: str, command: list[str]) -> int:
    child = subprocess.Popen(command, stdin=subprocess.PIPE)
    assert child.stdin is not None
    with open(log, "a", encoding="utf-8") as out:
        for line in sys.stdin.buffer:
            out.write(line.decode("utf-8", "replace"))
            out.flush()
            try:
                child.stdin.write(line)
                child.stdin.flush()
            except BrokenPipeError:
                break
    try:
        child.stdin.close()
    except BrokenPipeError:
        pass
    return child.wait()


def http(fd: int, token: str) -> None:
    """``fast``'s ``add`` over streamable HTTP on the listening socket
    ``fd``; with a non-empty ``token`` every request needs
    ``Authorization: Bearer <token>`` (else 401)."""
    import uvicorn
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("http-test")

    @server.tool()
    def add(a: int, b: int) -> dict[str, int]:
        """Add two integers."""
        return {"total": a + b}

    @server.tool()
    async def slow() -> str:
        """Sleep a minute; ``$HTTP_RECORDS/slow.started`` when it starts,
        ``slow.cancelled`` when the server cancels it."""
        import anyio

        records = Path(os.environ.get("HTTP_RECORDS", "."))
        (records / "slow.started").write_text("1")
        try:
            await anyio.sleep(60)
        except anyio.get_cancelled_exc_class():
            (records / "slow.cancelled").write_text("1")
            raise
        return "slept"

    inner = server.streamable_http_app()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and token:
            given = dict(scope["headers"]).get(b"authorization", b"").decode()
            if given != f"Bearer {token}":
                await send(
                    {"type": "http.response.start", "status": 401, "headers": [(b"content-type", b"text/plain")]}
                )
                await send({"type": "http.response.body", "body": b"no"})
                return
        await inner(scope, receive, send)

    uvicorn.run(app, fd=fd, log_level="warning", lifespan="on")


def fast() -> None:
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError as RemoteToolError
    from mcp.server.mcpserver.utilities.types import Image
    from mcp_types import EmbeddedResource, TextResourceContents

    server = MCPServer("fast-test")

    @server.tool()
    def add(a: int, b: int) -> dict[str, int]:
        """Add two integers."""
        return {"total": a + b}

    @server.tool(structured_output=False)
    def picture():  # type: ignore[no-untyped-def]  # unannotated: content blocks as they are
        """An image and an embedded resource."""
        return [
            Image(data=b"\x89PNG\r\n\x1a\n", format="png").to_image_content(),
            EmbeddedResource(
                type="resource",
                resource=TextResourceContents(uri="file:///note.txt", mime_type="text/plain", text="a note"),
            ),
        ]

    @server.tool()
    def fail(why: str) -> str:
        """Always fails, with ``why`` as the error text."""
        raise RemoteToolError(why)

    server.run("stdio")


_TOOLS = [
    {"name": name, "description": f"scripted {name}", "inputSchema": {"type": "object"}}
    for name in ("hang", "stubborn", "die", "garbage", "rpc_error", "busy", "ok")
]


def scripted(log: str) -> None:
    lock = threading.Lock()
    stubborn: list[Any] = []

    def send(message: dict[str, Any]) -> None:
        with lock:
            sys.stdout.write(json.dumps(message) + "\n")
            sys.stdout.flush()

    def result(rid: Any, text: str) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": rid, "result": {"content": [{"type": "text", "text": text}]}}

    with open(log, "a", encoding="utf-8") as out:
        for line in sys.stdin:
            out.write(line)
            out.flush()
            message = json.loads(line)
            method, rid = message.get("method"), message.get("id")
            if method == "initialize":
                hold = os.environ.get("SCRIPTED_HOLD")
                if hold is not None:
                    # The first start answers at once; a restart waits for
                    # HOLD.go, so a test can act while the server starts.
                    started = Path(hold + ".started")
                    if started.exists():
                        while not Path(hold + ".go").exists():
                            time.sleep(0.01)
                    started.write_text("1")
                send(
                    {
                        "jsonrpc": "2.0",
                        "id": rid,
                        "result": {
                            "protocolVersion": message["params"]["protocolVersion"],
                            "capabilities": {"tools": {}},
                            "serverInfo": {"name": "scripted", "version": "0"},
                        },
                    }
                )
            elif method == "tools/list" and "SCRIPTED_UNLISTED" not in os.environ:
                send({"jsonrpc": "2.0", "id": rid, "result": {"tools": _TOOLS}})
            elif method == "notifications/cancelled":
                cancelled = message["params"]["requestId"]
                if cancelled in stubborn:
                    send(result(cancelled, "answered anyway"))
            elif method == "tools/call":
                name = message["params"]["name"]
                if name == "ok":
                    send(result(rid, "ok"))
                elif name == "stubborn":
                    stubborn.append(rid)
                elif name == "die":
                    os._exit(3)
                elif name == "garbage":
                    with lock:
                        sys.stdout.write("this is not JSON\n")
                        sys.stdout.flush()
                    send({"jsonrpc": "2.0", "id": rid, "result": {"content": "not a list"}})
                elif name == "rpc_error":
                    send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32001, "message": "scripted failure"}})
                elif name == "busy":
                    send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32000, "message": "backend busy"}})
                # "hang": never answered


def main() -> int:
    mode = sys.argv[1]
    if mode == "tee":
        assert sys.argv[3] == "--"
        return tee(sys.argv[2], sys.argv[4:])
    if mode == "http":
        http(int(sys.argv[2]), sys.argv[3])
        return 0
    if mode == "fast":
        fast()
        return 0
    if mode == "scripted":
        scripted(sys.argv[2])
        return 0
    raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    sys.exit(main())
