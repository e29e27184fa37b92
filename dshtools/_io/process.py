"""The process machinery behind ``dshtools.io.run_process`` (docs/contract.md#io):
the abort self-pipe and the ``select`` loop that feeds the child, drains
its pipes, terminates its session and reaps it. Who is in the session and
how a member is signalled safely is ``dshtools._io.session``.

Guarantees:

* **One thread.** Spawning, signalling, reading and reaping all happen in
  the thread that called ``run_process``; the only code that runs
  elsewhere is ``_Waker.wake`` (the abort listener, in the aborting
  thread), which writes one byte to a pipe.
* **Nothing left running.** ``_Supervisor.run`` returns or raises only once
  the leader is reaped and no live (non-zombie) member of its session
  remains, including when an exception such as ``KeyboardInterrupt`` ends
  the loop early (the session is then SIGKILLed until it is empty).
* **Nothing outlives the caller's process.** The session is kept by this
  process's keeper (``dshtools._os.keeper``) from its spawn until it is
  empty: if this process dies meanwhile, by any signal, the session and its
  process tree are killed.
* **No stranger signalled.** A signal goes to the session's process group
  (whose id the kernel does not reuse while the group has a member) and to
  each member found in ``/proc`` whose session id, re-read right before,
  still matches (pinned by a pidfd where the kernel has ``pidfd_open``).
  The interleavings are written down at ``_Waker``, ``_kill_member`` and in
  ``_Supervisor._loop``.

Without ``/proc`` (not Linux) only the process group is covered.
"""

from __future__ import annotations

import os
import selectors
import signal as _os_signal
import subprocess
import threading
import time
from collections.abc import Mapping
from typing import Final

from .._core.errors import AbortError
from .._os import keeper as _keeper
from .._signal import AbortSignal
from .common import _PIPE_CHUNK, StrPath
from .session import _kill_member, _Session

# Polling bounds while a session is being terminated: POSIX has no
# "session became empty" event, so liveness is re-checked at this pace
# (doubling from the first value to the second), between pipe reads.
_GROUP_POLL_MIN: Final = 0.002
_GROUP_POLL_MAX: Final = 0.02
# Without pidfd_open the leader's exit is noticed by polling at this pace.
_LEADER_POLL: Final = 0.02


class ProcessAbortError(AbortError):
    """``run_process`` stopped its child because the signal aborted (the
    caller's abort, or its own ``timeout``). An ``AbortError``: ``reason``
    is the signal's reason (a ``TimeoutReason`` with code
    ``PROCESS_TIMEOUT`` for the timeout, so ``timeout_of`` finds it), and it
    keeps the evidence the stop would otherwise throw away:

    * ``stdout``, ``stderr``: ``bytes`` every member of the child's session
      wrote to the pipes before it died (read until the pipes were drained);
    * ``returncode``: the leader's exit status as ``subprocess`` reports it
      (``-15`` killed by SIGTERM, ``-9`` by SIGKILL, or its own exit code
      when it exited on the signal by itself); ``None`` when the signal was
      already aborted and no process was started (both outputs are then
      empty).

    Source: docs/contract.md#a14."""

    stdout: bytes
    stderr: bytes
    returncode: int | None

    def __init__(
        self, reason: object = None, *, stdout: bytes = b"", stderr: bytes = b"", returncode: int | None = None
    ) -> None:
        super().__init__(reason)
        self.stdout = stdout
        self.stderr = stderr
        self.returncode = returncode

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild, (self.reason, self.stdout, self.stderr, self.returncode))

    def __repr__(self) -> str:
        return (
            f"ProcessAbortError(reason={self.reason!r}, returncode={self.returncode!r}, "
            f"stdout={len(self.stdout)} bytes, stderr={len(self.stderr)} bytes)"
        )


def _rebuild(reason: object, stdout: bytes, stderr: bytes, returncode: int | None) -> ProcessAbortError:
    return ProcessAbortError(reason, stdout=stdout, stderr=stderr, returncode=returncode)


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

    __slots__ = ("_closed", "_lock", "_write_fd", "read_fd")

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
        _keeper.start()  # before the child: see `dshtools._os.keeper.start`
        self.proc = subprocess.Popen(
            args,
            stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            env=env,
            start_new_session=True,
        )
        # The session dies with this process, whatever thread started it.
        _keeper.keep(self.proc.pid)
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
                self.session.pidfd = None
                os.close(self.pidfd)
            for f in (proc.stdin, proc.stdout, proc.stderr):
                if f is not None:
                    try:
                        f.close()
                    except OSError:
                        pass
            _keeper.release(proc.pid)  # reaped, no member left

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
                self.session.pidfd = self.pidfd
                sel.register(self.pidfd, selectors.EVENT_READ)

        # No lost wake-up: abort() sets signal.aborted *before* the listener
        # writes its byte, and the loop head re-reads the flag after every
        # select(); so either the flag is already visible at the loop head, or
        # the byte is still to come and will end the select().
        #
        # No stranger killed: the session id (= group id) is the leader's
        # pid, which the kernel does not hand out again while any process
        # still has it as its pid, group id or session id (zombies
        # included). The group is signalled through the leader's pidfd
        # (_procfs.killpg_pinned), which names the group the leader made,
        # not its number, even after the leader was reaped. Where the kernel
        # cannot do that (before Linux 6.9) signals go out only while the
        # loop has just seen a member (or the unreaped leader); the window
        # left (the last member dies and the pid is reused, by a process
        # that makes itself a group leader, between that scan and a killpg
        # a few microseconds later) needs a full pid wrap-around.
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

            for key, _events in sel.select(wait):
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
        assert proc.returncode is not None
        stdout, stderr = b"".join(self.out[out_fd]), b"".join(self.out[err_fd])
        if aborted or self.signal.aborted:
            raise ProcessAbortError(self.signal.reason, stdout=stdout, stderr=stderr, returncode=proc.returncode)
        return subprocess.CompletedProcess(self.args, proc.returncode, stdout, stderr)

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
