"""Cancellable blocking I/O: capabilities that own termination (docs/contract.md#io).

A tool body that blocks (sleeps, waits on a future, runs a process, talks
HTTP, reads a file) hands its ``AbortSignal`` to one of these helpers. Each
helper, not its caller, owns stopping the work it started. Guarantees:

* **Returns only after its work stopped.** ``run_process`` returns or raises
  only once every member of the child's session is dead and the leader is
  reaped; ``http_request`` only once its socket is closed; ``read_file``
  only once its file is closed. Nothing is left running in the background:
  no helper starts a thread.
* **Prompt.** Abort wakes a blocked helper from the aborting thread:
  ``sleep``/``wait_future`` through an event, ``run_process`` through a
  self-pipe its ``select`` loop watches, ``http_request`` by shutting the
  socket down (which wakes a ``connect``, ``send`` or ``recv`` blocked on it).
* **The right exception.** Cancellation raises ``AbortError`` whose
  ``reason`` is the signal's reason: the caller's reason for a caller abort,
  a ``TimeoutReason`` (code ``PROCESS_TIMEOUT`` / ``HTTP_TIMEOUT``) when the
  helper's own ``timeout`` ran out. ``run_process`` raises its subclass
  ``ProcessAbortError``, which keeps the output written before the stop.
  An already-aborted signal raises before any work starts.
* **No block outside a cancellation point** (docs/contract.md#a14):
  ``read_file`` refuses a FIFO, device or socket at once instead of
  waiting in ``open`` or ``read``; ``http_request`` frames responses as
  RFC 9110/9112 state (interim 1xx skipped, bodiless responses without
  body), so it never waits for a body that is not coming.
* **No listener leaks.** Every listener a helper adds, directly or
  through a ``deadline``, is removed on every exit path, including
  exceptions and ``KeyboardInterrupt``; ``signal.listener_count`` is back to
  its value before the call.

Abort wins ties: when the signal is observed aborted before a helper
returns, the helper raises ``AbortError`` even if the work happened to
complete at the same moment.
"""

from __future__ import annotations

import concurrent.futures
import errno
import http.client
import os
import stat
import subprocess
import threading
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Final, TypeVar

import attrs

from ._core.errors import check_seconds
from ._core.interrupts import interrupt_slice
from ._io.common import StrPath, _abort_error
from ._io.http import HttpProtocolError, _exchange, _host_header, _open_socket, _prepare, _SocketGuard, _to_headers
from ._io.process import ProcessAbortError, _Supervisor, _Waker
from ._signal import AbortSignal, _ensure_signal
from ._signal.deadline import deadline

# This module is the public face: the helpers' signatures, argument checks
# and docstrings. The machinery behind run_process lives in dshtools._io.process
# (the select loop) and dshtools._io.session (finding and signalling
# the child's session), the HTTP client internals behind http_request in
# dshtools._io.http, and what they share in dshtools._io.common.

__all__ = [
    "HTTP_TIMEOUT",
    "PROCESS_TIMEOUT",
    "HttpProtocolError",
    "HttpResponse",
    "ProcessAbortError",
    "http_request",
    "read_file",
    "run_process",
    "sleep",
    "wait_future",
]

T = TypeVar("T")

PROCESS_TIMEOUT: Final = "PROCESS_TIMEOUT"
"""``TimeoutReason.code`` when ``run_process``'s own ``timeout`` runs out."""

HTTP_TIMEOUT: Final = "HTTP_TIMEOUT"
"""``TimeoutReason.code`` when ``http_request``'s own ``timeout`` runs out."""

_MiB: Final = 1024 * 1024


# ---------------------------------------------------------------------------
# sleep / wait_future


def sleep(seconds: float, signal: AbortSignal) -> None:
    """Block the calling thread for ``seconds`` (a finite number >= 0) or
    until ``signal`` aborts, whichever comes first.

    Returns ``None`` after the full duration (measured with
    ``time.monotonic``). Raises ``AbortError(signal.reason)`` at once when
    ``signal`` is already aborted, or within about a millisecond of an abort
    from another thread. Adds no listener. Raises ``TypeError`` for a
    non-number, ``ValueError`` for a negative, NaN or infinite duration.
    Source: docs/contract.md#io.
    """
    sig = _ensure_signal(signal, "signal")
    value = check_seconds(seconds)
    if value < 0:
        raise ValueError(f"seconds must be >= 0, got {seconds!r}")
    sig.throw_if_aborted()
    end = time.monotonic() + value
    while True:
        remaining = end - time.monotonic()
        if remaining <= 0:
            return
        if sig.wait(remaining):
            raise _abort_error(sig)


def wait_future(future: concurrent.futures.Future[T], signal: AbortSignal) -> T:
    """Wait for a ``concurrent.futures.Future`` or for ``signal`` to abort.

    Returns the future's result; re-raises the future's own exception as is
    (a future cancelled by someone else raises
    ``concurrent.futures.CancelledError``).

    On abort (already aborted at entry, or aborting while waiting, in which
    case the wait ends within about a millisecond) this helper calls
    ``future.cancel()`` and raises ``AbortError(signal.reason)``:

    * a future **still queued** is cancelled and its work never runs;
    * a future **already running** cannot be cancelled: ``wait_future``
      aborts only *the wait*. The running work carries on, and stopping it
      is the job of whoever owns that work (for example the body that
      submitted it, which should pass the same signal into it and join it).
      This helper never claims that work stopped: it owns the wait, not the
      work.

    Abort wins a tie with completion. The listener added on ``signal`` is
    removed before returning or raising. A small done-callback (setting a
    private event) stays attached to the future, as ``Future`` has no way to
    remove one. Source: docs/contract.md#io.
    """
    sig = _ensure_signal(signal, "signal")
    if not isinstance(future, concurrent.futures.Future):
        raise TypeError(f"future must be a concurrent.futures.Future, not {type(future).__name__}")
    if sig.aborted:
        future.cancel()
        raise _abort_error(sig)
    woken = threading.Event()
    future.add_done_callback(lambda _f: woken.set())
    handle = sig.add_listener(lambda _s: woken.set())
    try:
        while not woken.wait(interrupt_slice()):
            pass
    finally:
        handle.remove()
    if sig.aborted:
        future.cancel()
        raise _abort_error(sig)
    return future.result()


# ---------------------------------------------------------------------------
# read_file


def read_file(path: StrPath, signal: AbortSignal, *, chunk_size: int = _MiB) -> bytes:
    """Read the whole regular file at ``path`` and return its bytes,
    checking ``signal`` before every chunk of ``chunk_size`` bytes (default
    1 MiB).

    Raises ``AbortError(signal.reason)`` when the signal is aborted at entry
    or at a chunk boundary; the file is closed before the exception leaves.
    A single ``read`` of a regular file does not block indefinitely, so the
    abort is noticed within one chunk.

    **Only regular files** (symbolic links are followed). A FIFO, character
    or block device or socket could block in ``open`` or in a ``read``
    beyond every abort (a FIFO with no writer blocks ``open``), so it is
    refused at once with ``ValueError`` ("... is not a regular file (a
    FIFO)"), without waiting; a directory raises ``IsADirectoryError``. The
    file is opened non-blocking and checked with ``fstat`` on the opened
    descriptor, so a path swapped for a FIFO after the first check cannot
    block either. ``OSError`` (missing file, permissions) propagates. Adds
    no listener. Raises ``TypeError``/``ValueError`` for a ``chunk_size``
    that is not a positive ``int``. Source: docs/contract.md#io,
    docs/contract.md#a14.
    """
    sig = _ensure_signal(signal, "signal")
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int):
        raise TypeError(f"chunk_size must be an int, not {type(chunk_size).__name__}")
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size!r}")
    sig.throw_if_aborted()
    _check_regular(path, os.stat(path).st_mode)
    # O_NONBLOCK: opening a FIFO that became one since the stat returns at
    # once (instead of waiting for a writer), and the fstat below refuses it.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
    try:
        _check_regular(path, os.fstat(fd).st_mode)
        os.set_blocking(fd, True)
        chunks: list[bytes] = []
        while True:
            sig.throw_if_aborted()
            chunk = os.read(fd, chunk_size)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    finally:
        os.close(fd)


_KINDS: Final = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _check_regular(path: StrPath, mode: int) -> None:
    if stat.S_ISREG(mode):
        return
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), os.fspath(path))
    kind = next((name for test, name in _KINDS if test(mode)), "not a file")
    raise ValueError(f"{os.fspath(path)!r} is not a regular file ({kind}); read_file reads regular files only")


# ---------------------------------------------------------------------------
# run_process


def run_process(
    argv: Sequence[str | os.PathLike[str]],
    signal: AbortSignal,
    *,
    timeout: float | None = None,
    grace: float = 2.0,
    cwd: StrPath | None = None,
    env: Mapping[str, str] | None = None,
    input: bytes | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """Run ``argv`` (a non-empty sequence, not a string; no shell) in its own
    session and process group, feed it ``input``, capture its output, and
    return ``subprocess.CompletedProcess(argv, returncode, stdout, stderr)``
    with ``stdout``/``stderr`` as ``bytes``.

    A non-zero exit is not an error (like ``subprocess.run`` without
    ``check``). ``input=None`` gives the child ``/dev/null`` as stdin (a tool
    never reads the agent's terminal). Output of any size is read while the
    process runs, so neither side deadlocks on a full pipe.

    **Cancellation** (``signal`` aborts, or ``timeout`` seconds pass, which
    arms ``deadline(signal, timeout, PROCESS_TIMEOUT)``; ``None`` or ``<= 0``
    means no timeout): SIGTERM (and SIGCONT, so stopped members see it) goes
    to the child's whole **session**; if members are still alive ``grace``
    seconds later, SIGKILL goes to them. As soon as no member is alive
    (zombies do not count) the leader is reaped, the pipes are drained and
    closed, and ``ProcessAbortError(reason)`` (an ``AbortError``) is raised,
    ``reason`` being the caller's reason or ``TimeoutReason(PROCESS_TIMEOUT,
    timeout)``; its ``stdout``/``stderr`` hold the bytes written before the
    stop and ``returncode`` the leader's status. The grace
    period is not waited out when the session died on SIGTERM.

    **Who is stopped.** The child calls ``setsid()``, so its session id is
    its pid. On Linux every process whose session id (read from
    ``/proc/<pid>/stat``) is that pid is signalled, besides the child's
    process group: descendants in the group (``sleep 1000 &`` in a shell),
    descendants that moved to another process group (GNU ``timeout``,
    ``set -m`` job control, ``setpgid``) and descendants reparented to init
    after their parent died. **Limit:** a descendant that calls ``setsid()``
    itself leaves the session and is not found (nor waited for). Without
    ``/proc`` (not Linux) only the process group is covered. Pid reuse: a
    member found by the scan is signalled only if its session id, re-read
    right before, still matches; with ``pidfd_open`` (Linux >= 5.3) the
    process is pinned before that re-read, so no stranger can be hit;
    without it a window of microseconds remains (the member dies, is reaped
    and its pid is reused between the re-read and ``kill``).

    **Normal exit policy.** When the leader exits on its own, members it
    left behind in its session (background jobs, even reparented to init)
    are terminated the same way (SIGTERM, ``grace``, SIGKILL) before the
    call returns, and the result is the leader's. A tool call leaves nothing
    running: a tool that really means to start a daemon must move it to its
    own session (``setsid``).

    Threads: everything (spawning, signalling, reading, reaping) happens in
    the calling thread; the abort listener, which runs in the aborting thread,
    only writes a byte to a self-pipe. ``KeyboardInterrupt`` (or any other
    exception) while running SIGKILLs the session and waits until it is gone
    before it propagates. Errors from spawning (``FileNotFoundError``,
    ``PermissionError``) propagate unchanged.

    Raises ``TypeError`` for a string ``argv``, non-bytes ``input`` or a
    non-number ``timeout``/``grace`` (the message names the parameter),
    ``ValueError`` for an empty ``argv``, a negative ``grace`` or a NaN or
    infinite ``timeout``/``grace``. Source: docs/contract.md#io.
    """
    sig = _ensure_signal(signal, "signal")
    if isinstance(argv, (str, bytes)):
        raise TypeError("argv must be a sequence of arguments, not a string")
    args = list(argv)
    if not args:
        raise ValueError("argv must not be empty")
    if timeout is not None:
        check_seconds(timeout, "timeout")
    grace_s = check_seconds(grace, "grace")
    if grace_s < 0:
        raise ValueError(f"grace must be >= 0, got {grace!r}")
    if input is not None and not isinstance(input, (bytes, bytearray, memoryview)):
        raise TypeError(f"input must be bytes or None, not {type(input).__name__}")
    if sig.aborted:
        raise ProcessAbortError(sig.reason)
    with deadline(sig, timeout, PROCESS_TIMEOUT) as dl:
        waker = _Waker()
        try:
            handle = dl.signal.add_listener(waker.wake)
            try:
                if dl.signal.aborted:
                    raise ProcessAbortError(dl.signal.reason)
                return _Supervisor(args, dl.signal, waker, grace_s, cwd, env, input).run()
            finally:
                handle.remove()
        finally:
            waker.close()


# ---------------------------------------------------------------------------
# http_request


@attrs.frozen
class HttpResponse:
    """The outcome of ``http_request``: the final ``status`` (e.g. 200;
    never an interim 1xx, except 101 when the caller sent ``Upgrade``),
    ``headers`` (read-only, case-insensitive ``Mapping[str, str]``; repeated
    fields joined with ``", "``), the whole ``body`` as ``bytes`` (empty for
    responses that have none: HEAD, 204, 304) and ``trailers``, the fields
    sent after a chunked body (kept apart from ``headers``, as RFC 9110
    §6.5.1 asks; empty when there were none). Any status is a response, not
    an error (a 500 is returned, not raised). Source: docs/contract.md#io,
    docs/contract.md#a14."""

    status: int
    headers: Mapping[str, str] = attrs.field(converter=_to_headers)
    body: bytes
    trailers: Mapping[str, str] = attrs.field(factory=dict, converter=_to_headers)


def http_request(
    method: str,
    url: str,
    signal: AbortSignal,
    *,
    headers: Mapping[str, str] | None = None,
    body: bytes | None = None,
    timeout: float | None = None,
) -> HttpResponse:
    """Send one HTTP/1.1 request on a new connection and return the whole
    final response as an ``HttpResponse``.

    ``url`` is ``http://`` or ``https://`` (certificate verified with the
    system's default trust store). ``headers`` are sent as given; ``Host``,
    ``Content-Length`` (when there is a ``body``), ``Accept-Encoding:
    identity`` and ``Connection: close`` are added unless given. ``body`` is
    ``bytes`` or ``None``. Redirects are not followed; any final status is
    returned.

    **Framing** follows RFC 9110/9112 (docs/contract.md#a14): interim
    ``1xx`` responses (``100``, ``102``, ``103 Early Hints``, ...) are skipped
    and the final response returned; HEAD, ``204`` and ``304`` responses
    have an empty body whatever their headers say; ``Transfer-Encoding:
    chunked`` wins over ``Content-Length``; a response with neither is read
    until the server closes. A response whose framing is broken (conflicting
    or invalid ``Content-Length``, an unsupported transfer coding, a
    malformed chunk, a body cut short) raises ``HttpProtocolError`` (an
    ``http.client.HTTPException``).

    ``timeout`` (seconds; ``None`` or ``<= 0``: none) bounds the **whole
    request** -- name resolution, connect, sending, headers and body -- not
    each read (a server dripping one byte at a time cannot stretch it).
    When it runs out, raises ``AbortError`` whose reason is
    ``TimeoutReason(HTTP_TIMEOUT, timeout)``. When ``signal`` aborts, raises
    ``AbortError(signal.reason)``. In both cases a blocked connect, send or
    read is woken by shutting the socket down from the abort listener (in
    the aborting thread, or the shared timer thread for ``timeout``), and
    the socket is closed before the exception leaves: the server sees the
    connection closed. Name resolution itself cannot be interrupted.

    Other failures (refused connection, framing errors) propagate as
    ``OSError`` / ``HttpProtocolError`` when the signal is not aborted.
    Starts no thread. Raises ``TypeError`` for a ``url`` that is not a
    ``str``, a non-bytes body or a non-number ``timeout`` (the message names
    the parameter); ``ValueError`` for an unsupported URL scheme, a URL
    without host, the ``CONNECT`` method, a header the HTTP grammar does not
    allow, or a NaN or infinite ``timeout``. Source: docs/contract.md#io.
    """
    sig = _ensure_signal(signal, "signal")
    if not isinstance(method, str) or not method:
        raise TypeError("method must be a non-empty str")
    if body is not None and not isinstance(body, (bytes, bytearray, memoryview)):
        raise TypeError(f"body must be bytes or None, not {type(body).__name__}")
    if not isinstance(url, str):
        raise TypeError(f"url must be a str, not {type(url).__name__}")
    if timeout is not None:
        check_seconds(timeout, "timeout")
    parts = urllib.parse.urlsplit(url)
    if method.upper() == "CONNECT":
        raise ValueError("method CONNECT is not supported (it opens a tunnel, not a request)")
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"unsupported URL scheme {parts.scheme!r} (http or https)")
    host = parts.hostname
    if not host:
        raise ValueError(f"URL has no host: {url!r}")
    default_port = 443 if parts.scheme == "https" else 80
    port = parts.port if parts.port is not None else default_port
    target = parts.path or "/"
    if parts.query:
        target += "?" + parts.query
    machine, outgoing = _prepare(method, target, _host_header(host, port, default_port), headers, body)
    sig.throw_if_aborted()
    with deadline(sig, timeout, HTTP_TIMEOUT) as dl:
        guard = _SocketGuard()
        try:
            handle = dl.signal.add_listener(guard.abort)
            try:
                dl.signal.throw_if_aborted()
                sock = _open_socket(parts.scheme, host, port, guard, dl.signal)
                try:
                    status, fields, content, trailers = _exchange(sock, machine, outgoing, dl.signal)
                finally:
                    sock.close()
                return HttpResponse(status, fields, content, trailers)
            except (OSError, http.client.HTTPException) as exc:
                if dl.signal.aborted:
                    raise _abort_error(dl.signal) from exc
                raise
            finally:
                handle.remove()
        finally:
            guard.close()
