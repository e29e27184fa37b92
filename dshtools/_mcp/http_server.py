"""The streamable HTTP transport of the MCP server (``dshtools.mcp.serve_http``,
docs/mcp.md#the-server-over-http): the SDK's ``StreamableHTTPSessionManager``
behind a bearer-token check, served by uvicorn on a socket bound here.

This module knows nothing of the registry: it serves whatever low-level
``Server`` it is given and owns only what HTTP adds.

Guarantees:

* **Loopback unless told otherwise.** ``bind`` refuses a host that is not a
  loopback address (or ``localhost``) unless ``allow_remote`` is given.
* **A bearer token, compared in constant time.** With a ``token``, every
  HTTP request must carry ``Authorization: Bearer <token>``
  (``hmac.compare_digest`` on the UTF-8 bytes); any other request is
  answered ``401`` with ``WWW-Authenticate: Bearer`` before it reaches the
  MCP session manager.
* **DNS-rebinding protection** is always on: the SDK's
  ``TransportSecuritySettings`` accept a ``Host`` naming a loopback address
  or ``localhost`` (any port; for a non-loopback bind also the bound host)
  and an ``Origin`` on those hosts, plus what the caller adds. Another
  ``Host`` is answered ``421``, another ``Origin`` ``403``.
* **Idle sessions expire** after ``session_idle_timeout`` seconds with no
  request in flight and no open stream (the SDK's timer); the session's id
  then answers ``404``.
* **A cancelled request gets no response** (docs/contract.md#a19): the SDK's
  2025-era transport ends the stream of a request that settled unanswered
  with a ``-32800`` error; here that stream is closed with nothing written
  for the request instead.
* **Ids are matched exactly as sent** (docs/contract.md#a19): the SDK folds
  ``"10"``, ``"1_0"`` and ``10`` into one id, so each request's id is
  replaced, on its way in, by one of the server's own making (unique per
  server), and put back in the response; a ``notifications/cancelled``
  reaches the request of its session whose id has exactly its type and
  value, or none. A request reusing an id still in flight in its session
  is answered ``-32600`` under that id. A request without a session id (an
  ``initialize``: every client starts at id 1) belongs to a session of its
  own, so concurrent ones never collide (docs/contract.md#a25).
* Only the path ``/mcp`` is served; any other path is ``404``.
"""

from __future__ import annotations

import contextlib
import hmac
import ipaddress
import itertools
import json
import socket
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final

import uvicorn
from mcp.server.streamable_http import StreamableHTTPServerTransport
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE, TransportSecuritySettings
from mcp_types import RequestId
from starlette.types import Message, Receive, Scope, Send

from .._interop.jsonrpc import INVALID_REQUEST, RequestIds, WireId

__all__ = [
    "PATH",
    "SessionIds",
    "SessionManager",
    "WebServer",
    "asgi_app",
    "bind",
    "is_loopback",
    "security",
    "web_server",
]

PATH: Final = "/mcp"
"""The one path the server answers."""

_LOCAL_NAMES: Final = ("127.0.0.1", "localhost", "[::1]")


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``) is this machine only."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def bind(host: str, port: int, *, allow_remote: bool) -> socket.socket:
    """A listening TCP socket on ``host:port`` (``port`` 0: a free one).

    Raises ``ValueError`` for a non-loopback ``host`` without
    ``allow_remote``, ``OSError`` when the address cannot be bound."""
    if not allow_remote and not is_loopback(host):
        raise ValueError(
            f"refusing to serve MCP on {host!r}, which is not a loopback address: "
            "pass allow_remote=True (--allow-remote) to accept connections from other machines"
        )
    infos = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM)
    family, kind, proto, _, address = infos[0]
    listener = socket.socket(family, kind, proto)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(address)
        listener.listen(128)
    except BaseException:
        listener.close()
        raise
    listener.set_inheritable(False)
    return listener


def security(
    host: str, allowed_hosts: Sequence[str] = (), allowed_origins: Sequence[str] = ()
) -> TransportSecuritySettings:
    """DNS-rebinding protection for a server bound to ``host``: loopback
    names (and ``host`` itself) on any port, plus the caller's own
    ``Host`` values and origins (exact, or ``name:*`` for any port)."""
    names = list(_LOCAL_NAMES)
    bound = f"[{host.strip('[]')}]" if ":" in host.strip("[]") else host
    if bound not in names:
        names.append(bound)
    hosts = [*names, *(f"{name}:*" for name in names), *allowed_hosts]
    origins = [
        *(f"{scheme}://{name}" for scheme in ("http", "https") for name in names),
        *(f"{scheme}://{name}:*" for scheme in ("http", "https") for name in names),
        *allowed_origins,
    ]
    return TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins)


class _UnansweredTransport(StreamableHTTPServerTransport):
    """The SDK's transport, except that a request which settled without a
    response (the client cancelled it) gets none: its stream ends empty."""

    async def _terminate_unanswered_request(self, request_id: RequestId) -> None:
        # The transport keys a request's streams by the id's text.
        self.close_sse_stream(str(request_id))


class SessionManager(StreamableHTTPSessionManager):
    """The SDK's session manager whose sessions never answer a cancelled
    request (``_UnansweredTransport``)."""

    def _admit_session(self, requestor: Any) -> StreamableHTTPServerTransport | None:
        transport = super()._admit_session(requestor)
        if transport is not None:
            # Same state, one overridden method: nothing else differs.
            transport.__class__ = _UnansweredTransport
        return transport


_App = Callable[[Scope, Receive, Send], Awaitable[None]]


async def _plain(send: Send, status: int, text: str, headers: Sequence[tuple[bytes, bytes]] = ()) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"text/plain; charset=utf-8"), *headers],
        }
    )
    await send({"type": "http.response.body", "body": text.encode("utf-8")})


_INNER_PREFIX: Final = "dshtools-h"
# A request's key: its session, and its id's type and value as the client sent it.
_Key = tuple[str | None, type, WireId]


class SessionIds(RequestIds):
    """The client's request ids, per session, ↔ the ids the SDK sees.

    Invariants (under ``_guard``): ``_client`` and ``_sdk`` are inverse
    maps of the requests in flight; an inner id is never reused; a request
    outside any session is keyed by its inner id, so it shares its key
    with no other request and no cancel names it. ``outer_of`` (what the
    call handler names a call by) answers from them."""

    def __init__(self) -> None:
        super().__init__()
        self._guard = threading.Lock()
        self._count = itertools.count(1)
        self._client: dict[str, tuple[WireId, _Key]] = {}
        self._sdk: dict[_Key, str] = {}

    def admit_in(self, session: str | None, outer: WireId) -> str | None:
        """A new inner id for ``outer`` in ``session``, or ``None`` when a
        request with exactly that id is in flight there (never for a
        request without a session)."""
        with self._guard:
            inner = f"{_INNER_PREFIX}{next(self._count)}"
            key: _Key = (session, type(outer), outer) if session is not None else (None, str, inner)
            if key in self._sdk:
                return None
            self._sdk[key] = inner
            self._client[inner] = (outer, key)
            return inner

    def cancel_in(self, session: str | None, outer: object) -> str | None:
        """The inner id of the request in flight in ``session`` whose id is
        exactly ``outer`` (type and value), or ``None`` (always outside a
        session)."""
        if session is None or not isinstance(outer, (str, int)) or isinstance(outer, bool):
            return None
        with self._guard:
            return self._sdk.get((session, type(outer), outer))

    def release(self, inner: str) -> None:
        with self._guard:
            entry = self._client.pop(inner, None)
            if entry is not None:
                self._sdk.pop(entry[1], None)

    def outer_of(self, inner: object) -> WireId | None:
        with self._guard:
            entry = self._client.get(inner) if isinstance(inner, str) else None
            return None if entry is None else entry[0]


def _session_of(scope: Scope) -> str | None:
    for key, value in scope["headers"]:
        if key == b"mcp-session-id":
            return str(value.decode("latin-1"))
    return None


async def _body(receive: Receive, limit: int) -> tuple[bytes, list[Message]]:
    """The request's body and the messages it came in; reading stops once
    it passed ``limit`` bytes (the body is then partial, and the caller
    replays the messages to the SDK, which refuses the request)."""
    chunks: list[Message] = []
    size = 0
    while True:
        message = await receive()
        chunks.append(message)
        if message["type"] != "http.request":
            break
        size += len(message.get("body", b""))
        if size > limit or not message.get("more_body", False):
            break
    return b"".join(m.get("body", b"") for m in chunks if m["type"] == "http.request"), chunks


def _exact_ids(app: _App, ids: SessionIds) -> _App:
    """``app`` behind the id rewriting described in the module docstring."""

    async def rewritten(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] != "POST":
            await app(scope, receive, send)
            return
        body, chunks = await _body(receive, DEFAULT_MAX_REQUEST_BODY_SIZE)
        replay = list(chunks)

        async def replayed() -> Message:
            return replay.pop(0) if replay else await receive()

        try:
            message = json.loads(body)
        except (ValueError, RecursionError):  # not JSON (or too deep to read here): the SDK answers it
            await app(scope, replayed, send)
            return
        if not isinstance(message, dict) or not isinstance(message.get("method"), str):
            await app(scope, replayed, send)
            return
        session = _session_of(scope)
        outer = message.get("id")
        if message["method"] == "notifications/cancelled" and isinstance(message.get("params"), dict):
            params = message["params"]
            # A cancel naming no request in flight names one that never exists.
            params["requestId"] = ids.cancel_in(session, params.get("requestId")) or f"{_INNER_PREFIX}none"
            await app(*_with_body(scope, receive, message), send)
            return
        if not isinstance(outer, (str, int)) or isinstance(outer, bool):
            await app(scope, replayed, send)
            return
        inner = ids.admit_in(session, outer)
        if inner is None:
            refused = "Invalid Request: a request with this id is still in flight"
            await _json(send, {"jsonrpc": "2.0", "id": outer, "error": {"code": INVALID_REQUEST, "message": refused}})
            return
        message["id"] = inner
        ours = b'"id":"' + inner.encode() + b'"'
        theirs = b'"id":' + json.dumps(outer).encode()

        async def answer(event: Message) -> None:
            if event["type"] == "http.response.body":
                if ours in event.get("body", b""):
                    event = {**event, "body": event["body"].replace(ours, theirs)}
                    # Free before the client can see the answer (and reuse the id).
                    ids.release(inner)
                elif not event.get("more_body", False):
                    ids.release(inner)  # the stream ended unanswered (cancelled)
            await send(event)

        try:
            await app(*_with_body(scope, receive, message), answer)
        finally:
            ids.release(inner)

    return rewritten


def _with_body(scope: Scope, receive: Receive, message: object) -> tuple[Scope, Receive]:
    """``scope`` and a ``receive`` for the request whose whole body is now
    ``message``: the body first (its length in the headers), then whatever
    the client's connection says next (its disconnect)."""
    body = json.dumps(message).encode()
    headers = [(k, v) for k, v in scope["headers"] if k != b"content-length"]
    headers.append((b"content-length", str(len(body)).encode()))
    sent = False

    async def replaced() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return {**scope, "headers": headers}, replaced


async def _json(send: Send, value: object) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": json.dumps(value).encode()})


def asgi_app(manager: StreamableHTTPSessionManager, token: str | None, ids: SessionIds) -> _App:
    """The ASGI application: ``401`` without the bearer ``token`` (when
    given), ``404`` off ``/mcp``, else the session manager behind the
    exact-id layer (``ids``)."""
    expected = None if token is None else token.encode("utf-8")
    exact = _exact_ids(manager.handle_request, ids)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if expected is not None and not _authorized(scope, expected):
            await _plain(send, 401, "Unauthorized: a bearer token is required", [(b"www-authenticate", b"Bearer")])
            return
        if scope["path"].rstrip("/") != PATH:
            await _plain(send, 404, "Not Found")
            return
        await exact(scope, receive, send)

    return app


def _authorized(scope: Scope, expected: bytes) -> bool:
    given = b""
    for key, value in scope["headers"]:
        if key == b"authorization":
            given = value
            break
    scheme, _, credential = given.partition(b" ")
    # compare_digest runs in time independent of where the bytes differ.
    return hmac.compare_digest(credential.strip(), expected) and scheme.lower() == b"bearer"


class WebServer(uvicorn.Server):
    """uvicorn without its own signal handling: the caller decides when to
    stop (``should_exit``)."""

    def capture_signals(self) -> Any:
        return contextlib.nullcontext()


def web_server(app: _App) -> WebServer:
    config = uvicorn.Config(
        app,
        lifespan="off",
        log_config=None,  # the application's logging stays as it is
        log_level="warning",
        access_log=False,
        # Streams still open after every call ended (a client's GET stream)
        # are cut after this many seconds when the server stops.
        timeout_graceful_shutdown=2,
    )
    return WebServer(config)
