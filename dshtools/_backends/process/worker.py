"""The worker side of ``ProcessBackend`` (docs/contract.md#backends): the loop a
worker process runs (``main(fd)``, started by ``ProcessBackend`` in a fresh
interpreter).

Guarantees:

* The worker leads its own session (the parent starts it with
  ``start_new_session=True``), so a forced stop can kill its process group
  and find every member of its session.
* One body at a time, on the main thread. A reader thread receives the
  parent's messages: a call is handed to the main thread with a fresh
  ``AbortController`` made at receipt; an abort for that call aborts the
  controller at once (in the reader thread, so a body blocked in C code or
  ``time.sleep`` still sees ``run.signal`` abort within milliseconds).
* The body gets a ``ToolRunContext`` whose ``signal`` is that controller's
  real ``AbortSignal``, which reports the caller's remaining budget as
  ``deadline``/``time_left()`` (seconds left at the send, re-based on this
  process's clock at receipt; ``None`` when no timer can abort the call);
  ``token`` is fresh, ``parent`` and ``definition``
  are ``None``; ``defer_context`` collects JSON objects that travel back
  with the outcome; ``dispatch`` raises ``RuntimeError``.
* Every outcome travels back: a value that does not pickle, or an
  exception that does not, is described (type name, message) instead.
* ``run.report_progress`` never blocks the body: it stores the update
  (replacing one not yet sent) for the ``dshtools-worker-progress``
  thread, which sends the latest one at most every ``_PROGRESS_EVERY_S``.
  The last update a body reported is sent before its outcome (both under
  the connection's send lock, so they never swap places).
* When the parent goes away (end of file on the connection), the current
  call's signal aborts and the worker exits; after ``kill_after`` seconds
  (5 s without one) it kills its own process group first.

* A call this worker cannot rebuild (its arguments or its body do not
  unpickle here) is answered ``"not_run"`` with the reason: the body never
  starts and the worker goes on serving calls. A frame from the parent that
  does not decode at all is reported on stderr and ends the worker as if
  the parent had gone (the parent reports its call as lost).

Messages (pickled tuples of plain data on a
``multiprocessing.connection.Connection``; whatever may hold user classes
travels as bytes inside them and is decoded per call): parent → worker
``("config", kill_after, sys_path)`` first, then ``("call", seq, body_key,
body_bytes | None, args_bytes, call_id, root_call_id, name, agent,
seconds_left | None, carried | None)`` (``args_bytes``: ``cloudpickle``
when they name ``__main__``, so a script's classes travel by value;
``pickle`` otherwise), ``("abort", seq,
reason_bytes)``, ``("body", body_key, body_bytes)`` (a body loaded ahead of
its first call, answered ``("loaded", body_key)``); worker → parent
``("ready",)`` once it listens, then
``("progress", seq, progress, total, message)`` any number of times while a
call runs and ``("done", seq, kind, payload, contexts, detail)`` with
``kind`` one of ``"value"`` (``detail``: the value's class as
``module.qualname``), ``"error"``, ``"bad_value"``, ``"not_run"``
(``detail``: the reason).
"""

from __future__ import annotations

import os
import pickle
import queue
import signal as _os_signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from multiprocessing.connection import Connection
from typing import Any

from ..._core.errors import AbortError, report_unraisable, safe_str
from ..._os import procfs as _procfs
from ..._signal import AbortController
from ..remote import RemoteRun, call_controller, class_name, incoming_context
from .wire import describe_error, load_reason

cloudpickle: Any = None  # imported by main(): only workers need it here

__all__ = ["main"]

_PROTOCOL = pickle.HIGHEST_PROTOCOL
_PROGRESS_EVERY_S = 0.02
"""The shortest time between two progress frames of this worker: a body
reporting in a tight loop costs the parent a frame per period, not one per
report (the observers see the latest; the last one is always sent)."""


class _Progress:
    """The worker's outgoing progress: the latest unsent update per call
    (``pending``, under ``cond``) and the thread that sends it. Every frame
    to the parent goes out under ``send_lock``, and an update leaves
    ``pending`` only under it, so ``flush`` (the main thread, before the
    outcome) never lets the outcome overtake an update taken for sending."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.send_lock = threading.Lock()
        self.cond = threading.Condition(threading.Lock())
        self.pending: dict[int, tuple[float, float | None, str | None]] = {}
        self.thread: threading.Thread | None = None

    def sink(self, seq: int) -> Callable[[float, float | None, str | None], None]:
        """``run.report_progress``'s destination for call ``seq`` (the
        body's thread): a dict store and a wake-up, never a send."""
        pending = self.pending
        cond = self.cond

        def post(progress: float, total: float | None, message: str | None) -> None:
            with cond:
                fresh = not pending
                pending[seq] = (progress, total, message)
                if self.thread is None:
                    self.thread = threading.Thread(target=self._run, name="dshtools-worker-progress", daemon=True)
                    self.thread.start()
                elif fresh:
                    cond.notify()

        return post

    def _take_locked(self, seq: int | None) -> bytes | None:
        # Under send_lock; takes cond for the store.
        with self.cond:
            if not self.pending:
                return None
            if seq is None:
                seq = next(iter(self.pending))
            update = self.pending.pop(seq, None)
        if update is None:
            return None
        return pickle.dumps(("progress", seq, *update), _PROTOCOL)

    def _run(self) -> None:
        while True:
            with self.cond:
                while not self.pending:
                    self.cond.wait()
            with self.send_lock:
                data = self._take_locked(None)
                if data is not None:
                    try:
                        self.conn.send_bytes(data)
                    except OSError:
                        return
            time.sleep(_PROGRESS_EVERY_S)  # a rate bound, not a hand-off: updates meanwhile coalesce

    def send_after_flush(self, seq: int, data: bytes) -> None:
        """Send call ``seq``'s last unsent update, then ``data`` (its
        outcome), with nothing in between (main thread)."""
        with self.send_lock:
            last = self._take_locked(seq)
            if last is not None:
                self.conn.send_bytes(last)
            self.conn.send_bytes(data)


class _Reader:
    """The reader thread: calls go to ``inbox``; an abort is handed to its
    call's controller on a thread of its own, so that a body's listener
    that blocks or raises never stops the reading."""

    def __init__(self, conn: Connection, inbox: queue.SimpleQueue[tuple[Any, AbortController | None] | None]) -> None:
        self.conn = conn
        self.inbox = inbox
        self.lock = threading.Lock()
        self.controllers: dict[int, AbortController] = {}
        self.kill_after = 5.0

    def run(self) -> None:
        try:
            while True:
                message = pickle.loads(self.conn.recv_bytes())
                kind = message[0]
                if kind == "call":
                    controller = call_controller(message[9], time.monotonic())
                    with self.lock:
                        self.controllers[message[1]] = controller
                    self.inbox.put((message, controller))
                elif kind == "body":
                    self.inbox.put((message, None))  # loaded ahead by the main thread
                elif kind == "abort":
                    with self.lock:
                        target = self.controllers.get(message[1])
                    if target is not None:
                        # The body's listeners run on a thread of their own:
                        # one that blocks or raises must not stop this
                        # thread reading the calls and aborts that follow.
                        threading.Thread(
                            target=_abort_sent, args=(target, message[2]), name="dshtools-worker-abort", daemon=True
                        ).start()
                elif kind == "config":
                    # First message: the parent's kill_after and sys.path (so
                    # bodies pickled by reference to an importable module
                    # load here as they did there).
                    if message[1] is not None:
                        self.kill_after = message[1]
                    sys.path[:] = [p for p in message[2] if isinstance(p, str)]
        except (EOFError, OSError):
            pass
        except BaseException as exc:
            # Every frame from the parent is plain data (a call's arguments
            # and an abort's reason travel as bytes inside it and are
            # decoded per call): a frame that does not decode means the
            # connection cannot be trusted. Said on stderr, then this worker
            # ends as if the parent had gone; the parent reports its call
            # as lost and starts a fresh worker.
            report_unraisable(exc, "reader of a ProcessBackend worker (a frame from the parent did not decode)", None)
        # The parent is gone: stop the call cooperatively, then by force.
        with self.lock:
            pending = list(self.controllers.values())
        gone = AbortError("the parent process of this ProcessBackend worker went away")
        for controller in pending:
            _abort(controller, gone)
        self.inbox.put(None)
        timer = threading.Timer(self.kill_after, _procfs.killpg, (0, _os_signal.SIGKILL))
        timer.daemon = True
        timer.start()

    def finished(self, seq: int) -> None:
        with self.lock:
            self.controllers.pop(seq, None)


def _abort_sent(target: AbortController, data: bytes) -> None:
    """Abort a call's ``run.signal`` with the reason the parent sent (on a
    thread of its own, started by the reader)."""
    try:
        reason = load_reason(data)
    except BaseException as exc:  # foreign unpickling: its SystemExit too
        reason = AbortError(f"aborted (the reason could not be unpickled: {safe_str(exc)})")
    _abort(target, reason)


def _abort(target: AbortController, reason: object) -> None:
    """Abort a call's ``run.signal``. What a body's listener raises,
    ``SystemExit`` included, is reported, never propagated: nobody on this
    thread could take it, and the caller of this must go on."""
    try:
        target.abort(reason)
    except BaseException as exc:
        report_unraisable(exc, "abort listener of a ProcessBackend call", target.signal)


def _run_one(
    bodies: dict[int, Callable[[Any, Any], object] | BaseException],
    message: tuple[Any, ...],
    controller: AbortController,
    progress: _Progress,
) -> tuple[str, Any, list[Mapping[str, Any]], Any]:
    _, seq, key, body_bytes, args_bytes, call_id, root_call_id, name, agent, _left, carried = message
    worker_run = RemoteRun("a ProcessBackend worker", thaw_contexts=True, progress=progress.sink(seq))
    try:
        body = bodies.get(key)
        if body is None:
            body = bodies[key] = cloudpickle.loads(body_bytes)
        elif isinstance(body, BaseException):
            raise body  # it did not load ahead of this call
        args = pickle.loads(args_bytes)
    except BaseException as exc:  # foreign unpickling, its SystemExit too: the body never starts
        return "not_run", None, [], f"{type(exc).__name__}: {safe_str(exc)}"
    try:
        ctx = worker_run.context(call_id, root_call_id, name, agent, args, controller.signal)
        with incoming_context(carried):
            value = body(args, ctx)
    except BaseException as exc:  # every body fault is an outcome, never a crash
        worker_run.settled = True
        detail = describe_error(exc)
        try:
            payload: Any = pickle.dumps(exc, _PROTOCOL)
        except Exception:
            try:
                payload = cloudpickle.dumps(exc, _PROTOCOL)
            except Exception:
                payload = None
        return "error", payload, worker_run.contexts, detail
    worker_run.settled = True
    named = class_name(value)
    try:
        return "value", pickle.dumps(value, _PROTOCOL), worker_run.contexts, named
    except Exception as exc:
        try:
            return "value", cloudpickle.dumps(value, _PROTOCOL), worker_run.contexts, named
        except Exception:
            pass
        return "bad_value", None, worker_run.contexts, (named, safe_str(exc))


def _preload(
    bodies: dict[int, Callable[[Any, Any], object] | BaseException], message: tuple[Any, ...], progress: _Progress
) -> None:
    """Load a body ahead of its first call (``("body", key, body_bytes)``,
    main thread) and say so; one that does not load is left for its call
    to report."""
    _, key, data = message
    try:
        bodies[key] = cloudpickle.loads(data)
    except BaseException as exc:  # foreign unpickling, its SystemExit too: its first call reports it
        bodies[key] = exc
    with progress.send_lock:
        progress.conn.send_bytes(pickle.dumps(("loaded", key), _PROTOCOL))


def main(fd: int) -> None:
    """The worker loop; exits the process when the parent closes the
    connection."""
    global cloudpickle
    import cloudpickle  # type: ignore[import-untyped]

    conn = Connection(fd)
    inbox: queue.SimpleQueue[tuple[Any, AbortController | None] | None] = queue.SimpleQueue()
    reader = _Reader(conn, inbox)
    thread = threading.Thread(target=reader.run, name="dshtools-worker-reader", daemon=True)
    thread.start()
    conn.send_bytes(pickle.dumps(("ready",), _PROTOCOL))
    bodies: dict[int, Callable[[Any, Any], object] | BaseException] = {}
    progress = _Progress(conn)
    while True:
        item = inbox.get()
        if item is None:
            break
        message, controller = item
        if controller is None:
            _preload(bodies, message, progress)
            continue
        seq = message[1]
        kind, payload, contexts, detail = _run_one(bodies, message, controller, progress)
        reader.finished(seq)
        try:
            data = pickle.dumps(("done", seq, kind, payload, contexts, detail), _PROTOCOL)
        except Exception:  # a context that does not pickle: it was frozen JSON, so never
            data = pickle.dumps(("done", seq, kind, payload, [], detail), _PROTOCOL)
        try:
            progress.send_after_flush(seq, data)
        except OSError:
            break
    os._exit(0)
