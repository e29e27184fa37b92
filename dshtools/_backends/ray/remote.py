"""The Ray side of ``RayBackend`` (docs/contract.md#backends,
docs/contract.md#ray): what runs inside Ray, imported by every worker that runs a body.

* The *signal actor*: one per backend, a threaded actor that carries abort
  reasons from the caller to the worker processes: every
  worker process that ran a body of the backend is subscribed and keeps one
  ``watch`` call outstanding; an abort lands in every subscriber's mailbox
  and returns those calls.
* The task wrapper ``_run_remote``: makes its call known to the worker
  process (``arrive``), loads the body (cached per worker), claims the call
  *locally* (the claim races the withdrawal inside the worker process,
  never over the network), builds the remote ``run`` (a fresh token,
  ``parent`` and ``definition`` ``None``, ``run.dispatch`` refused,
  ``run.signal`` reporting the caller's remaining budget on this process's
  clock), runs the body and packs what it returned or
  raised. An abort that finds the task there reports ``RUNNING`` (after
  the claim) or ``WITHDRAWN`` (before it: the body never runs) to the
  actor, for the forced stop, which then knows whether it stops a body.
* The interrupt guard: a worker's ``SIGINT`` handler, through which Ray's
  ``ray.cancel(force=False)`` arrives (Ray simulates a ``SIGINT`` on the
  main thread). For a task of this module it never raises: before the claim
  it withdraws the call, after the claim it is ignored. Any other task of
  the worker gets the handler that was there before.
* Serialization with Ray's own ``cloudpickle``: a value, exception or reason
  that does not round-trip travels as a stand-in. Unpickling is foreign code
  (a ``__reduce__``), so every fault it raises, ``SystemExit`` included,
  fails only its own call (``_CONTAINED``).

* Progress: ``run.report_progress`` stores the update for the worker's
  ``dshtools-ray-progress`` thread, which sends each call's latest to the
  actor (``progress``) at most every ``_PROGRESS_EVERY_S``; the caller's
  backend takes them (``take_progress``). Each update is numbered per
  call, and the body's last travels with its result, so the caller reports
  it even when the actor's copy comes late (a stale number is dropped).

Threads: in a worker, the task runs on the process's main thread (where Ray
runs tasks and delivers its interrupt) and one watcher thread per worker
process waits on the actor for abort reasons; the abort of a running body
(its ``run.signal`` listeners) runs on a short-lived thread of its own, so
that a listener never delays the watcher's report; the actor's methods run on
its own thread pools (``control``, ``watch``). The caller side is
``dshtools.ray``.
"""

from __future__ import annotations

import itertools
import os
import pickle
import signal
import threading
import time
import uuid
from collections.abc import Callable
from types import FrameType
from typing import Any, Final, cast

import ray
from ray import cloudpickle

from ..._core.errors import report_unraisable, safe_str
from ..._signal import AbortController
from ..base import Body
from ..remote import ProgressSink, RemoteRun, call_controller, class_name, describe_error, incoming_context
from . import reap as _ray_reap

__all__: list[str] = []


def _dumps(obj: object) -> bytes:
    """Ray's serializer for Python objects (``ray.cloudpickle``)."""
    return cast(bytes, cloudpickle.dumps(obj))  # type: ignore[no-untyped-call]


def _loads(data: bytes) -> Any:
    return cloudpickle.loads(data)


def _pack(obj: object) -> bytes:
    """The call's own data (ids, frozen arguments, the result's envelope) as
    one ``bytes``: Ray passes a ``bytes`` argument or result without its
    object serializer, which is the cheaper path for every call. Plain
    ``pickle`` first (these are plain data), ``cloudpickle`` if it refuses
    or the bytes name ``__main__`` (a script's pydantic model among the
    arguments: the worker's ``__main__`` is not the script, so the class
    travels by value; docs/contract.md#a28)."""
    try:
        data = pickle.dumps(obj, protocol=5)
    except Exception:
        return _dumps(obj)
    return _dumps(obj) if b"__main__" in data else data


# ------------------------------------------------------------ the signal actor


ProcessId = tuple[int, int, int]
WorkerId = tuple[str, ProcessId | None]
"""``(Ray node id, process identity on that node)`` of a worker process."""

Abort = tuple[str, bytes]
"""``(call key, pickled reason)``."""

RUNNING: Final = "running"
"""A worker's report on an aborted call: its body runs in that process (the
claim came first; the abort went to the body's ``run.signal``)."""

WITHDRAWN: Final = "withdrawn"
"""A worker's report on an aborted call: its task runs in that process and
has not claimed the call, and never will (the abort came first, under the
lock the claim takes): the body never runs."""

Progress = tuple[float, "float | None", "str | None"]
"""``(progress, total, message)`` of a body's ``run.report_progress``."""

Report = tuple[str, str]
"""``(call key, RUNNING or WITHDRAWN)``: what a worker tells the actor about
an aborted call whose task it runs."""

Where = tuple[str, WorkerId]
"""``(RUNNING or WITHDRAWN, the worker process that reported it)``."""

_WATCH_IDLE_S: Final = 30.0
"""A worker's watch call returns empty after this long without news, and
the worker calls again."""

_MAILBOX_KEPT_S: Final = 3 * _WATCH_IDLE_S
"""A mailbox whose worker has not watched for this long is dropped (the
worker is gone); a worker that comes back is subscribed anew."""

_FORGOTTEN_KEPT: Final = 4096
"""Forgets that arrived before their abort, remembered until it comes."""

_WATCH_THREADS: Final = 1024
"""Threads (created on demand) for the outstanding ``watch`` calls: one per
worker process that ran a body of the backend."""

# What unpickling a tool's result may raise and still fail only its call.
_CONTAINED: Final = (Exception, SystemExit, GeneratorExit)


class _Mailbox:
    __slots__ = ("items", "pid", "seen", "watching")

    def __init__(self, pid: WorkerId, items: list[Abort]) -> None:
        self.items = items
        self.pid = pid
        self.seen = time.monotonic()
        self.watching = 0


class _SignalActor:
    """One per backend: the channel that carries an abort's reason to the
    worker process running the call's body (or about to start it).

    The actor does not know where a call runs: the claim is made inside the
    worker. So an abort goes to *every* subscribed worker
    process; the one running the body aborts its ``run.signal``, every
    other one notes the call as withdrawn, so that if the task starts there
    later its body never runs. A worker subscribes (``subscribe``) before
    its first claim and gets every abort not yet forgotten; from then on its
    mailbox receives every abort until it stops watching for
    ``_MAILBOX_KEPT_S`` (a ``watch`` after that re-subscribes it with the
    same snapshot). ``forget`` drops an abort once its call settled: the
    task ended and can never start again (no retries). The worker whose
    task has the call reports what the abort found there (``RUNNING`` or
    ``WITHDRAWN``, riding on its next ``watch``); ``where`` gives that
    report to the forced stop.

    A threaded actor: ``subscribe``/``abort``/``forget`` run in the small
    ``"control"`` group; ``watch`` and ``where`` block in the ``"watch"``
    group and never delay an abort."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._news = threading.Condition(self._lock)
        self._aborted: dict[str, bytes] = {}
        self._mailboxes: dict[str, _Mailbox] = {}
        self._where: dict[str, Where] = {}
        self._forgotten: dict[str, None] = {}
        self._progress: dict[str, tuple[int, Progress]] = {}
        self._progress_news = threading.Condition(self._lock)

    @ray.method(concurrency_group="control")
    def subscribe(self, worker: str, pid: WorkerId) -> list[Abort]:
        """The worker process ``worker`` starts its first body: every abort
        not yet forgotten; later ones go to its mailbox."""
        with self._lock:
            self._mailboxes[worker] = _Mailbox(pid, [])
            return list(self._aborted.items())

    @ray.method(concurrency_group="control")
    def abort(self, key: str, reason: bytes) -> None:
        """The caller aborted call ``key``: its reason goes to every
        subscribed worker process. Idempotent."""
        with self._lock:
            if key in self._aborted:
                return
            if self._forgotten.pop(key, 0) is None:
                return  # its forget overtook it: the call settled already
            self._aborted[key] = reason
            now = time.monotonic()
            for worker, box in list(self._mailboxes.items()):
                if not box.watching and now - box.seen > _MAILBOX_KEPT_S:
                    del self._mailboxes[worker]
                    continue
                box.items.append((key, reason))
            self._news.notify_all()

    @ray.method(concurrency_group="control")
    def forget(self, key: str) -> None:
        """The caller settled the aborted call ``key`` (its task ended)."""
        with self._lock:
            if self._aborted.pop(key, None) is None:
                # The abort is still on its way (the actor's threads do not
                # keep the caller's order): it will find this and drop.
                if len(self._forgotten) >= _FORGOTTEN_KEPT:
                    del self._forgotten[next(iter(self._forgotten))]
                self._forgotten[key] = None
            self._where.pop(key, None)
            self._news.notify_all()

    @ray.method(concurrency_group="control")
    def progress(self, key: str, seq: int, update: Progress) -> None:
        """A worker's latest progress update ``seq`` of call ``key``;
        replaces an older one the caller has not taken yet."""
        with self._lock:
            known = self._progress.get(key)
            if known is None or known[0] < seq:
                self._progress[key] = (seq, update)
                self._progress_news.notify_all()

    @ray.method(concurrency_group="watch")
    def take_progress(self) -> dict[str, tuple[int, Progress]]:
        """The caller's side: every update not taken yet, by call key,
        blocking until there is one (or ``_WATCH_IDLE_S``: then empty)."""
        with self._lock:
            self._progress_news.wait_for(lambda: bool(self._progress), _WATCH_IDLE_S)
            taken, self._progress = self._progress, {}
            return taken

    @ray.method(concurrency_group="watch")
    def watch(self, worker: str, pid: WorkerId, reports: list[Report]) -> list[Abort]:
        """The aborts for ``worker``'s mailbox, blocking until there is one
        (or ``_WATCH_IDLE_S``). ``reports``: what earlier aborts found in
        that worker for the calls whose tasks run there (for ``where``); a
        ``RUNNING`` report is never replaced by a ``WITHDRAWN`` one."""
        with self._lock:
            box = self._mailboxes.get(worker)
            if box is None:  # dropped while the worker did not watch: subscribe it again
                box = self._mailboxes[worker] = _Mailbox(pid, list(self._aborted.items()))
            if reports:
                for key, state in reports:
                    known = self._where.get(key)
                    if key in self._aborted and (known is None or known[0] != RUNNING):
                        self._where[key] = (state, pid)
                self._news.notify_all()
            box.watching += 1
            try:
                self._news.wait_for(lambda: bool(box.items), _WATCH_IDLE_S)
            finally:
                box.watching -= 1
                box.seen = time.monotonic()
            items, box.items = box.items, []
            return items

    @ray.method(concurrency_group="watch")
    def where(self, key: str, timeout: float) -> Where | None:
        """What the abort of call ``key`` found in the worker process that
        runs its task, once that worker reported it (waits up to
        ``timeout`` seconds): ``(RUNNING, worker)`` or ``(WITHDRAWN,
        worker)``; ``None`` when no report came in time (the task has not
        reached its wrapper, or its worker is stuck or gone). Waits even
        while the abort itself has not arrived: the caller sends it before
        it asks, but the actor's threads do not keep that order."""
        with self._lock:
            self._news.wait_for(lambda: key in self._where, timeout)
            return self._where.get(key)


_SignalActorRemote = ray.remote(concurrency_groups={"control": 2, "watch": _WATCH_THREADS})(_SignalActor)  # type: ignore[call-overload]


# ------------------------------------------------------------ the interrupt guard

_current_task: str | None = None
"""The Ray task id of the wrapper running on the main thread (stale after it
returned: the guard compares it with the task Ray runs now)."""

_interrupted_task: str | None = None
"""A task of this module that Ray's ``cancel(force=False)`` interrupted;
read by its claim."""

_previous_handler: Callable[[int, FrameType | None], Any] | int | None = None


def _guard(signum: int, frame: FrameType | None) -> Any:
    """The worker's ``SIGINT`` handler (main thread). Ray delivers
    ``ray.cancel(force=False)`` of the running task as a simulated
    ``SIGINT``; for a task of this module it is recorded, never raised:
    before the claim it withdraws the call, after it it is ignored (the
    abort reaches the body through its ``run.signal``)."""
    global _interrupted_task
    current = _current_task
    try:
        now = ray.get_runtime_context().get_task_id()
    except Exception:
        now = None
    if current is not None and current == now:
        _interrupted_task = current
        return None
    previous = _previous_handler
    if callable(previous):
        return previous(signum, frame)
    if previous == signal.SIG_IGN:
        return None
    raise KeyboardInterrupt


def _install_guard() -> None:
    """Make the guard the worker's ``SIGINT`` handler, on the main thread,
    before each task of this module: other code of the worker (a plain Ray
    task, a library it imported) may have installed its own handler since
    the last one, which then becomes the handler the guard hands other
    tasks' interrupts to. Raises ``RuntimeError`` when the guard is not in
    place and this is not the main thread (Ray would then interrupt a
    thread that is not the task's)."""
    global _previous_handler
    current = signal.getsignal(signal.SIGINT)
    if current is _guard:
        return
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError("a RayBackend task must run on its Ray worker's main thread")
    _previous_handler = current
    signal.signal(signal.SIGINT, _guard)


# ------------------------------------------------------------ the remote side


class _NotJSON:
    """Stands for a return value that did not pickle; the registry reports
    ``INVALID_TOOL_OUTPUT`` with this text."""

    __slots__ = ("__json_problem__",)

    def __init__(self, problem: str) -> None:
        self.__json_problem__ = problem


def _load_reason(data: bytes) -> object:
    # On the thread that aborts a running body: what the foreign unpickling
    # raises (SystemExit included) must not keep the body from its abort.
    try:
        return _loads(data)
    except _CONTAINED as exc:
        return f"<abort reason that did not unpickle here: {safe_str(exc)}>"


_PROGRESS_EVERY_S: Final = 0.02
"""The shortest time between two rounds of progress a worker sends to the
actor: a body reporting in a tight loop costs an actor call per round, not
one per report (the last update travels with the result)."""

_WITHDRAWN_KEPT: Final = 65536
"""How many aborted calls a worker remembers that did not run there (the
oldest are forgotten first). Only a call whose task is still on its way to
this worker needs its entry; Ray's own cancel removes a queued task."""


class _Channel:
    """A worker process's link to one backend's signal actor: the cached
    actor handle, the bodies running here and their controllers, the tasks
    here that have not claimed their call yet, the calls aborted before
    their task came here, and the watcher thread that keeps one ``watch``
    call outstanding.

    Each call's fate in this process is decided under ``lock``, by
    ``arrive``/``claim`` (the task, main thread) against ``deliver`` (the
    watcher thread), and whichever comes first wins:

    * the abort came before the task: ``arrive`` refuses, the body never
      runs;
    * the task arrived, the abort came before its claim: the call is marked
      withdrawn in ``starting`` and ``claim`` refuses; the worker reports
      ``WITHDRAWN`` (the body never runs: the forced stop may end the task
      and say so);
    * the claim came first: the abort goes to the body's ``run.signal`` and
      the worker reports ``RUNNING``.

    Only this process can make the second report: it alone runs the call's
    task (no retries), and its claim takes the same lock."""

    def __init__(self, name: str, actor: Any, pid: WorkerId) -> None:
        self.name = name
        self.actor = actor
        self.worker = uuid.uuid4().hex
        self.pid = pid
        self.lock = threading.Lock()
        self.running: dict[str, AbortController] = {}
        self.starting: dict[str, bool] = {}  # True once withdrawn before its claim
        self.withdrawn: dict[str, None] = {}
        # Progress: each running call's last update and the ones not sent
        # yet (under progress_cond), and the thread that sends them.
        self.progress_cond = threading.Condition(threading.Lock())
        self.progress_last: dict[str, tuple[int, Progress]] = {}
        self.progress_unsent: dict[str, tuple[int, Progress]] = {}
        self.progress_thread: threading.Thread | None = None

    @classmethod
    def connect(cls, actor_name: str, namespace: str) -> _Channel:
        """Look the actor up, subscribe this process (every abort not yet
        forgotten is noted as withdrawn here) and start the watcher. A wait
        on ``future()``, not ``ray.get``: the task keeps its slot."""
        actor = ray.get_actor(actor_name, namespace=namespace)
        pid = (ray.get_runtime_context().get_node_id(), _ray_reap.identity(os.getpid()))
        channel = cls(actor_name, actor, pid)
        for key, _reason in actor.subscribe.remote(channel.worker, pid).future().result():
            channel._note_withdrawn(key)
        thread = threading.Thread(target=channel._watch, name="dshtools-ray-watch", daemon=True)
        thread.start()
        return channel

    def _note_withdrawn(self, key: str) -> None:
        # Under self.lock (or before the watcher started).
        if len(self.withdrawn) >= _WITHDRAWN_KEPT:
            del self.withdrawn[next(iter(self.withdrawn))]
        self.withdrawn[key] = None

    def arrive(self, key: str) -> bool:
        """The task of call ``key`` runs here (main thread, before it loads
        the body): ``False`` when the call's abort reached this process
        first (the task returns at once, withdrawn); else the call is
        *starting* here until ``claim`` or ``leave``."""
        with self.lock:
            if self.withdrawn.pop(key, 0) is None:
                return False
            self.starting[key] = False
        return True

    def leave(self, key: str) -> None:
        """The task of ``key`` ends before its claim (its body failed to load)."""
        with self.lock:
            self.starting.pop(key, None)

    def claim(self, key: str, task_id: str, left: float | None = None, received: float = 0.0) -> AbortController | None:
        """Claim ``key`` here: its controller (``call_controller(left,
        received)``), or ``None`` when the call was aborted first (its abort
        reached this process, or Ray's cancel interrupted this task before
        the claim)."""
        with self.lock:
            if self.starting.pop(key, False) or key in self.withdrawn or _interrupted_task == task_id:
                self.withdrawn.pop(key, None)
                return None
            controller = call_controller(left, received)
            self.running[key] = controller
        return controller

    def release(self, key: str) -> None:
        with self.lock:
            self.running.pop(key, None)

    def progress_sink(self, key: str) -> ProgressSink:
        """``run.report_progress``'s destination for call ``key`` (the
        body's thread): numbers the update, keeps it as the call's last and
        as unsent (replacing an older unsent one), wakes the sender. Never
        sends, never waits for the actor."""
        numbers = itertools.count(1)
        cond = self.progress_cond

        def post(progress: float, total: float | None, message: str | None) -> None:
            entry = (next(numbers), (progress, total, message))
            with cond:
                self.progress_last[key] = entry
                fresh = not self.progress_unsent
                self.progress_unsent[key] = entry
                if self.progress_thread is None:
                    self.progress_thread = threading.Thread(
                        target=self._send_progress, name="dshtools-ray-progress", daemon=True
                    )
                    self.progress_thread.start()
                elif fresh:
                    cond.notify()

        return post

    def last_progress(self, key: str) -> tuple[int, Progress] | None:
        """The body of ``key`` returned: its last update (it travels with
        the result, so it is never lost), and nothing more to send."""
        with self.progress_cond:
            self.progress_unsent.pop(key, None)
            return self.progress_last.pop(key, None)

    def _send_progress(self) -> None:
        """The sender: the latest unsent update of each call to the actor,
        one at a time (each waits for the actor's answer), then a pause of
        ``_PROGRESS_EVERY_S`` in which new updates coalesce."""
        cond = self.progress_cond
        while True:
            with cond:
                while not self.progress_unsent:
                    cond.wait()
                taken, self.progress_unsent = self.progress_unsent, {}
            for key, (seq, update) in taken.items():
                try:
                    self.actor.progress.remote(key, seq, update).future().result()
                except BaseException:  # the actor is gone: the watcher stops the bodies
                    with cond:
                        self.progress_thread = None
                    return
            time.sleep(_PROGRESS_EVERY_S)  # a rate bound, not a hand-off

    def _watch(self) -> None:
        reports: list[Report] = []
        while True:
            try:
                items = self.actor.watch.remote(self.worker, self.pid, reports).future().result()
            except BaseException as exc:  # the actor (or the driver owning it) is gone
                reason = RuntimeError(f"the RayBackend signal actor is gone ({type(exc).__name__}); stopping")
                with self.lock:
                    controllers = list(self.running.values())
                    _channels.pop(self.name, None)
                for controller in controllers:
                    controller.abort(reason)
                return
            reports = self.deliver(items)

    def deliver(self, items: list[Abort]) -> list[Report]:
        """Hand aborts to the calls they concern (watcher thread): a body
        running here has its ``run.signal`` aborted on a thread started for
        it (``RUNNING``); a task
        here that has not claimed its call never will (``WITHDRAWN``); any
        other call is noted as withdrawn here, in case its task comes later.
        Returns the reports for the calls whose tasks run here."""
        reports: list[Report] = []
        for key, data in items:
            with self.lock:
                target = self.running.get(key)
                if target is None:
                    if key in self.starting:
                        self.starting[key] = True
                        reports.append((key, WITHDRAWN))
                    else:
                        self._note_withdrawn(key)
            if target is not None:
                reports.append((key, RUNNING))
                # The body's listeners run on a thread of their own: one
                # that blocks must not hold back this report (the forced
                # stop needs it to find the worker's processes) nor the
                # aborts that follow.
                threading.Thread(
                    target=_abort_body, args=(key, target, data), name="dshtools-ray-abort", daemon=True
                ).start()
        return reports


def _abort_body(key: str, target: AbortController, data: bytes) -> None:
    """Abort a running body's ``run.signal`` with the caller's reason (a
    thread of its own, started by the watcher)."""
    try:
        target.abort(_load_reason(data))
    except BaseException as exc:
        # A SystemExit/KeyboardInterrupt from one of the body's listeners:
        # nobody on this thread to hand it to.
        report_unraisable(exc, f"abort listener of the RayBackend call {key}", target.signal)


_channels: dict[str, _Channel] = {}
_channels_lock = threading.Lock()


def _channel(actor_name: str, namespace: str) -> _Channel:
    channel = _channels.get(actor_name)
    if channel is None:
        with _channels_lock:
            channel = _channels.get(actor_name)
            if channel is None:
                channel = _Channel.connect(actor_name, namespace)
                _channels[actor_name] = channel
    return channel


_body_cache: dict[str, Body] = {}


def _load_body(body_key: str, body_data: bytes | Any) -> Body:
    """The body, unpickled once per worker process. ``body_data`` is the
    serialized body, or (a large one) the ``ObjectRef`` of it: a reference
    nested in an argument is not resolved by Ray, and is fetched here only
    when this worker has not seen the body yet (``future()``, not
    ``ray.get``: the task keeps its slot)."""
    body = _body_cache.get(body_key)
    if body is None:
        if isinstance(body_data, ray.ObjectRef):
            body_data = body_data.future().result()
        body = _loads(bytes(body_data))
        if len(_body_cache) >= 64:
            _body_cache.clear()
        _body_cache[body_key] = body
    return body


def _pack_error(exc: BaseException) -> tuple[str, object]:
    """``("error", (serialized exception, its ErrorDetail))``, or
    ``("error_stub", ErrorDetail)`` when it does not round-trip here. The
    description always travels: the caller may lack the exception's module
    (installed only on the workers) and then stands in for it by name and
    message."""
    # After the claim nothing may escape the wrapper: Ray would report a
    # task that raised, which reads as a body that never started.
    detail = describe_error(exc)
    try:
        data = _dumps(exc)
        _loads(data)  # the caller will do this: foreign code may run here
    except BaseException:
        return "error_stub", detail
    return "error", (data, detail)


def _not_invoked(exc: BaseException) -> bytes:
    kind, payload = _pack_error(exc)
    return _pack((("not_invoked" if kind == "error" else "not_invoked_stub"), payload, ()))


def _run_remote(packed: bytes | tuple[bytes, Any]) -> bytes:
    """The task. Returns ``_pack((kind, payload, contexts[, last progress]))``
    (the last is ``(seq, (progress, total, message))`` or ``None``, present
    once the body ran): ``kind`` is
    ``withdrawn``, ``not_invoked`` (pickled error and its description),
    ``not_invoked_stub`` (its description), ``value`` (pickled value and
    its class's ``module.qualname``),
    ``bad_value`` (problem text), ``error`` (pickled exception and its
    description) or ``error_stub`` (its description; ``ErrorDetail``).
    ``packed`` is ``_pack((actor name, namespace, call key, body key,
    serialized body or None, args, fields))``, paired with the body's
    ``ObjectRef`` for a body too large to travel inline (nested in a tuple
    so that Ray does not fetch it: the worker does, when it has not seen the
    body yet). ``fields`` is ``(call_id, root_call_id, name, agent, seconds
    left or None, carried tracing context or None)``: the budget is
    re-based on this process's clock at the task's start."""
    global _current_task
    received = time.monotonic()
    try:
        task_id = ray.get_runtime_context().get_task_id()
        if not task_id:
            raise RuntimeError("a RayBackend task must run as a Ray task (no task id)")
        _install_guard()
        # From here on a cancel of this task is recorded by the guard, never
        # raised; before it, Ray's KeyboardInterrupt ends the task unstarted.
        _current_task = task_id
        head, body_ref = (packed, None) if isinstance(packed, bytes) else packed
        actor_name, namespace, key, body_key, body_data, args, fields = pickle.loads(head)
        channel = _channel(actor_name, namespace)
    except _CONTAINED as exc:
        return _not_invoked(exc)
    # The call is known here before its body loads (foreign code that may
    # take long or never end): an abort that comes meanwhile is reported
    # WITHDRAWN, so the forced stop can end the task without calling it a
    # killed body.
    if not channel.arrive(key):
        return _pack(("withdrawn", None, ()))
    try:
        body = _load_body(body_key, body_data if body_ref is None else body_ref)
    except _CONTAINED as exc:  # loading the body is foreign code: SystemExit too
        channel.leave(key)
        return _not_invoked(exc)
    except BaseException:
        channel.leave(key)
        raise
    call_id, root_call_id, name, agent, left, carried = fields
    controller = channel.claim(key, task_id, left, received)
    if controller is None:
        return _pack(("withdrawn", None, ()))
    run = RemoteRun("a RayBackend worker", thaw_contexts=False, progress=channel.progress_sink(key))
    ctx = run.context(call_id, root_call_id, name, agent, args, controller.signal)
    try:
        with incoming_context(carried):
            value = body(args, ctx)
    except BaseException as exc:
        run.settled = True
        channel.release(key)
        kind, payload = _pack_error(exc)
        return _pack((kind, payload, tuple(run.contexts), channel.last_progress(key)))
    run.settled = True
    channel.release(key)
    last = channel.last_progress(key)
    try:
        return _pack(("value", (_dumps(value), class_name(value)), tuple(run.contexts), last))
    except BaseException as exc:  # foreign code (a __reduce__): see _pack_error
        problem = f"the tool's return value ({type(value).__name__}) cannot be serialized by Ray: {safe_str(exc)}"
        return _pack(("bad_value", problem, tuple(run.contexts), last))


_run_remote_task = ray.remote(_run_remote)
