"""The HTTP client internals behind ``dshtools.io.http_request`` (docs/contract.md#io,
docs/contract.md#a14): case-insensitive response headers, the socket guard an abort
listener shuts down, opening the (TLS) connection through that guard, and
the request/response exchange, framed by ``h11``'s HTTP/1.1 state machine
while this module owns the socket (so cancellation stays a socket
shutdown). Messages are framed as RFC 9110 and RFC 9112 require
(docs/contract.md#a14): ``h11`` applies the framing rules it knows, and
``_exchange`` checks the ones it leaves to the caller.

Guarantees:

* **Abort wakes the request thread.** The abort listener (running in the
  aborting thread, or the shared timer thread for a timeout) only calls
  ``_SocketGuard.abort``, which shuts the raw socket down: a ``connect``,
  ``send`` or ``recv`` blocked on it returns at once. It never closes the
  socket (see ``_SocketGuard`` for why, and for the attach race).
* **Closed before returning.** The raw socket is closed by the request
  thread, through ``_SocketGuard.close()``, on every exit path.
* **Abort is never mistaken for a complete body.** A shutdown looks like
  EOF to a close-delimited body, so ``_exchange`` re-checks the signal
  after the last event.
* **Framing as RFC 9110/9112 state it.** Interim 1xx responses are
  skipped; HEAD, 1xx, 204 and 304 responses have no body whatever their
  headers say; chunked bodies (with extensions and trailers), conflicting
  or invalid lengths and truncated bodies are h11's; a framing error is
  ``HttpProtocolError``.

Starts no thread.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
from collections.abc import Iterable, Iterator, Mapping
from typing import Final

import h11

from .._signal import AbortSignal
from .common import _PIPE_CHUNK, _abort_error


class _Headers(Mapping[str, str]):
    """Read-only, case-insensitive response headers. Iteration yields the
    names as the server spelled them (first occurrence); a field repeated
    by the server is joined with ``", "`` (RFC 9110 §5.3)."""

    __slots__ = ("_items",)

    def __init__(self, pairs: Iterable[tuple[str, str]]) -> None:
        items: dict[str, tuple[str, str]] = {}
        for name, value in pairs:
            key = name.lower()
            if key in items:
                first, prev = items[key]
                items[key] = (first, f"{prev}, {value}")
            else:
                items[key] = (name, value)
        self._items = items

    def __getitem__(self, key: str) -> str:
        if not isinstance(key, str):
            raise KeyError(key)
        return self._items[key.lower()][1]

    def __iter__(self) -> Iterator[str]:
        return (name for name, _ in self._items.values())

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(frozenset(self._items.items()))

    def __repr__(self) -> str:
        return f"Headers({dict(self.items())!r})"


def _to_headers(value: Mapping[str, str]) -> Mapping[str, str]:
    return value if isinstance(value, _Headers) else _Headers(dict(value).items())


def _shutdown(sock: socket.socket) -> None:
    # socket.socket.shutdown, not SSLSocket.shutdown: the latter tears down
    # the TLS object under a thread that may be inside it. A shutdown of the
    # raw socket makes that thread's read fail cleanly instead.
    try:
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:
        pass


class _SocketGuard:
    """Owns the raw TCP socket of one request and lets an abort listener
    (running in the aborting thread) shut it down.

    ``shutdown(SHUT_RDWR)`` wakes a thread blocked in ``connect`` (Linux
    drops a connection still in SYN_SENT), ``send`` or ``recv`` on that
    socket. The listener never *closes* it: closing under a blocked thread
    does not wake it on Linux, and the number could be reused by another
    file. Closing belongs to the request thread, through ``close()``.

    The request thread gets a ``dup()`` of the connected socket (which TLS
    may wrap and which it closes when done); the raw socket stays open (under the lock) until the
    request thread is done, so the listener's shutdown can never reach a
    reused descriptor. Race handled: an abort between creating the socket
    and ``attach`` -- ``attach`` sees ``shut`` under the lock and shuts the
    new socket down at once, and the caller re-checks the signal right after.
    """

    __slots__ = ("_lock", "_shut", "_sock")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._shut = False

    def abort(self, _signal: object = None) -> None:
        with self._lock:
            self._shut = True
            if self._sock is not None:
                _shutdown(self._sock)

    def attach(self, sock: socket.socket) -> None:
        with self._lock:
            self._sock = sock
            if self._shut:
                _shutdown(sock)

    def close(self) -> None:
        with self._lock:
            sock, self._sock = self._sock, None
            if sock is not None:
                sock.close()

    def connect(self, host: str, port: int, signal: AbortSignal) -> socket.socket:
        """Connect to ``(host, port)`` trying each address in turn; return a
        ``dup()`` of the connected socket for the request thread. Name resolution
        runs in this thread and is not interruptible (an IP literal makes
        it instant); the signal is checked right after it."""
        infos = socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM)
        last: OSError | None = None
        for family, kind, proto, _, address in infos:
            signal.throw_if_aborted()
            sock = socket.socket(family, kind, proto)
            sock.settimeout(None)
            self.attach(sock)
            try:
                signal.throw_if_aborted()
                sock.connect(address)
                signal.throw_if_aborted()
                if family in (socket.AF_INET, socket.AF_INET6):
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                return sock.dup()
            except OSError as exc:
                self.close()
                if signal.aborted:
                    raise _abort_error(signal) from exc
                last = exc
        raise last if last is not None else OSError(f"getaddrinfo({host!r}) returned no address")


class HttpProtocolError(http.client.HTTPException):
    """The server's response breaks HTTP/1.1 message framing (RFC 9112 §6):
    conflicting or invalid ``Content-Length``, a transfer coding other than
    ``chunked``, a malformed chunk, a body cut short by the connection
    closing, an unsolicited ``101``, ``Transfer-Encoding`` in an HTTP/1.0
    response, or no response at all. A subclass of
    ``http.client.HTTPException``, so code catching that still catches it.
    Raised by ``dshtools.io.http_request`` only when its signal is not
    aborted (an abort always wins). Source: docs/contract.md#a14."""


# An interim or final response head larger than this is refused (as
# http.client refuses a header line over 64 KiB).
_MAX_HEAD: Final = 64 * 1024


# Methods that define a meaning for enclosed content: without a body they
# still say "Content-Length: 0" (RFC 9110 §8.6).
_METHODS_WITH_CONTENT: Final = frozenset({"POST", "PUT", "PATCH"})


def _host_header(host: str, port: int, default_port: int) -> str:
    name = f"[{host}]" if ":" in host else host
    return name if port == default_port else f"{name}:{port}"


def _open_socket(scheme: str, host: str, port: int, guard: _SocketGuard, signal: AbortSignal) -> socket.socket:
    """Connect through ``guard`` and, for ``https``, do the TLS handshake
    (certificate checked against the system's default trust store). The
    returned socket is the request thread's to close; the guard keeps the
    raw one it may shut down."""
    sock = guard.connect(host, port, signal)
    if scheme != "https":
        return sock
    try:
        # suppress_ragged_eofs=False: a TCP close without TLS close_notify
        # raises instead of reading as EOF, so a close-delimited body cut by
        # a forged FIN is not taken for complete (RFC 9112 §9.8).
        return ssl.create_default_context().wrap_socket(sock, server_hostname=host, suppress_ragged_eofs=False)
    except BaseException:
        sock.close()
        raise


def _prepare(
    method: str,
    target: str,
    host_header: str,
    headers: Mapping[str, str] | None,
    body: bytes | bytearray | memoryview | None,
) -> tuple[h11.Connection, bytes]:
    """The client state machine and the serialized request (head, body,
    end), made before connecting, so a request the HTTP grammar does not
    allow (a header with CR/LF, a bad method) is a ``ValueError`` without
    any network traffic. ``Host``, ``Accept-Encoding: identity``,
    ``Content-Length`` (with a body) and ``Connection: close`` are added
    unless the caller gave them (``Content-Length: 0`` for POST, PUT and
    PATCH without a body)."""
    conn = h11.Connection(h11.CLIENT, max_incomplete_event_size=_MAX_HEAD)
    given = {name.lower() for name in (headers or {})}
    fields: list[tuple[str, str]] = []
    if "host" not in given:
        fields.append(("Host", host_header))
    if "accept-encoding" not in given:
        fields.append(("Accept-Encoding", "identity"))
    if "content-length" in given and "transfer-encoding" in given:
        # RFC 9112 §6.2: never both.
        raise ValueError("invalid request: Content-Length and Transfer-Encoding both given")
    if "content-length" not in given and "transfer-encoding" not in given:
        if body is not None:
            fields.append(("Content-Length", str(len(body))))
        elif method.upper() in _METHODS_WITH_CONTENT:
            fields.append(("Content-Length", "0"))  # RFC 9110 §8.6
    if "connection" not in given:
        fields.append(("Connection", "close"))  # one request per connection
    fields.extend((headers or {}).items())
    try:
        head = conn.send(h11.Request(method=method, target=target, headers=fields))
        payload = conn.send(h11.Data(data=bytes(body))) if body else b""
        end = conn.send(h11.EndOfMessage())
    except h11.LocalProtocolError as exc:
        raise ValueError(f"invalid request: {exc}") from None
    return conn, b"".join(part or b"" for part in (head, payload, end))


def _exchange(
    sock: socket.socket, conn: h11.Connection, outgoing: bytes, signal: AbortSignal
) -> tuple[int, _Headers, bytes, _Headers]:
    """Send ``outgoing`` (from ``_prepare``) on ``sock`` and read the whole
    response through ``conn``; return ``(status, headers, body, trailers)``.

    Framing is ``h11``'s state machine (RFC 9112 §6.3; the rules are those
    of docs/contract.md#a14); the rules it leaves to
    the caller are checked here: ``Transfer-Encoding`` in an HTTP/1.0
    response is faulty framing (RFC 9112 §6.1), and an EOF that ends a
    close-delimited body is only a complete body if the signal did not
    abort (a shutdown looks the same). The signal is checked before every
    read and once after the last event."""
    sock.sendall(outgoing)
    status = 0
    response_headers = _Headers(())
    chunks: list[bytes] = []
    try:
        while True:
            signal.throw_if_aborted()
            event = conn.next_event()
            if event is h11.NEED_DATA:
                try:
                    data = sock.recv(_PIPE_CHUNK)  # b"": EOF
                except ssl.SSLEOFError:
                    signal.throw_if_aborted()
                    raise HttpProtocolError(
                        "the TLS connection closed without close_notify before the response ended "
                        "(it may be truncated; RFC 9112 §9.8)"
                    ) from None
                conn.receive_data(data)
            elif isinstance(event, h11.InformationalResponse):
                # 1xx is interim and skipped (RFC 9110 §15.2), except a 101
                # that answers the caller's own Upgrade: h11 then pauses.
                # An unsolicited 101 is a RemoteProtocolError inside h11.
                if event.status_code == 101:
                    status = 101
                    response_headers = _decode_fields(event.headers.raw_items())
            elif isinstance(event, h11.Response):
                if event.http_version == b"1.0" and any(name == b"transfer-encoding" for name, _ in event.headers):
                    raise HttpProtocolError("HTTP/1.0 response with Transfer-Encoding (faulty framing)")
                status = event.status_code
                response_headers = _decode_fields(event.headers.raw_items())
            elif isinstance(event, h11.Data):
                chunks.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                # A shutdown makes a close-delimited body look complete (EOF):
                # only the signal can tell, so check it once more.
                signal.throw_if_aborted()
                trailers = _decode_fields(event.headers.raw_items())
                return status, response_headers, b"".join(chunks), trailers
            elif event is h11.PAUSED:
                # 101 to the caller's own Upgrade: the connection now speaks
                # another protocol, which is not ours to read.
                signal.throw_if_aborted()
                return status, response_headers, b"", _Headers(())
            else:  # ConnectionClosed before any response
                signal.throw_if_aborted()
                raise HttpProtocolError("the server closed the connection without a response")
    except h11.RemoteProtocolError as exc:
        signal.throw_if_aborted()
        raise HttpProtocolError(str(exc)) from None


def _decode_fields(raw: Iterable[tuple[bytes, bytes]]) -> _Headers:
    # Field values are octets; ISO-8859-1 maps each to one character and
    # back (RFC 9110 §5.5), as http.client does.
    return _Headers((name.decode("iso-8859-1"), value.decode("iso-8859-1")) for name, value in raw)
