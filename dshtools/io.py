"""Cancellable blocking I/O: capabilities that own termination (DESIGN.md §5).

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
  helper's own ``timeout`` ran out. An already-aborted signal raises before
  any work starts.
* **No listener leaks (B12).** Every listener a helper adds, directly or
  through a ``deadline``, is removed on every exit path, including
  exceptions and ``KeyboardInterrupt``; ``signal.listener_count`` is back to
  its value before the call.

Abort wins ties: when the signal is observed aborted before a helper
returns, the helper raises ``AbortError`` even if the work happened to
complete at the same moment.
"""

from __future__ import annotations

import concurrent.futures
import http.client
import os
import selectors
import signal as _os_signal
import socket
import ssl
import subprocess
import threading
import time
import urllib.parse
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Final, TypeVar, Union

import attrs

from ._deadline import deadline
from ._errors import AbortError, check_seconds
from ._signal import AbortSignal, _ensure_signal

__all__ = [
    "HTTP_TIMEOUT",
    "PROCESS_TIMEOUT",
    "HttpResponse",
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
_PIPE_CHUNK: Final = 64 * 1024
# An untimed wait is sliced so KeyboardInterrupt reaches the waiting thread
# on every platform (as AbortSignal.wait does).
_WAIT_SLICE: Final = 0.25
# Polling bounds while a session is being terminated: POSIX has no
# "session became empty" event, so liveness is re-checked at this pace
# (doubling from the first value to the second), between pipe reads.
_GROUP_POLL_MIN: Final = 0.002
_GROUP_POLL_MAX: Final = 0.02
# Without pidfd_open the leader's exit is noticed by polling at this pace.
_LEADER_POLL: Final = 0.02

StrPath = Union[str, "os.PathLike[str]"]


def _abort_error(signal: AbortSignal) -> AbortError:
    return AbortError(signal.reason)


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
    Source: DESIGN.md §5.
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
    remove one. Source: DESIGN.md §5.
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
        while not woken.wait(_WAIT_SLICE):
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
    """Read the whole file at ``path`` and return its bytes, checking
    ``signal`` before every chunk of ``chunk_size`` bytes (default 1 MiB).

    Raises ``AbortError(signal.reason)`` when the signal is aborted at entry
    or at a chunk boundary; the file is closed before the exception leaves.
    A single ``read`` of a regular file does not block indefinitely, so the
    abort is noticed within one chunk; a read blocked on a FIFO or device
    that never delivers data is *not* interrupted (the check happens between
    chunks only). ``OSError`` (missing file, permissions) propagates. Adds no
    listener. Raises ``TypeError``/``ValueError`` for a ``chunk_size`` that
    is not a positive ``int``. Source: DESIGN.md §5.
    """
    sig = _ensure_signal(signal, "signal")
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int):
        raise TypeError(f"chunk_size must be an int, not {type(chunk_size).__name__}")
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size!r}")
    sig.throw_if_aborted()
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        chunks: list[bytes] = []
        while True:
            sig.throw_if_aborted()
            chunk = os.read(fd, chunk_size)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------
# run_process


class _Waker:
    """A self-pipe that an abort listener writes to, so a ``select`` loop in
    the owning thread wakes up.

    Race handled here: ``ListenerHandle.remove()`` does not wait for a
    listener already running on another thread, so ``wake`` may run while
    the owner closes the pipe. Without the lock the owner could close the
    write end, another thread could open a new file under the same number,
    and ``wake`` would write a byte into that stranger's file. Under the
    lock, ``wake`` either writes before ``close`` or sees ``closed``.
    """

    __slots__ = ("_lock", "_closed", "read_fd", "_write_fd")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._closed = False
        self.read_fd, self._write_fd = os.pipe()
        os.set_blocking(self.read_fd, False)
        os.set_blocking(self._write_fd, False)

    def wake(self, _signal: object = None) -> None:
        with self._lock:
            if self._closed:
                return
            try:
                os.write(self._write_fd, b"\0")
            except BlockingIOError:
                pass  # the pipe is full: the reader is already woken

    def drain(self) -> None:
        try:
            while os.read(self.read_fd, 4096):
                pass
        except BlockingIOError:
            pass

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            os.close(self._write_fd)
            os.close(self.read_fd)


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


_HAVE_PROC: Final = os.path.isdir("/proc/self")


def _stat_session(pid: int) -> tuple[int, bool] | None:
    """``(session id, is_dead)`` of ``pid`` read from ``/proc/<pid>/stat``,
    ``None`` when it cannot be read (the process is gone). ``is_dead`` is
    true for a zombie (``Z``) or a dying (``X``) process."""
    # os.open/os.read rather than open(): about three times faster, and a
    # scan reads every process's stat. One read returns the whole line.
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        data = os.read(fd, 4096)
    except OSError:
        return None
    finally:
        os.close(fd)
    # "pid (comm) state ppid pgrp session ...": comm may contain spaces and
    # parentheses, so split after the *last* ')'.
    fields = data[data.rfind(b")") + 2 :].split()
    if len(fields) < 4:
        return None
    try:
        sid = int(fields[3])
    except ValueError:
        return None
    return sid, fields[0] in (b"Z", b"X")


def _session_members(sid: int) -> list[int] | None:
    """Pids of the live (not zombie) processes whose session id is ``sid``;
    ``None`` when ``/proc`` cannot be scanned (not Linux).

    Zombies are excluded because they are dead: an orphaned grandchild's
    zombie waits for PID 1 to reap it, which in some containers never
    happens, and must not make us wait forever.
    """
    if not _HAVE_PROC:
        return None
    try:
        entries = os.scandir("/proc")
    except OSError:
        return None
    members: list[int] = []
    with entries:
        for entry in entries:
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            info = _stat_session(pid)
            if info is not None and info[0] == sid and not info[1]:
                members.append(pid)
    return members


def _kill_member(pid: int, sid: int, sig: int) -> None:
    """Send ``sig`` to ``pid`` only if its session id, read right before, is
    still ``sid`` (the pid may have been reused by a stranger since the
    scan that found it).

    With ``pidfd_open`` the process is pinned *before* the re-read, so the
    signal reaches exactly the process whose session was checked (or nobody,
    if it died meanwhile): no window. Without it (old kernels), a window of
    a few microseconds is left between the re-read and ``kill``: the member
    would have to die, be reaped, and its pid be handed to a new process in
    between.
    """
    pidfd = -1
    if hasattr(os, "pidfd_open") and hasattr(_os_signal, "pidfd_send_signal"):
        try:
            pidfd = os.pidfd_open(pid)
        except ProcessLookupError:
            return
        except OSError:
            pidfd = -1  # e.g. ENOSYS, EMFILE: fall back to kill()
    try:
        info = _stat_session(pid)
        if info is None or info[0] != sid:
            return
        if pidfd >= 0:
            _os_signal.pidfd_send_signal(pidfd, sig)
        else:
            os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
    finally:
        if pidfd >= 0:
            os.close(pidfd)


def _group_alive(pgid: int) -> bool:
    """Whether process group ``pgid`` has a member that is not a zombie.

    Zombies are excluded because they are dead: an orphaned grandchild's
    zombie waits for PID 1 to reap it, which in some containers never
    happens, and must not make us wait forever. Without ``/proc`` (not
    Linux) any member counts. ``run_process`` itself watches the whole
    session (``_Session``) and uses this only when ``/proc`` cannot be
    scanned; ``dshtools._demo`` uses it for its quiescence check.
    """
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    if not _HAVE_PROC:
        return True
    try:
        entries = os.scandir("/proc")
    except OSError:
        return True
    with entries:
        for entry in entries:
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as f:
                    data = f.read()
            except OSError:
                continue  # exited meanwhile
            # "pid (comm) state ppid pgrp ...": comm may contain anything,
            # so split after the last ')'.
            fields = data[data.rfind(b")") + 2 :].split()
            if len(fields) < 3:
                continue
            try:
                pgrp = int(fields[2])
            except ValueError:
                continue
            if pgrp == pgid and fields[0] not in (b"Z", b"X"):
                return True
    return False


class _Session:
    """The child's session: every process whose session id is the child's
    pid (it ran ``setsid()``, so its session id, its process group id and
    its pid are equal).

    Signals go to the process group (one atomic ``killpg``) and to every
    session member found in ``/proc``. The session also covers descendants
    that moved to another process group (GNU ``timeout``, ``set -m`` job
    control, ``setpgid``) and members reparented to init after their parent
    died. Only a descendant that calls ``setsid()`` itself leaves the
    session and is not found. Without ``/proc`` (not Linux) only the
    process group is covered.
    """

    __slots__ = ("sid",)

    def __init__(self, sid: int) -> None:
        self.sid = sid

    def members(self) -> list[int] | None:
        """Live members (see ``_session_members``); ``None``: unknown."""
        return _session_members(self.sid)

    def alive(self, members: list[int] | None) -> bool:
        """Whether a live member remains, given a fresh ``members()``."""
        return bool(members) if members is not None else _group_alive(self.sid)

    def send(self, sig: int, members: list[int] | None) -> None:
        """Signal the group and each of ``members`` (re-checked, see
        ``_kill_member``)."""
        _killpg(self.sid, sig)
        for pid in members or ():
            _kill_member(pid, self.sid, sig)


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
    closed, and ``AbortError(reason)`` is raised, ``reason`` being the
    caller's reason or ``TimeoutReason(PROCESS_TIMEOUT, timeout)``. The grace
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
    infinite ``timeout``/``grace``. Source: DESIGN.md §5.
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
    sig.throw_if_aborted()
    with deadline(sig, timeout, PROCESS_TIMEOUT) as dl:
        waker = _Waker()
        try:
            handle = dl.signal.add_listener(waker.wake)
            try:
                dl.signal.throw_if_aborted()
                return _Supervisor(args, dl.signal, waker, grace_s, cwd, env, input).run()
            finally:
                handle.remove()
        finally:
            waker.close()


class _Supervisor:
    """One child session (and its process group), driven from the calling
    thread by a ``select`` loop over: the child's stdout/stderr/stdin pipes,
    the abort self-pipe, and (Linux) a pidfd that becomes readable when the
    leader exits."""

    def __init__(
        self,
        args: list[str | os.PathLike[str]],
        signal: AbortSignal,
        waker: _Waker,
        grace: float,
        cwd: StrPath | None,
        env: Mapping[str, str] | None,
        input: bytes | bytearray | memoryview | None,
    ) -> None:
        self.args = args
        self.signal = signal
        self.waker = waker
        self.grace = grace
        self.input = memoryview(bytes(input)) if input is not None else None
        self.proc = subprocess.Popen(
            args,
            stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            env=env,
            start_new_session=True,
        )
        # setsid(): the leader's pid is both the session and the group id.
        self.session = _Session(self.proc.pid)
        self.out: dict[int, list[bytes]] = {}
        self.sel = selectors.DefaultSelector()
        self.pidfd: int | None = None

    def run(self) -> subprocess.CompletedProcess[bytes]:
        proc = self.proc
        finished = False
        try:
            result = self._loop()
            finished = True
            return result
        finally:
            if not finished:
                # An exception (KeyboardInterrupt, a bug) left the loop early:
                # never leave the session behind. SIGKILL is repeated while
                # members remain, for any forked in the meantime.
                session = self.session
                session.send(_os_signal.SIGKILL, session.members())
                proc.wait()
                while True:
                    members = session.members()
                    if not session.alive(members):
                        break
                    session.send(_os_signal.SIGKILL, members)
                    time.sleep(_GROUP_POLL_MAX)
            self.sel.close()
            if self.pidfd is not None:
                os.close(self.pidfd)
            for f in (proc.stdin, proc.stdout, proc.stderr):
                if f is not None:
                    try:
                        f.close()
                    except OSError:
                        pass

    def _loop(self) -> subprocess.CompletedProcess[bytes]:
        proc = self.proc
        sel = self.sel
        assert proc.stdout is not None and proc.stderr is not None
        out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
        for fd in (out_fd, err_fd):
            os.set_blocking(fd, False)
            self.out[fd] = []
            sel.register(fd, selectors.EVENT_READ)
        in_fd: int | None = None
        in_pos = 0
        if proc.stdin is not None:
            in_fd = proc.stdin.fileno()
            os.set_blocking(in_fd, False)
            sel.register(in_fd, selectors.EVENT_WRITE)
        sel.register(self.waker.read_fd, selectors.EVENT_READ)
        if hasattr(os, "pidfd_open"):
            try:
                self.pidfd = os.pidfd_open(proc.pid)
            except OSError:
                self.pidfd = None
            if self.pidfd is not None:
                sel.register(self.pidfd, selectors.EVENT_READ)

        # No lost wake-up: abort() sets signal.aborted *before* the listener
        # writes its byte, and the loop head re-reads the flag after every
        # select(); so either the flag is already visible at the loop head, or
        # the byte is still to come and will end the select().
        #
        # No stranger killed: the session id (= group id) is the leader's
        # pid, which the kernel does not hand out again while any process
        # still has it as its pid, group id or session id (zombies
        # included). Signals go out only while the loop has just seen a
        # member (or the unreaped leader); the one window left for killpg
        # (the last member dies and the pid is reused between that scan and
        # a killpg a few microseconds later) needs a full pid wrap-around.
        # Each member found by the scan is re-checked right before it is
        # signalled (see _kill_member).
        session = self.session
        aborted = False
        term_at: float | None = None  # monotonic time SIGTERM went out
        termed: set[int] = set()  # members SIGTERM went to
        poll = _GROUP_POLL_MIN
        while True:
            if not aborted and self.signal.aborted:
                aborted = True
            if proc.returncode is None and proc.poll() is not None and self.pidfd is not None:
                sel.unregister(self.pidfd)  # stays readable forever once exited
            leader_done = proc.returncode is not None

            if term_at is None and (aborted or leader_done):
                # Abort: stop everything. Leader exited on its own: stop what
                # it left in its session (the normal-exit policy), if anything.
                members = session.members()
                if aborted or session.alive(members):
                    term_at = time.monotonic()
                    session.send(_os_signal.SIGTERM, members)
                    session.send(_os_signal.SIGCONT, members)
                    termed.update(members or ())
                    if in_fd is not None:
                        self._close_stdin(in_fd)
                        in_fd = None
                else:
                    break  # leader gone, session empty: drain and return

            wait: float | None
            if term_at is not None:
                members = session.members()
                if leader_done and not session.alive(members):
                    break
                now = time.monotonic()
                past_grace = now - term_at >= self.grace
                if past_grace:
                    # Repeated every round: a member forked since the last
                    # round gets it too.
                    session.send(_os_signal.SIGKILL, members)
                else:
                    # A member that appeared since SIGTERM went out (forked
                    # meanwhile) gets its own SIGTERM.
                    for pid in members or ():
                        if pid not in termed:
                            termed.add(pid)
                            _kill_member(pid, session.sid, _os_signal.SIGTERM)
                            _kill_member(pid, session.sid, _os_signal.SIGCONT)
                wait = poll
                if not past_grace:
                    wait = min(wait, max(0.0, term_at + self.grace - now))
                poll = min(poll * 2, _GROUP_POLL_MAX)
            else:
                wait = None if self.pidfd is not None else _LEADER_POLL

            for key, events in sel.select(wait):
                fd = key.fd
                if fd == self.waker.read_fd:
                    self.waker.drain()
                elif fd == self.pidfd:
                    pass  # the loop head reaps the leader
                elif fd == in_fd:
                    in_pos = self._feed_stdin(in_fd, in_pos)
                    if self.input is None or in_pos >= len(self.input):
                        self._close_stdin(in_fd)
                        in_fd = None
                else:
                    self._read_pipe(fd)

        # Every writer in the session is dead: what they wrote is in the pipes.
        for fd in list(self.out):
            if fd in sel.get_map():
                self._drain_pipe(fd)
        if aborted or self.signal.aborted:
            raise _abort_error(self.signal)
        assert proc.returncode is not None
        return subprocess.CompletedProcess(
            self.args, proc.returncode, b"".join(self.out[out_fd]), b"".join(self.out[err_fd])
        )

    def _feed_stdin(self, fd: int, pos: int) -> int:
        assert self.input is not None
        try:
            return pos + os.write(fd, self.input[pos : pos + _PIPE_CHUNK])
        except BlockingIOError:
            return pos
        except (BrokenPipeError, OSError):
            return len(self.input)  # the child stopped reading: drop the rest

    def _close_stdin(self, fd: int) -> None:
        self.sel.unregister(fd)
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.close()
        except OSError:
            pass

    def _read_pipe(self, fd: int) -> None:
        try:
            data = os.read(fd, _PIPE_CHUNK)
        except BlockingIOError:
            return
        if data:
            self.out[fd].append(data)
        else:
            self.sel.unregister(fd)  # EOF

    def _drain_pipe(self, fd: int) -> None:
        while True:
            try:
                data = os.read(fd, _PIPE_CHUNK)
            except BlockingIOError:
                # A writer outside the session (it left with setsid) still
                # holds the pipe: stop here rather than wait for it.
                return
            if not data:
                return
            self.out[fd].append(data)


# ---------------------------------------------------------------------------
# http_request


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


@attrs.frozen
class HttpResponse:
    """The outcome of ``http_request``: ``status`` (e.g. 200), ``headers``
    (read-only, case-insensitive ``Mapping[str, str]``; repeated fields
    joined with ``", "``) and the whole ``body`` as ``bytes``. Any status is
    a response, not an error (a 500 is returned, not raised). Source:
    DESIGN.md §5."""

    status: int
    headers: Mapping[str, str] = attrs.field(converter=_to_headers)
    body: bytes


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

    __slots__ = ("_lock", "_sock", "_shut")

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
                    raise _abort_error(signal)
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


def http_request(
    method: str,
    url: str,
    signal: AbortSignal,
    *,
    headers: Mapping[str, str] | None = None,
    body: bytes | None = None,
    timeout: float | None = None,
) -> HttpResponse:
    """Send one HTTP/1.1 request with the standard library's ``http.client``
    and return the whole response as an ``HttpResponse``.

    ``url`` is ``http://`` or ``https://`` (certificate verified with the
    system's default trust store). ``headers`` are sent as given (``Host``,
    ``Content-Length`` and ``Accept-Encoding: identity`` are added by
    http.client); ``body`` is ``bytes`` or ``None``. Redirects are not
    followed; any status is returned.

    ``timeout`` (seconds; ``None`` or ``<= 0``: none) bounds the **whole
    request** -- name resolution, connect, sending, headers and body -- not
    each read (field case B26: a server dripping one byte at a time cannot
    stretch it). When it runs out, raises ``AbortError`` whose reason is
    ``TimeoutReason(HTTP_TIMEOUT, timeout)``. When ``signal`` aborts, raises
    ``AbortError(signal.reason)``. In both cases a blocked connect, send or
    read is woken by shutting the socket down from the abort listener (in
    the aborting thread, or the shared timer thread for ``timeout``), and
    the socket is closed before the exception leaves: the server sees the
    connection closed. Name resolution itself cannot be interrupted.

    Other failures (refused connection, protocol errors) propagate as
    ``OSError`` / ``http.client.HTTPException`` when the signal is not
    aborted. Starts no thread. Raises ``TypeError`` for a ``url`` that is
    not a ``str``, a non-bytes body or a non-number ``timeout`` (the message
    names the parameter); ``ValueError`` for an unsupported URL scheme, a URL
    without host, or a NaN or infinite ``timeout``. Source: DESIGN.md §5.
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
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"unsupported URL scheme {parts.scheme!r} (http or https)")
    host = parts.hostname
    if not host:
        raise ValueError(f"URL has no host: {url!r}")
    # An explicit port: http.client would otherwise parse "::1" as host "::"
    # and port 1.
    port = parts.port if parts.port is not None else (443 if parts.scheme == "https" else 80)
    target = parts.path or "/"
    if parts.query:
        target += "?" + parts.query
    sig.throw_if_aborted()
    with deadline(sig, timeout, HTTP_TIMEOUT) as dl:
        guard = _SocketGuard()
        try:
            handle = dl.signal.add_listener(guard.abort)
            try:
                dl.signal.throw_if_aborted()
                conn: http.client.HTTPConnection
                if parts.scheme == "https":
                    conn = _HTTPSConnection(host, port, guard, dl.signal)
                else:
                    conn = _HTTPConnection(host, port, guard, dl.signal)
                try:
                    return _exchange(conn, method, target, headers, body, dl.signal)
                finally:
                    conn.close()
            except (OSError, http.client.HTTPException):
                if dl.signal.aborted:
                    raise _abort_error(dl.signal)
                raise
            finally:
                handle.remove()
        finally:
            guard.close()


def _exchange(
    conn: http.client.HTTPConnection,
    method: str,
    target: str,
    headers: Mapping[str, str] | None,
    body: bytes | bytearray | memoryview | None,
    signal: AbortSignal,
) -> HttpResponse:
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
        return HttpResponse(response.status, _Headers(response.getheaders()), b"".join(chunks))
    finally:
        response.close()
