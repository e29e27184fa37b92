"""The pipeline of one call: steps 1-7 of docs/contract.md §3 (§7, §8).

Guarantees:

* ``execute`` publishes **exactly one** result per call, to the caller and
  to every result observer, and only after the body (if it ever started)
  has returned: a started body is joined however long it takes, never
  raced or abandoned. Tool, policy and input faults become failure
  results; ``execute`` raises only for misuse (a non-call argument,
  ``RuntimeError`` after ``close()``) and re-raises a ``KeyboardInterrupt``
  (or a hook's ``SystemExit``/``GeneratorExit``, §8 A3) after publishing.
* Whether the body ran is decided by its backend, at one point (the thread
  backend's ``_Handoff.start()``); the pipeline only reads the typed
  report (docs/backends.md).
* Abort classification is one rule, ``_classify``; each phase says which
  signal is in force (the dispatch signal for the body's own time, the
  caller's for wrappers and post-execute, never an abort that arrived while
  a settled call waited for its turn in a batch, §8 A1).
* The dispatch-scoped signal is ``any_of(caller, wrapper's exec.signal)``;
  it is closed as soon as the body settles, so no link stays on the
  caller's long-lived signal (field case B03).
* Waits are sliced (0.25 s) so ``KeyboardInterrupt`` reaches a main thread
  blocked in ``execute`` promptly on every platform (B19).

Threads: steps 1-3 and 6-7 and the around-dispatch waterfall run in the
calling thread; the body runs where its backend puts it.

Package-internal phase API (``execute_batch``): ``execute(call)`` is
``complete(dispatch(begin(registry, call)))``, where a ``KeyboardInterrupt``
raised by ``dispatch`` leaves the run holding its ``ABORTED`` (or
``ABORTED_BEFORE_DISPATCH``) result, so ``complete`` still publishes it
before the interrupt is re-raised.
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import Future
from functools import partial
from typing import Final, TypeVar

import attrs

from .._backends.base import Backend, BodyReport, Dispatch, Error, NotInvoked, Value, WorkerLost
from .._backends.thread import ThreadBackend, WithdrawalSlot, worker_owners
from .._core.errors import AbortError, report_unraisable, safe_repr, safe_str
from .._core.freeze import FreezeError, FrozenDict, freeze_with_height
from .._signal import AbortSignal, abort_owned, derive
from .._types.calls import (
    ANY_OBJECT,
    INVALID_ARGS,
    INVALID_CALL,
    UNKNOWN_TOOL,
    WORKER_LOST,
    InvalidCall,
    SignalSlot,
    ToolExecution,
    ToolExecutionInput,
    ToolExecutionResult,
    ToolFailure,
    ToolRunContext,
    ToolSuccess,
    aborted,
    argument_problems,
    exception_failure,
    failure,
)
from .._types.hooks import Accept, Approver, Block, PostExecuteDecision, ToolDefinition
from .admission import HookReturnError, Waterfall, admit
from .outcome import NULL_SUCCESS, apply_post_decision, check_result, check_success, finalize, invalid_output
from .run import Hooks, Run, trusted_run_context
from .trusted import trusted_dispatch_view

__all__ = ["Pipeline", "begin", "check_open", "complete", "dispatch", "on_worker_of", "run_marked"]

_SLICE: Final = 0.25
_T = TypeVar("_T")
_CLOSED_BEFORE_DISPATCH: Final = "ToolRegistry closed before the call was dispatched"
_ACCEPT: Final = Accept()


def _accept() -> PostExecuteDecision:
    return _ACCEPT


def _check_unsettled(run: Run) -> None:
    if run.settled:
        raise RuntimeError("next() called after the around-dispatch waterfall settled")


_log: Final = logging.getLogger("dshtools")
_OVERRUN_REPORTED_S: Final = 0.1


def _with_backend_meta(run: Run, result: ToolExecutionResult) -> ToolExecutionResult:
    """Add the backend's own ``meta`` entries, ``meta["killed"]`` and
    ``meta["overrun_s"]`` (an overrun above 0.1 s, also logged as a WARNING)
    to the call's final result, whichever hook built it (docs/contract.md
    §8 A8, §9)."""
    extra: dict[str, object] = dict(run.backend_meta) if run.backend_meta else {}
    if run.killed:
        extra["killed"] = True
    overrun = run.overrun_s
    if overrun is not None and overrun > _OVERRUN_REPORTED_S:
        extra["overrun_s"] = overrun
        _log.warning(
            "tool %r (call %r) returned %.3f s after its dispatch signal aborted",
            run.call.name,
            run.call.call_id,
            overrun,
        )
    if not extra:
        return result
    return attrs.evolve(result, meta={**(result.meta or {}), **extra})


# Pipelines alive in this process, for the fork handler below.
_pipelines: weakref.WeakSet[Pipeline] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    # Only the forking thread exists in the child: the calls other threads
    # were running (and any lock they held) belong to the parent. Start each
    # registry over with fresh locks and no call in flight; its thread
    # backend makes fresh workers on the next call (docs/contract.md §8 A10).
    for pipeline in list(_pipelines):
        pipeline._idle = threading.Condition(threading.Lock())
        pipeline._lock = pipeline._idle._lock  # type: ignore[attr-defined]
        pipeline._bodies = set()


os.register_at_fork(after_in_child=_after_fork_in_child)


class Pipeline:
    """The call path of a ``ToolRegistry`` (its base class): the state every
    call reads and the phases. Registration and lifecycle are in
    ``ToolRegistry``; this class never changes its definitions or hooks.

    ``_lock`` guards waiting on ``_idle`` (``close()`` and a wrapper's
    stray dispatch attempts wait there); ``_definitions`` and ``_hooks`` are
    replaced whole (copy-on-write), never mutated, so a call reads them
    without the lock; ``_bodies`` is changed by single ``set.add``/``discard``
    calls (atomic with the GIL)."""

    def __init__(self, *, threads: ThreadBackend, backend: Backend, approver: Approver | None) -> None:
        # Thread pool for a batch's overlapping dispatches, and the bodies'
        # default backend unless another is given.
        self._threads = threads
        self._backend = backend
        self._approver = approver
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        # Run contexts of the dispatch attempts in flight.
        self._bodies: set[object] = set()
        self._closed = False
        self._definitions: dict[str, ToolDefinition] = {}
        self._hooks = Hooks()
        _pipelines.add(self)

    # --------------------------------------------------------------- execute

    def execute(self, call: ToolExecutionInput) -> ToolExecutionResult:
        """Run one call through the pipeline of docs/contract.md §3 and return its
        frozen result (blocks the calling thread). Raises ``TypeError`` for a
        non-``ToolExecutionInput``, ``RuntimeError`` after ``close()``; a
        ``KeyboardInterrupt`` while blocked aborts the dispatch signal, joins
        the body, publishes the ``ABORTED`` result, then is re-raised."""
        run = self._begin(call)
        try:
            self._dispatch(run)
        except BaseException:
            # The run holds its cancellation result; publish it, then re-raise.
            self._complete(run)
            raise
        result = self._complete(run)
        if run.interrupt is not None:  # arrived during post-execute/observers
            raise run.interrupt
        return result

    # -- phase 1: steps 1-3 -------------------------------------------------

    def _begin(self, call: ToolExecutionInput, *, allow_closed: bool = False) -> Run:
        """Steps 1-3. Never raises for faults; a ``KeyboardInterrupt`` during
        step 3 is recorded on ``run.interrupt`` (with an
        ``ABORTED_BEFORE_DISPATCH`` result) and re-raised by ``_dispatch``.
        With ``allow_closed`` (a batch that started before ``close()``), a
        closed registry settles the call ``ABORTED_BEFORE_DISPATCH`` instead
        of raising, so the batch still publishes one result per call."""
        if not isinstance(call, ToolExecutionInput):
            raise TypeError(f"execute() takes a ToolExecutionInput, not {type(call).__name__}")
        if self._closed and not allow_closed:
            self._check_open()
        run = Run(self, call, self._definitions.get(call.name), self._hooks)
        if allow_closed and self._closed and not on_worker_of(self):
            run.settle(aborted(RuntimeError(_CLOSED_BEFORE_DISPATCH), invoked=False), skip_post=True)
            return run
        definition = run.definition
        # Step 1: snapshot, freeze, validate. Wins over an aborted signal.
        if type(call.arguments) is InvalidCall:  # a model call that cannot run as written (A11)
            run.settle(failure(str(call.arguments), name="InvalidCallError", code=INVALID_CALL), skip_post=True)
            return run
        height = 0
        try:
            run.arguments, height = freeze_with_height(call.arguments)
        except FreezeError as exc:
            run.settle(
                failure(f"invalid arguments: {exc}", name="InvalidArgumentsError", code=INVALID_ARGS), skip_post=True
            )
            return run
        if definition is not None and not (definition.parameters is ANY_OBJECT and type(run.arguments) is FrozenDict):
            problems = argument_problems(definition, run.arguments, height)
            if problems:
                run.settle(
                    failure(
                        "invalid arguments: " + "; ".join(problems), name="InvalidArgumentsError", code=INVALID_ARGS
                    ),
                    skip_post=True,
                )
                return run
        # Step 2: pre-aborted.
        if call.signal.aborted:
            run.settle(aborted(call.signal.reason, invoked=False), skip_post=True)
            return run
        # Step 3.
        hooks = run.hooks
        if not (hooks.pre_execute or hooks.guards):  # nothing to ask: the hot path
            if definition is None:
                run.settle(
                    failure(f'unknown tool "{call.name}"', name="UnknownToolError", code=UNKNOWN_TOOL), skip_post=False
                )
            return run
        try:
            admit(run, self._approver)
        except BaseException as exc:
            # admit() turns every Exception into a result; what escapes is a
            # KeyboardInterrupt/SystemExit/GeneratorExit from a hook, guard
            # or approver (docs/contract.md §8 A3): nothing was dispatched,
            # the call is published ABORTED_BEFORE_DISPATCH, then re-raised.
            run.interrupt = exc
            run.settle(aborted(exc, invoked=False), skip_post=True)
        return run

    # -- phase 2: steps 4-5 -------------------------------------------------

    def _dispatch(self, run: Run) -> Run:
        """Steps 4-5 (a no-op when ``run.result`` is set, except that a
        recorded interrupt is re-raised). Blocks until the body, if started,
        returned. On ``KeyboardInterrupt`` the run is left holding
        ``ABORTED`` (body invoked) or ``ABORTED_BEFORE_DISPATCH`` and the
        interrupt is re-raised; ``_complete(run)`` still publishes it."""
        if run.result is not None:
            if run.interrupt is not None:
                raise run.interrupt
            return run
        call = run.call
        around = run.hooks.around
        # The slot and view exist only for wrappers (none: the hot path).
        slot = SignalSlot(call.signal) if around else None
        view = (
            trusted_dispatch_view(
                run.token,
                call.call_id,
                run.root_call_id,
                call.name,
                run.arguments,
                call.agent,
                call.parent,
                run.definition,
                slot,
            )
            if slot is not None
            else None
        )

        try:
            # No wrapper: the innermost next() directly (no waterfall).
            if around:
                result = Waterfall(
                    "around-dispatch hook",
                    around,
                    (view,),
                    partial(self._invoke, run, slot),
                    (ToolSuccess, ToolFailure),
                    partial(_check_unsettled, run),
                ).at(0)
            else:
                result = self._invoke(run, slot)
        except HookReturnError as exc:
            run.settle(invalid_output(call.name, str(exc)), skip_post=False)
            return run
        except Exception as exc:
            # A wrapper raised: a wrapper failure (no post-execute). An
            # AbortError while cancellation is in force is cancellation.
            raised = exception_failure(exc)
            if isinstance(exc, AbortError):
                run.body_abort = raised
            run.settle(self._classify(run, raised, self._cancellation(run)), skip_post=True)
            return run
        except BaseException as exc:
            # KeyboardInterrupt (the caller's Ctrl-C, already delivered to the
            # dispatch signal by the join) or a SystemExit/GeneratorExit from
            # a wrapper or renderer (docs/contract.md §8 A3): abort what is
            # still dispatching, join it (below), publish, re-raise.
            if run.interrupt is None:
                run.interrupt = exc
            signal = run.cancel_signal
            if run.attempts and signal is not call.signal:
                abort_owned(signal, exc)
            reason = signal.reason if signal.aborted else exc
            run.settle(aborted(reason, invoked=run.body_invoked), skip_post=True)
            raise
        finally:
            run.settled = True
            if slot is not None:
                slot.signal = call.signal  # unconditionally, whatever a wrapper left
            if run.attempts:
                # A wrapper returned while a next() it started on another
                # thread is still dispatching: join it (quiescence).
                self._join_attempts(run)
        # Step 5: classification.
        # Registry-built body results are valid already; re-checking would
        # copy them and lose the identity test against run.body_abort.
        if result is not run.body_success and result is not run.body_abort:
            result = check_result(run.call.name, run.definition, result)
        if call.signal.aborted or run.cancel_signal.aborted:
            result = self._classify(run, result, self._cancellation(run))
        run.result = result
        return run

    def _join_attempts(self, run: Run) -> None:
        # Dekker-style handshake with _invoke's finally: we set `joining`
        # then read `attempts`; it discards its attempt then reads `joining`.
        # Either it sees `joining` and notifies, or we see the set empty.
        run.joining = True
        interrupt: KeyboardInterrupt | None = None
        with self._lock:
            while run.attempts:
                try:
                    self._idle.wait(_SLICE)
                except KeyboardInterrupt as ki:  # keep joining: never abandon
                    interrupt = interrupt or ki
        if interrupt is not None:
            if run.interrupt is None:
                run.interrupt = interrupt
            raise interrupt

    def _classify(self, run: Run, result: ToolExecutionResult, in_force: AbortSignal | None) -> ToolExecutionResult:
        """The one rule of abort classification (docs/contract.md §3 step 5,
        §7, §8 A1): while cancellation is in force (``in_force`` aborted), a
        success, or the failure of an ``AbortError`` raised by the body or a
        wrapper, becomes ``ABORTED`` if the body was invoked, else
        ``ABORTED_BEFORE_DISPATCH``; every other failure keeps its code.
        Which signal is in force is each phase's question: the dispatch
        signal for the body's own time, the caller's for the wrapper and
        post-execute time; never an abort that arrived only while a settled
        call waited for its turn in a batch."""
        if in_force is None or not (isinstance(result, ToolSuccess) or result is run.body_abort):
            return result
        return aborted(in_force.reason, invoked=run.body_invoked, additional_contexts=result.additional_contexts)

    def _cancellation(self, run: Run) -> AbortSignal | None:
        """The signal whose abort is "cancellation in force", if any."""
        if run.cancel_signal.aborted:
            return run.cancel_signal
        if run.call.signal.aborted:
            return run.call.signal
        return None

    def _invoke(self, run: Run, slot: SignalSlot | None) -> ToolExecutionResult:
        """The innermost ``next()``: fuse, submit to the tool's backend, join."""
        call = run.call
        caller = call.signal
        outer = caller if slot is None else slot.signal
        definition = run.definition
        assert definition is not None
        backend: Backend = definition.backend or self._backend
        # The thread backend's withdrawal listens on the dispatch signal from
        # its birth (one lock round trip); other backends add what they need
        # in submit().
        withdrawal = WithdrawalSlot() if type(backend) is ThreadBackend else None
        # The registry aborts `fused` itself on KeyboardInterrupt, so signals
        # a body derives from it must link to it (aborts_directly).
        fused = derive([caller] if outer is caller else [caller, outer], withdrawal, aborts_directly=True)
        run.cancel_signal = fused
        if fused.aborted:
            fused.close()
            return aborted(fused.reason, invoked=False)
        ctx = trusted_run_context(
            run.token,
            call.call_id,
            run.root_call_id,
            call.name,
            run.arguments,
            call.agent,
            call.parent,
            definition,
            fused,
            run,
        )
        bodies = self._bodies
        # One attempt per next() call (a wrapper may retry or hedge): its run
        # context. Registered before the closed check (close() sets
        # `_closed`, then reads `_bodies`): either close() waits for this
        # attempt, or this call sees `_closed` and never dispatches.
        bodies.add(ctx)
        run.attempts.add(ctx)
        try:
            if self._closed and not on_worker_of(self):
                # close() ran while this call was in admission: its backend
                # may be gone. The body never runs; nothing was dispatched.
                return aborted(RuntimeError(_CLOSED_BEFORE_DISPATCH), invoked=False)
            if slot is not None:
                slot.signal = fused
            return self._run_body(run, backend, definition, ctx, fused, withdrawal)
        finally:
            # Bookkeeping first, each step reached even if an interrupt lands
            # in the one before: a stale attempt would block close() and
            # _join_attempts forever.
            try:
                try:
                    bodies.discard(ctx)
                finally:
                    run.attempts.discard(ctx)
                if (self._closed and not bodies) or run.joining:
                    # close() or _join_attempts may be waiting; a missed
                    # notify costs them one slice.
                    with self._lock:
                        self._idle.notify_all()
            finally:
                if slot is not None:
                    slot.signal = outer
                # Detaches from the caller's signal; a backend's listeners go
                # with the closed signal (it can no longer abort).
                fused.close()

    def _run_body(
        self,
        run: Run,
        backend: Backend,
        definition: ToolDefinition,
        ctx: ToolRunContext,
        fused: AbortSignal,
        withdrawal: WithdrawalSlot | None,
    ) -> ToolExecutionResult:
        """Submit the body once, wait until its dispatch settles, and return
        the body's outcome as the result the innermost ``next()`` returns.

        The wait is sliced; a ``KeyboardInterrupt`` anywhere aborts the
        dispatch signal (the backend withdraws a queued body or tells a
        running one) and the wait goes on: a started body is never
        abandoned. The interrupt is re-raised once the dispatch settled.

        The result is classified already here (step 5), so wrappers see
        ``ABORTED`` for a success or ``AbortError`` while the dispatch signal
        is aborted; a tool failure (``ToolError``, other exceptions, invalid
        output) stays."""
        interrupt: KeyboardInterrupt | None = None
        dispatch: Dispatch | None = None
        submitted = False
        while True:
            try:
                if not submitted:
                    submitted = True
                    try:
                        if withdrawal is None:
                            dispatch = backend.submit(definition.execute, run.arguments, ctx)
                        else:
                            assert isinstance(backend, ThreadBackend)
                            dispatch = backend.submit_listening(definition.execute, run.arguments, ctx, withdrawal)
                    except Exception as exc:
                        # The backend refused: the body was not and will not
                        # be started.
                        report = BodyReport(outcome=NotInvoked(exc))
                        break
                if interrupt is not None:
                    # Also runs listeners a second interrupt left pending.
                    abort_owned(fused, interrupt)
                if dispatch is None:
                    # An interrupt inside submit() lost the handle: the abort
                    # above withdrew whatever the backend had queued.
                    report = BodyReport(outcome=NotInvoked())
                    break
                if dispatch.wait(_SLICE):
                    report = dispatch.report()
                    break
            except KeyboardInterrupt as ki:
                # Abort the dispatch signal and keep joining: never abandon.
                if interrupt is None:
                    interrupt = ki
        if interrupt is not None:
            run.interrupt = interrupt
            if type(report.outcome) is Value or type(report.outcome) is Error:
                run.body_invoked = True
            run.note_report(report)
            raise interrupt
        outcome = report.outcome
        if report.contexts or report.killed or report.overrun_s is not None or report.meta:
            run.note_report(report)
        in_force = fused if fused.aborted else None
        if type(outcome) is Value:
            run.body_invoked = True
            value = outcome.value
            content = report.content
            if value is None and content is None and definition.output_schema is None and definition.render is None:
                checked: ToolExecutionResult = NULL_SUCCESS  # "done, nothing to say": never varies
            else:
                checked = check_success(run.call.name, definition, value, content)
            if isinstance(checked, ToolSuccess):
                run.body_success = checked
                if in_force is not None:
                    return self._classify(run, checked, in_force)
            return checked
        if type(outcome) is Error:
            run.body_invoked = True
            error = outcome.error
            if isinstance(error, WorkerLost):
                return failure(safe_str(error), name="WorkerLost", code=WORKER_LOST)
            result = exception_failure(error)
            if not isinstance(error, AbortError):
                # The model gets str(exc) and the class name; whoever debugs
                # the tool gets the traceback (where it crossed with the error).
                _log.debug("tool %r (call %r) raised", run.call.name, run.call.call_id, exc_info=error)
            if report.killed or isinstance(error, AbortError):
                # A forced stop follows an abort: it is cancellation, as an
                # AbortError is.
                run.body_abort = result
                return self._classify(run, result, in_force)
            return result
        # Not invoked: withdrawn by the abort, or refused/dropped/failed by
        # the backend (its own error when it gave one).
        if fused.aborted:
            return aborted(fused.reason, invoked=False)
        refusal = outcome.error if isinstance(outcome, NotInvoked) else None
        if refusal is None:
            refusal = RuntimeError("the backend shut down before the call was dispatched")
        return aborted(refusal, invoked=False)

    # -- result checking ----------------------------------------------------

    # -- phase 3: steps 6-7 -------------------------------------------------

    def _complete(self, run: Run, *, waited: bool = False) -> ToolExecutionResult:
        """Steps 6-7: post-execute (unless skipped), caller cancellation over
        a success, ``finalize_content``, freezing, observers (once).
        Returns the final result; never raises for hook faults. A
        ``BaseException`` that is not an ``Exception`` (KeyboardInterrupt,
        SystemExit, ...) from post-execute or the finalizer makes a success
        ``ABORTED`` and is recorded on ``run.interrupt`` (docs/contract.md
        §8 A3). ``waited``: the call's dispatch settled before and it waited
        for its model-order turn (a batch); an abort that arrived during
        that wait does not replace its success (§8 A1)."""
        if run.published:
            assert run.result is not None
            return run.result
        result = run.result
        if result is None:  # pragma: no cover - defensive: a phase was skipped
            result = failure("internal error: the call has no result", name="RuntimeError", code=None)
        signal = run.call.signal
        # Aborted while waiting for its turn: not this call's own time.
        waited_out = waited and signal.aborted
        try:
            if not run.skip_post and run.hooks.post_execute:
                result = self._post_execute(run, run.view, result)
            if signal.aborted and not waited_out:
                result = self._classify(run, result, signal)
            definition = run.definition
            if isinstance(result, ToolSuccess) and definition is not None and definition.finalize_content is not None:
                result = finalize(definition, run.view, result)
        except BaseException as exc:
            if run.interrupt is None:
                run.interrupt = exc
            if isinstance(result, ToolSuccess):
                result = aborted(exc, invoked=run.body_invoked, additional_contexts=result.additional_contexts)
        if run.tool_contexts and not run.drop_tool_contexts:
            result = attrs.evolve(result, additional_contexts=tuple(run.tool_contexts) + result.additional_contexts)
        if run.killed or run.overrun_s is not None or run.backend_meta:
            result = _with_backend_meta(run, result)
        run.result = result
        run.published = True
        observers = run.hooks.observers
        if observers:
            view = run.view
            for observer in observers:
                try:
                    observer(view, result)
                except KeyboardInterrupt as ki:
                    if run.interrupt is None:
                        run.interrupt = ki
                except BaseException as exc:
                    report_unraisable(exc, "Exception in result observer " + safe_repr(observer), result)
        return result

    def _post_execute(self, run: Run, view: ToolExecution, result: ToolExecutionResult) -> ToolExecutionResult:
        hooks = run.hooks.post_execute

        try:
            decision = Waterfall("post-execute hook", hooks, (view, result), _accept, (Accept, Block)).at(0)
        except HookReturnError as exc:
            return attrs.evolve(invalid_output(run.call.name, str(exc)), additional_contexts=result.additional_contexts)
        except Exception as exc:
            return attrs.evolve(exception_failure(exc), additional_contexts=result.additional_contexts)
        result, drop = apply_post_decision(run.call.name, run.definition, result, decision)
        if drop:
            run.drop_tool_contexts = True
        return result

    # -- batch support --------------------------------------------------------

    def _check_open(self) -> None:
        """Raise ``RuntimeError`` when the registry is closed (and the caller
        is not one of its in-flight bodies)."""
        if self._closed and not on_worker_of(self):
            raise RuntimeError("ToolRegistry is closed: execute() after close() is not allowed")


def on_worker_of(registry: Pipeline) -> bool:
    """The current thread runs (or dispatches for) one of ``registry``'s bodies."""
    owners = worker_owners()
    if not owners:
        return False
    bodies = registry._bodies
    return any(owner in bodies or (isinstance(owner, Run) and owner.registry is registry) for owner in owners)


def begin(pipeline: Pipeline, call: ToolExecutionInput, *, allow_closed: bool = False) -> Run:
    """Steps 1-3 of ``call`` (see ``Pipeline._begin``)."""
    return pipeline._begin(call, allow_closed=allow_closed)


def dispatch(run: Run) -> Run:
    """Steps 4-5 of a begun call (see ``Pipeline._dispatch``)."""
    pipeline = run.registry
    assert isinstance(pipeline, Pipeline)
    return pipeline._dispatch(run)


def complete(run: Run, *, waited: bool = False) -> ToolExecutionResult:
    """Steps 6-7 and publication, once (see ``Pipeline._complete``)."""
    pipeline = run.registry
    assert isinstance(pipeline, Pipeline)
    return pipeline._complete(run, waited=waited)


def check_open(pipeline: Pipeline) -> None:
    """Raise ``RuntimeError`` when the registry is closed (and the caller is
    not one of its in-flight bodies)."""
    pipeline._check_open()


def run_marked(pipeline: Pipeline, fn: Callable[[], _T]) -> Future[_T]:
    """Run ``fn`` on the registry's thread pool, in a copy of the calling
    thread's context, with the worker marked as a registry worker (so a
    dispatch there runs thread-backend bodies inline)."""
    return pipeline._threads.run_marked(fn)
