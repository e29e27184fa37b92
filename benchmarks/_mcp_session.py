"""The MCP SDK's ``ClientSession`` over a server process's pipes, one
JSON-RPC message per line, recording every message in both directions.

The SDK's ``stdio_client`` hides the process; the MCP benchmarks and the
server's tests need its pid, its exit status and its stdin, so they start
the process themselves and talk through this pump. A stdout line that is not
JSON-RPC fails the pump (stray output on the server's stdout is a bug).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import anyio.abc
import mcp_types as types
from mcp.client.session import ClientSession
from mcp.shared.message import SessionMessage

__all__ = ["line_session"]


@asynccontextmanager
async def line_session(
    process: anyio.abc.Process,
    sent: list[types.JSONRPCMessage],
    received: list[types.JSONRPCMessage],
    *,
    timeout: float,
) -> AsyncIterator[ClientSession]:
    """An initialized ``ClientSession`` talking to ``process`` over its
    stdin and stdout; each message sent is appended to ``sent``, each one
    received to ``received``, in order. Raises ``TimeoutError`` when the
    server has not answered ``initialize`` within ``timeout`` seconds.
    Leaving the block stops both pumps; the process is the caller's."""
    to_client, from_server = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    to_server, from_client = anyio.create_memory_object_stream[SessionMessage](0)

    async def pump_out() -> None:
        assert process.stdout is not None
        pending = b""
        async with to_client:
            async for chunk in process.stdout:
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                    received.append(message)
                    await to_client.send(SessionMessage(message))

    async def pump_in() -> None:
        assert process.stdin is not None
        async with from_client:
            async for item in from_client:
                sent.append(item.message)
                data = item.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n"
                try:
                    await process.stdin.send(data.encode())
                except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                    pass

    async with anyio.create_task_group() as tg, ClientSession(from_server, to_server) as session:
        tg.start_soon(pump_out)
        tg.start_soon(pump_in)
        with anyio.fail_after(timeout):
            await session.initialize()
        yield session
        tg.cancel_scope.cancel()
