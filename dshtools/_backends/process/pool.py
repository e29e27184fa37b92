"""The two halves of one ``ProcessBackend`` call
(docs/contract.md#backends): ``_Worker``, a worker process and its connection, and
``_Job``, one submitted body with its claim, its withdrawal and its report.

Guarantees:

* **One claim decides.** ``_Job.start_on`` (a worker is idle) and
  ``_Job.withdraw`` (the abort listener, a closing backend) race on
  ``claim.setdefault(0, ...)``; whoever inserts first decides. The claimer
  re-checks the signal under ``lock`` before sending, and the abort
  listener takes the same lock after losing the claim, so an abort message
  is sent only after the call message, or not at all.
* **Settled once.** ``settle_locked`` records the first report only, removes
  the abort listener and releases every ``wait``.
* **Messages never interleave.** Everything sent to a worker goes through
  ``_Worker.send`` under its ``send_lock``.

Threads: ``start_on`` runs on the submitting thread or the backend's
manager thread; ``on_abort`` on the aborting thread; ``wait``/``report`` on
the thread blocked in ``execute``.
"""

from __future__ import annotations

import math
import os
import pickle
import select
import socket
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection
from typing import Any, Final, Protocol

import attrs

from ..._os import keeper as _keeper
from ..._signal import AbortSignal
from ..._types.tools import ToolRunContext
from ..base import BodyReport, NotInvoked
from .wire import dump_reason


class _Wakeable(Protocol):
    """What a job needs from its backend: a nudge to its manager thread."""

    def _wake(self) -> None: ...


__all__: list[str] = []

_PROTOCOL: Final = pickle.HIGHEST_PROTOCOL
_CLAIMED: Final = object()  # the claim's value when a worker took the job
_PACKAGE_ROOT: Final = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class _Worker:
    """One worker process and its connection. ``job`` is the call it runs
    (``None``: idle). Messages to it go through ``send`` (under
    ``send_lock``: the claimer and abort listeners may send concurrently)."""

    __slots__ = ("bodies", "conn", "dead", "job", "loading", "pid", "pidfd", "proc", "ready", "send_lock")

    def __init__(self, kill_after: float | None) -> None:
        parent_sock, child_sock = socket.socketpair()
        child_fd = child_sock.fileno()
        env = dict(os.environ)
        env["PYTHONPATH"] = _PACKAGE_ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        _keeper.start()  # before the worker: see `dshtools._os.keeper.start`
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", f"from dshtools._backends.process.worker import main; main({child_fd})"],
                pass_fds=(child_fd,),
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=env,
            )
        finally:
            child_sock.close()
        self.pid = self.proc.pid
        # Its session dies with this process, whatever thread started it.
        _keeper.keep(self.pid)
        self.conn = Connection(parent_sock.detach())
        self.send_lock = threading.Lock()
        self.job: _Job | None = None
        self.dead = False
        self.ready = False  # set when the worker said it runs: only then is it idle
        self.bodies: set[int] = set()
        self.loading = 0  # bodies sent ahead and not loaded yet (under the backend's lock)
        self.pidfd = -1
        if hasattr(os, "pidfd_open"):
            try:
                self.pidfd = os.pidfd_open(self.pid)
            except OSError:
                self.pidfd = -1
        self.send(("config", kill_after, list(sys.path)))

    def send(self, message: tuple[Any, ...]) -> None:
        data = pickle.dumps(message, _PROTOCOL)
        with self.send_lock:
            self.conn.send_bytes(data)

    def exited(self) -> bool:
        return self.proc.poll() is not None

    def release(self) -> None:
        """Close this side's handles (after the process was reaped)."""
        self.dead = True
        try:
            self.conn.close()
        except OSError:
            pass
        if self.pidfd >= 0:
            os.close(self.pidfd)
            self.pidfd = -1
        _keeper.release(self.pid)


@attrs.define(eq=False, repr=False, weakref_slot=False)
class _Job:
    """One submitted body: the claim, the settlement and the report.
    ``_Job(backend, seq, body_key, body_data, args, run)``; the other fields
    start empty."""

    backend: _Wakeable
    seq: int
    body_key: int
    body_data: bytes
    args: object
    run: ToolRunContext
    # 0 -> the claimer's token, inserted once with setdefault (module docstring)
    claim: dict[int, object] = attrs.field(init=False, factory=dict)
    lock: threading.Lock = attrs.field(init=False, factory=threading.Lock)
    done: threading.Event = attrs.field(init=False, factory=threading.Event)
    report_: BodyReport | None = attrs.field(init=False, default=None)
    worker: _Worker | None = attrs.field(init=False, default=None)
    aborted_at: float | None = attrs.field(init=False, default=None)
    handle: Any = attrs.field(init=False, default=None)
    # an interrupt submit() caught after the start
    deferred: BaseException | None = attrs.field(init=False, default=None)
    # the tracing context sent with the call (remote.outgoing_context)
    carried: Any = attrs.field(init=False, default=None)
    # time.monotonic() at submit, and the seconds until a worker took the
    # call (None until then): meta["worker_wait"]
    queued_at: float = attrs.field(init=False, factory=time.monotonic)
    waited: float | None = attrs.field(init=False, default=None)

    # -- Dispatch protocol --------------------------------------------------

    def wait(self, timeout: float) -> bool:
        deferred = self.deferred
        if deferred is not None:
            self.deferred = None
            raise deferred
        return self.done.wait(timeout)

    def report(self) -> BodyReport:
        report = self.report_
        if report is None:
            raise RuntimeError("report() before the dispatch settled (wait() returned False)")
        return report

    # -- claim, withdrawal, settlement --------------------------------------

    def settle_locked(self, report: BodyReport) -> None:
        if self.report_ is not None:
            return
        # How long the call waited for a worker: until one took it, else
        # until it settled without one (withdrawn, refused).
        waited = self.waited if self.waited is not None else time.monotonic() - self.queued_at
        self.report_ = attrs.evolve(report, meta={**(report.meta or {}), "worker_wait": waited})
        handle = self.handle
        if handle is not None:
            handle.remove()
        self.done.set()

    def withdraw(self, error: BaseException | None) -> bool:
        """Withdraw the job if no worker claimed it; ``True`` if it was."""
        mine = object()
        if self.claim.setdefault(0, mine) is not mine:
            return False
        with self.lock:
            self.settle_locked(BodyReport(outcome=NotInvoked(error)))
        return True

    def on_abort(self, signal: AbortSignal) -> None:
        # The abort listener of run.signal, on the aborting thread.
        if self.withdraw(None):
            return
        with self.lock:
            if self.report_ is not None or self.aborted_at is not None:
                return
            self.aborted_at = time.monotonic()
            worker = self.worker
            if worker is None:  # the claimer re-checks the signal: it settles
                return
            try:
                worker.send(("abort", self.seq, dump_reason(signal.reason)))
            except OSError:
                pass  # the worker is gone: the manager reports it
        self.backend._wake()

    def start_on(self, worker: _Worker) -> bool:
        """Claim the job for ``worker`` and send it; ``False`` when it was
        withdrawn first (the worker stays idle). ``True`` also when the
        worker turned out dead (the job settles as not invoked and the
        worker is not made idle again)."""
        if self.claim.setdefault(0, _CLAIMED) is not _CLAIMED:
            return False
        with self.lock:
            if self.run.signal.aborted:
                # Aborted between queueing and the claim: the body never starts.
                self.settle_locked(BodyReport(outcome=NotInvoked()))
                return False
            self.waited = time.monotonic() - self.queued_at
            self.worker = worker
            worker.job = self
            body = None if self.body_key in worker.bodies else self.body_data
            run = self.run
            try:
                worker.send(
                    (
                        "call",
                        self.seq,
                        self.body_key,
                        body,
                        self.args,
                        run.call_id,
                        run.root_call_id,
                        run.name,
                        run.agent,
                        # The budget as seconds left now, as late as possible
                        # before the send: the worker re-bases it on its own
                        # clock; only a duration crosses, never an instant.
                        run.signal.time_left(),
                        self.carried,
                    )
                )
            except OSError as exc:
                # The worker died before the whole call reached it (an idle
                # worker killed before the manager noticed): the body never
                # started. Not back to idle: the manager retires the worker.
                self.worker = None
                worker.job = None
                self.settle_locked(
                    BodyReport(
                        outcome=NotInvoked(
                            RuntimeError(
                                f"the worker process (pid {worker.pid}) exited before the call reached it: {exc}"
                            )
                        )
                    )
                )
                return True
            except Exception as exc:  # the message did not pickle: nothing was sent
                self.worker = None
                worker.job = None
                self.settle_locked(BodyReport(outcome=NotInvoked(exc)))
                return False
            worker.bodies.add(self.body_key)
        return True


_NO_PIDFD_POLL: Final = 0.05  # liveness polling where there is no pidfd


class _WorkerPoll:
    """The manager thread's poll set: the wake-up pipe and, per live worker,
    its connection (``"conn"``) and pidfd (``"pid"``), kept equal to the
    workers it is given. Manager thread only."""

    def __init__(self, wake_fd: int) -> None:
        self.wake_fd = wake_fd
        self.poller = select.poll()
        self.poller.register(wake_fd, select.POLLIN)
        self.registered: dict[int, tuple[_Worker, str]] = {}

    def poll(self, workers: list[_Worker], timeout: float | None) -> list[tuple[_Worker, str]]:
        """Wait up to ``timeout`` seconds (``None``: until something
        happens; at most ``_NO_PIDFD_POLL`` while a worker has no pidfd);
        the live workers whose connection or pidfd is ready, the wake-up
        pipe drained."""
        wanted: dict[int, tuple[_Worker, str]] = {}
        for w in workers:
            if not w.dead:
                wanted[w.conn.fileno()] = (w, "conn")
                if w.pidfd >= 0:
                    wanted[w.pidfd] = (w, "pid")
        registered = self.registered
        for fd in list(registered):
            if fd not in wanted or registered[fd][0] is not wanted[fd][0]:
                self.poller.unregister(fd)
                del registered[fd]
        for fd, item in wanted.items():
            if fd not in registered:
                self.poller.register(fd, select.POLLIN)
                registered[fd] = item
        if any(w.pidfd < 0 for w in workers):
            timeout = _NO_PIDFD_POLL if timeout is None else min(timeout, _NO_PIDFD_POLL)
        ready = []
        for fd, _mask in self.poller.poll(None if timeout is None else max(0, math.ceil(timeout * 1000))):
            if fd == self.wake_fd:
                try:
                    while os.read(fd, 4096):
                        pass
                except BlockingIOError:
                    pass
                continue
            entry = registered.get(fd)
            if entry is not None and not entry[0].dead:
                ready.append(entry)
        return ready


def _next_kill(workers: list[_Worker], kill_after: float | None) -> float | None:
    """Seconds until the soonest forced stop of a body among ``workers``
    falls due (``None``: none pending)."""
    if kill_after is None:
        return None
    now = time.monotonic()
    soonest: float | None = None
    for w in workers:
        job = w.job
        if job is not None and job.aborted_at is not None and not job.done.is_set():
            left = job.aborted_at + kill_after - now
            soonest = left if soonest is None else min(soonest, left)
    return soonest
