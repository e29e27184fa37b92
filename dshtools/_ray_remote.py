"""The Ray side of ``RayBackend`` (docs/contract.md §9, §10): what runs
inside Ray, imported by every worker that runs a body.

* The *signal actor*: one per backend, a threaded actor that decides each
  call's claim against its withdrawal under one lock, and hands abort
  reasons to the workers whose bodies they concern (decision 0036).
* The task wrapper ``_run_remote``: loads the body (cached per worker),
  claims the call, builds the remote ``run`` (a fresh token, ``parent`` and
  ``definition`` ``None``, ``run.dispatch`` refused), runs the body and packs
  what it returned or raised for the trip back.
* Serialization with Ray's own ``cloudpickle``: a value, exception or reason
  that does not round-trip travels as a stand-in. Unpickling is foreign code
  (a ``__reduce__``), so every fault it raises, ``SystemExit`` included,
  fails only its own call (``_CONTAINED``).

Threads: in a worker, the task runs on Ray's executor thread and one
watcher thread per worker process waits on the actor for abort reasons;
the actor's methods run on its own thread pools (``claim``, ``watch``).
The caller side is ``dshtools.ray``.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Mapping
from typing import Any, Final, cast

import ray
from ray import cloudpickle

from . import _ray_reap
from ._backend import Body
from ._errors import safe_str
from ._remote_run import RemoteRun
from ._signal import AbortController
from ._types import ExecutionToken, ToolRunContext

__all__: list[str] = []


def _dumps(obj: object) -> bytes:
    """Ray's serializer for Python objects (``ray.cloudpickle``)."""
    return cast(bytes, cloudpickle.dumps(obj))  # type: ignore[no-untyped-call]


def _loads(data: bytes) -> Any:
    return cloudpickle.loads(data)


# ------------------------------------------------------------ the signal actor


ProcessId = tuple[int, int, int]
WorkerId = tuple[str, ProcessId | None]
"""``(Ray node id, process identity on that node)`` of a worker process."""

_WATCH_IDLE_S: Final = 30.0
"""A worker's watch call returns empty after this long without news, and
the worker calls again: a worker that went away stops being waited for."""


_WATCH_THREADS: Final = 1024
"""Threads (created on demand) for the outstanding ``watch`` calls: one per
worker process that ran a body of the backend."""


# What unpickling a tool's result may raise and still fail only its call.
_CONTAINED: Final = (Exception, SystemExit, GeneratorExit)


class _Entry:
    __slots__ = ("pid", "state", "worker")

    def __init__(self, state: str, worker: str | None = None, pid: WorkerId | None = None) -> None:
        self.state = state  # "withdrawn" | "claimed" | "aborted"
        self.worker = worker
        self.pid = pid


class _Mailbox:
    __slots__ = ("items", "waiters")

    def __init__(self) -> None:
        self.items: list[tuple[str, bytes]] = []
        self.waiters = 0


class _SignalActor:
    """One per backend: the authority on claim vs withdrawal, and the
    channel that carries an abort's reason to a running body.

    A threaded actor: ``claim``/``abort``/``forget`` run in the small
    ``"claim"`` concurrency group and decide under one lock, so a claim and
    a withdrawal of the same call are ordered; ``watch`` calls block in
    their own ``"watch"`` group and never delay a claim. Each worker
    process keeps one ``watch`` call outstanding (not one per body): an
    abort for a body it claimed lands in its mailbox and returns that call."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._news = threading.Condition(self._lock)
        self._calls: dict[str, _Entry] = {}
        self._mailboxes: dict[str, _Mailbox] = {}

    @ray.method(concurrency_group="claim")
    def claim(self, key: str, worker: str, pid: WorkerId, finished: list[str]) -> bool:
        """A task starts on ``worker``: ``True`` if its body may run,
        ``False`` if the call was withdrawn first. ``finished``: calls
        whose bodies returned on that worker since its last claim."""
        with self._lock:
            for done in finished:
                entry = self._calls.get(done)
                if entry is not None and entry.worker == worker:
                    del self._calls[done]
            if key in self._calls:
                return False
            self._calls[key] = _Entry("claimed", worker, pid)
            return True

    @ray.method(concurrency_group="claim")
    def abort(self, key: str, reason: bytes) -> tuple[bool, WorkerId | None]:
        """The caller aborted. ``(False, None)``: nothing claimed the call,
        it is withdrawn now. ``(True, pid)``: its body started (on the
        worker process ``pid``); the reason goes to that worker."""
        with self._lock:
            entry = self._calls.get(key)
            if entry is None:
                self._calls[key] = _Entry("withdrawn")
                return False, None
            if entry.state == "claimed" and entry.worker is not None:
                entry.state = "aborted"
                box = self._mailboxes.setdefault(entry.worker, _Mailbox())
                box.items.append((key, reason))
                self._news.notify_all()
            return entry.state != "withdrawn", entry.pid

    @ray.method(concurrency_group="claim")
    def forget(self, key: str) -> None:
        """The caller settled the call: drop whatever is left of it."""
        with self._lock:
            self._calls.pop(key, None)

    @ray.method(concurrency_group="watch")
    def watch(self, worker: str) -> list[tuple[str, bytes]]:
        """``[(key, pickled reason), ...]`` for aborts of bodies claimed by
        ``worker``; blocks until there is one (or ``_WATCH_IDLE_S``)."""
        with self._lock:
            box = self._mailboxes.setdefault(worker, _Mailbox())
            box.waiters += 1
            try:
                self._news.wait_for(lambda: bool(box.items), _WATCH_IDLE_S)
            finally:
                box.waiters -= 1
            items, box.items = box.items, []
            if not items and not box.waiters:
                self._mailboxes.pop(worker, None)
            return items


_SignalActorRemote = ray.remote(concurrency_groups={"claim": 4, "watch": _WATCH_THREADS})(_SignalActor)  # type: ignore[call-overload]


# ------------------------------------------------------------ the remote side


class _NotJSON:
    """Stands for a return value that did not pickle; the registry reports
    ``INVALID_TOOL_OUTPUT`` with this text."""

    __slots__ = ("__json_problem__",)

    def __init__(self, problem: str) -> None:
        self.__json_problem__ = problem


def _load_reason(data: bytes) -> object:
    try:
        return _loads(data)
    except Exception as exc:
        return f"<abort reason that did not unpickle here: {safe_str(exc)}>"


class _Channel:
    """A worker process's link to one backend's signal actor: the cached
    actor handle, the bodies running here and their controllers, and the
    watcher thread that keeps one ``watch`` call outstanding."""

    def __init__(self, actor_name: str, namespace: str) -> None:
        self.name = actor_name
        self.actor = ray.get_actor(actor_name, namespace=namespace)
        self.worker = uuid.uuid4().hex
        self.pid: WorkerId = (ray.get_runtime_context().get_node_id(), _ray_reap.identity(os.getpid()))
        self.lock = threading.Lock()
        self.running: dict[str, AbortController] = {}
        self.finished: list[str] = []
        self.thread: threading.Thread | None = None

    def claim(self, key: str) -> AbortController | None:
        """Claim ``key`` in the actor: its controller, or ``None`` when the
        call was withdrawn first. The controller is registered *before* the
        claim is sent: an abort the actor delivers between granting the
        claim and this thread reading the reply must find it."""
        controller = AbortController()
        with self.lock:
            finished, self.finished = self.finished, []
            self.running[key] = controller
            if self.thread is None:
                self.thread = threading.Thread(target=self._watch, name="dshtools-ray-watch", daemon=True)
                self.thread.start()
        granted = False
        try:
            granted = self.actor.claim.remote(key, self.worker, self.pid, finished).future().result() is True
        finally:
            if not granted:
                with self.lock:
                    self.running.pop(key, None)
        return controller if granted else None

    def release(self, key: str) -> None:
        with self.lock:
            self.running.pop(key, None)
            self.finished.append(key)

    def _watch(self) -> None:
        while True:
            try:
                items = self.actor.watch.remote(self.worker).future().result()
            except BaseException as exc:  # the actor (or the driver owning it) is gone
                reason = RuntimeError(f"the RayBackend signal actor is gone ({type(exc).__name__}); stopping")
                with self.lock:
                    controllers = list(self.running.values())
                    self.thread = None
                    _channels.pop(self.name, None)
                for controller in controllers:
                    controller.abort(reason)
                return
            for key, data in items:
                with self.lock:
                    target = self.running.get(key)
                if target is not None:
                    target.abort(_load_reason(data))


_channels: dict[str, _Channel] = {}
_channels_lock = threading.Lock()


def _channel(actor_name: str, namespace: str) -> _Channel:
    channel = _channels.get(actor_name)
    if channel is None:
        with _channels_lock:
            channel = _channels.get(actor_name)
            if channel is None:
                channel = _Channel(actor_name, namespace)
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
    try:
        data = _dumps(exc)
        _loads(data)  # the caller will do this: foreign code may run here
    except _CONTAINED:
        return "error_stub", (type(exc).__name__, safe_str(exc))
    return "error", data


def _run_remote(packed: tuple[Any, ...]) -> tuple[str, object, tuple[Mapping[str, Any], ...]]:
    """The task. Returns ``(kind, payload, contexts)``: ``withdrawn``,
    ``not_invoked`` (pickled error), ``not_invoked_stub`` (class name,
    message), ``value`` (pickled value), ``bad_value`` (problem text),
    ``error`` (pickled exception) or ``error_stub`` (class name, message).
    ``packed`` is one argument (Ray serializes each argument on its own):
    ``(actor name, namespace, call key, body key, body, args, fields)``."""
    actor_name, namespace, key, body_key, body_data, args, fields = packed
    try:
        body = _load_body(body_key, body_data)
    except Exception as exc:
        kind, payload = _pack_error(exc)
        return ("not_invoked" if kind == "error" else "not_invoked_stub"), payload, ()
    channel = _channel(actor_name, namespace)
    controller = channel.claim(key)
    if controller is None:
        return "withdrawn", None, ()
    call_id, root_call_id, name, agent = fields
    run = RemoteRun("a RayBackend worker", thaw_contexts=False)
    ctx = ToolRunContext(
        token=ExecutionToken(),
        call_id=call_id,
        root_call_id=root_call_id,
        name=name,
        arguments=args,
        agent=agent,
        parent=None,
        definition=None,
        signal=controller.signal,
        run=run,
    )
    try:
        value = body(args, ctx)
    except BaseException as exc:
        run.settled = True
        channel.release(key)
        kind, payload = _pack_error(exc)
        return kind, payload, tuple(run.contexts)
    run.settled = True
    channel.release(key)
    try:
        return "value", _dumps(value), tuple(run.contexts)
    except Exception as exc:
        problem = f"the tool's return value ({type(value).__name__}) cannot be serialized by Ray: {safe_str(exc)}"
        return "bad_value", problem, tuple(run.contexts)


_run_remote_task = ray.remote(_run_remote)
