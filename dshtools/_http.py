"""The HTTP client internals behind ``dshtools.io.http_request`` (docs/contract.md
§5): case-insensitive response headers, the socket guard an abort listener
shuts down, ``http.client`` connections that connect through that guard,
and the request/response exchange.

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
  after the last chunk.

Starts no thread.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
from collections.abc import Iterable, Iterator, Mapping

from ._iocommon import _PIPE_CHUNK, _abort_error
from ._signal import AbortSignal


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

    http.client gets a ``dup()`` of the connected socket, which it may close
    whenever it likes; the raw socket stays open (under the lock) until the
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
        ``dup()`` of the connected socket for http.client. Name resolution
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


class _HTTPConnection(http.client.HTTPConnection):
    def __init__(self, host: str, port: int, guard: _SocketGuard, signal: AbortSignal) -> None:
        super().__init__(host, port)
        self._guard = guard
        self._signal = signal

    def connect(self) -> None:
        self.sock = self._guard.connect(self.host, self.port, self._signal)


class _HTTPSConnection(http.client.HTTPSConnection):
    def __init__(self, host: str, port: int, guard: _SocketGuard, signal: AbortSignal) -> None:
        self._ssl_ctx = ssl.create_default_context()
        super().__init__(host, port, context=self._ssl_ctx)
        self._guard = guard
        self._signal = signal

    def connect(self) -> None:
        sock = self._guard.connect(self.host, self.port, self._signal)
        try:
            self.sock = self._ssl_ctx.wrap_socket(sock, server_hostname=self.host)
        except BaseException:
            sock.close()
            raise


def _exchange(
    conn: http.client.HTTPConnection,
    method: str,
    target: str,
    headers: Mapping[str, str] | None,
    body: bytes | bytearray | memoryview | None,
    signal: AbortSignal,
) -> tuple[int, _Headers, bytes]:
    """Send the request on ``conn`` and read the whole response; return its
    ``(status, headers, body)`` (``dshtools.io.http_request`` wraps them in
    an ``HttpResponse``). The signal is checked before every chunk and once
    after the last."""
    conn.request(method, target, body=bytes(body) if body is not None else None, headers=dict(headers or {}))
    response = conn.getresponse()
    try:
        chunks: list[bytes] = []
        while True:
            signal.throw_if_aborted()
            chunk = response.read(_PIPE_CHUNK)
            if not chunk:
                break
            chunks.append(chunk)
        # A shutdown makes a close-delimited body look complete (EOF): only
        # the signal can tell, so check it once more.
        signal.throw_if_aborted()
        return response.status, _Headers(response.getheaders()), b"".join(chunks)
    finally:
        response.close()
