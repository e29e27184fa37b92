"""Batch execution of one model turn's tool calls (docs/contract.md#batch),
for a synchronous caller (``execute_batch``) and an async one
(``execute_batch_async``, awaited as ``aio`` awaits a call).

Guarantees:

* Exactly one result per call, returned in model order, and exactly one
  publication per call to the result observers — also for calls that never
  started because the batch was cancelled.
* Only dispatch overlaps. Pre-execute/approval/guards (``begin``) and
  post-execute/observers (``complete``) run on the calling thread, in model
  order. A run of consecutive calls whose ``execution_mode`` is
  ``"parallel"`` dispatches up to ``max_parallel`` at a time on registry
  workers; an ``"exclusive"`` call waits until everything before it has
  completed, runs alone, and holds later calls back until its own result is
  published.
* Cancellation (the batch ``signal``, or a ``KeyboardInterrupt`` in the
  calling thread) starts nothing new: queued dispatches are withdrawn,
  started bodies are signalled through their call's fused signal and
  drained (joined), and every unstarted call gets ``ABORTED_BEFORE_DISPATCH``.
  A ``KeyboardInterrupt`` is re-raised once every result is published.
* A tool's failure never cancels its siblings.
* A call whose dispatch settled and that then waits for its model-order
  turn keeps its success if the batch is cancelled during that wait; only
  a cancellation while its own post-execute runs replaces it
  (docs/contract.md#a1).
* A ``KeyboardInterrupt``, or a hook's ``SystemExit``/``GeneratorExit``
  (docs/contract.md#a3), stops new dispatch; every call still gets its
  one published result, then the first of them is re-raised.
* A batch run from inside a tool body (on a registry worker) dispatches
  its calls one after the other on that worker, never queued behind a
  pool full of parents. A ``close()`` of the registry during
  the batch settles the calls not yet dispatched as
  ``ABORTED_BEFORE_DISPATCH``: still one published result per call.
* An internal fault of the scheduler (never a tool or policy fault, which
  the registry turns into results) stops new dispatch, drains started work,
  closes every signal it created, and then raises: no result is invented.

Context: each call's dispatch work runs on a worker in a copy of the
calling thread's ``contextvars`` context, taken per call
(docs/contract.md#a7). ``execute_batch_async``'s batch thread runs in the
awaiting task's context, carried when the batch was awaited
(docs/contract.md#a22), so its hooks and every body see the task's values.

Signals: each call runs with ``AbortSignal.any_of([call.signal, signal,
interrupt])`` where ``interrupt`` is private to this batch; every such
fused signal is closed before ``execute_batch`` returns, so the caller's
signals end with no listener left by the batch.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable

import attrs

from .._backends.thread import on_worker
from .._core.errors import check_items
from .._core.interrupts import interrupt_slice
from .._signal import AbortController, AbortSignal
from .._types.calls import ToolExecutionInput, ToolExecutionResult
from .aio import await_job, start_on_thread
from .registry import ToolRegistry
from .run import Run

__all__ = ["execute_batch", "execute_batch_async"]


def _check_calls(calls: object) -> list[ToolExecutionInput]:
    return check_items(
        calls,
        ToolExecutionInput,
        one="calls must be an iterable of ToolExecutionInput, not one: for a single call pass [call]",
        item="calls must be ToolExecutionInput objects, not {}",
    )


def _check_max_parallel(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"max_parallel must be an int, not {type(value).__name__}")
    if value < 1:
        raise ValueError(f"max_parallel must be >= 1, got {value}")
    return value


@attrs.define(eq=False)
class _Slot:
    """One call's progress through the batch. Dispatch on a worker:
    ``submitted`` is set *before* the executor is asked,
    ``started``/``withdrawn`` are decided under the batch lock, and
    ``finished`` is set by the worker when its dispatch returned; ``done``:
    the dispatch finished, or was never needed."""

    index: int
    call: ToolExecutionInput
    run: Run | None = attrs.field(init=False, default=None)
    submitted: bool = attrs.field(init=False, default=False)
    started: bool = attrs.field(init=False, default=False)
    withdrawn: bool = attrs.field(init=False, default=False)
    finished: threading.Event = attrs.field(init=False, factory=threading.Event)
    done: bool = attrs.field(init=False, default=False)
    error: BaseException | None = attrs.field(init=False, default=None)


@attrs.define(eq=False)
class _Batch:
    """One ``execute_batch``: its calls and options, and the scheduler's
    state. ``window``: the calls begun, not yet completed, in model order;
    calls ``[0, begun)`` have been begun; ``in_flight`` counts dispatches
    for ``max_parallel`` (not trusted when draining); ``events`` carries a
    finished slot from a worker to the calling thread, or ``None`` as a
    wake-up when the batch signal aborts; ``interrupted`` is the first
    ``KeyboardInterrupt`` (or hook ``BaseException``, docs/contract.md#a3)
    to re-raise once every result is published."""

    registry: ToolRegistry
    calls: list[ToolExecutionInput]
    signal: AbortSignal
    max_parallel: int
    interrupt: AbortController = attrs.field(init=False, factory=AbortController)
    results: list[ToolExecutionResult | None] = attrs.field(init=False)
    fused: list[AbortSignal] = attrs.field(init=False, factory=list)
    window: list[_Slot] = attrs.field(init=False, factory=list)
    begun: int = attrs.field(init=False, default=0)
    in_flight: int = attrs.field(init=False, default=0)
    lock: threading.Lock = attrs.field(init=False, factory=threading.Lock)
    events: queue.SimpleQueue[_Slot | None] = attrs.field(init=False, factory=queue.SimpleQueue)
    interrupted: BaseException | None = attrs.field(init=False, default=None)

    @results.default
    def _no_results(self) -> list[ToolExecutionResult | None]:
        return [None] * len(self.calls)

    def cancelled(self) -> bool:
        return self.signal.aborted or self.interrupt.signal.aborted

    # ------------------------------------------------------------- per call

    def begin(self, index: int) -> _Slot:
        call = self.calls[index]
        fused = AbortSignal.any_of([call.signal, self.signal, self.interrupt.signal])
        self.fused.append(fused)
        slot = _Slot(index, attrs.evolve(call, signal=fused))
        # After cancellation the fused signal is already aborted, so begin
        # settles the call as ABORTED_BEFORE_DISPATCH and runs no hook
        # (docs/contract.md#step-pre-abort): no pre-execute runs after the batch aborted.
        # The slot is recorded only once begin returned: a call whose
        # begin was interrupted counts as never begun and is settled again.
        slot.run = run = self.registry._begin(slot.call, allow_closed=True)
        slot.done = run.result is not None
        if run.interrupt is not None:
            # A KeyboardInterrupt inside pre-execute/approval: the registry
            # settled the call as ABORTED_BEFORE_DISPATCH and recorded it.
            self.on_interrupt(run.interrupt)
        self.window.append(slot)
        self.begun = index + 1
        return slot

    def submit(self, slot: _Slot) -> None:
        run = slot.run
        assert run is not None
        events = self.events
        lock = self.lock

        def work() -> None:
            with lock:
                if slot.withdrawn:
                    return
                slot.started = True
            try:
                self.registry._dispatch(run)
            except BaseException as exc:
                if run.interrupt is not exc:  # a fault of the pipeline itself
                    slot.error = exc
                # else: a hook's BaseException, recorded on the run with its
                # result; the calling thread re-raises it (complete_ready).
            finally:
                slot.finished.set()
                events.put(slot)

        # The race written down: a KeyboardInterrupt can land anywhere in the
        # calling thread, including inside executor.submit() (it blocks while
        # starting a worker thread) after the work item was queued but before
        # the Future is returned. So nothing here depends on receiving the
        # Future: `submitted` is set first, and draining (join_started) either
        # withdraws the work under the lock before it starts or waits for
        # `finished` after it did.
        self.in_flight += 1
        slot.submitted = True
        try:
            # On the registry's thread pool, the worker marked as a registry
            # worker (a dispatch there runs thread-backend bodies inline).
            self.registry._threads.run_marked(work)
        except Exception:
            # The executor is shut down (close() during the batch) or refused
            # the work (docs/contract.md#a5): nothing was queued.
            # Dispatching here reports ABORTED_BEFORE_DISPATCH (closed) or
            # runs the call on this thread.
            self.in_flight -= 1
            slot.submitted = False
            self.dispatch_here(slot)

    def dispatch_here(self, slot: _Slot) -> None:
        run = slot.run
        assert run is not None
        try:
            self.registry._dispatch(run)
        except BaseException as exc:
            if run.interrupt is not exc:
                raise
            # Recorded with the call's result: publish it in order, stop
            # starting new work, re-raise at the end.
            self.on_interrupt(exc)
        finally:
            # Even when a KeyboardInterrupt comes out of dispatch the
            # registry has joined the body and recorded ABORTED first, so
            # the run can still be completed and published.
            slot.done = True

    def complete_ready(self) -> None:
        """Publish results from the head of the window while they are ready
        (post-execute and observers in model order, on this thread)."""
        while self.window and self.window[0].done:
            slot = self.window[0]
            assert slot.run is not None
            self.results[slot.index] = self.registry._complete(slot.run, waited=True)
            self.window.pop(0)
            if slot.run.interrupt is not None:
                # Recorded (not raised) by complete; complete is
                # idempotent, so a repeated call cannot publish twice.
                self.on_interrupt(slot.run.interrupt)

    # -------------------------------------------------------------- waiting

    def wait_one(self) -> None:
        """Block (in slices) until a dispatch finished or the batch signal
        aborted; account for what happened."""
        while True:
            try:
                slot = self.events.get(timeout=interrupt_slice())
                break
            except queue.Empty:
                continue
        if slot is None:
            return
        self.in_flight -= 1
        slot.done = True
        if slot.error is not None:
            raise slot.error

    def wait_until_below(self, limit: int) -> bool:
        """Wait until fewer than ``limit`` dispatches are in flight,
        publishing what becomes ready. False when cancelled meanwhile."""
        while self.in_flight >= limit:
            if self.cancelled():
                return False
            self.wait_one()
            self.complete_ready()
        return not self.cancelled()

    # ------------------------------------------------------------- schedule

    def schedule(self) -> None:
        registry = self.registry
        # A batch run from inside a tool body (a sub-agent's turn) already
        # holds a worker; queueing its calls behind a full pool of parents
        # would deadlock. It dispatches each call inline on
        # this thread instead, one after the other.
        nested = on_worker()
        for index, call in enumerate(self.calls):
            if self.cancelled():
                return
            parallel = not nested and registry.execution_mode(call) == "parallel"
            if not parallel:
                # Exclusive: everything before it completes first.
                if not self.wait_until_below(1):
                    return
                self.complete_ready()
            slot = self.begin(index)
            if not slot.done:
                if not parallel:
                    self.dispatch_here(slot)
                elif self.wait_until_below(self.max_parallel):
                    self.submit(slot)
                else:
                    return
            self.complete_ready()
        self.wait_until_below(1)
        self.complete_ready()

    def join_started(self) -> None:
        """Withdraw every submitted dispatch that has not started and join
        every one that has. A KeyboardInterrupt meanwhile aborts (once) and
        the join goes on: started work is never abandoned."""
        for slot in self.window:
            if not slot.submitted or slot.done:
                continue
            with self.lock:
                if not slot.started:
                    # Still queued: it will never run. Settled below on this
                    # thread; its fused signal is aborted, so the registry
                    # reports ABORTED_BEFORE_DISPATCH without the executor.
                    slot.withdrawn = True
                    continue
            while not slot.finished.is_set():
                try:
                    slot.finished.wait(interrupt_slice())
                except KeyboardInterrupt as exc:
                    self.on_interrupt(exc)
            slot.done = True
        self.in_flight = 0

    def settle_rest(self) -> None:
        """After cancellation (or at the end): withdraw queued dispatches,
        join started ones, settle begun-but-undispatched runs, give every
        call never begun its ABORTED_BEFORE_DISPATCH, publish in order."""
        self.join_started()
        for slot in self.window:
            if slot.error is not None:
                raise slot.error
        for slot in self.window:
            if not slot.done:
                self.dispatch_here(slot)
        self.complete_ready()
        for index in range(self.begun, len(self.calls)):
            self.begin(index)
            self.complete_ready()
        self.complete_ready()

    def on_interrupt(self, exc: BaseException) -> None:
        if self.interrupted is None:
            self.interrupted = exc
        self.interrupt.abort(exc)

    def run_all(self) -> list[ToolExecutionResult]:
        wake = self.signal.add_listener(lambda _s: self.events.put(None), run_if_aborted=False)
        try:
            try:
                self.schedule()
            except KeyboardInterrupt as exc:
                self.on_interrupt(exc)
            except BaseException:
                # Internal fault: start nothing new, join what started, raise.
                self.join_started()
                raise
            while True:
                try:
                    self.settle_rest()
                    break
                except KeyboardInterrupt as exc:
                    self.on_interrupt(exc)
        finally:
            wake.remove()
            for fused in self.fused:
                fused.close()
        if self.interrupted is not None:
            raise self.interrupted
        results: list[ToolExecutionResult] = []
        for result in self.results:
            assert result is not None
            results.append(result)
        return results


def execute_batch(
    registry: ToolRegistry,
    calls: Iterable[ToolExecutionInput],
    *,
    signal: AbortSignal,
    max_parallel: int = 10,
) -> list[ToolExecutionResult]:
    """Execute one model turn's tool calls; returns one result per call, in
    model order.

    ``calls``: ``ToolExecutionInput`` objects (each with its own signal).
    ``signal``: the batch's caller-owned ``AbortSignal`` (required).
    ``max_parallel``: how many parallel-safe dispatches may overlap (>= 1).
    Blocks the calling thread, which runs every pre-execute, post-execute
    and observer hook in model order; bodies run on registry workers.
    Raises ``TypeError`` for a ``registry`` that is not a ``ToolRegistry``,
    a non-signal ``signal``, ``calls`` that is one input rather than an
    iterable of them, or a non-input call; ``ValueError`` for ``max_parallel < 1``, ``RuntimeError`` when the
    registry is closed; re-raises ``KeyboardInterrupt`` after every result
    was published. Source: docs/contract.md#batch.
    """
    if not isinstance(registry, ToolRegistry):
        raise TypeError(f"registry must be a ToolRegistry, not {type(registry).__name__}")
    if not isinstance(signal, AbortSignal):
        raise TypeError(f"signal must be an AbortSignal, not {type(signal).__name__}")
    limit = _check_max_parallel(max_parallel)
    items = _check_calls(calls)
    registry._check_open()
    return _Batch(registry, items, signal, limit).run_all()


async def execute_batch_async(
    registry: ToolRegistry,
    calls: Iterable[ToolExecutionInput],
    *,
    signal: AbortSignal,
    max_parallel: int = 10,
) -> list[ToolExecutionResult]:
    """``execute_batch`` for an async caller; returns one result per call,
    in model order.

    The options and what is raised for them are ``execute_batch``'s
    (``TypeError``, ``ValueError``, ``RuntimeError`` when the registry is
    closed), raised before anything runs. The batch runs on a thread of its
    own (its hooks run there, in model order), its dispatches on the
    registry's workers; the event loop is not blocked. Cancelling the
    awaiting task aborts the batch's signal with ``TaskCancelled``: started
    bodies are signalled and joined, unstarted calls settled
    ``ABORTED_BEFORE_DISPATCH`` and every result published to the result
    observers; then the cancellation is re-raised. ``signal`` itself is
    never aborted. Source: docs/contract.md#async.
    """
    if not isinstance(signal, AbortSignal):
        raise TypeError(f"signal must be an AbortSignal, not {type(signal).__name__}")
    limit = _check_max_parallel(max_parallel)
    items = _check_calls(calls)
    registry._check_open()
    if on_worker():
        return execute_batch(registry, items, signal=signal, max_parallel=limit)

    def batch(private: AbortSignal) -> list[ToolExecutionResult]:
        return execute_batch(registry, items, signal=private, max_parallel=limit)

    return await await_job(batch, signal, start_on_thread)
