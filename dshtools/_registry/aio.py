"""Async callers: ``ToolRegistry.aexecute``/``aresume``, and the awaiting
of a job on a thread that ``execute_batch_async`` (``batch``) shares with
them (docs/contract.md#async, docs/async.md).

Guarantees:

* The call runs through the same pipeline and on the same backend as
  ``execute``/``execute_batch``; only the waiting differs. The event loop is
  never blocked: the synchronous work runs on a thread, and that thread
  wakes the loop (``call_soon_threadsafe`` under asyncio, the trio token's
  ``run_sync_soon`` under trio) when it is done.
* Cancelling the awaiting task aborts the call's signal with a
  ``TaskCancelled`` reason, waits for the call to finish shielded from any
  further cancellation (a second ``task.cancel()``, a cancelled enclosing
  scope), then re-raises the first cancellation. A started body has
  returned before the cancellation reaches the caller: never abandoned.
* The loop decides that abort but never runs its listeners (those a body
  added to its signal may block): a call some thread runs is aborted on an
  abort runner (docs/contract.md#a15), and the task waits for the call and
  for the abort's listeners; a call no thread took is claimed back by the
  loop first, so its body never runs. An abort of the caller's own signal
  runs its listeners in the thread that aborts it, as every abort does.
* Not cancelled, the awaiting task gets the call's result: it is never lost.
* The awaiting task's ``contextvars`` context is carried to the job when it
  is awaited (``_core.context.carry``): the hooks and the body see the
  task's values whichever thread runs them, the pool's or a thread of its
  own (a batch's), and what they set never reaches the task.
* The caller's signals are never aborted: each call runs under a private
  signal, ``AbortSignal.any_of([call.signal, private])``, closed before
  the coroutine returns, so no listener is left on the caller's signals.
* Threads are bounded. A call waits in the registry's thread pool queue
  (``max_workers``, default 32) until a worker takes it; steps 1-7 then run
  on that worker, with a thread-backend body inline on it (one thread per
  running call). A call still queued when its signal aborts (the task
  cancelled, the caller's signal) is withdrawn: it is settled at once, on
  the loop's thread, ``ABORTED_BEFORE_DISPATCH`` (step 2; no hook runs,
  the result observers see it). Its timeout, which starts at dispatch, is
  not charged for the time it waited. A batch runs on a thread of its own
  (the thread ``execute_batch`` blocks), its dispatches on the pool.

No event-loop library is imported here: the loop side uses the running
loop's own primitives (``asyncio.Event``, or trio's, trio being loaded
when its loop runs), and honours anyio's cancel scopes when anyio is in
use (its shield keeps a cancelled scope from re-delivering during the
join). anyio (the ``async`` extra) is not needed to await a call.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from functools import partial
from typing import Any, Final, Generic, Protocol, TypeVar

import attrs

from .._backends.thread import ThreadBackend, on_worker
from .._core.context import carry
from .._signal import AbortController, AbortSignal
from .._signal.timer import run_on_abort_runner
from .._types.calls import ToolExecutionInput, ToolExecutionResult
from .._types.hooks import ResumeDecision
from .run import Run
from .tickets import check_resume

__all__ = ["AwaitedRegistry", "TaskCancelled", "aexecute", "aresume", "await_job", "start_on_thread"]

_T = TypeVar("_T")
_WORKER: Final = object()  # the claim's value when a thread took the job


class TaskCancelled(Exception):
    """The reason a call's signal aborts with when the task awaiting
    ``aexecute`` or ``execute_batch_async`` is cancelled:
    ``TaskCancelled(library)``, ``library`` being ``"asyncio"`` or
    ``"trio"``. The cancellation exception itself is not the reason: it
    belongs to the awaiting task (it is re-raised there) and is never
    shared with a body's thread. Source: docs/contract.md#async."""

    library: str

    def __init__(self, library: str) -> None:
        super().__init__(library)
        self.library = library

    def __str__(self) -> str:
        return f"the awaiting {self.library} task was cancelled"

    def __repr__(self) -> str:
        return f"TaskCancelled({self.library!r})"


class AwaitedRegistry(Protocol):
    """What ``aexecute`` and ``aresume`` use of the ``ToolRegistry`` that
    awaits them (it passes itself; this module never imports the registry,
    whose ``aexecute``/``aresume`` import this one): its closed check, its
    synchronous ``execute``/``resume`` (inline on a worker), the phases of
    a call run from its thread pool, and that pool."""

    _threads: ThreadBackend

    def _check_open(self) -> None: ...

    def execute(self, call: ToolExecutionInput) -> ToolExecutionResult: ...

    def resume(
        self, ticket: object, decision: ResumeDecision, *, arguments: object = None, signal: AbortSignal
    ) -> ToolExecutionResult: ...

    def _begin(self, call: ToolExecutionInput, *, allow_closed: bool = False) -> Run: ...

    def _run(self, run: Run) -> ToolExecutionResult: ...


class _Job(Generic[_T]):
    """The synchronous work of one awaiting coroutine, handed to a thread.

    The claim decides, once, who runs ``fn``: the thread (``run``) or the
    withdrawal (``withdraw``, after an abort, while it is still queued).
    ``finished``/``value``/``error`` are written before ``wake`` is called
    and read by the loop only after it was woken (or saw ``finished``)."""

    __slots__ = ("claim", "error", "finished", "fn", "value", "wake")

    def __init__(self, fn: Callable[[], _T], wake: Callable[[], None]) -> None:
        self.fn = fn
        self.wake = wake
        self.claim: dict[int, object] = {}
        self.finished = False
        self.value: _T | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        """The thread's work item: claim, run ``fn``, wake the loop."""
        if self.claim.setdefault(0, _WORKER) is not _WORKER:
            return  # withdrawn first
        self.settle()

    def settle(self) -> None:
        try:
            self.value = self.fn()
        except BaseException as exc:  # handed to the awaiting task, raised there
            self.error = exc
        finally:
            self.finished = True
            self.wake()

    def withdraw(self, _signal: object = None) -> None:
        """The abort listener: a job no thread took yet never will; the loop
        is woken to settle it itself."""
        mine = object()
        if self.claim.setdefault(0, mine) is mine:
            self.wake()

    def take_back(self) -> bool:
        """The loop's claim, on a cancellation: ``True`` when no thread took
        the job (now none ever will), ``False`` when one runs it."""
        mine = object()
        return self.claim.setdefault(0, mine) is not _WORKER

    def withdrawn(self) -> bool:
        winner = self.claim.get(0)
        return winner is not None and winner is not _WORKER

    def result(self) -> _T:
        if self.error is not None:
            raise self.error
        return self.value  # type: ignore[return-value]  # set when `finished` without an error


class _Abort:
    """An abort the loop decided, run on an abort runner so that the
    listeners a body added to its signal never run on the loop's thread.
    ``done`` is written before ``wake`` is called."""

    __slots__ = ("controller", "done", "reason", "wake")

    def __init__(self, controller: AbortController, reason: TaskCancelled, wake: Callable[[], None]) -> None:
        self.controller = controller
        self.reason = reason
        self.wake = wake
        self.done = False

    def __call__(self) -> None:
        try:
            self.controller.abort(self.reason)
        finally:
            self.done = True
            self.wake()


class _Waiter:
    """The loop side of one wait: an event of the loop's library that the
    worker sets through the loop's thread-safe scheduler (``schedule``),
    from any thread, never blocking it; a loop that finished (``schedule``
    raises ``gone``) has nobody waiting."""

    __slots__ = ("event", "gone", "schedule")
    event: Any
    schedule: Callable[[Callable[[], object]], object]
    gone: type[BaseException]

    def wake(self) -> None:
        try:
            self.schedule(self.event.set)
        except self.gone:
            pass

    async def wait(self) -> None:
        await self.event.wait()


class _AsyncioWaiter(_Waiter):
    """The loop side under asyncio: an ``asyncio.Event`` the worker sets
    through ``call_soon_threadsafe`` (a closed loop raises ``RuntimeError``)."""

    __slots__ = ("loop",)
    library: Final = "asyncio"
    cancelled: Final = asyncio.CancelledError

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.event = asyncio.Event()
        self.schedule = loop.call_soon_threadsafe
        self.gone = RuntimeError

    def another(self) -> _AsyncioWaiter:
        return _AsyncioWaiter(self.loop)

    def shield(self) -> AbstractContextManager[object]:
        # An anyio cancel scope re-delivers its cancellation at every await
        # until its shield stops it; a native cancellation passes a shield
        # and is caught by the caller's loop. Without anyio loaded no anyio
        # scope exists.
        anyio = sys.modules.get("anyio")
        return nullcontext() if anyio is None else anyio.CancelScope(shield=True)


class _TrioWaiter(_Waiter):
    """The loop side under trio: a ``trio.Event`` the worker sets through
    the trio token's ``run_sync_soon`` (a finished run raises
    ``trio.RunFinishedError``)."""

    __slots__ = ("trio",)
    library: Final = "trio"

    def __init__(self, trio: Any) -> None:
        self.trio = trio
        self.schedule = trio.lowlevel.current_trio_token().run_sync_soon  # RuntimeError outside trio
        self.event = trio.Event()
        self.gone = trio.RunFinishedError

    @property
    def cancelled(self) -> type[BaseException]:
        return self.trio.Cancelled  # type: ignore[no-any-return]

    def another(self) -> _TrioWaiter:
        return _TrioWaiter(self.trio)

    def shield(self) -> AbstractContextManager[object]:
        return self.trio.CancelScope(shield=True)  # type: ignore[no-any-return]


def _waiter() -> _AsyncioWaiter | _TrioWaiter:
    """The running loop's waiter; ``RuntimeError`` outside asyncio and trio."""
    try:
        return _AsyncioWaiter(asyncio.get_running_loop())
    except RuntimeError:
        pass
    trio = sys.modules.get("trio")
    if trio is not None:
        try:
            return _TrioWaiter(trio)
        except RuntimeError:
            pass
    raise RuntimeError("aexecute and execute_batch_async must be awaited in an asyncio or trio event loop")


async def await_job(
    fn: Callable[[AbortSignal], _T],
    signal: AbortSignal,
    start: Callable[[_Job[_T]], None],
) -> _T:
    """Run ``fn(private)`` through ``start`` (which hands the job to a
    thread) and await it; ``private`` is ``any_of([signal, own])``. The
    protocol of the module docstring: cancellation aborts ``own``, the join
    is shielded, the first cancellation is re-raised."""
    waiter = _waiter()
    cancelled = waiter.cancelled
    own = AbortController()
    private = AbortSignal.any_of([signal, own.signal])
    # Carried here, in the awaiting task: whichever thread runs the job
    # runs it in a copy of the task's context (docs/contract.md#a22).
    job: _Job[_T] = _Job(carry(partial(fn, private)), waiter.wake)
    # Queued and aborted: withdrawn (the listener runs at once when the
    # caller's signal is already aborted). Removed at the end: the job
    # refers to the signal, so the way back would be a reference cycle.
    withdrawal = private.add_listener(job.withdraw)
    try:
        if not job.withdrawn():
            start(job)
        try:
            if not job.withdrawn() and not job.finished:
                await waiter.wait()
        except cancelled:
            reason = TaskCancelled(waiter.library)
            if job.take_back():
                # Never dispatched, and now never will be: the only listeners
                # on the private signal are this module's, so the abort is
                # quick here; the call is settled here, no thread needed.
                own.abort(reason)
                job.settle()
            else:
                # A thread runs the call, and its body may have added
                # listeners that block: the abort runs on an abort runner,
                # and the task waits for the call and for the abort.
                done = waiter.another()
                abort = _Abort(own, reason, done.wake)
                run_on_abort_runner(abort)
                await _join(waiter, cancelled, lambda: job.finished)
                await _join(done, cancelled, lambda: abort.done)
            raise
        if job.withdrawn():
            job.settle()
        return job.result()
    finally:
        withdrawal.remove()
        private.close()


async def _join(waiter: _AsyncioWaiter | _TrioWaiter, cancelled: type[BaseException], done: Callable[[], bool]) -> None:
    """Wait on ``waiter`` until ``done()``, shielded: a further cancellation
    (a native asyncio one passes a shield) does not end the wait."""
    while not done():
        try:
            with waiter.shield():
                await waiter.wait()
        except cancelled:
            continue


def _execute_from_pool(registry: AwaitedRegistry, call: ToolExecutionInput, signal: AbortSignal) -> ToolExecutionResult:
    """``registry.execute`` for ``call`` under ``signal``, except that a
    registry closed while the call was queued settles it
    ``ABORTED_BEFORE_DISPATCH`` (one result per call) instead of raising."""
    return registry._run(registry._begin(attrs.evolve(call, signal=signal), allow_closed=True))


def _start_on_pool(registry: AwaitedRegistry, job: _Job[Any]) -> None:
    try:
        registry._threads.run_marked(job.run)
    except Exception:
        # The pool is shut down (the registry closed meanwhile) or the
        # supplied executor refused the work: a thread of its own.
        start_on_thread(job)


def start_on_thread(job: _Job[Any]) -> None:
    threading.Thread(target=job.run, name="dshtools-async").start()


async def aexecute(registry: AwaitedRegistry, call: ToolExecutionInput) -> ToolExecutionResult:
    """``await registry.aexecute(call)``: see ``ToolRegistry.aexecute``."""
    if not isinstance(call, ToolExecutionInput):
        raise TypeError(f"aexecute() takes a ToolExecutionInput, not {type(call).__name__}")
    registry._check_open()
    if on_worker():
        # A body's own event loop: queueing behind the pool its thread
        # belongs to could deadlock a full pool; the call runs inline, as a
        # nested ``execute`` does.
        return registry.execute(call)
    return await await_job(partial(_execute_from_pool, registry, call), call.signal, partial(_start_on_pool, registry))


async def aresume(
    registry: AwaitedRegistry,
    ticket: object,
    decision: ResumeDecision,
    *,
    arguments: object = None,
    signal: AbortSignal,
) -> ToolExecutionResult:
    """``await registry.aresume(...)``: see ``ToolRegistry.aresume``."""
    check_resume(decision, arguments, signal)
    registry._check_open()
    if on_worker():
        return registry.resume(ticket, decision, arguments=arguments, signal=signal)

    def resume(private: AbortSignal) -> ToolExecutionResult:
        # On the worker: the ticket store's claim (a file, a database) never
        # runs on the loop, nor does a ``TicketError`` arise there.
        return registry.resume(ticket, decision, arguments=arguments, signal=private)

    return await await_job(resume, signal, partial(_start_on_pool, registry))
