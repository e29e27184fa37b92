"""A ``ToolRegistry`` served as a Model Context Protocol server over stdio
(docs/contract.md#mcp-stdio) or streamable HTTP (docs/mcp.md#the-server-over-http),
built on the official ``mcp`` SDK (extra ``mcp``).

``serve_stdio(registry, *, name="dshtools")`` answers ``tools/list`` from
``registry.schemas()`` and runs each ``tools/call`` through
``registry.execute`` -- every hook, guard, approver and policy of the
registry applies -- and returns when the client closes the connection.
``serve_http(registry, host, port, ...)`` does the same for HTTP clients
with the same handlers; its own guarantees are in its docstring and in
``dshtools._mcp.http_server``.

Guarantees:

* **Each call has its own ``AbortController``.** The protocol's
  ``notifications/cancelled`` for a request aborts that call's signal at
  once, from the event loop, while the body runs in a worker thread (it is
  not waiting for the body to notice); the handler then waits, shielded from
  further cancellation, until ``registry.execute`` has returned, i.e. until
  the body was joined. No response is sent for a cancelled request (the SDK
  drops it), but the registry still publishes the call's one result to its
  observers.
* **Every request with an id gets exactly one response, or none when
  the client cancelled it** (docs/contract.md#a19).
  Lines the SDK would drop are answered by the reader before the next line
  is read: not UTF-8 JSON → ``-32700``; not a request, or an id that is not
  a string or an integer → ``-32600`` (id ``null``); a bad envelope or a
  ``params`` that is not an object → ``-32600``/``-32602`` under its id; an
  id still in flight → ``-32600``. Arguments holding a lone surrogate, or
  nested past 1 000 levels, are the registry's ``INVALID_ARGS`` result.
  Ids are matched exactly as sent (``10`` is not ``"1_0"``, ``1`` is not
  ``"1"``): the SDK sees ids of the server's own making, and a
  cancellation reaches only the request it names (``_interop.jsonrpc``).
* **End of input aborts every call in flight** (reason: the connection
  closed), joins them, and only then does ``serve_stdio`` return.
* **Progress**: a call whose request carries ``_meta.progressToken``
  gets ``notifications/progress`` (that token, ``progress``, ``total``,
  ``message``) for what its body reports with ``run.report_progress``,
  coalesced, the last update before the response (``_mcp.progress``).
* **Results**: each content block of the result becomes the MCP block of
  its type, or a text block holding its JSON when it has no valid MCP form;
  a tool with an output schema declares it as ``outputSchema`` and its
  successes carry ``structuredContent`` (``dshtools._mcp.content``,
  docs/mcp.md#content-and-structured-results); ``isError`` is ``True``
  exactly when the result is a ``ToolFailure``. An unknown tool, invalid
  arguments or a denial are ``isError`` results (the registry's
  ``UNKNOWN_TOOL``, ``INVALID_ARGS``, ``DENIED``), never JSON-RPC errors.
* **Scheduling**: calls overlap, each on its own thread, except that a call
  whose ``registry.execution_mode(call)`` is ``"exclusive"`` runs alone:
  admission is first come, first served, so an exclusive call waits for the
  calls admitted before it and holds back the ones that arrive after it.
  A call cancelled while it waits never runs its body (the registry reports
  ``ABORTED_BEFORE_DISPATCH``).
* **Nothing but protocol on stdout.** While serving, file descriptor 1
  points at stderr and descriptor 0 at the null device, so a ``print`` in a
  tool, a logging handler on ``sys.stdout`` or a child process started by a
  tool can neither corrupt the protocol stream nor read its input; the
  protocol uses private close-on-exec duplicates of the original
  descriptors (a child never holds the client's pipes open). Both
  descriptors are restored when ``serve_stdio`` returns.
* **Signals** (only when called in the main thread): SIGTERM or SIGINT
  aborts every call in flight (reason names the signal), joins them, and
  makes ``serve_stdio`` return ``128 + signum``. A second signal does not
  cut the join short (SIGKILL does).

Threads: the asyncio event loop (``anyio.run``) runs the protocol in the
calling thread; a daemon thread reads stdin (a blocking read cannot be
cancelled, so shutdown never waits for it); each call runs
``registry.execute`` on a thread of its own, and the body on the
registry's executor as usual.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import signal as _signals
import socket
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Final

import anyio
import anyio.abc
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread
import mcp_types as types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.message import SessionMessage

from ._core.errors import safe_str
from ._core.freeze import thaw
from ._interop.calls import check_decoded, provider_text, result_text
from ._interop.jsonrpc import INVALID_REQUEST, Forward, Reply, RequestIds, read_line
from ._mcp.admission import Gate
from ._mcp.client import REMOTE_PROTOCOL_ERROR, REMOTE_TOOL_ERROR, MCPClient
from ._mcp.content import OutputShape, mcp_blocks, output_shape, text_block
from ._mcp.progress import FLUSH_S, ProgressRelay, flush
from ._registry.registry import ToolRegistry, registered
from ._signal import AbortController, AbortSignal
from ._types.calls import ToolExecutionInput, ToolExecutionResult

__all__ = ["REMOTE_PROTOCOL_ERROR", "REMOTE_TOOL_ERROR", "MCPClient", "serve_http", "serve_stdio"]

DEFAULT_SESSION_IDLE_TIMEOUT: Final = 600.0
"""Seconds an HTTP session may go without any request in flight before it
expires (10 minutes; ``serve_http``)."""

_STOP_SIGNALS = (_signals.SIGTERM, _signals.SIGINT)

_Outgoing = SessionMessage | Reply
"""What the writer takes: the SDK's messages and the reader's own replies."""


# Abort reasons, one per way a call can be stopped from outside.
CLIENT_CANCELLED = "the MCP client cancelled the request (notifications/cancelled)"
CONNECTION_CLOSED = "the MCP connection closed (end of input)"


def serve_stdio(registry: ToolRegistry, *, name: str = "dshtools") -> int:
    """Serve ``registry``'s tools over this process's stdin/stdout as an MCP
    server named ``name``; block until the client closes the connection.

    Returns ``0`` after end of input, or ``128 + signum`` after SIGTERM or
    SIGINT (handled only when called from the main thread). Either way every
    call in flight was aborted and joined first: no body of ``registry`` is
    still running when this returns. The registry is not closed (it is the
    caller's). Raises ``RuntimeError`` when called from a running event loop
    (it starts its own). Source: docs/contract.md#mcp-stdio.
    """
    handle_signals = threading.current_thread() is threading.main_thread()
    with _claim_stdio() as (in_fd, out_fd):
        server = _StdioServer(registry, name, in_fd, out_fd)
        status: int = anyio.run(server.serve, handle_signals)
        return status


@contextmanager
def _claim_stdio() -> Iterator[tuple[int, int]]:
    """Move the protocol to private duplicates of fds 0 and 1, and point
    fd 0 at the null device and fd 1 at stderr; restore both on exit."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    in_fd = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
    out_fd = fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 3)
    null = os.open(os.devnull, os.O_RDWR)
    try:
        os.dup2(null, 0)
        try:
            os.dup2(2, 1)
        except OSError:  # no stderr: stray output is discarded instead
            os.dup2(null, 1)
    finally:
        os.close(null)
    try:
        yield in_fd, out_fd
    finally:
        try:
            sys.stdout.flush()
        except (OSError, ValueError, AttributeError):
            pass
        os.dup2(out_fd, 1)
        os.dup2(in_fd, 0)
        os.close(out_fd)
        # in_fd stays open: after a signal the reader thread may still be
        # blocked reading it, and a closed number could be reused under it.


def _tool_result(
    outcome: ToolExecutionResult | BaseException, shape: OutputShape | None = None
) -> types.CallToolResult:
    """The MCP result for ``outcome`` (docs/mcp.md#content-and-structured-results);
    ``shape``: the tool's output schema as MCP declares it."""
    if isinstance(outcome, BaseException):
        text = f"Error: the server could not run the call: {type(outcome).__name__}: {safe_str(outcome)}"
        return types.CallToolResult(content=[text_block({"type": "text", "text": text})], is_error=True)
    content = mcp_blocks(outcome.content)
    if outcome.is_error and (said := provider_text(outcome)) != result_text(outcome.content):
        # A failure whose text says nothing (docs/contract.md#a18).
        content = [types.TextContent(type="text", text=said)]
    if shape is not None and not outcome.is_error:
        return types.CallToolResult(content=content, structured_content=shape.structured(outcome.value))
    return types.CallToolResult(content=content, is_error=outcome.is_error)


class _StdioServer:
    """One connection: the SDK's low-level ``Server`` over our own stdio
    streams. ``stop_reason`` is set before anything cancels the handlers
    from outside (end of input, a signal), so a handler that sees neither
    was cancelled by the client."""

    def __init__(self, registry: ToolRegistry, name: str, in_fd: int, out_fd: int) -> None:
        self._registry = registry
        self._name = name
        self._in_fd = in_fd
        self._out_fd = out_fd
        self._gate = Gate()
        self._ids = RequestIds()
        self._progress = ProgressRelay(registry)
        self.stop_reason: str | None = None
        self.signum: int | None = None

    # ------------------------------------------------------------- handlers

    def _shape(self, tool: str) -> OutputShape | None:
        """How ``tool``'s output schema goes over MCP (``None``: it has none)."""
        definition = self._registry.get(tool)
        return None if definition is None else output_shape(definition.output_schema)

    async def _list_tools(
        self, _ctx: ServerRequestContext[Any, Any], _params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        # One snapshot of the registry: each entry's schema and output
        # shape come from the same definition, whatever another thread
        # registers meanwhile (docs/contract.md#a24).
        tools = []
        for definition in registered(self._registry):
            plain = thaw(definition.schema())
            tools.append(
                types.Tool(
                    name=plain["name"],
                    description=plain.get("description") or None,
                    input_schema=plain.get("parameters") or {"type": "object", "properties": {}},
                    output_schema=None if (shape := output_shape(definition.output_schema)) is None else shape.schema,
                )
            )
        return types.ListToolsResult(tools=tools)

    async def _call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        controller = AbortController()
        outer = self._ids.outer_of(ctx.request_id)
        call = ToolExecutionInput(
            call_id=f"mcp:{ctx.request_id if outer is None else outer}",
            name=params.name,
            # Lone surrogates or nesting past 1 000 levels: INVALID_ARGS,
            # answered by the registry like any bad arguments
            # (docs/contract.md#a11, docs/contract.md#a19).
            arguments=check_decoded(params.arguments) if params.arguments is not None else {},
            signal=controller.signal,
        )
        ticket = self._gate.enqueue(self._registry.execution_mode(call) == "exclusive")
        forward = self._progress.track(ctx, controller.signal)
        done = anyio.Event()
        token = anyio.lowlevel.current_token()
        outcome: list[ToolExecutionResult | BaseException] = []

        def run() -> None:
            try:
                admitted = self._gate.wait(ticket, controller.signal)
                try:
                    # Withdrawn while queued: the registry still answers
                    # (ABORTED_BEFORE_DISPATCH, published to its observers).
                    outcome.append(self._registry.execute(call))
                finally:
                    if admitted:
                        self._gate.leave(ticket)
                if forward is not None:
                    flush(FLUSH_S)  # its last update reaches the relay before the answer
            except BaseException as exc:
                outcome.append(exc)
            finally:
                try:
                    anyio.from_thread.run_sync(done.set, token=token)
                except anyio.RunFinishedError:  # pragma: no cover - the loop always joins first
                    pass

        try:
            threading.Thread(target=run, name=f"dshtools-mcp-{call.call_id}", daemon=True).start()
        except RuntimeError as exc:  # no thread to be had: this call does not run
            self._gate.drop(ticket)
            return _tool_result(exc)
        try:
            await done.wait()
        except anyio.get_cancelled_exc_class():
            # Abort first, from here, without waiting for the worker to
            # notice; then join, shielded, so the handler cannot finish (and
            # the server cannot exit) while the body still runs.
            controller.abort(self.stop_reason or CLIENT_CANCELLED)
            with anyio.CancelScope(shield=True):
                await done.wait()
                if forward is not None:
                    await self._progress.finish(forward, controller.signal, answered=False)
            raise
        if forward is not None:
            await self._progress.finish(forward, controller.signal, answered=True)
        return _tool_result(outcome[0], self._shape(params.name))

    # ------------------------------------------------------------ transport

    def _outgoing(self, item: _Outgoing) -> types.JSONRPCMessage | None:
        """What goes out for ``item``: a reply of the reader as is; an SDK
        answer under the client's own id, or nothing when its request was
        cancelled (``RequestIds.answer``); any other SDK message as is."""
        if isinstance(item, Reply):
            return types.JSONRPCError(
                jsonrpc="2.0", id=item.id, error=types.ErrorData(code=item.code, message=item.message)
            )
        message = item.message
        if isinstance(message, types.JSONRPCResponse | types.JSONRPCError):
            keep, outer = self._ids.answer(message.id)
            if not keep:
                return None
            return message.model_copy(update={"id": outer})
        return message

    def _read_loop(
        self,
        send: MemoryObjectSendStream[SessionMessage | Exception],
        answer: MemoryObjectSendStream[_Outgoing],
        token: anyio.lowlevel.EventLoopToken,
    ) -> None:
        """Reader thread: one JSON-RPC message per line of stdin. A line the
        SDK would drop although it carries a request id is answered here,
        through the writer, before the next line is read (``read_line``)."""
        pending = bytearray()
        try:
            while True:
                try:
                    chunk = os.read(self._in_fd, 65536)
                except OSError:
                    chunk = b""
                if not chunk:
                    break
                pending += chunk
                while (end := pending.find(b"\n")) >= 0:
                    line = bytes(pending[:end])
                    del pending[: end + 1]
                    if line.strip():
                        self._route(line, send, answer, token)
            if pending.strip():
                self._route(bytes(pending), send, answer, token)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.RunFinishedError):
            return
        if self.stop_reason is None:
            self.stop_reason = CONNECTION_CLOSED
        try:
            anyio.from_thread.run_sync(send.close, token=token)
        except anyio.RunFinishedError:  # pragma: no cover
            pass

    def _route(
        self,
        line: bytes,
        send: MemoryObjectSendStream[SessionMessage | Exception],
        answer: MemoryObjectSendStream[_Outgoing],
        token: anyio.lowlevel.EventLoopToken,
    ) -> None:
        read = read_line(line, self._ids)
        routed = self._validated(read) if isinstance(read, Forward) else read
        if isinstance(routed, SessionMessage):
            anyio.from_thread.run(send.send, routed, token=token)
        elif routed is not None:
            for reply in routed:
                anyio.from_thread.run(answer.send, reply, token=token)

    def _validated(self, forward: Forward) -> SessionMessage | list[Reply] | None:
        """The SDK's message for ``forward``; a request the SDK's envelope
        refuses is answered ``-32600`` under its own id, anything else it
        refuses is dropped (notifications and responses are never
        answered)."""
        try:
            return SessionMessage(types.jsonrpc_message_adapter.validate_python(forward.message, by_name=False))
        except Exception:
            if "method" not in forward.message or "id" not in forward.message:
                return None
            _, outer = self._ids.answer(forward.message["id"])
            return [Reply(outer, INVALID_REQUEST, "Invalid Request: not a valid MCP request envelope")]

    async def _write_loop(self, receive: MemoryObjectReceiveStream[_Outgoing]) -> None:
        broken = False
        async with receive:
            async for item in receive:
                message = self._outgoing(item)
                if broken or message is None:
                    continue
                data = _encode(message)
                try:
                    await anyio.to_thread.run_sync(_write_all, self._out_fd, data)
                except OSError:  # the client went away; keep draining
                    broken = True

    async def _watch_signals(
        self,
        serving: anyio.CancelScope,
        watching: anyio.CancelScope,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        # Listening until every call was joined: a second signal during the
        # join is swallowed here instead of raising KeyboardInterrupt into it.
        with watching, anyio.open_signal_receiver(*_STOP_SIGNALS) as received:
            task_status.started()
            async for signum in received:
                if self.signum is None:
                    self.signum = int(signum)
                    if self.stop_reason is None:
                        self.stop_reason = f"the MCP server is stopping ({_signals.Signals(signum).name})"
                serving.cancel()

    async def serve(self, handle_signals: bool) -> int:
        server: Server[Any] = Server(
            self._name, version=_version(), on_list_tools=self._list_tools, on_call_tool=self._call_tool
        )
        send_in, receive_in = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        send_out, receive_out = anyio.create_memory_object_stream[_Outgoing](0)
        reader = threading.Thread(
            target=self._read_loop,
            args=(send_in, send_out, anyio.lowlevel.current_token()),
            name="dshtools-mcp-stdin",
            daemon=True,
        )
        async with anyio.create_task_group() as outer:
            # The writer is outside the serving scope: the SDK's last
            # writes (errors for requests cut short) still reach stdout.
            outer.start_soon(self._write_loop, receive_out)
            self._progress.start(outer)
            with anyio.CancelScope() as serving:
                watching = anyio.CancelScope()
                if handle_signals:
                    await outer.start(self._watch_signals, serving, watching)
                reader.start()
                await server.run(receive_in, send_out, server.create_initialization_options())
            # server.run returned (or was cancelled) only after every call
            # handler finished its shielded join.
            watching.cancel()
            self._progress.close()
            send_out.close()
            receive_in.close()
        return 0 if self.signum is None else 128 + self.signum


def _version() -> str:
    from . import __version__

    return __version__


def _encode(message: types.JSONRPCMessage) -> bytes:
    """One line of UTF-8 JSON. A string the SDK cannot encode (a lone
    surrogate in an id the client sent) is written as a ``\\u`` escape, so
    the id goes back exactly as it came."""
    try:
        text = message.model_dump_json(by_alias=True, exclude_unset=True)
    except ValueError:  # pydantic_core.PydanticSerializationError
        plain = message.model_dump(mode="python", by_alias=True, exclude_unset=True)
        text = json.dumps(plain, ensure_ascii=True, separators=(",", ":"), default=str)
    return (text + "\n").encode("utf-8")


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


# ------------------------------------------------------------------ HTTP


def serve_http(
    registry: ToolRegistry,
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    token: str | None = None,
    name: str = "dshtools",
    allow_remote: bool = False,
    allowed_hosts: Sequence[str] = (),
    allowed_origins: Sequence[str] = (),
    session_idle_timeout: float | None = DEFAULT_SESSION_IDLE_TIMEOUT,
    signal: AbortSignal | None = None,
    on_ready: Callable[[str], object] | None = None,
) -> int:
    """Serve ``registry``'s tools as an MCP server named ``name`` over
    streamable HTTP at ``http://host:port/mcp``; block until stopped
    (docs/mcp.md#the-server-over-http).

    Tool calls take the same path as over stdio: each its own
    ``AbortController``, ``notifications/cancelled`` aborts it and joins the
    body, and a cancelled request gets no response (docs/contract.md#a19).

    * ``host`` must be a loopback address or ``localhost`` unless
      ``allow_remote`` (else ``ValueError``); ``port`` 0 picks a free port.
    * ``token``: every request must carry ``Authorization: Bearer <token>``
      (compared in constant time), else ``401``.
    * DNS-rebinding protection is always on: a ``Host`` or ``Origin`` that
      is not this machine (or the bound host, or in ``allowed_hosts`` /
      ``allowed_origins``; ``name:*`` allows any port) is refused (``421`` /
      ``403``).
    * ``session_idle_timeout``: seconds a session may go without a request
      in flight before it expires (default 600; ``None``: never).
    * ``on_ready(url)`` is called from the calling thread once the socket
      listens, before the first request is served.

    Stops when ``signal`` is aborted (returns ``0``) or, when called from
    the main thread, on SIGTERM or SIGINT (returns ``128 + signum``).
    Either way every call in flight was aborted (its client gets the
    registry's ``ABORTED`` result) and joined, and every session closed,
    before this returns. The registry is not closed (it is the caller's).

    Threads: the asyncio event loop (``anyio.run``) runs uvicorn and the
    protocol in the calling thread; each call runs ``registry.execute`` on
    a thread of its own, as over stdio. Raises ``OSError`` when the address
    cannot be bound, ``RuntimeError`` when called from a running event loop.
    """
    if session_idle_timeout is not None and not session_idle_timeout > 0:
        raise ValueError(
            f"session_idle_timeout must be a positive number of seconds or None, not {session_idle_timeout!r}"
        )
    from ._mcp import http_server as _http  # uvicorn and starlette: imported only to serve HTTP

    listener = _http.bind(host, port, allow_remote=allow_remote)
    try:
        bound_host, bound_port = listener.getsockname()[:2]
        shown = f"[{bound_host}]" if ":" in bound_host else bound_host
        server = _HttpServer(registry, name)
        if on_ready is not None:
            on_ready(f"http://{shown}:{bound_port}{_http.PATH}")
        status: int = anyio.run(
            server.serve_http,
            listener,
            _http.security(host, allowed_hosts, allowed_origins),
            session_idle_timeout,
            token,
            threading.current_thread() is threading.main_thread(),
            signal,
        )
        return status
    finally:
        listener.close()


SERVER_STOPPING = "the MCP server is stopping"


class _HttpServer(_StdioServer):
    """The stdio server's call and list handlers (transport-neutral: they
    use neither descriptor) behind the SDK's streamable HTTP session
    manager. Calls in flight are tracked so that stopping the server can
    abort and join every one of them before the sessions close."""

    def __init__(self, registry: ToolRegistry, name: str) -> None:
        super().__init__(registry, name, -1, -1)
        from ._mcp.http_server import SessionIds

        self._ids = self._http_ids = SessionIds()
        self._calls: set[anyio.CancelScope] = set()
        self._drained: anyio.Event | None = None

    async def _tracked_call(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        if self.stop_reason is None:
            with anyio.CancelScope() as scope:
                self._calls.add(scope)
                try:
                    return await self._call_tool(ctx, params)
                finally:
                    self._calls.discard(scope)
                    if not self._calls and self._drained is not None:
                        self._drained.set()
        # The server is stopping: the call was aborted and joined (or never
        # started); its client still gets an answer.
        text = f"Error: tool call aborted: {self.stop_reason or SERVER_STOPPING}"
        return types.CallToolResult(content=[text_block({"type": "text", "text": text})], is_error=True)

    async def _end_calls(self, reason: str) -> None:
        """Abort every call in flight with ``reason`` and wait until each
        was joined; calls that arrive from now on do not run."""
        self.stop_reason = reason
        self._drained = anyio.Event()
        for scope in list(self._calls):
            scope.cancel()
        if self._calls:
            await self._drained.wait()

    async def _watch_http_signals(
        self,
        stopping: anyio.Event,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        # Listening until the server stopped: a second signal during the
        # join is swallowed here instead of raising KeyboardInterrupt into it.
        with anyio.open_signal_receiver(*_STOP_SIGNALS) as received:
            task_status.started()
            async for signum in received:
                if self.signum is None:
                    self.signum = int(signum)
                    stopping.set()

    async def serve_http(
        self,
        listener: socket.socket,
        settings: Any,
        idle_timeout: float | None,
        token: str | None,
        handle_signals: bool,
        stop: AbortSignal | None,
    ) -> int:
        from ._mcp import http_server as _http

        server: Server[Any] = Server(
            self._name, version=_version(), on_list_tools=self._list_tools, on_call_tool=self._tracked_call
        )
        manager = _http.SessionManager(server, security_settings=settings, session_idle_timeout=idle_timeout)
        web = _http.web_server(_http.asgi_app(manager, token, self._http_ids))
        stopping = anyio.Event()

        loop = asyncio.get_running_loop()

        def stop_now(_signal: AbortSignal) -> None:
            # From whichever thread aborts ``stop``, the loop's own included.
            with contextlib.suppress(RuntimeError):  # the loop already ended
                loop.call_soon_threadsafe(stopping.set)

        served = anyio.Event()

        async def run_web() -> None:
            try:
                await web.serve([listener])
            finally:
                served.set()
                stopping.set()

        with contextlib.ExitStack() as listening:
            if stop is not None:
                listening.enter_context(stop.add_listener(stop_now))
            async with anyio.create_task_group() as tasks:
                watching = anyio.CancelScope()
                if handle_signals:

                    async def watch(*, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
                        with watching:
                            await self._watch_http_signals(stopping, task_status=task_status)

                    await tasks.start(watch)
                self._progress.start(tasks)
                async with manager.run():
                    tasks.start_soon(run_web)
                    await stopping.wait()
                    if self.signum is not None:
                        reason = f"{SERVER_STOPPING} ({_signals.Signals(self.signum).name})"
                    else:
                        reason = SERVER_STOPPING
                    await self._end_calls(reason)
                    # uvicorn stops accepting, lets the answers of the calls
                    # just ended reach their clients (the sessions are still
                    # open), then cuts what stays open past its grace.
                    web.should_exit = True
                    await served.wait()
                # Every session is closed now.
                watching.cancel()
                self._progress.close()
        return 0 if self.signum is None else 128 + self.signum
