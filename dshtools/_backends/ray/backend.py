"""The caller's side of ``RayBackend``, published as ``dshtools.ray``
(whose docstring is the user's account of it): the backend, which submits
each body as a Ray task and owns the signal actor, and ``_RayDispatch``, one
submitted body from its submission to its report. The worker's side (the
task, the claim, the signal actor) is ``dshtools._backends.ray.remote``;
the forced stop's process sweep is ``dshtools._backends.ray.reap``.
"""

from __future__ import annotations

import itertools
import logging
import os
import pickle
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Final

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from ..._core.errors import AbortError, safe_repr, safe_str
from ..._signal import AbortSignal, ListenerHandle
from ..._signal.lifecycle import sigint_deferred
from ..._types.tools import ToolRunContext
from ..base import Body, BodyReport, Error, NotInvoked, Value, WorkerLost
from ..remote import ErrorDetail, outgoing_context, rebuilt_error
from . import reap as _ray_reap
from .remote import (
    _CONTAINED,
    WITHDRAWN,
    ProcessId,
    Progress,
    Where,
    _dumps,
    _loads,
    _NotJSON,
    _pack,
    _run_remote_task,
    _SignalActorRemote,
)

__all__ = ["RayBackend"]

logger = logging.getLogger("dshtools.ray")


_INLINE_BODY_BYTES: Final = 64 * 1024
"""A serialized body up to this size travels inside each task; a larger one
is put in the object store once and passed by reference."""

_CONFIRM_S: Final = 30.0
"""How long a forced stop waits for the killed processes to be gone."""

_LOOK_AGAIN_S: Final = 0.02
"""The shortest time the waiting thread blocks on the task before it looks
at the kill clock again (never a poll faster than 10 ms)."""

_WHERE_WAIT_S: Final = 1.0
"""How long a forced stop waits for the worker running the task to have
reported what the abort found there (it does so as the abort reaches it):
the body running, or the call withdrawn before its claim."""

_FORCE_AGAIN_S: Final = 0.1
"""How often a forced stop is sent again until the task ended: Ray drops a
cancel of a task whose previous cancel is still in flight (the withdrawal
sent at the abort), so one forced stop alone may never arrive."""

_ACTOR_SLACK_S: Final = 5.0
"""How much longer than it asked for the caller waits on an actor's answer."""

_FORBIDDEN_OPTIONS: Final = ("num_returns", "_generator_backpressure_num_objects")


# ------------------------------------------------------------ the caller side


def _pickle_reason(reason: object) -> bytes:
    try:
        data = _dumps(reason)
        _loads(data)
        return data
    except _CONTAINED:
        return _dumps(safe_repr(reason))


def _error(payload: tuple[bytes, ErrorDetail] | ErrorDetail) -> BaseException:
    """The exception a task sent back: deserialized, or (a stub, or one
    whose class this process cannot import) a stand-in with its class name,
    message, code and timeout reason. Foreign code runs in the load: what it
    raises fails only this call; a ``KeyboardInterrupt`` propagates."""
    if len(payload) == 2:
        data, detail = payload
        return rebuilt_error(data, detail, _loads, _CONTAINED)
    return rebuilt_error(None, payload, _loads, _CONTAINED)


def _cancel(ref: Any, *, force: bool) -> None:
    """``ray.cancel``; a refusal (the task ended meanwhile, Ray shutting
    down) is not the waiting caller's fault: the task's end still settles
    the dispatch."""
    try:
        ray.cancel(ref, force=force, recursive=force)
    except Exception as exc:
        logger.warning("ray.cancel(force=%s) failed: %s", force, safe_str(exc))


class _RayDispatch:
    """One submitted body (the ``Dispatch`` of docs/contract.md#backends).

    Two threads touch it. The abort listener (the thread that aborted
    ``run.signal``) sends the reason to the signal actor and withdraws the
    task with ``ray.cancel(force=False)``; it records the abort and sends
    it under ``_lock``, so the ``forget`` of a settle that follows is sent
    after it. The waiting thread does everything else: it blocks in
    ``ray.get`` on the task's ``ObjectRef`` (woken by the task's end, or
    when the forced stop falls due) and settles. A ``KeyboardInterrupt`` in
    ``wait`` leaves nothing half done: ``wait`` can be called again."""

    def __init__(self, backend: RayBackend, key: str, actor: Any, signal: AbortSignal) -> None:
        self._backend = backend
        self._key = key
        self._actor = actor
        self._ref: Any = None
        self._lock = threading.Lock()
        self._abort_at: float | None = None
        self._cancel_sent = False
        self._closed = False
        self._stop_weighed = False
        self._force_again_at: float | None = None  # when the forced stop is sent again
        self._kill: tuple[ProcessId | None, list[ProcessId]] | None = None
        self._withdrawn = False  # the worker reported the call withdrawn before its claim
        self._report: BodyReport | None = None
        self._pending: BaseException | None = None  # a Ctrl-C held back in submit()
        self._signal = signal
        # Progress: the run's report_progress, the number of the last update
        # reported (under _lock: the progress thread and the settling
        # thread both report), and whether the call settled.
        self._report_progress: Callable[[float, float | None, str | None], None] | None = None
        self._progress_seq = 0
        self._progress_closed = False
        # The listener goes first: an abort from here on withdraws the call
        # even if the task is never started (a Ctrl-C inside submit()).
        self._handle: ListenerHandle | None = signal.add_listener(self._on_abort)

    def _progress(self, seq: int, update: Progress, *, last: bool = False) -> None:
        """Report update ``seq`` of this call to the registry unless a newer
        one was reported already or the call settled; ``last`` (the one
        that came with the result) also closes it. Never blocks."""
        with self._lock:
            if self._progress_closed:
                return
            if last:
                self._progress_closed = True
            if seq <= self._progress_seq or self._report_progress is None:
                return
            self._progress_seq = seq
            self._report_progress(*update)

    def _handle_remove(self) -> None:
        handle = self._handle
        if handle is not None:
            handle.remove()

    def _started(self, ref: Any) -> None:
        with self._lock:
            self._ref = ref
            withdraw = self._abort_at is not None and not self._cancel_sent
            self._cancel_sent = self._cancel_sent or withdraw
        if withdraw:
            _cancel(ref, force=False)

    @property
    def task(self) -> Any:
        """The Ray ``ObjectRef`` of the task running this body: ``ray.wait``
        on it says whether Ray reports the task ended."""
        return self._ref

    # -- the aborting thread

    def _on_abort(self, signal: AbortSignal) -> None:
        data = _pickle_reason(signal.reason)
        with self._lock:
            if self._abort_at is not None or self._closed:
                return
            self._abort_at = time.monotonic()
            ref = self._ref
            withdraw = ref is not None and not self._cancel_sent
            self._cancel_sent = self._cancel_sent or withdraw
            # The reason first, to every worker this backend uses: a task
            # that claimed the call gets it on its run.signal, one that has
            # not yet claimed it finds the call withdrawn.
            try:
                self._actor.abort.remote(self._key, data)
            except Exception as exc:
                logger.warning("the abort could not reach the signal actor: %s", safe_str(exc))
        if withdraw:
            # Ray removes a queued task; one that runs already gets an
            # interrupt that the worker's guard turns into a withdrawal
            # before the claim and ignores after it (_ray_remote).
            _cancel(ref, force=False)

    # -- the waiting thread

    def wait(self, timeout: float) -> bool:
        pending = self._pending
        if pending is not None:
            # Held back inside submit(): the registry aborts the dispatch
            # signal and keeps joining the task.
            self._pending = None
            raise pending
        if self._report is not None:
            return True
        deadline = time.monotonic() + timeout
        kill_after = self._backend.kill_after
        while True:
            now = time.monotonic()
            due = self._kill_due()
            if due is not None and now >= due:
                self._force_stop()
                continue
            again = self._force_again_at
            if again is not None and now >= again:
                _cancel(self._ref, force=True)
                self._force_again_at = now + _FORCE_AGAIN_S
                continue
            end = deadline
            if again is not None:
                end = min(end, again)
            if due is not None:
                end = min(end, due)
            elif kill_after is not None and self._abort_at is None:
                # The kill clock starts at the abort, which this thread is
                # not woken for: look again within the grace.
                end = min(end, now + max(kill_after, _LOOK_AGAIN_S))
            try:
                result = ray.get(self._ref, timeout=max(0.0, end - now))
            except ray.exceptions.GetTimeoutError:
                if time.monotonic() >= deadline:
                    return False
                continue
            except Exception as exc:
                self._settle(None, exc)
                return True
            self._settle(result, None)
            return True

    def _kill_due(self) -> float | None:
        if self._abort_at is None or self._backend.kill_after is None or self._stop_weighed:
            return None
        return self._abort_at + self._backend.kill_after

    def _force_stop(self) -> None:
        # Every step may be cut by a Ctrl-C and is done again by the next
        # wait(): the stop counts as weighed only once it was sent.
        if self._kill is None:
            if self._ended():
                self._stop_weighed = True
                return  # withdrawn by Ray meanwhile, or the body just returned: nothing to stop
            # The worker that runs the task tells the actor what the abort
            # found there: the body running, or the call withdrawn before
            # its claim (the task still loading its body, which now never
            # runs). The task is stopped either way (a load may never end),
            # but only a running body is reported killed; no report at all
            # counts as running. The worker's processes can be swept only on
            # this node (/proc).
            where = self._where(_WHERE_WAIT_S)
            if self._ended():
                self._stop_weighed = True
                return
            self._withdrawn = where is not None and where[0] == WITHDRAWN
            local: ProcessId | None = None
            if where is not None and where[1][0] == self._backend._node_id:
                local = where[1][1]
            descendants: list[ProcessId] = []
            if local is not None and _ray_reap.alive(local):
                descendants = _ray_reap.snapshot(local[0])
            self._kill = (local, descendants)
        _cancel(self._ref, force=True)
        self._force_again_at = time.monotonic() + _FORCE_AGAIN_S
        _ray_reap.kill_tree(None, self._kill[1])
        self._stop_weighed = True

    def _where(self, timeout: float, *, while_running: bool = True) -> Where | None:
        """The worker's report on this call (``dshtools._backends.ray.remote``'s
        ``where``), waiting up to ``timeout`` seconds for it (and, with
        ``while_running``, no longer than the task runs); ``None`` when
        there is none (or the actor cannot say). Only after the abort."""
        try:
            asked = self._actor.where.remote(self._key, timeout)
            if while_running:
                ready, _pending = ray.wait(
                    [asked, self._ref], num_returns=1, timeout=timeout + _ACTOR_SLACK_S, fetch_local=False
                )
                if asked not in ready:
                    return None
            where: Where | None = ray.get(asked, timeout=timeout + _ACTOR_SLACK_S)
        except Exception:
            return None
        return where

    def _ended(self) -> bool:
        try:
            ready, _pending = ray.wait([self._ref], timeout=0, fetch_local=False)
        except Exception:
            return True  # Ray no longer knows the task (shut down): the next ray.get settles it
        return bool(ready)

    def _settle(self, result: Any, exc: BaseException | None) -> None:
        ended_at = time.monotonic()
        outcome, contexts, invoked, ended = self._outcome(result, exc)
        # Stopped: a forced stop was issued and the task ended without the
        # wrapper returning (one that returned at that very moment was not).
        # Killed: what was stopped was a body (not a task whose worker had
        # reported its call withdrawn before the claim).
        stopped = self._kill is not None and ended
        killed = stopped and invoked
        if stopped:
            assert self._kill is not None
            worker, descendants = self._kill
            _ray_reap.kill_tree(worker, descendants)
            _ray_reap.wait_gone(([worker] if worker is not None else []) + descendants, _CONFIRM_S)
        with self._lock:
            self._closed = True
            self._progress_closed = True
            aborted_at = self._abort_at
        overrun = None
        if invoked and aborted_at is not None:
            overrun = max(0.0, ended_at - aborted_at)
        self._handle_remove()
        if aborted_at is not None:
            self._backend._forget(self._key)
        self._backend._settled(self, killed)
        self._report = BodyReport(outcome=outcome, contexts=contexts, killed=killed, overrun_s=overrun)

    def _outcome(self, result: Any, exc: BaseException | None) -> tuple[Any, tuple[Mapping[str, Any], ...], bool, bool]:
        """``(outcome, contexts, invoked, ended)``; ``ended``: the task
        ended without the wrapper returning (Ray reports it failed)."""
        if exc is None:
            try:
                kind, payload, contexts, *last = pickle.loads(result)
            except _CONTAINED as bad:
                # Only this module's own envelope: not expected to fail.
                unreadable = RuntimeError(f"the RayBackend task's result could not be read: {safe_str(bad)}")
                return Error(unreadable), (), True, False
            if last and last[0] is not None:
                # Before the call settles: the last update is queued for the
                # observers before the result is published.
                self._progress(*last[0], last=True)
            outcome, invoked = self._decode(kind, payload)
            return outcome, (contexts if invoked else ()), invoked, False
        if self._kill is not None:
            if self._withdrawn:
                # Stopped while still loading its body, after its worker
                # had made the claim impossible: the body never started.
                return NotInvoked(), (), False, True
            return Error(AbortError(self._signal.reason)), (), True, True
        if isinstance(exc, ray.exceptions.TaskCancelledError):
            # Ray removed the queued task, or interrupted it before the
            # wrapper's guard was in place: the body never started.
            return (NotInvoked() if self._cancel_sent else NotInvoked(exc)), (), False, True
        if isinstance(exc, ray.exceptions.RayTaskError):
            # The wrapper raised: only possible before the claim.
            cause = exc.cause if isinstance(exc.cause, BaseException) else exc
            return NotInvoked(cause), (), False, True
        if self._abort_at is not None:
            # A worker lost after it reported the call withdrawn before its
            # claim died before the body could start. Without that report
            # the body may have run: lost, the conservative answer.
            where = self._where(0.0, while_running=False)
            if where is not None and where[0] == WITHDRAWN:
                return NotInvoked(), (), False, True
        lost = WorkerLost(f"the Ray worker running the body was lost ({type(exc).__name__}: {safe_str(exc)})")
        return Error(lost), (), True, True

    def _decode(self, kind: str, payload: Any) -> tuple[Any, bool]:
        # A value or exception the tool sent back is foreign code when it is
        # unpickled (its __reduce__ runs here, in the caller's thread): any
        # fault it raises, SystemExit included, fails only this call. A
        # KeyboardInterrupt is the caller's own Ctrl-C and propagates.
        if kind == "withdrawn":
            if self._abort_at is None:
                # Not our abort: a ray.cancel of this task from elsewhere
                # reached it before its claim.
                return NotInvoked(RuntimeError("the Ray task was cancelled before its body started")), False
            return NotInvoked(), False
        if kind in ("not_invoked", "not_invoked_stub"):
            return NotInvoked(_error(payload)), False
        if kind == "value":
            data, named = payload
            try:
                value = _loads(data)
            except _CONTAINED as exc:
                value = _NotJSON(
                    f"the tool's return value (a {named}) cannot be deserialized here "
                    f"({type(exc).__name__}: {safe_str(exc)})"
                )
            return Value(value), True
        if kind == "bad_value":
            return Value(_NotJSON(payload)), True
        return Error(_error(payload)), True

    def report(self) -> BodyReport:
        if self._report is None:
            raise RuntimeError("report() before wait() returned True")
        return self._report


class RayBackend:
    """Run tool bodies as Ray tasks (docs/contract.md#backends,
    docs/contract.md#ray).

    ``RayBackend(*, kill_after=5.0, **ray_options)``:

    * ``kill_after``: seconds (finite, ``>= 0``) between the abort of a
      call's signal and the forced stop of a body still running, or
      ``None`` to never kill (cooperative only, still joined).
    * ``ray_options``: task options for ``.options()`` (``num_cpus``,
      ``num_gpus``, ``resources``, ``memory``, ``runtime_env``,
      ``scheduling_strategy``, ...). ``max_retries`` other than 0,
      ``retry_exceptions`` and ``num_returns`` raise ``ValueError``; an
      option Ray does not know raises ``ValueError`` here.

    * ``prestart``: ``True`` calls ``start()`` before the constructor
      returns.

    Ray is connected (``ray.init()``, a local cluster) at ``start()`` or
    the first ``submit`` if this process is not connected yet; that
    start-up counts against the first call's timeout unless ``start()``
    took it (docs/contract.md#a32). Raises ``RuntimeError`` when used in a
    process forked after it was created.
    """

    def __init__(self, *, kill_after: float | None = 5.0, prestart: bool = False, **ray_options: Any) -> None:
        if kill_after is not None:
            if isinstance(kill_after, bool) or not isinstance(kill_after, (int, float)):
                raise TypeError(f"kill_after must be a number of seconds or None, not {type(kill_after).__name__}")
            if not (0 <= kill_after < float("inf")):
                raise ValueError(f"kill_after must be finite and >= 0, not {kill_after!r}")
        retries = ray_options.pop("max_retries", 0)
        if retries != 0:
            raise ValueError("RayBackend never retries a tool body: max_retries must be 0 (docs/contract.md#ray)")
        if ray_options.pop("retry_exceptions", False):
            raise ValueError("RayBackend never retries a tool body: retry_exceptions is not allowed")
        for name in _FORBIDDEN_OPTIONS:
            if name in ray_options:
                raise ValueError(f"RayBackend does not accept the task option {name!r}")
        try:
            self._task = _run_remote_task.options(max_retries=0, **ray_options)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"invalid Ray task options for RayBackend: {exc}") from exc
        self.kill_after: float | None = None if kill_after is None else float(kill_after)
        self.ray_options: Mapping[str, Any] = dict(ray_options)
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._actor: Any = None
        self._node_id = ""
        self._closed = False
        self._prefix = uuid.uuid4().hex[:12]
        self._actor_name = (f"dshtools-signal-{self._prefix}", "dshtools")
        self._counter = itertools.count(1)
        self._bodies: dict[int, tuple[Body, str, Any]] = {}
        self._in_flight: set[_RayDispatch] = set()
        self._by_key: dict[str, _RayDispatch] = {}
        self._progress_thread: threading.Thread | None = None
        self.tasks_started = 0
        self.tasks_killed = 0
        if prestart:
            self.start()

    def start(self, timeout: float | None = None) -> None:
        """Connect to Ray (``ray.init()`` when this process is not connected)
        and create this backend's signal actor, returning once the actor
        answers, so the first call does not pay for either
        (docs/contract.md#a32). Runs on the calling thread; ``timeout`` in
        seconds bounds the wait for the actor (``None``: no bound).
        Idempotent. Raises ``RuntimeError`` when closed or in a forked
        child, ``ray.exceptions.GetTimeoutError`` when the actor does not
        answer in time."""
        if os.getpid() != self._pid:
            raise RuntimeError("RayBackend was created in another process (before a fork); create one in this process")
        actor = self._actor_handle()
        ray.get(actor.where.remote("", 0.0), timeout=timeout)

    def __repr__(self) -> str:
        return f"RayBackend(kill_after={self.kill_after!r}, in_flight={len(self._in_flight)})"

    # -- Backend protocol

    def validate(self, name: str, body: Body) -> None:
        """Refuse (``ValueError`` naming the tool) a body that does not
        round-trip through Ray's serializer. Runs in ``register()``'s thread."""
        self._serialized(name, body)

    def submit(self, body: Body, args: object, run: ToolRunContext) -> _RayDispatch:
        """Start ``body(args, run)`` as a Ray task. Raises ``RuntimeError``
        after ``close()`` or in a forked child (the body never starts)."""
        if os.getpid() != self._pid:
            raise RuntimeError("RayBackend was created in another process (before a fork); create one in this process")
        with self._lock:
            if self._closed:
                raise RuntimeError("RayBackend is closed")
        actor = self._actor_handle()
        body_key, body_data = self._body_ref(run.name, body)
        key = f"{self._prefix}-{next(self._counter)}"
        # The budget as seconds left now: the worker re-bases it on its own
        # clock when the task starts; only a duration crosses.
        # With them the tracing context of this (the dispatching) thread.
        fields = (run.call_id, run.root_call_id, run.name, run.agent, run.signal.time_left(), outgoing_context())
        inline = isinstance(body_data, bytes)
        head = _pack((*self._actor_name, key, body_key, body_data if inline else None, args, fields))
        packed: Any = head if inline else (head, body_data)
        dispatch = _RayDispatch(self, key, actor, run.signal)
        dispatch._report_progress = run.report_progress
        with self._lock:
            if self._closed:
                dispatch._handle_remove()
                raise RuntimeError("RayBackend is closed")
            # In flight before the task exists: close() waits for it.
            self._in_flight.add(dispatch)
            self._by_key[key] = dispatch
            if self._progress_thread is None:
                self._progress_thread = threading.Thread(
                    target=self._take_progress, args=(actor,), name="dshtools-ray-progress", daemon=True
                )
                self._progress_thread.start()
            self.tasks_started += 1
        # A Ctrl-C is held back while Ray takes the task and the dispatch
        # keeps its ObjectRef: landing after Ray accepted the task, it would
        # lose the handle of a task that may claim the call and run (the
        # claim is made in the worker), which then could be neither joined
        # nor reported as dispatched. It is handed back through the first
        # wait(), as the thread backend does.
        deferred = sigint_deferred()
        try:
            with deferred:
                dispatch._started(self._task.remote(packed))
        except BaseException as exc:
            if dispatch.task is not None:
                # Ray has the task; a Ctrl-C that landed just as the handler
                # was put back goes the same way as a held-back one.
                dispatch._pending = exc
                return dispatch
            self._settled(dispatch, False)
            if isinstance(exc, Exception):
                dispatch._handle_remove()
            # else a Ctrl-C that landed before Ray was given the task (outside
            # the held-back window): nothing was submitted, and the listener
            # stays so the registry's abort of the dispatch signal finds it.
            raise
        dispatch._pending = deferred.interrupt()
        return dispatch

    def close(self) -> None:
        """Stop accepting calls, wait until every submitted task ended
        (their callers join them), then release the signal actor. Does not
        shut Ray down. Idempotent."""
        with self._idle:
            self._closed = True
            while self._in_flight:
                self._idle.wait()
            actor, self._actor = self._actor, None
            self._bodies.clear()
        if actor is not None and os.getpid() == self._pid:
            try:
                ray.kill(actor)
            except Exception:
                pass

    # -- introspection (the demo's quiescence report, tests)

    def running_tasks(self) -> int:
        """How many of this backend's tasks Ray does not report ended yet
        (asked of Ray now: ``ray.wait`` on every unsettled task's
        ``ObjectRef``). ``0`` means quiescent: every task this backend
        started has ended."""
        with self._lock:
            refs = [d._ref for d in self._in_flight]
        if not refs:
            return 0
        _ready, pending = ray.wait(refs, num_returns=len(refs), timeout=0, fetch_local=False)
        return len(pending)

    # -- internals

    def _actor_handle(self) -> Any:
        actor = self._actor
        if actor is not None:
            return actor
        with self._lock:
            if self._closed:
                # close() ran since submit()'s check: an actor made now
                # would outlive the closed backend.
                raise RuntimeError("RayBackend is closed")
            if self._actor is None:
                if not ray.is_initialized():
                    ray.init()
                self._node_id = ray.get_runtime_context().get_node_id()
                self._actor = _SignalActorRemote.options(
                    name=self._actor_name[0],
                    namespace=self._actor_name[1],
                    num_cpus=0,
                    max_restarts=0,
                    scheduling_strategy=NodeAffinitySchedulingStrategy(
                        ray.get_runtime_context().get_node_id(), soft=True
                    ),
                ).remote()
            return self._actor

    def _serialized(self, name: str, body: Body) -> bytes:
        try:
            data = _dumps(body)
            _loads(data)
        except Exception as exc:
            raise ValueError(
                f"tool {name!r} cannot run on RayBackend: its body does not round-trip through Ray's "
                f"serializer ({type(exc).__name__}: {safe_str(exc)})"
            ) from exc
        return data

    def _body_ref(self, name: str, body: Body) -> tuple[str, Any]:
        cached = self._bodies.get(id(body))
        if cached is not None and cached[0] is body:
            return cached[1], cached[2]
        data = self._serialized(name, body)
        body_key = uuid.uuid4().hex
        payload: Any = data if len(data) <= _INLINE_BODY_BYTES else ray.put(data)
        with self._lock:
            if len(self._bodies) >= 256:
                self._bodies.clear()
            self._bodies[id(body)] = (body, body_key, payload)
        return body_key, payload

    def _forget(self, key: str) -> None:
        # Bookkeeping after the call settled (the waiting thread): Ray
        # refusing it (shut down meanwhile) must not fail the call or leave
        # it in flight, where close() would wait for it forever.
        actor = self._actor
        if actor is not None:
            try:
                actor.forget.remote(key)
            except Exception as exc:
                logger.warning("the settled call could not be forgotten by the signal actor: %s", safe_str(exc))

    def _take_progress(self, actor: Any) -> None:
        """The ``dshtools-ray-progress`` thread: the workers' progress
        updates, taken from the signal actor as they come, go to their
        calls. Ends when the actor is gone (``close()`` kills it)."""
        while True:
            try:
                taken = actor.take_progress.remote().future().result()
            except BaseException:
                return
            for key, (seq, update) in taken.items():
                dispatch = self._by_key.get(key)
                if dispatch is not None:
                    dispatch._progress(seq, update)

    def _settled(self, dispatch: _RayDispatch, killed: bool) -> None:
        with self._idle:
            self._in_flight.discard(dispatch)
            self._by_key.pop(dispatch._key, None)
            self.tasks_killed += killed
            if not self._in_flight:
                self._idle.notify_all()
