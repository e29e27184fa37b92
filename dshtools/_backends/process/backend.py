"""``ProcessBackend``: tool bodies in worker processes, stopped by force
when they ignore their signal (docs/contract.md#backends).

Guarantees:

* **One queue, one claim.** Calls wait in this backend's own queue (in this
  process) until a worker is idle. Starting a call is a claim on its job
  (one atomic ``dict.setdefault``) that races the withdrawal made by the
  abort listener of ``run.signal``: whoever inserts first decides. The
  claimer re-checks the signal and only then sends the call to the worker
  (``Value``/``Error``); a withdrawal that won means the body never reaches
  any worker (``NotInvoked``). Nothing is pre-queued in a worker.
* **The signal crosses.** After the claim, an abort of ``run.signal`` is
  sent to the worker from the aborting thread (its reason pickled, or a
  stand-in ``AbortError`` carrying its text), where a reader thread aborts
  the body's own ``AbortSignal`` at once.
* **The budget crosses.** The call carries ``run.signal.time_left()``,
  read right before it is sent; the body's signal reports it as
  ``deadline``/``time_left()`` counted on the worker's clock from receipt
  (``None`` stays ``None``), and is aborted only by the caller's abort:
  the clocks of two processes are never compared.
* **Forced stop.** ``kill_after`` seconds after the abort a body that has
  not returned is stopped: its worker's session and everything the worker
  started are killed and confirmed gone (``dshtools._os.tree``), the
  worker is reaped, and the report says ``killed`` (outcome ``Error`` of an
  ``AbortError``). The worker is replaced lazily, on the next call.
  ``kill_after=None`` never kills.
* **Lost workers.** A worker that exits on its own while running a body
  gives ``Error(WorkerLost(...))``; whatever it left in its session is
  killed; the next call gets a fresh worker.
* **What cannot be rebuilt fails one call.** Arguments cross as bytes
  (``cloudpickle``, by value, when they name ``__main__``); a call the
  worker cannot rebuild settles ``NotInvoked`` with the reason, a value
  that does not unpickle here is an ``UnsendableValue`` naming its class,
  an exception that does not is a stand-in; a frame that does not decode
  at all stops its worker and loses its call. The backend goes on serving
  calls either way, and the manager thread never dies of a message.
* **Settled means stopped.** ``Dispatch.wait`` returns ``True`` only once
  the body returned, was withdrawn, or its worker was reaped.
* **Fork.** A backend used in a process forked from the one that made it
  raises ``RuntimeError`` naming the fork (docs/contract.md#a10);
  ``close()`` there only marks the copy closed and never touches the
  parent's workers.

Threads: ``validate`` runs on the registering thread; ``submit``, ``wait``
and ``report`` on the thread blocked in ``execute``; abort listeners on the
aborting thread; one manager thread per backend (started on first use,
joined by ``close()``) reads outcomes, enforces ``kill_after``, notices lost
workers and starts queued calls. Workers are started with
``subprocess.Popen`` (a fresh interpreter: the "spawn" start method, safe
whatever threads this process runs) in a new session.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import pickle
import threading
import time
from collections import deque
from typing import Any, Final

from ..._core.errors import AbortError, safe_str
from ..._core.interrupts import interrupt_slice
from ..._os.tree import left_behind, stop_tree
from ..._types.tools import ToolRunContext
from ..base import Body, BodyReport, Dispatch, Error, NotInvoked, Value, WorkerLost
from ..remote import outgoing_context
from .pool import _Job, _next_kill, _Worker, _WorkerPoll
from .wire import outcome_of

__all__ = ["ProcessBackend"]

_log = logging.getLogger("dshtools.process")
_log.addHandler(logging.NullHandler())

_PROTOCOL: Final = pickle.HIGHEST_PROTOCOL


class ProcessBackend:
    """Run tool bodies in a pool of worker processes; stop, by killing its
    worker and everything the worker started, a body that has not returned
    ``kill_after`` seconds after its signal aborted (docs/contract.md#backends).

    ``ProcessBackend(max_workers=None, *, kill_after=5.0, prestart=False)``:
    ``max_workers`` (default: the CPU count) worker processes at most,
    started on demand and reused; ``kill_after`` in seconds (finite, >= 0),
    or ``None`` never to kill (cooperative only, still joined);
    ``prestart=True`` calls ``start()`` before the constructor returns.
    Raises ``ValueError`` for a bad value.

    A worker's start-up (a fresh interpreter) is time a call waits for a
    worker, and that wait counts against the call's timeout, as any queue
    wait does: ``start()`` (or ``prestart=True``) takes it out of the first
    calls. Every result's ``meta["worker_wait"]`` says how many seconds the
    call waited for a worker (until one took it, or until it settled
    without one) (docs/contract.md#a32).

    Use as ``ToolRegistry(backend=ProcessBackend())`` or per tool with
    ``ToolDefinition(..., backend=...)``. Bodies are serialized by value
    with ``cloudpickle`` (``validate`` does a full round trip at
    ``register()``). In the worker, ``run.signal`` is a real ``AbortSignal``
    aborted when the caller-side signal aborts (same reason when it
    pickles) whose ``deadline``/``time_left()`` give the caller's remaining
    budget on the worker's clock (``None`` when no timer can abort the
    call), ``run.defer_context`` works, ``run.report_progress`` reaches
    the registry's progress observers (coalesced: at most one update per
    20 ms crosses, the last one always), ``run.dispatch`` raises
    ``RuntimeError``, ``run.token`` is fresh and ``run.parent`` is ``None``.
    ``close()`` stops every worker and everything they started; also a
    context manager.
    """

    def __init__(
        self, max_workers: int | None = None, *, kill_after: float | None = 5.0, prestart: bool = False
    ) -> None:
        if max_workers is None:
            max_workers = os.cpu_count() or 1
        if isinstance(max_workers, bool) or not isinstance(max_workers, int) or max_workers < 1:
            raise ValueError(f"max_workers must be an int >= 1, got {max_workers!r}")
        if kill_after is not None:
            if isinstance(kill_after, bool) or not isinstance(kill_after, (int, float)):
                raise ValueError(f"kill_after must be a number of seconds or None, got {kill_after!r}")
            if not math.isfinite(kill_after) or kill_after < 0:
                raise ValueError(f"kill_after must be finite and >= 0 seconds, got {kill_after!r}")
            kill_after = float(kill_after)
        try:
            import cloudpickle  # type: ignore[import-untyped]
        except ImportError as exc:  # pragma: no cover - a dependency; imported here, not by `import dshtools`
            raise ImportError(
                "ProcessBackend needs cloudpickle (a dependency of dshtools): pip install cloudpickle"
            ) from exc
        self._pickler: Any = cloudpickle
        self.max_workers: Final = max_workers
        self.kill_after: Final = kill_after
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._workers: list[_Worker] = []
        self._idle: list[_Worker] = []
        self._starting = 0
        # Calls taken off the queue for an idle worker and not yet sent (or
        # refused): close() waits for them as for running bodies.
        self._handing_off = 0
        self._queue: deque[_Job] = deque()
        self._closed = False
        self._stopping = False
        self._manager: threading.Thread | None = None
        self._wake_lock = threading.Lock()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._seq = itertools.count(1)
        self._keys = itertools.count(1)
        # id(body) -> (body, key, cloudpickle bytes); the body is held so its
        # id stays its own.
        self._bodies: dict[int, tuple[object, int, bytes]] = {}
        self._kills = 0
        self._lost = 0
        self._started: list[int] = []
        if prestart:
            self.start()

    def start(self, timeout: float | None = None) -> None:
        """Start every worker not running yet (up to ``max_workers``) and
        return once each is ready to take a call and has loaded the body of
        every tool registered so far, so that a first call costs what later
        calls cost (docs/contract.md#a32); a tool registered later is loaded
        by the ready workers in the background. Runs on the
        calling thread; ``timeout`` in seconds bounds the wait (``None``:
        no bound). Idempotent: workers already running are kept. Raises
        ``TimeoutError`` when the workers are not ready in time (they go on
        starting and serve calls once ready), ``RuntimeError`` when the
        backend is closed, used in a forked child, or no worker could
        start (a worker that dies later is replaced on demand as usual)."""
        self._check_fork()
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._lock:
                if self._closed:
                    raise RuntimeError("ProcessBackend is closed")
                if len(self._workers) + self._starting >= self.max_workers:
                    break
                self._starting += 1
                self._ensure_manager_locked()
            try:
                fresh = _Worker(self.kill_after)
            finally:
                with self._lock:
                    self._starting -= 1
            with self._lock:
                self._workers.append(fresh)
                self._started.append(fresh.pid)
            self._wake()  # the manager makes it idle once it says it is ready
        with self._lock:
            while True:
                coming = [w for w in self._workers if (not w.ready or w.loading) and not w.dead]
                if not coming:
                    break
                left = None if end is None else end - time.monotonic()
                if left is not None and left <= 0:
                    raise TimeoutError(
                        f"{len(coming)} ProcessBackend worker(s) not ready after {timeout} s; they go on starting"
                    )
                step = interrupt_slice()
                self._changed.wait(left if step is None else step if left is None else min(left, step))
            if not any(w.ready and not w.dead for w in self._workers):
                raise RuntimeError("no ProcessBackend worker process could start")

    # -- introspection (the demo's quiescence report, tests) ----------------

    @property
    def worker_pids(self) -> list[int]:
        """Pids of the worker processes alive now (idle or busy)."""
        with self._lock:
            return [w.pid for w in self._workers if not w.dead]

    @property
    def bodies_running(self) -> int:
        """How many bodies a worker is running right now."""
        with self._lock:
            return sum(1 for w in self._workers if w.job is not None and not w.job.done.is_set())

    @property
    def workers_started(self) -> list[int]:
        """Pids of every worker process this backend started, in order."""
        with self._lock:
            return list(self._started)

    def left_behind(self) -> list[int] | None:
        """Pids of the live processes that a worker started and that
        outlived the body that started them (descendants of live workers,
        members of any worker's session), for quiescence reports; ``None``
        when ``/proc`` cannot be read (not Linux, or no file descriptor
        left): not checked, which is never "none left"."""
        return left_behind(self.workers_started, self.worker_pids)

    @property
    def calls_queued(self) -> int:
        """How many calls wait for a worker (submitted, neither started nor
        withdrawn)."""
        with self._lock:
            return sum(1 for job in self._queue if not job.claim)

    @property
    def kills(self) -> int:
        """How many workers were killed by a forced stop so far."""
        return self._kills

    # -- Backend protocol ---------------------------------------------------

    def _check_fork(self) -> None:
        if os.getpid() != self._pid:
            raise RuntimeError(
                f"this ProcessBackend was created in process {self._pid} and cannot be used in process "
                f"{os.getpid()} forked from it (docs/contract.md#a10): create a new one in the child"
            )

    def validate(self, name: str, body: Body) -> None:
        """Serialize ``body`` by value (``cloudpickle``) and load it back;
        ``ValueError`` naming the tool when either step fails. The bytes are
        kept for ``submit``."""
        self._check_fork()
        self._entry(name, body)

    def _entry(self, name: str, body: Body) -> tuple[int, bytes]:
        entry = self._bodies.get(id(body))
        if entry is not None and entry[0] is body:
            return entry[1], entry[2]
        try:
            data = self._pickler.dumps(body, _PROTOCOL)
            self._pickler.loads(data)
        except Exception as exc:
            raise ValueError(
                f"tool {name!r}: its body cannot be sent to a worker process ({type(exc).__name__}: "
                f"{safe_str(exc)}); a ProcessBackend body must pickle with cloudpickle"
            ) from exc
        key = next(self._keys)
        with self._lock:
            self._bodies[id(body)] = (body, key, data)
            for worker in self._workers:
                if worker.ready and not worker.dead:
                    self._preload_locked(worker)
        return key, data

    def _preload_locked(self, worker: _Worker) -> None:
        """Send ``worker`` every known body it does not have, to load ahead
        of its first call (under ``_lock``; a worker running a call loads
        them after it)."""
        for _body, key, data in list(self._bodies.values()):
            if key in worker.bodies:
                continue
            try:
                worker.send(("body", key, data))
            except OSError:
                return  # gone: the manager notices
            worker.bodies.add(key)
            worker.loading += 1

    def submit(self, body: Body, args: object, run: ToolRunContext) -> Dispatch:
        """Queue ``body(args, run)`` for a worker; never waits for one.
        Raises ``RuntimeError`` when closed or used in a forked child,
        ``ValueError`` when the body does not pickle."""
        self._check_fork()
        if self._closed:
            raise RuntimeError("ProcessBackend is closed")
        key, data = self._entry(run.name, body)
        try:
            # Plain pickle refers to classes by module; one of ``__main__`` (a
            # script's pydantic model) the worker cannot find there, so such
            # arguments go by value with cloudpickle instead. Bytes in the
            # call frame: a failure to load them is that call's alone.
            sent = pickle.dumps(args, _PROTOCOL)
            if b"__main__" in sent:
                sent = self._pickler.dumps(args, _PROTOCOL)
        except Exception:
            try:
                sent = self._pickler.dumps(args, _PROTOCOL)
            except Exception as exc:
                raise ValueError(
                    f"tool {run.name!r}: its arguments cannot be sent to a worker process "
                    f"({type(exc).__name__}: {safe_str(exc)})"
                ) from exc
        job = _Job(self, next(self._seq), key, data, sent, run)
        job.carried = outgoing_context()  # here: the dispatching thread's context
        job.handle = run.signal.add_listener(job.on_abort)
        if job.done.is_set():
            return job  # withdrawn at once: the signal was already aborted
        with self._lock:
            if self._closed:
                closed = True
            else:
                closed = False
                self._queue.append(job)
                self._ensure_manager_locked()
        if closed:
            job.withdraw(RuntimeError("ProcessBackend is closed"))
            return job
        try:
            self._pump()
        except BaseException as exc:  # e.g. KeyboardInterrupt while starting it
            # A raising submit() tells the registry the body never starts:
            # true only if this withdrawal wins. If the job was started
            # already, it must be joined: the interrupt surfaces from the
            # first wait() instead, where the registry handles it.
            if job.withdraw(exc if isinstance(exc, Exception) else None):
                raise
            job.deferred = exc
        return job

    def close(self) -> None:
        """Withdraw queued calls, wait for the running ones (``kill_after``
        still applies), stop every worker and kill whatever they left
        running, join the manager thread. Idempotent. In a forked child it
        only marks this copy closed."""
        if os.getpid() != self._pid:
            self._closed = True
            return
        with self._lock:
            if self._stopping:
                return
            self._closed = True
            queued = list(self._queue)
            self._queue.clear()
        for job in queued:
            job.withdraw(RuntimeError("ProcessBackend closed before the call was dispatched"))
        with self._lock:
            while self._handing_off or any(w.job is not None and not w.job.done.is_set() for w in self._workers):
                self._changed.wait(interrupt_slice())
            self._stopping = True
            manager = self._manager
        self._wake()
        if manager is not None:
            manager.join()
        with self._lock:
            workers = list(self._workers)
            self._workers.clear()
            self._idle.clear()
        for worker in workers:
            self._stop_worker(worker)
        with self._wake_lock:
            os.close(self._wake_r)
            os.close(self._wake_w)
            self._wake_w = -1

    def __enter__(self) -> ProcessBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<ProcessBackend {state} max_workers={self.max_workers} kill_after={self.kill_after}>"

    # -- scheduling ---------------------------------------------------------

    def _wake(self) -> None:
        # Under its own lock against close(): a late listener must never
        # write into a descriptor number that close() freed and the process
        # reused for something else.
        with self._wake_lock:
            if self._wake_w < 0:
                return
            try:
                os.write(self._wake_w, b"\0")
            except OSError:
                pass  # full: the manager is woken already

    def _ensure_manager_locked(self) -> None:
        if self._manager is None:
            self._manager = threading.Thread(target=self._manage, name="dshtools-process-backend", daemon=True)
            self._manager.start()

    def _pump(self) -> None:
        """Start queued jobs on idle workers, and start workers while jobs
        wait and the pool is not full. Any thread."""
        while True:
            with self._lock:
                while self._queue and self._queue[0].claim:
                    self._queue.popleft()  # withdrawn while queued
                if not self._queue or self._stopping:
                    return
                if self._idle:
                    worker = self._idle.pop()
                    job = self._queue.popleft()
                    self._handing_off += 1
                else:
                    # Start a worker for each waiting call that no worker
                    # on its way (started, not ready yet) will take.
                    coming = self._starting + sum(1 for w in self._workers if not w.ready and not w.dead)
                    waiting = sum(1 for j in self._queue if not j.claim)
                    if waiting <= coming or len(self._workers) + self._starting >= self.max_workers:
                        return
                    self._starting += 1
                    worker = None
                    job = None
            if worker is None:
                try:
                    fresh = _Worker(self.kill_after)
                except BaseException as exc:
                    with self._lock:
                        self._starting -= 1
                        failed = list(self._queue) if not self._workers else []
                        if failed:
                            self._queue.clear()
                    for queued in failed:
                        queued.withdraw(exc if isinstance(exc, Exception) else RuntimeError(safe_str(exc)))
                    if not isinstance(exc, Exception):
                        raise
                    return
                with self._lock:
                    self._starting -= 1
                    self._workers.append(fresh)
                    self._started.append(fresh.pid)
                self._wake()  # the manager watches it and makes it idle once it is ready
                continue
            assert job is not None
            started = False
            try:
                started = job.start_on(worker)
            finally:
                # Also on an interrupt: a worker whose job was not sent is
                # idle again, never stranded.
                with self._lock:
                    if not started and worker.job is None:
                        self._idle.append(worker)
                    self._handing_off -= 1
                    self._changed.notify_all()

    # -- the manager thread -------------------------------------------------

    def _manage(self) -> None:
        try:
            self._manage_loop()
        except BaseException as exc:  # pragma: no cover - a bug here must not hang callers
            _log.exception("ProcessBackend manager thread failed; the backend is closed")
            self._fail_all(exc)

    def _fail_all(self, exc: BaseException) -> None:  # pragma: no cover - see _manage
        """Without its manager the backend cannot finish anything: close it,
        withdraw what waits, kill every worker and report what ran as lost."""
        with self._lock:
            self._closed = True
            queued = list(self._queue)
            self._queue.clear()
            workers = list(self._workers)
        for waiting in queued:
            waiting.withdraw(RuntimeError(f"ProcessBackend failed: {safe_str(exc)}"))
        for worker in workers:
            self._retire(worker)
            if worker.proc.returncode is None:
                stop_tree(worker.pid)
                worker.proc.wait()
            worker.release()
            job = worker.job
            if job is not None:
                self._finish(
                    worker, job, Error(WorkerLost(f"ProcessBackend failed: {safe_str(exc)}")), (), killed=False
                )

    def _manage_loop(self) -> None:
        watch = _WorkerPoll(self._wake_r)
        while True:
            with self._lock:
                if self._stopping:
                    return
                workers = list(self._workers)
            for worker, kind in watch.poll(workers, _next_kill(workers, self.kill_after)):
                if kind == "conn":
                    self._receive(worker)
                else:
                    self._lose(worker)
            for worker in workers:
                if not worker.dead and worker.pidfd < 0 and worker.exited():
                    self._lose(worker)
            now = time.monotonic()
            for worker in workers:
                job = worker.job
                if (
                    not worker.dead
                    and job is not None
                    and self.kill_after is not None
                    and job.aborted_at is not None
                    and not job.done.is_set()
                    and now >= job.aborted_at + self.kill_after
                ):
                    self._kill(worker, job)
            self._pump()

    def _receive(self, worker: _Worker) -> None:
        try:
            data = worker.conn.recv_bytes()
        except (EOFError, OSError):
            self._lose(worker)
            return
        try:
            message = pickle.loads(data)
        except BaseException as exc:  # foreign unpickling, its SystemExit too: see _handle
            self._unreadable(worker, exc)
            return
        self._handle(worker, message)

    def _unreadable(self, worker: _Worker, exc: BaseException) -> None:
        """A frame from ``worker`` did not decode. Its payloads travel as
        bytes decoded per call, so this is a broken connection, not a bad
        value: the worker is stopped (with everything it started) and its
        call, if any, fails as lost with the reason; the next call gets a
        fresh worker."""
        _log.error("a message from ProcessBackend worker %d could not be decoded: %s", worker.pid, safe_str(exc))
        self._stop_and_reap(worker)
        job = worker.job
        if job is not None:
            error = WorkerLost(
                f"a message from the worker process (pid {worker.pid}) running tool {job.run.name!r} could not be "
                f"decoded ({type(exc).__name__}: {safe_str(exc)}); the worker was stopped"
            )
            self._finish(worker, job, Error(error), (), killed=False)

    def _handle(self, worker: _Worker, message: Any) -> None:
        if message[0] == "ready":
            # Imported and listening: from now on a claim starts the body at
            # once, so "invoked" never covers an interpreter start-up.
            worker.ready = True
            with self._lock:
                if not worker.dead:
                    self._idle.append(worker)
                    self._preload_locked(worker)
                self._changed.notify_all()  # start() waits for it
            return
        if message[0] == "loaded":
            with self._lock:
                worker.loading -= 1
                self._changed.notify_all()  # start() waits for it
            return
        if message[0] == "progress":
            # Sent before its call's outcome (the worker flushes the last
            # one first), read here in order: it is queued for the
            # observers before the result is published. One for a call
            # that settled (a killed worker's last words) is dropped.
            job = worker.job
            if job is not None and job.seq == message[1] and not job.done.is_set():
                job.run.report_progress(message[2], message[3], message[4])
            return
        _, seq, kind, payload, contexts, detail = message
        job = worker.job
        if job is None or job.seq != seq:  # pragma: no cover - protocol invariant
            _log.warning("worker %d reported call %s it was not running", worker.pid, seq)
            return
        outcome = outcome_of(kind, payload, detail, job.run.name)
        self._finish(worker, job, outcome, tuple(contexts), killed=False)
        with self._lock:
            if not worker.dead:
                self._idle.append(worker)

    def _finish(
        self,
        worker: _Worker,
        job: _Job,
        outcome: Value | Error | NotInvoked,
        contexts: tuple[Any, ...],
        *,
        killed: bool,
    ) -> None:
        with job.lock:
            invoked = not isinstance(outcome, NotInvoked)
            overrun = time.monotonic() - job.aborted_at if invoked and job.aborted_at is not None else None
            job.settle_locked(BodyReport(outcome=outcome, contexts=contexts, killed=killed, overrun_s=overrun))
        with self._lock:
            worker.job = None
            self._changed.notify_all()

    def _retire(self, worker: _Worker) -> None:
        with self._lock:
            if worker in self._workers:
                self._workers.remove(worker)
            if worker in self._idle:
                self._idle.remove(worker)
            worker.dead = True
            self._changed.notify_all()  # start() waits for it

    def _stop_and_reap(self, worker: _Worker) -> int:
        """Retire ``worker``, kill it with everything it started (confirmed
        gone), reap it and close its handles; how many processes other than
        the worker were found."""
        self._retire(worker)
        found = stop_tree(worker.pid)
        worker.proc.wait()
        worker.release()
        return found

    def _kill(self, worker: _Worker, job: _Job) -> None:
        """The forced stop: kill the worker and everything it started,
        confirm, reap, report ``killed``. A body whose outcome is already in
        the pipe returned before its stop fell due: that outcome stands and
        its worker is not stopped."""
        while worker.job is job and not worker.dead and worker.conn.poll(0):
            self._receive(worker)  # settles the job (or loses the worker)
        if worker.job is not job or worker.dead:
            return
        found = self._stop_and_reap(worker)
        self._kills += 1
        _log.warning(
            "tool %r did not return %.3g s after its signal aborted: worker %d killed (with %d processes it started)",
            job.run.name,
            self.kill_after,
            worker.pid,
            found,
        )
        reason = job.run.signal.reason
        error = reason if isinstance(reason, AbortError) else AbortError(reason)
        self._finish(worker, job, Error(error), (), killed=True)

    def _lose(self, worker: _Worker) -> None:
        """The worker exited on its own: kill what it left, reap it, report
        the body it ran (if any) as lost."""
        self._retire(worker)
        # What it sent before it died still counts, whichever of the two the
        # manager saw first: a body whose outcome is in the pipe returned, a
        # worker whose "ready" is there did start (its queue is no start-up
        # failure to refuse).
        try:
            while (worker.job is not None or not worker.ready) and worker.conn.poll(0):
                self._handle(worker, pickle.loads(worker.conn.recv_bytes()))
        except Exception:  # a frame that does not decode: the worker is lost all the same
            pass
        stop_tree(worker.pid)
        code = worker.proc.wait()
        worker.release()
        job = worker.job
        if not worker.ready:
            # It never got as far as running: do not start another one for
            # the same queue forever; the queued calls never ran.
            with self._lock:
                failed = list(self._queue)
                self._queue.clear()
            refused = RuntimeError(f"a ProcessBackend worker process failed to start (exit status {code})")
            for queued in failed:
                queued.withdraw(refused)
            return
        if job is None:
            return
        self._lost += 1
        how = f"was killed by signal {-code}" if code < 0 else f"exited with status {code}"
        error = WorkerLost(f"the worker process (pid {worker.pid}) running tool {job.run.name!r} {how}")
        self._finish(worker, job, Error(error), (), killed=False)

    def _stop_worker(self, worker: _Worker) -> None:
        """close(): stop an idle worker. It runs no body, so it is killed
        outright, with whatever earlier bodies left running in its session
        or started from it (swept while it is unreaped: pid-reuse safe),
        then reaped."""
        if worker.proc.returncode is None:
            stop_tree(worker.pid)
            worker.proc.wait()
        worker.release()
