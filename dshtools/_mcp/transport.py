"""Transport and server lifecycle of the MCP client: one incarnation of an
MCP server (``Connection``), the SDK session over its stdio pipes or
streamable HTTP, the stdio server's process group, and the one point where
a remote call is claimed (``RemoteCall``) (docs/mcp.md#the-client).

Guarantees:

* **The request is the dispatch.** ``RemoteCall``'s state goes
  ``_QUEUED`` → ``_RUNNING`` only in the session's writer, as it writes that
  call's ``tools/call`` request (``claim()``), or ``_QUEUED`` → ``_WITHDRAWN``
  when the call's signal aborts first; a withdrawn call's request is never
  written. ``handed_off`` is set once the request is on the wire.
* **End of output ends the incarnation.** When the server's output ends or a
  write to it fails, ``Connection.alive`` turns false and ``stop`` is set;
  the session then closes (the SDK fails every request in flight with its
  connection-closed error). ``stop`` is always set before the SDK can see
  the end, so a connection-closed error while ``stop`` is not set is the
  server's own answer (``Connection.lost``).
* **A bounded handshake.** The handshake ends within
  ``bounds.connect_timeout`` seconds of the start (``TimeoutError``), or as
  soon as ``stop`` is set (the SDK's connection-closed ``MCPError``):
  nothing waits for a server that reads ``initialize`` and never answers.
* **A forgotten session.** Over HTTP, a ``404`` to a request that carried
  the session's id means the server no longer knows the session:
  ``Connection.alive`` turns false and the id of each such request is in
  ``refused`` (the client sends it again in a new session).
* **Stop.** ``Server.serve`` returns only after, for a stdio server, its
  stdin was closed, its process group got SIGTERM and,
  ``bounds.kill_grace`` seconds later, SIGKILL, and no process of its
  session is left (or ``KILL_WAIT`` more seconds passed: then a WARNING);
  for an HTTP server, its session's closing request got at most
  ``kill_grace`` seconds. ``Connection.gone`` is set on the way out
  whatever happened, and ``ready`` is set with ``error`` when the server
  could not be started or reached.

Everything here runs on the client's event-loop thread, except
``RemoteCall``'s thread-safe methods and ``Connection.pid`` (read by tests).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal as _signals
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final

import anyio
import anyio.abc
import attrs
import mcp_types as types
from anyio.streams.memory import MemoryObjectSendStream
from mcp.client.session import ClientSession
from mcp.shared.exceptions import MCPError
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher
from mcp.shared.message import SessionMessage

from .._backends.base import BodyReport, NotInvoked
from .._os import procfs
from .bounds import KILL_WAIT, Bounds

if TYPE_CHECKING:
    import httpx2

__all__ = ["CONNECTION_CLOSED", "Connection", "RemoteCall", "Server"]

_log: Final = logging.getLogger("dshtools")

# Seconds between two looks at /proc while the server's session empties.
_GONE_POLL: Final = 0.01

_QUEUED, _RUNNING, _WITHDRAWN, _SETTLED = range(4)

# The error the SDK gives every request in flight when the connection
# closes; a server may send the same code (and even the same text).
CONNECTION_CLOSED: Final = types.CONNECTION_CLOSED
_CLOSED_TEXT: Final = "Connection closed"


class RemoteCall:
    """One submitted remote call: the registry's ``Dispatch``.

    ``_state`` (under ``_lock``) goes ``_QUEUED`` → ``_RUNNING`` at exactly
    one point, the writer's claim as it writes the request, or ``_QUEUED``
    → ``_WITHDRAWN`` when the signal aborts first; ``_SETTLED`` once the
    report is set. ``abort_requested`` is set by the signal's listener; the
    loop learns of it through ``wake``."""

    __slots__ = (
        "_done",
        "_lock",
        "_report",
        "_state",
        "abort_requested",
        "arguments",
        "handed_off",
        "name",
        "reason",
        "request_id",
        "wake",
    )

    def __init__(self, name: str, arguments: Any, request_id: str) -> None:
        self.name = name
        self.arguments = arguments
        self.request_id = request_id
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._state = _QUEUED
        self._report: BodyReport | None = None
        self.abort_requested = False
        self.reason: object = None
        # Loop-side, set by the loop once the call's coroutine runs.
        self.wake: Callable[[], None] | None = None
        self.handed_off: anyio.Event | None = None

    # -- the registry's side (the calling thread) --

    def wait(self, timeout: float) -> bool:
        return self._done.wait(timeout)

    def report(self) -> BodyReport:
        report = self._report
        assert report is not None
        return report

    # -- any thread --

    def on_abort(self, reason: object) -> None:
        """The call's signal aborted (or the client closes): withdraw a call
        not yet written, else ask the loop to cancel it on the server."""
        with self._lock:
            if self.abort_requested:
                return
            self.abort_requested = True
            self.reason = reason
            withdrew = self._state == _QUEUED
            if withdrew:
                self._state = _WITHDRAWN
                self._report = BodyReport(outcome=NotInvoked())
            wake = self.wake
        if withdrew:
            self._done.set()
        if wake is not None:
            wake()

    def claim(self) -> bool:
        """The writer is about to write the request: ``True`` when the call
        is now running (write it; also for a request sent again in a new
        session), ``False`` when it was withdrawn or settled."""
        with self._lock:
            if self._state == _QUEUED:
                self._state = _RUNNING
            return self._state == _RUNNING

    def settle(self, report: BodyReport) -> None:
        """Set the report unless the call was withdrawn (whose report is
        already set); wakes the waiting registry."""
        with self._lock:
            if self._state in (_WITHDRAWN, _SETTLED):
                return
            self._state = _SETTLED
            self._report = report
        self._done.set()

    @property
    def withdrawn(self) -> bool:
        return self._state == _WITHDRAWN

    @property
    def claimed(self) -> bool:
        return self._state in (_RUNNING, _SETTLED)


class Connection:
    """One incarnation of the server: its process, transport and session.
    Touched only on the loop thread, except ``pid`` (read by tests)."""

    def __init__(self) -> None:
        self.ready = anyio.Event()  # set once usable, or once it failed to become so
        self.stop = anyio.Event()  # close() or the server's end of output
        self.gone = anyio.Event()  # the process group is confirmed gone
        self.error: BaseException | None = None
        self.alive = True  # false once the server's output ended or close() began
        self.process: anyio.abc.Process | None = None
        self.pid: int | None = None
        self.pidfd: int | None = None
        self.http_status: str | None = None  # the last HTTP error status (streamable HTTP)
        self.dispatcher: JSONRPCDispatcher | None = None
        self.tools: list[types.Tool] = []
        # Calls whose request the writer has not written yet, by request id.
        self.unwritten: dict[str, RemoteCall] = {}
        # Ids of requests answered 404 for the session (HTTP): never run.
        self.refused: set[str] = set()

    def lost(self, error: MCPError) -> bool:
        """Whether ``error`` is the SDK's connection-closed error for this
        incarnation's end, not an error the server answered."""
        closed = error.error.code == CONNECTION_CLOSED and error.error.message == _CLOSED_TEXT
        return closed and self.stop.is_set()


def _parse_line(line: bytes) -> SessionMessage | Exception:
    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except Exception as exc:  # malformed output: surfaced to the session, the client goes on
        return exc


@attrs.frozen(eq=False)
class Server:
    """How to reach one MCP server (a stdio ``command`` with its ``env`` and
    ``cwd``, or a streamable-HTTP ``url`` with its ``headers``) and how to
    run one incarnation of it: ``serve(conn)``."""

    command: list[str]
    env: dict[str, str] = attrs.field(kw_only=True)
    cwd: str | os.PathLike[str] | None = attrs.field(kw_only=True)
    url: str | None = attrs.field(kw_only=True)
    headers: dict[str, str] = attrs.field(kw_only=True)
    bounds: Bounds = attrs.field(kw_only=True)

    async def serve(self, conn: Connection) -> None:
        """Run one incarnation of the server until ``conn.stop``; stop its
        process group on the way out, whatever happened."""
        if self.url is not None:
            await self._serve_http(conn, self.url)
            return
        try:
            conn.process = process = await anyio.open_process(
                self.command, env=self.env, cwd=self.cwd, start_new_session=True, stderr=None
            )
        except Exception as exc:
            conn.error = exc
            conn.alive = False
            conn.ready.set()
            conn.gone.set()
            return
        conn.pid = process.pid
        try:
            conn.pidfd = os.pidfd_open(process.pid)
        except (AttributeError, OSError):
            conn.pidfd = None
        try:
            await self._session_stdio(conn, process)
        except Exception as exc:
            if not conn.ready.is_set():
                conn.error = exc
            else:
                _log.debug("the MCP session with %r ended with an error", self.command, exc_info=exc)
        finally:
            conn.alive = False
            conn.ready.set()
            with anyio.CancelScope(shield=True):
                await self._stop_process(conn, process)

    async def _session_stdio(self, conn: Connection, process: anyio.abc.Process) -> None:
        assert process.stdout is not None and process.stdin is not None
        stdout, stdin = process.stdout, process.stdin

        async def pump_in(read_send: MemoryObjectSendStream[SessionMessage | Exception]) -> None:
            pending = b""
            async for chunk in stdout:
                pending += chunk
                while (end := pending.find(b"\n")) >= 0:
                    line, pending = pending[:end], pending[end + 1 :]
                    if line.strip():
                        await read_send.send(_parse_line(line))

        async def emit(message: SessionMessage) -> None:
            data = message.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n"
            await stdin.send(data.encode("utf-8"))

        await self._session(conn, pump_in, emit)

    async def _serve_http(self, conn: Connection, url: str) -> None:
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        async def note_status(response: httpx2.Response) -> None:
            if response.status_code >= 400:
                conn.http_status = f"HTTP {response.status_code} {response.reason_phrase}".rstrip()
            if response.status_code == 404 and response.request.headers.get("mcp-session-id"):
                conn.alive = False
                conn.refused.add(_request_id(response.request))

        timeout = self.bounds.connect_timeout
        try:
            async with (
                httpx2.AsyncClient(
                    headers=self.headers,
                    timeout=httpx2.Timeout(timeout, read=300.0),
                    event_hooks={"response": [note_status]},
                ) as http,
                _cut_after_stop(conn, self.bounds.kill_grace),
                streamable_http_client(url, http_client=http) as (sdk_read, sdk_write),
            ):

                async def pump_in(read_send: MemoryObjectSendStream[SessionMessage | Exception]) -> None:
                    async for item in sdk_read:
                        await read_send.send(item)

                async def emit(message: SessionMessage) -> None:
                    await sdk_write.send(message)

                await self._session(conn, pump_in, emit)
        except Exception as exc:
            if not conn.ready.is_set():
                conn.error = exc
            else:
                _log.debug("the MCP session with %r ended with an error", url, exc_info=exc)
        finally:
            conn.alive = False
            if conn.error is not None and conn.http_status is not None:
                conn.error = ConnectionError(f"{conn.http_status} from {url}")
            conn.ready.set()
            conn.gone.set()

    async def _session(
        self,
        conn: Connection,
        pump_in: Callable[[MemoryObjectSendStream[SessionMessage | Exception]], Awaitable[None]],
        emit: Callable[[SessionMessage], Awaitable[None]],
    ) -> None:
        """The SDK session over one transport: ``pump_in`` feeds what the
        server sends until it ends; ``emit`` writes one message. The writer
        claims each remote call as it writes that call's request."""
        read_send, read_recv = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        write_send, write_recv = anyio.create_memory_object_stream[SessionMessage](0)

        async def reader() -> None:
            try:
                await pump_in(read_send)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                pass
            finally:
                conn.alive = False
                conn.stop.set()  # before the SDK can see the end (Connection.lost)
                read_send.close()

        async def writer() -> None:
            try:
                async with write_recv:
                    async for message in write_recv:
                        inner = message.message
                        call = None
                        if isinstance(inner, types.JSONRPCRequest) and isinstance(inner.id, str):
                            call = conn.unwritten.pop(inner.id, None)
                            if call is not None and not call.claim():
                                continue  # withdrawn: never written
                        await emit(message)
                        if call is not None and call.handed_off is not None:
                            call.handed_off.set()
            except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                conn.alive = False
                conn.stop.set()
                read_send.close()

        handshake = anyio.CancelScope(deadline=anyio.current_time() + self.bounds.connect_timeout)

        async def end_handshake_on_stop() -> None:
            await conn.stop.wait()
            handshake.cancel()

        async with anyio.create_task_group() as tg:
            tg.start_soon(reader)
            tg.start_soon(writer)
            tg.start_soon(end_handshake_on_stop)
            try:
                dispatcher = JSONRPCDispatcher(read_recv, write_send)
                async with ClientSession(dispatcher=dispatcher) as session:
                    with handshake:
                        await session.initialize()
                    if handshake.cancelled_caught:
                        if conn.stop.is_set():  # the server's output ended, or close()
                            raise MCPError(CONNECTION_CLOSED, _CLOSED_TEXT)
                        raise TimeoutError(f"no answer to initialize in {self.bounds.connect_timeout:g} s")
                    conn.dispatcher = dispatcher
                    conn.ready.set()
                    await conn.stop.wait()
            finally:
                conn.alive = False
                conn.stop.set()  # also when the handshake failed or the loop is stopping
                write_send.close()
                tg.cancel_scope.cancel()

    async def _stop_process(self, conn: Connection, process: anyio.abc.Process) -> None:
        """Close the server's stdin, SIGTERM its process group, SIGKILL it
        after ``bounds.kill_grace``, and return once no process of its
        session is left (or ``KILL_WAIT`` more seconds passed: then a
        WARNING)."""
        pid = process.pid
        try:
            if process.stdin is not None:
                await process.stdin.aclose()
        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass
        procfs.killpg_pinned(conn.pidfd, pid, _signals.SIGTERM)
        with anyio.move_on_after(self.bounds.kill_grace):
            await process.wait()
            while procfs.session_members(pid):
                await anyio.sleep(_GONE_POLL)
        procfs.killpg_pinned(conn.pidfd, pid, _signals.SIGKILL)
        with anyio.move_on_after(KILL_WAIT) as waiting:
            await process.wait()
            while procfs.session_members(pid):
                procfs.killpg_pinned(conn.pidfd, pid, _signals.SIGKILL)
                await anyio.sleep(_GONE_POLL)
        if waiting.cancelled_caught:
            _log.warning("MCP server %r (pid %d) survived SIGKILL for %.1f s", self.command, pid, KILL_WAIT)
        try:
            await process.aclose()  # its pipes and the loop's transport
        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass
        if conn.pidfd is not None:
            os.close(conn.pidfd)
            conn.pidfd = None
        conn.gone.set()


def _request_id(request: httpx2.Request) -> str:
    """The id of the JSON-RPC request in ``request``'s body when it is a
    string (the client's call ids are), else ``""``."""
    try:
        message = json.loads(request.content)
    except Exception:  # no body (a GET), or one not held in memory
        return ""
    rid = message.get("id") if isinstance(message, dict) else None
    return rid if isinstance(rid, str) else ""


@contextlib.asynccontextmanager
async def _cut_after_stop(conn: Connection, grace: float) -> AsyncIterator[None]:
    """The block, cancelled ``grace`` seconds after ``conn.stop`` was set
    when it has not ended by then (an HTTP session's closing request to a
    server that does not answer)."""
    async with anyio.create_task_group() as tg:

        async def cut() -> None:
            await conn.stop.wait()
            await anyio.sleep(grace)
            tg.cancel_scope.cancel()

        tg.start_soon(cut)
        try:
            yield
        finally:
            tg.cancel_scope.cancel()
