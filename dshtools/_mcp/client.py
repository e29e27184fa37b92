"""``MCPClient``: the tools of an MCP server as registry tools whose
cancellation reaches the server (docs/mcp.md#the-client).

Guarantees:

* **A remote call is a body.** Each remote tool is a ``ToolDefinition`` whose
  backend is the client: the registry's whole pipeline (validation against
  the server's ``inputSchema``, policies, approval, timeouts, batches,
  observers) runs before anything is sent, and the call's one result comes
  back through it.
* **The request is the dispatch.** A call claims its dispatch in the one
  place that writes its ``tools/call`` request to the server; an abort that
  wins that race withdraws it (``ABORTED_BEFORE_DISPATCH``: the server saw
  nothing). After the claim, an abort sends exactly one
  ``notifications/cancelled`` naming that request's id (the SDK's own
  courtesy cancel is switched off for these requests) once the request is
  on the wire, and the call settles when the server answers or
  ``cancel_grace`` seconds passed; ``meta["remote"]`` says which
  (``"answered"`` or ``"cancelled, no answer in 2.0 s"``). The client never
  stops waiting for a call without settling it, and never cancels another
  request.
* **Results.** ``isError`` → ``REMOTE_TOOL_ERROR`` with the server's text;
  ``structuredContent`` → ``value`` (else the text of a single text block,
  else ``None``); the server's content blocks are the call's content, as
  sent. A JSON-RPC error (any code) or a result that is not a valid
  ``CallToolResult`` → ``REMOTE_PROTOCOL_ERROR``. A server that exits or
  closes its output mid-call → ``WORKER_LOST`` for every call in flight;
  the next call starts the server again (``restart=False``: it is refused,
  ``ABORTED_BEFORE_DISPATCH``). Over HTTP, a call (or a listing) the server
  refused with ``404`` because it no longer knows the session is sent
  again, once, in a new session.
* **Bounded waits.** Every wait ends by a bound of ``_mcp.bounds``
  (``connect_timeout``, ``cancel_grace``, ``kill_grace``); a call's wait
  for its answer ends with its signal.
* **Close.** ``close()`` refuses new calls, cancels the calls in flight
  (each settles within ``cancel_grace``), ends a handshake in progress,
  closes the session, and for a stdio server closes its stdin, sends
  SIGTERM to its process group and SIGKILL ``kill_grace`` seconds later,
  and waits until no process of its session is left; then it joins the
  client's event-loop thread.
* **Progress.** Every ``tools/call`` asks for progress
  (``_meta.progressToken``); the server's ``notifications/progress`` for it
  are reported as the call's progress (``run.report_progress``: the
  registry's progress observers see them, coalesced).
* **HTTP.** ``MCPClient.http`` speaks streamable HTTP through the SDK's
  transport with the same claim and cancel; an HTTP error status the
  transport saw is named in the error (``HTTP 401 Unauthorized``).

Threads: one event-loop thread per client (``dshtools-mcp-client``) runs the
SDK session, the transport and every request; the public methods are
synchronous, thread-safe, and block the calling thread (never the loop).
The abort of a call's signal is handled in the aborting thread (withdrawal)
and then on the loop (the cancel notification).

This module owns the public class, the calls' life on the loop (claiming a
connection, the cancel and its grace, settling) and ``close()``; the session,
the transports and the server's process live in ``_mcp.transport``, the
mapping of the server's answers to reports in ``_mcp.results``.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import threading
import weakref
from collections.abc import Callable, Collection, Coroutine, Mapping, Sequence
from concurrent.futures import Future
from typing import Any, Final, TypeVar

import anyio
import mcp_types as types
from mcp.shared.exceptions import MCPError

from .._backends.base import BodyReport, Error, NotInvoked, Value, WorkerLost
from .._core.closing import Closing
from .._core.errors import AbortError, safe_str
from .._core.freeze import thaw
from .._core.interrupts import after_fork_in_child
from .._registry.registry import ToolRegistry
from .._signal import AbortSignal
from .._types.tools import ToolDefinition, ToolRunContext
from .bounds import WRITE_AT_LEAST, Bounds, first_of
from .results import REMOTE_PROTOCOL_ERROR, REMOTE_TOOL_ERROR, first_leaf, reason_text, report_of
from .transport import Connection, RemoteCall, Server

__all__ = ["REMOTE_PROTOCOL_ERROR", "REMOTE_TOOL_ERROR", "MCPClient"]

_T = TypeVar("_T")

# Environment variables a server inherits when ``env`` does not name them
# (the SDK's own choice for stdio servers).
_INHERITED_ENV: Final = ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER")

CLIENT_CLOSED: Final = "the MCPClient was closed during the call"

# Clients alive in this process, for the fork handler below.
_clients: weakref.WeakSet[MCPClient] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    # The child has no event-loop thread, and the servers are the parent's:
    # every client is closed in the child without touching them, so a call
    # there is refused instead of waiting for a loop that does not run.
    for client in list(_clients):
        client._lock = threading.Lock()
        client._closed = True
        client._calls = set()


after_fork_in_child(_after_fork_in_child)


class _RemoteBody:
    """The ``execute`` of a remote tool's definition. The registry never
    calls it: the client, the tool's backend, sends the request instead.
    Called directly it raises ``RuntimeError``."""

    __slots__ = ("client", "name")

    def __init__(self, client: MCPClient, name: str) -> None:
        self.client = client
        self.name = name

    def __call__(self, args: Any, run: ToolRunContext) -> object:
        raise RuntimeError(f"remote tool {self.name!r} runs only through a ToolRegistry (its backend is the MCPClient)")


_Progress = Callable[[float, "float | None", "str | None"], None]
"""``run.report_progress`` of a remote call: never blocks, never raises."""


def _progress_callback(report: _Progress) -> Callable[[float, float | None, str | None], Coroutine[Any, Any, None]]:
    """The SDK's progress callback for a call whose body reports to
    ``report``: a server's ``notifications/progress`` become the call's own
    progress (the registry's progress observers see them)."""

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        report(progress, total, message)

    return on_progress


def _stopped(call: RemoteCall) -> BaseException:
    """What ends a claimed call that was stopped before its answer: the
    registry classifies an ``AbortError`` (``ABORTED`` while its signal is
    in force); a ``close()`` has no signal in force, so it is a lost
    worker."""
    return WorkerLost(CLIENT_CLOSED) if call.reason == CLIENT_CLOSED else AbortError(call.reason)


class MCPClient(Closing):
    """A synchronous client of one MCP server (docs/mcp.md#the-client).

    Made by ``MCPClient.stdio(command, ...)`` or ``MCPClient.http(url,
    ...)``, which complete the MCP handshake before returning
    (``ConnectionError`` when they cannot). A context manager; ``close()``
    is idempotent. Every public method is thread-safe and blocks only the
    calling thread; every wait has a bound (docs/mcp.md#bounds).
    """

    def __init__(
        self,
        command: Sequence[str] | None,
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        url: str | None = None,
        headers: Mapping[str, str] | None = None,
        cancel_grace: float,
        restart: bool,
        connect_timeout: float,
        kill_grace: float,
    ) -> None:
        if url is None:
            if isinstance(command, (str, bytes)) or not command or not all(isinstance(a, str) for a in command):
                raise TypeError("command must be a non-empty sequence of strings (the server's argv)")
            self._command: list[str] = list(command)
        else:
            if not isinstance(url, str) or not url.startswith(("http://", "https://")):
                raise ValueError(f"url must be an http:// or https:// URL, got {url!r}")
            if headers is not None and not all(isinstance(k, str) and isinstance(v, str) for k, v in headers.items()):
                raise TypeError("headers must map str to str")
            self._command = [url]
        self._url = url
        bounds = Bounds(cancel_grace=cancel_grace, connect_timeout=connect_timeout, kill_grace=kill_grace)
        base = {k: os.environ[k] for k in _INHERITED_ENV if k in os.environ}
        self._server = Server(
            self._command, env=base | dict(env or {}), cwd=cwd, url=url, headers=dict(headers or {}), bounds=bounds
        )
        self._grace = bounds.cancel_grace
        self._restart = bool(restart)
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._closed = False
        self._calls: set[RemoteCall] = set()  # submitted and not settled; guarded by _lock
        self._tasks: set[asyncio.Task[None]] = set()  # the calls' coroutines; loop only
        self._servers: set[asyncio.Task[None]] = set()  # the connections' coroutines; loop only
        self._conn: Connection | None = None  # loop only
        self._backend = _ClientBackend(self)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run_loop, name="dshtools-mcp-client", daemon=True)
        self._thread.start()
        _clients.add(self)
        try:
            self._on_loop(self._connected())
        except BaseException:
            self.close()
            raise

    @classmethod
    def stdio(
        cls,
        command: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        cancel_grace: float = 2.0,
        restart: bool = True,
        connect_timeout: float = 30.0,
        kill_grace: float = 2.0,
    ) -> MCPClient:
        """Start the server ``command`` (its argv) in a new session and
        process group, speak MCP over its stdin/stdout, and return the
        connected client. ``env`` adds to (or overrides) the variables the
        server inherits, which are only ``HOME``, ``LOGNAME``, ``PATH``,
        ``SHELL``, ``TERM`` and ``USER``; ``cwd`` is its working directory;
        the server's stderr is this process's. ``cancel_grace``: seconds a
        cancelled call waits for the server's answer. ``restart``: start
        the server again on the next call after it exited.
        ``connect_timeout``: seconds a start (the first and every restart)
        may take up to the end of the MCP handshake. ``kill_grace``: seconds
        between SIGTERM and SIGKILL to the server's process group
        (docs/mcp.md#bounds). Raises ``TypeError``/``ValueError`` for bad
        arguments, ``ConnectionError`` when the server cannot be started or
        does not complete the handshake in time."""
        return cls(
            command,
            env=env,
            cwd=cwd,
            cancel_grace=cancel_grace,
            restart=restart,
            connect_timeout=connect_timeout,
            kill_grace=kill_grace,
        )

    @classmethod
    def http(
        cls,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        cancel_grace: float = 2.0,
        connect_timeout: float = 30.0,
        kill_grace: float = 2.0,
    ) -> MCPClient:
        """Connect to the MCP server at ``url`` over streamable HTTP (the
        SDK's transport; ``headers`` go with every request, e.g.
        ``{"Authorization": "Bearer ..."}``) and complete the handshake.
        A connection that ends is made again on the next call; a call the
        server refuses with ``404`` for a session it no longer knows (it
        restarted, or the session expired) is sent again, once, in a new
        session. ``connect_timeout``: seconds a connection (the first and
        every new session) may take up to the end of the MCP handshake;
        ``kill_grace``: seconds ``close()`` gives the request that ends the
        session (docs/mcp.md#bounds). Raises ``ValueError`` for a URL that
        is not ``http(s)://``, ``ConnectionError`` when the server cannot
        be reached or refuses: the message names the HTTP status (``HTTP
        401 Unauthorized``)."""
        return cls(
            None,
            url=url,
            headers=headers,
            cancel_grace=cancel_grace,
            restart=True,
            connect_timeout=connect_timeout,
            kill_grace=kill_grace,
        )

    # ------------------------------------------------------------- public

    @property
    def server_pid(self) -> int | None:
        """The pid of the running server process (also its process group
        and session id), or ``None`` while none runs."""
        conn = self._conn
        return None if conn is None or not conn.alive else conn.pid

    def list_tools(self) -> list[dict[str, Any]]:
        """The server's tools as plain data: ``[{"name", "description",
        "inputSchema", "outputSchema"}, ...]`` (``outputSchema`` ``None``
        when the tool declares none), fetched from the server now (starting
        it again if it exited and ``restart`` allows). Raises
        ``RuntimeError`` after ``close()``, ``ConnectionError`` when the
        server cannot be reached, ``TimeoutError`` when it does not list
        its tools within ``connect_timeout`` seconds."""
        tools = self._on_loop(self._list_tools())
        return [
            {
                "name": t.name,
                "description": t.description or "",
                "inputSchema": dict(t.input_schema),
                "outputSchema": None if t.output_schema is None else dict(t.output_schema),
            }
            for t in tools
        ]

    def tool(self, name: str, /, **options: Any) -> ToolDefinition:
        """The server's tool ``name`` as a ``ToolDefinition`` whose backend
        is this client: ``parameters`` is the tool's ``inputSchema``,
        ``output_schema`` its ``outputSchema``; ``options`` are further
        ``ToolDefinition`` keywords (``timeout``, ``is_concurrency_safe``,
        ``render``, ``finalize_content``; a ``name`` here renames the
        registry tool). Raises ``KeyError`` for a tool the server does not
        list, ``TypeError`` for ``parameters``, ``output_schema``,
        ``execute``, ``description`` or ``backend`` (the server's and the
        client's to give)."""
        for spec in self.list_tools():
            if spec["name"] == name:
                return self._definition(spec, options.pop("name", name), options)
        raise KeyError(f"the MCP server has no tool named {name!r}")

    def register_tools(
        self,
        registry: ToolRegistry,
        *,
        prefix: str = "",
        include: Collection[str] | None = None,
        exclude: Collection[str] = (),
        timeout: float | None = None,
        **options: Any,
    ) -> Callable[[], None]:
        """Register the server's tools on ``registry`` as ``prefix + name``
        (only those in ``include`` when given, none in ``exclude``), each
        with ``timeout`` (seconds, read by ``TimeoutPolicy``) and the other
        ``ToolDefinition`` keywords in ``options``. All or nothing: a name
        already taken raises ``ValueError`` and registers none. Returns one
        idempotent ``unregister()`` for all of them."""
        definitions = [
            self._definition(spec, prefix + spec["name"], {"timeout": timeout, **options})
            for spec in self.list_tools()
            if (include is None or spec["name"] in include) and spec["name"] not in exclude
        ]
        undo: list[Callable[[], None]] = []

        def unregister() -> None:
            while undo:
                undo.pop()()

        try:
            for definition in definitions:
                undo.append(registry.register(definition))
        except BaseException:
            unregister()
            raise
        return unregister

    def close(self) -> None:
        """Cancel every call in flight (each settles within
        ``cancel_grace``), end a handshake in progress, close the session,
        stop the server's whole process group (SIGTERM, SIGKILL after
        ``kill_grace``) and wait until it is gone, then stop the client's
        thread. Returns within about ``max(cancel_grace, 1 s) +
        kill_grace`` (docs/mcp.md#bounds). Idempotent; a call made after it
        is refused (``ABORTED_BEFORE_DISPATCH``)."""
        with self._lock:
            first = not self._closed
            self._closed = True
            calls = list(self._calls)
        if first and self._thread.is_alive():
            for call in calls:
                call.on_abort(CLIENT_CLOSED)
            try:
                asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result()
            finally:
                self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not threading.current_thread() and self._thread.is_alive():
            self._thread.join()

    # ------------------------------------------------------------ helpers

    def _definition(self, spec: Mapping[str, Any], name: str, options: dict[str, Any]) -> ToolDefinition:
        fixed = sorted({"backend", "output_schema", "parameters", "execute", "description"} & set(options))
        if fixed:
            raise TypeError(f"{', '.join(fixed)} of a remote tool come from the MCP server and the client")
        return ToolDefinition(
            name,
            spec["description"],
            spec["inputSchema"] or {"type": "object"},
            _RemoteBody(self, spec["name"]),
            output_schema=spec["outputSchema"],
            backend=self._backend,
            **options,
        )

    def _run_loop(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_forever()
        finally:
            pending = [t for t in asyncio.all_tasks(self._loop) if not t.done()]
            for task in pending:
                task.cancel()
            if pending:
                self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self._loop.run_until_complete(self._loop.shutdown_asyncgens())
            self._loop.close()

    def _on_loop(self, coro: Coroutine[Any, Any, _T]) -> _T:
        """Run ``coro`` on the loop and wait for it in the calling thread."""
        with self._lock:
            if self._closed:
                coro.close()
                raise RuntimeError("the MCPClient is closed")
            future: Future[_T] = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return future.result()

    def _submit(self, name: str, arguments: Any, signal: AbortSignal, progress: _Progress | None = None) -> RemoteCall:
        call = RemoteCall(name, thaw(arguments), f"dshtools-{next(self._ids)}")
        with self._lock:
            if self._closed:
                raise RuntimeError("the MCPClient is closed")
            self._calls.add(call)
            self._loop.call_soon_threadsafe(self._start_call, call, progress)
        # After the loop has it: a listener that runs now (already aborted)
        # withdraws the queued call, and the loop sees it withdrawn.
        signal.add_listener(lambda s: call.on_abort(s.reason))
        return call

    # ---------------------------------------------------------- the loop

    def _start_call(self, call: RemoteCall, progress: _Progress | None) -> None:
        task = self._loop.create_task(self._perform(call, progress))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _connected(self) -> Connection:
        """The live connection, starting the server when none runs."""
        conn = self._conn
        if conn is None or not conn.alive:
            if conn is not None and not self._restart:
                raise ConnectionError("the MCP server exited and the client was made with restart=False")
            if conn is not None:
                conn.stop.set()  # a replaced incarnation ends (a forgotten HTTP session)
            conn = self._conn = Connection()
            task = self._loop.create_task(self._server.serve(conn))
            self._servers.add(task)
            task.add_done_callback(self._servers.discard)
        await conn.ready.wait()
        if conn.error is not None:
            what = f"at {self._url} could not be reached" if self._url else f"{self._command!r} could not be started"
            cause = first_leaf(conn.error)
            text = safe_str(cause) or type(cause).__name__
            if isinstance(cause, MCPError) and self._url is None:
                text += " (the server exited or closed its output before the MCP handshake; its stderr says why)"
            raise ConnectionError(f"the MCP server {what}: {text}") from conn.error
        if not conn.alive:
            raise ConnectionError("the MCP server exited before the call could be sent")
        return conn

    async def _list_tools(self) -> list[types.Tool]:
        conn = await self._connected()
        try:
            return await self._fetch_tools(conn)
        except MCPError:
            if not conn.refused:
                raise
        return await self._fetch_tools(await self._connected())  # in a new session, once

    async def _fetch_tools(self, conn: Connection) -> list[types.Tool]:
        """Every page of ``tools/list``, all within ``connect_timeout``
        (``TimeoutError`` past it)."""
        assert conn.dispatcher is not None
        tools: list[types.Tool] = []
        cursor: str | None = None
        limit = self._server.bounds.connect_timeout
        with anyio.move_on_after(limit):
            while True:
                params = {} if cursor is None else {"cursor": cursor}
                raw = await conn.dispatcher.send_raw_request("tools/list", params or None, {})
                page = types.ListToolsResult.model_validate(raw, by_name=False)
                tools.extend(page.tools)
                cursor = page.next_cursor
                if not cursor:
                    return tools
        raise TimeoutError(f"the MCP server did not list its tools in {limit:g} s")

    async def _perform(self, call: RemoteCall, progress: _Progress | None) -> None:
        try:
            await self._perform_inner(call, progress)
        except BaseException as exc:  # never leave the registry waiting
            call.settle(BodyReport(outcome=NotInvoked(exc) if not call.claimed else Error(exc)))
            if not isinstance(exc, Exception):
                raise
        finally:
            with self._lock:
                self._calls.discard(call)

    async def _perform_inner(self, call: RemoteCall, progress: _Progress | None) -> None:
        conn = self._conn
        if conn is None or not conn.alive or conn.dispatcher is None:
            # The server is (re)starting: wait for it, or for the withdrawal.
            conn = await self._connection_for(call)
            if conn is None:
                return
        answer, answered, remote = await self._attempt(conn, call, progress)
        if not call.withdrawn and answered and remote is None and call.request_id in conn.refused:
            # The server no longer knows the session (HTTP 404), so it never
            # ran the call: send it again, once, in a new session.
            again = await self._connection_for(call)
            if again is None:
                call.settle(BodyReport(outcome=Error(_stopped(call))))
                return
            conn = again
            answer, answered, remote = await self._attempt(conn, call, progress)
        if call.withdrawn:
            return
        if not answered:
            # Cancelled, and the grace passed without an answer.
            call.settle(BodyReport(outcome=Error(_stopped(call)), meta={"remote": remote}))
            return
        lost = isinstance(answer, MCPError) and conn.lost(answer)
        if remote is not None and isinstance(answer, MCPError) and (not lost or self._url is not None):
            # A JSON-RPC error after our cancel answers the cancel (the SDK's
            # HTTP server sends -32800), and over HTTP so does the request's
            # stream ending without a response (a server that follows
            # JSON-RPC and answers a cancelled request with nothing): the
            # call was aborted, not faulty.
            answer = AbortError(call.reason)
        report = report_of(answer, remote, conn.http_status, lost=lost)
        if call.reason == CLIENT_CLOSED and isinstance(report.outcome, Value):
            report = BodyReport(outcome=Error(WorkerLost(CLIENT_CLOSED)), meta=report.meta)
        call.settle(report)

    async def _attempt(
        self, conn: Connection, call: RemoteCall, progress: _Progress | None
    ) -> tuple[object, bool, str | None]:
        """Send ``call``'s request on ``conn`` and wait for its answer or,
        after an abort, for the cancel's grace: ``(answer, answered,
        meta["remote"] or None when no cancel went out)``."""
        loop = self._loop
        dispatcher = conn.dispatcher
        assert dispatcher is not None
        scope = anyio.CancelScope()
        done = anyio.Event()
        call.handed_off = anyio.Event()
        cancelling: list[asyncio.Task[str]] = []

        def on_abort() -> None:  # on the loop
            if done.is_set() or cancelling:
                return
            if call.withdrawn:  # never written: nothing to cancel
                scope.cancel()
                return
            cancelling.append(loop.create_task(self._cancel(conn, call, done, scope)))

        def wake() -> None:
            loop.call_soon_threadsafe(on_abort)

        with call._lock:
            call.wake = wake
            requested = call.abort_requested
        if requested:
            on_abort()
        conn.unwritten[call.request_id] = call
        answer: object = None
        answered = False
        options: dict[str, Any] = {"request_id": call.request_id, "cancel_on_abandon": False}
        if progress is not None:
            # The SDK then asks for progress (_meta.progressToken) and hands
            # this request's notifications to it, on the loop.
            options["on_progress"] = _progress_callback(progress)
        try:
            with scope:
                answer = await dispatcher.send_raw_request(
                    "tools/call",
                    {"name": call.name, "arguments": call.arguments},
                    options,  # type: ignore[arg-type]
                )
                answered = True
        except Exception as exc:
            answer, answered = exc, True
        finally:
            done.set()
            conn.unwritten.pop(call.request_id, None)
        remote = (await cancelling[0]) if cancelling else None
        return answer, answered, remote

    async def _connection_for(self, call: RemoteCall) -> Connection | None:
        """The live connection for ``call`` (starting the server, or a new
        session, when needed; bounded by ``connect_timeout``), or ``None``
        once the call's abort was requested while it waited (a call not yet
        written is then withdrawn). A failure to connect settles the call
        (``NotInvoked``) and returns ``None``."""
        loop = self._loop
        aborted = anyio.Event()

        def wake() -> None:
            loop.call_soon_threadsafe(aborted.set)

        with call._lock:
            call.wake = wake
            if call.abort_requested:
                return None
        result: list[Connection] = []
        failure: list[Exception] = []
        got = anyio.Event()

        async def connect() -> None:
            try:
                result.append(await self._connected())
            except Exception as exc:
                failure.append(exc)
            got.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(connect)
            await first_of(got, aborted)
            if call.abort_requested:
                tg.cancel_scope.cancel()
                return None
            await got.wait()
        if failure:
            call.settle(BodyReport(outcome=NotInvoked(failure[0])))
            return None
        return result[0]

    async def _cancel(self, conn: Connection, call: RemoteCall, done: anyio.Event, scope: anyio.CancelScope) -> str:
        """Send the one ``notifications/cancelled`` for ``call`` once its
        request is on the wire, then wait up to the grace for an answer.
        The request's write and the cancel's get at least
        ``WRITE_AT_LEAST`` whatever the grace (a grace of 0 still cancels).
        Stops the request's wait (``scope``) when the grace passed without
        an answer. Returns what ``meta["remote"]`` says."""
        assert call.handed_off is not None and conn.dispatcher is not None
        now = anyio.current_time()
        answer_by = now + self._grace
        write_by = now + max(self._grace, WRITE_AT_LEAST)
        with anyio.move_on_at(write_by):
            await first_of(call.handed_off, done)
            if not done.is_set():
                await conn.dispatcher.notify(
                    "notifications/cancelled",
                    {"requestId": call.request_id, "reason": reason_text(call.reason)},
                )
        with anyio.move_on_at(answer_by):
            await done.wait()
        if done.is_set():
            return "answered"
        scope.cancel()  # stop waiting for the request (no second cancel: the SDK's is off)
        return f"cancelled, no answer in {self._grace:.1f} s"

    async def _shutdown(self) -> None:
        """Loop side of ``close()``: the calls in flight settle (their
        cancels went out, each waits at most the grace), then the server
        stops."""
        calls = list(self._tasks)
        if calls:
            await asyncio.gather(*calls, return_exceptions=True)
        conn = self._conn
        if conn is not None:
            conn.stop.set()
            await conn.gone.wait()
        servers = list(self._servers)  # an earlier incarnation still stopping
        if servers:
            await asyncio.gather(*servers, return_exceptions=True)


class _ClientBackend:
    """The backend of every remote tool of one client: ``submit`` hands the
    call to the client's loop; the registry waits on the returned
    ``RemoteCall``. ``close()`` does nothing (the client is closed by its
    owner)."""

    def __init__(self, client: MCPClient) -> None:
        self._client = client

    def validate(self, name: str, body: object) -> None:
        if not isinstance(body, _RemoteBody) or body.client is not self._client:
            raise ValueError(f"tool {name!r}: an MCPClient runs only the remote tools it made")

    def submit(self, body: object, args: object, run: ToolRunContext) -> RemoteCall:
        assert isinstance(body, _RemoteBody)
        return self._client._submit(body.name, args, run.signal, run.report_progress)

    def close(self) -> None:
        pass
