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
* Only the path ``/mcp`` is served; any other path is ``404``.
"""

from __future__ import annotations

import hmac
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final

import uvicorn
from mcp.server.streamable_http import StreamableHTTPServerTransport
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import RequestId
from starlette.types import Receive, Scope, Send

__all__ = [
    "PATH",
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


def asgi_app(manager: StreamableHTTPSessionManager, token: str | None) -> _App:
    """The ASGI application: ``401`` without the bearer ``token`` (when
    given), ``404`` off ``/mcp``, else the session manager."""
    expected = None if token is None else token.encode("utf-8")

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if expected is not None and not _authorized(scope, expected):
            await _plain(send, 401, "Unauthorized: a bearer token is required", [(b"www-authenticate", b"Bearer")])
            return
        if scope["path"].rstrip("/") != PATH:
            await _plain(send, 404, "Not Found")
            return
        await manager.handle_request(scope, receive, send)

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
        import contextlib

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
