"""``ToolRegistry``: registered tools, their policies and backends, and
the call path of every call through them (docs/contract.md#registry,
docs/contract.md#precedence, docs/contract.md#backends).

Guarantees:

* ``execute`` publishes **exactly one** result per call, to the caller and
  to every result observer, and only after the body (if it ever started)
  has returned: a started body is joined however long it takes, never
  raced or abandoned. Tool, policy and input faults become failure
  results; ``execute`` raises only for misuse (a non-call argument,
  ``RuntimeError`` after ``close()``) and re-raises a ``KeyboardInterrupt``
  (or a hook's ``SystemExit``/``GeneratorExit``) after publishing.
* Each concern is decided once: the arguments in ``_begin`` (step 1), the
  pre-aborted call (step 2), admission (step 3, ``admission.admit``, only
  when there is a hook or guard to ask; an unknown tool is settled
  ``UNKNOWN_TOOL`` after it), the body's dispatch by the call's ``Run``
  (steps 4-5: ``Run.invoke`` is the innermost ``next()``), post-execute and
  publication in ``_complete`` (steps 6-7). Abort classification is one
  rule (``classify``, with the run) applied once per phase to a result of
  an explicit kind (``SUCCESS``, ``ABORT``, ``FINAL``), with the signal in
  force in that phase: the dispatch signal for the body's own time (so
  wrappers see it), then the dispatch or the caller's signal once the
  waterfall settled, then the caller's over post-execute.
* ``resume`` runs a call its approver deferred, once per ticket
  (``tickets``): from step 1, with step 3 reduced to the resume's decision
  (``admission.admit_resumed``), then as ``execute``.
* The result says whether the body ran: its ``body_invoked`` is the run's
  one record of it (docs/contract.md#a16).
* A call observer (``observer.set_call_observer``, used by
  ``dshtools.otel``) sees every call, whatever its outcome: started at the
  start of ``_begin``, entered around the dispatch, finished once after
  publication. Without one the call path pays one attribute test per phase.

What is not the call path lives beside it: the call-observer seam in
``observer``; registration of tools and hooks (copy-on-write), backend
sharing, ``close()``, the fork reset and ``RegistryStatistics`` in
``lifecycle``.

Threads: steps 1-3 and 6-7 and the around-dispatch waterfall run in the
calling thread; the body runs where its backend puts it. Hook registration
and ``execute`` are thread-safe; each call snapshots the hooks at its start.

``execute_batch`` drives the phases itself: ``execute(call)`` is
``_complete(_dispatch(_begin(call)))``, where a ``KeyboardInterrupt``
raised by ``_dispatch`` leaves the run holding its ``ABORTED`` (or
``ABORTED_BEFORE_DISPATCH``) result, so ``_complete`` still publishes it
before the interrupt is re-raised.
"""

from __future__ import annotations

import logging
import threading
import warnings
from collections.abc import Callable
from concurrent.futures import Executor
from functools import partial
from typing import TYPE_CHECKING, Any, Final, Literal, ParamSpec, TypeVar, overload

import attrs

from .._backends.base import Backend, ListeningBackend
from .._backends.thread import ThreadBackend
from .._core.closing import Closing
from .._core.errors import AbortError, report_unraisable, safe_repr
from .._core.freeze import FreezeError, FrozenDict, freeze_with_height
from .._journal import Journal
from .._signal import AbortSignal, abort_owned
from .._types import hooks as hook_types
from .._types.calls import (
    ANY_OBJECT,
    INVALID_ARGS,
    INVALID_CALL,
    InvalidCall,
    ToolExecutionInput,
    ToolExecutionResult,
    ToolFailure,
    ToolSuccess,
    aborted,
    exception_failure,
    failure,
)
from .._types.hooks import Accept, Block, ToolDefinition
from .._types.marks import ToolOptions
from .._types.tools import SignalSlot, ToolExecution, argument_problems
from .admission import HookReturnError, Waterfall, admit, admit_resumed
from .journaled import begin_journaled
from .lifecycle import (
    RegistryStatistics,
    add_hook,
    adopt,
    close_registry,
    register_definition,
    statistics_of,
    track,
)
from .observer import CallObserver, enter_watch, exit_watch, notify_published
from .outcome import apply_post_decision, check_result, finalize, invalid_output, unknown_tool
from .run import (
    ABORT,
    FINAL,
    Hooks,
    Kind,
    Run,
    classify,
    closed_reason,
    kind_of,
    on_worker_of,
    prepare_body_arguments,
)
from .tickets import ApprovalTickets, check_resume
from .trusted import trusted_dispatch_view

if TYPE_CHECKING:
    from typing_extensions import Unpack

_log = logging.getLogger("dshtools")
_P = ParamSpec("_P")
_R = TypeVar("_R")

__all__ = ["ToolRegistry", "around_dispatch_hooks", "registered"]

_ACCEPT: Final = Accept()


def _accept() -> hook_types.PostExecuteDecision:
    return _ACCEPT


def _check_unsettled(run: Run) -> None:
    if run.settled:
        raise RuntimeError("next() called after the around-dispatch waterfall settled")


class ToolRegistry(Closing):
    """Registered tools, their policies, and the backend their bodies run on.

    ``ToolRegistry(*, max_workers=None, executor=None, approver=None,
    backend=None, tickets=None, journal=None)``: bodies run on ``backend`` (any ``Backend``,
    docs/backends.md) unless their ``ToolDefinition`` names its own. Without
    ``backend`` the registry owns a ``ThreadBackend``: a
    ``ThreadPoolExecutor`` of ``max_workers`` (default
    ``DEFAULT_MAX_WORKERS`` = 32), shut down in ``close()``; or, with
    ``executor``, that executor used as is and never shut down (``close()``
    then waits for this registry's in-flight bodies only). Giving
    ``max_workers``/``executor`` together, or either with ``backend``,
    raises ``ValueError``. Hook registration and ``execute`` are
    thread-safe; each call snapshots the hooks at its start. ``tickets``
    (an ``ApprovalTickets``; default: one with an in-memory store) issues
    the tickets of calls the approver defers and redeems them in
    ``resume``; ``journal`` (a ``dshtools.durable`` journal) makes every
    call durable: each needs a ``session``, is claimed before its body
    starts and settled before it is published, and keeps the pending
    tickets when ``tickets`` is not given (docs/contract.md#journal). Source: docs/contract.md#registry, docs/contract.md#backends.

    ``_lock`` guards registration and waiting on ``_idle`` (``close()`` and
    a wrapper's stray dispatch attempts wait there); ``_definitions`` and
    ``_hooks`` are replaced whole (copy-on-write), never mutated, so a call
    reads them without the lock; ``_bodies`` (the run contexts of the
    dispatch attempts in flight) is changed by single ``set.add``/
    ``discard`` calls (atomic with the GIL).
    """

    def __init__(
        self,
        *,
        max_workers: int | None = None,
        executor: Executor | None = None,
        approver: hook_types.Approver | None = None,
        backend: Backend | None = None,
        tickets: ApprovalTickets | None = None,
        journal: Journal | None = None,
    ) -> None:
        if approver is not None and not callable(approver):
            raise TypeError(f"approver must be callable, not {type(approver).__name__}")
        if backend is not None:
            if max_workers is not None or executor is not None:
                raise ValueError("give backend, or max_workers/executor for the thread backend, not both")
            if not isinstance(backend, Backend):
                raise TypeError(f"backend must implement the Backend protocol, not {type(backend).__name__}")
        # The thread pool (created on first use) serves a batch's
        # overlapping dispatches and, without `backend`, the bodies.
        threads = ThreadBackend(max_workers, executor=executor)
        self._threads = threads
        self._backend: Backend = threads if backend is None else backend
        # Whether the default backend has the ListeningBackend capability
        # (decided once; a tool's own backend is asked per call).
        self._listening = isinstance(self._backend, ListeningBackend)
        self._approver = approver
        if tickets is not None and not isinstance(tickets, ApprovalTickets):
            raise TypeError(f"tickets must be an ApprovalTickets, not {type(tickets).__name__}")
        if journal is not None and not isinstance(journal, Journal):
            raise TypeError(f"journal must be a SqliteJournal or PostgresJournal, not {type(journal).__name__}")
        self._journal = journal
        if tickets is None:
            tickets = ApprovalTickets() if journal is None else ApprovalTickets(journal)
        self._tickets = tickets
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._bodies: set[object] = set()
        self._closed = False
        self._close_reason: object = None
        self._definitions: dict[str, ToolDefinition] = {}
        self._hooks = Hooks()
        self._observer: CallObserver | None = None  # see observer.set_call_observer
        track(self)
        # Every backend this registry uses, closed (when its last registry
        # closes) by close(). Guarded by _lock.
        self._backends: list[Backend] = [threads]
        if backend is not None:
            adopt(backend)
            self._backends.append(backend)
        self._closing: list[Backend] | None = None  # backends close() still has to close

    def statistics(self) -> RegistryStatistics:
        """A snapshot of the registry's state, for tests, monitoring and
        quiescence checks (nothing here is a lock-protected invariant: read
        it after the calls you care about returned)."""
        return statistics_of(self)

    # ------------------------------------------------------------ registration

    def register(self, definition: ToolDefinition) -> Callable[[], None]:
        """Add a tool. Returns an idempotent ``unregister()``. Raises
        ``TypeError`` for a non-``ToolDefinition``, ``ValueError`` for a name
        already registered or a body its backend cannot run
        (``Backend.validate``), ``RuntimeError`` after ``close()``
        (docs/contract.md#a13)."""
        return register_definition(self, definition)

    @overload
    def tool(self, fn: Callable[_P, _R], /) -> Callable[_P, _R]: ...

    @overload
    def tool(self, /, **options: Unpack[ToolOptions]) -> Callable[[Callable[_P, _R]], Callable[_P, _R]]: ...

    def tool(self, fn: Callable[..., Any] | None = None, /, **options: Unpack[ToolOptions]) -> Any:
        """``@registry.tool`` or ``@registry.tool(name=..., timeout=...,
        concurrency_safe=..., backend=..., strict=..., output_schema=...)``:
        register ``ToolDefinition.from_function(fn, **options)`` and return
        ``fn`` unchanged (still callable directly). Raises what
        ``from_function`` and ``register`` raise, at decoration
        (docs/contract.md#typed-tools). Warns (``UserWarning``, at the
        decorated line) for a function without a docstring (and no
        ``description``) and for each parameter without an annotation:
        the model would not be told (docs/contract.md#a33)."""

        def decorate(f: Callable[..., Any]) -> Callable[..., Any]:
            from .._types.functions import undescribed  # with pydantic, on first use

            definition = ToolDefinition.from_function(f, **options)
            self.register(definition)
            for text in undescribed(f, definition.name, definition.description):
                warnings.warn(text, UserWarning, stacklevel=2 if fn is None else 3)
            return f

        return decorate if fn is None else decorate(fn)

    def get(self, name: str) -> ToolDefinition | None:
        """The definition registered under ``name``, or ``None``."""
        return self._definitions.get(name)

    def schemas(self) -> list[dict[str, Any]]:
        """``[{"name", "description", "parameters"}, ...]`` in registration
        order, as fresh mutable data."""
        return [d.schema() for d in self._definitions.values()]

    def add_pre_execute(self, fn: hook_types.PreExecuteHook) -> Callable[[], None]:
        """``fn(exec, next) -> Allow() | Deny(reason) | Ask(reason=None)``;
        first registered runs outermost. Returns ``unregister()``."""
        return add_hook(self, "pre_execute", fn)

    def add_guard(self, fn: hook_types.Guard) -> Callable[[], None]:
        """``fn(exec) -> str | None``: a string denies (final)."""
        return add_hook(self, "guards", fn)

    def add_around_dispatch(self, fn: hook_types.AroundDispatch) -> Callable[[], None]:
        """``fn(exec: ToolDispatchExecution, next) -> result``; may replace
        ``exec.signal`` (and must restore it) or return without ``next()``."""
        return add_hook(self, "around", fn)

    def add_post_execute(self, fn: hook_types.PostExecuteHook) -> Callable[[], None]:
        """``fn(exec, result, next) -> Accept(...) | Block(...)``."""
        return add_hook(self, "post_execute", fn)

    def add_result_observer(self, fn: hook_types.ResultObserver) -> Callable[[], None]:
        """``fn(exec, result) -> None``: sees each call's frozen final result
        exactly once; an exception goes to ``sys.unraisablehook``."""
        return add_hook(self, "observers", fn)

    def add_progress_observer(self, fn: hook_types.ProgressObserver) -> Callable[[], None]:
        """``fn(exec, update) -> None``: sees the ``ProgressUpdate``s a body
        reports with ``run.report_progress``, on the ``dshtools-progress``
        thread (never the body's): a slow observer sees only the latest
        update of a call, the last one included; an exception goes to
        ``sys.unraisablehook`` (docs/policies.md#progress)."""
        return add_hook(self, "progress", fn)

    def execution_mode(self, call: ToolExecutionInput) -> Literal["parallel", "exclusive"]:
        """``"parallel"`` when the tool's ``is_concurrency_safe(args)``
        returns exactly ``True`` for the frozen arguments, else
        ``"exclusive"`` (unknown tool, bad arguments, a raising predicate,
        which is also logged as a WARNING on the ``dshtools`` logger)."""
        definition = self._definitions.get(call.name)
        if definition is None or definition.is_concurrency_safe is None:
            return "exclusive"
        try:
            args, _ = freeze_with_height(call.arguments)
        except Exception:
            return "exclusive"  # the call itself is answered INVALID_ARGS
        try:
            return "parallel" if definition.is_concurrency_safe(args) is True else "exclusive"
        except Exception:
            _log.warning("is_concurrency_safe of tool %r raised: the call runs alone", call.name, exc_info=True)
            return "exclusive"

    # ------------------------------------------------------------- lifecycle

    def close(self, abort: object = None) -> None:
        """Refuse new calls and registrations, wait for every in-flight body
        to return, then close the backends: the own thread backend (its pool
        shut down; a supplied executor is left running) and every backend
        given to this registry or its tools, a shared one only when the last
        registry using it closes (docs/contract.md#closing-backends). Idempotent; a close()
        interrupted by Ctrl-C is finished by the next. A nested call made by
        a body still running is allowed to finish. Raises ``RuntimeError``
        when called from a registry worker (it would wait for itself).

        ``abort`` (a reason, as ``AbortController.abort`` takes one: a
        ``str`` or an exception; ``None``, the default, aborts nothing)
        first aborts the dispatch signal of every body in flight with that
        reason, in the calling thread (their listeners run here), then joins
        them as above: each such call ends ``ABORTED`` with ``meta["reason"]``
        the reason, and a call that reaches its dispatch afterwards
        (queued, in a batch, awaited) ends ``ABORTED_BEFORE_DISPATCH`` with
        it (docs/contract.md#a31)."""
        close_registry(self, abort)

    # --------------------------------------------------------------- execute

    def execute(self, call: ToolExecutionInput) -> ToolExecutionResult:
        """Run one call through the pipeline of docs/contract.md#pipeline and return its
        frozen result (blocks the calling thread). Raises ``TypeError`` for a
        non-``ToolExecutionInput``, ``RuntimeError`` after ``close()``; a
        ``KeyboardInterrupt`` while blocked aborts the dispatch signal, joins
        the body, publishes the ``ABORTED`` result, then is re-raised."""
        return self._run(self._begin(call))

    async def aexecute(self, call: ToolExecutionInput) -> ToolExecutionResult:
        """``execute`` for an asyncio or trio caller (anyio's cancel scopes
        are honoured; anyio is not needed): the same pipeline, backend and
        frozen result, without blocking the event loop. Steps 1-7 run on
        one of the registry's worker threads (a call waits in its queue for
        one; its timeout starts at dispatch). Cancelling the awaiting task
        aborts the call's signal with ``TaskCancelled``, waits for the body
        to return (shielded from further cancellation), then re-raises the
        cancellation; a call still queued is settled
        ``ABORTED_BEFORE_DISPATCH`` at once. The caller's signal is never
        aborted. Raises ``TypeError``/``RuntimeError`` as ``execute`` does,
        and ``RuntimeError`` outside an asyncio or trio loop
        (docs/contract.md#async, docs/async.md)."""
        from .aio import aexecute

        return await aexecute(self, call)

    def resume(
        self,
        ticket: object,
        decision: hook_types.ResumeDecision,
        *,
        arguments: object = None,
        signal: AbortSignal,
    ) -> ToolExecutionResult:
        """Run a call its approver deferred (an ``APPROVAL_PENDING`` result's
        ``meta["ticket"]``, or its JSON text), in the calling thread as
        ``execute`` does: ``"allowed-once"`` runs it through the rest of the
        pipeline (guards, dispatch, post-execute, observers) on ``signal``,
        with ``arguments`` in place of the ticket's when given (validated
        again: ``INVALID_ARGS``); ``"rejected"`` returns its ``DENIED``
        result. The ticket is used up by the first resume that accepts it,
        whatever the result. Raises ``TicketError`` for a ticket that is
        refused (not one, forged or altered, already resumed, expired, for
        an unknown or changed tool: no call ran, no result was published),
        ``ValueError`` for another decision or ``arguments`` with
        ``"rejected"``, ``TypeError`` for a non-``AbortSignal``, and what
        ``execute`` raises (docs/policies.md#deferred-approval)."""
        check_resume(decision, arguments, signal)
        self._check_open()
        named = self._tickets.redeem(ticket, self._definitions.get)
        call = ToolExecutionInput(
            named.call_id,
            named.tool,
            named.arguments if arguments is None else arguments,
            signal,
            agent=named.agent,
            root_call_id=named.root_call_id,
            session=named.session,
        )
        return self._run(self._begin(call, admission=partial(admit_resumed, decision, named.reason)))

    async def aresume(
        self,
        ticket: object,
        decision: hook_types.ResumeDecision,
        *,
        arguments: object = None,
        signal: AbortSignal,
    ) -> ToolExecutionResult:
        """``resume`` for an asyncio or trio caller, as ``aexecute`` is for
        ``execute``: the ticket is redeemed and the call run on one of the
        registry's worker threads (the loop is never blocked, the ticket
        store's claim included), and the awaiting task gets the result, or
        the ``TicketError`` of a refused ticket. Cancelling the task aborts
        the call's signal with ``TaskCancelled``, waits for the body to
        return (shielded), then re-raises the cancellation; a resume still
        queued is settled on the loop as ``resume`` settles an aborted
        signal (the ticket used up, ``ABORTED_BEFORE_DISPATCH``). Raises
        ``ValueError``/``TypeError``/``RuntimeError`` as ``resume`` does,
        before anything runs, and ``RuntimeError`` outside an asyncio or
        trio loop (docs/policies.md#deferred-approval, docs/async.md)."""
        from .aio import aresume

        return await aresume(self, ticket, decision, arguments=arguments, signal=signal)

    def _run(self, run: Run) -> ToolExecutionResult:
        """Steps 4-7 of a run that ``_begin`` made, as ``execute`` runs them."""
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

    def _begin(
        self,
        call: ToolExecutionInput,
        *,
        allow_closed: bool = False,
        admission: Callable[[Run], None] | None = None,
    ) -> Run:
        """Steps 1-3. Never raises for faults; a ``KeyboardInterrupt`` during
        step 3 is recorded on ``run.interrupt`` (with an
        ``ABORTED_BEFORE_DISPATCH`` result) and re-raised by ``_dispatch``.
        With ``allow_closed`` (a batch that started before ``close()``), a
        closed registry settles the call ``ABORTED_BEFORE_DISPATCH`` instead
        of raising, so the batch still publishes one result per call.
        ``admission`` replaces step 3 (a resumed call's)."""
        if not isinstance(call, ToolExecutionInput):
            raise TypeError(f"execute() takes a ToolExecutionInput, not {type(call).__name__}")
        if self._closed and not allow_closed:
            self._check_open()
        run = Run(self, call, self._definitions.get(call.name), self._hooks)
        journal = self._journal
        if journal is not None and begin_journaled(journal, run):
            return run
        observer = self._observer
        if observer is not None:
            try:
                run.watch = observer.started(call, run.definition)
            except Exception as exc:
                report_unraisable(exc, "Exception in call observer " + safe_repr(observer), call)
        if allow_closed and self._closed and not on_worker_of(self):
            run.settle(aborted(closed_reason(self), invoked=False), skip_post=True)
            return run
        definition = run.definition
        # Step 1: snapshot, freeze, validate. Wins over an aborted signal.
        if type(call.arguments) is InvalidCall:  # a model call that cannot run as written
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
        if (
            definition is not None
            and definition.prepare_arguments is not None
            and not prepare_body_arguments(run, definition)
        ):
            return run
        # Step 2: pre-aborted.
        if call.signal.aborted:
            run.settle(aborted(call.signal.reason, invoked=False), skip_post=True)
            return run
        # Step 3: admission, when there is anything to ask (else the hot path).
        hooks = run.hooks
        if hooks.pre_execute or hooks.guards or admission is not None:
            try:
                if admission is None:
                    admit(run, self._approver, self._tickets)
                else:
                    admission(run)
            except BaseException as exc:
                # admit() turns every Exception into a result; what escapes
                # is a KeyboardInterrupt/SystemExit/GeneratorExit from a
                # hook, guard or approver: nothing was dispatched, the call
                # is published ABORTED_BEFORE_DISPATCH, then re-raised.
                run.interrupt = exc
                run.settle(aborted(exc, invoked=False), skip_post=True)
                return run
        if definition is None and run.result is None:
            # After the hooks, which see `definition is None` and may deny first.
            run.settle(unknown_tool(call.name), skip_post=False)
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
        slot = SignalSlot(call.signal, run) if around else None
        kind: Kind
        watch = run.watch
        entered = None if watch is None else enter_watch(watch, call)
        try:
            if slot is not None:
                result = Waterfall(
                    "around-dispatch hook",
                    around,
                    (trusted_dispatch_view(run, slot),),
                    partial(run.invoke, slot),
                    (ToolSuccess, ToolFailure),
                    partial(_check_unsettled, run),
                ).at(0)
            else:
                result = run.invoke(None)
        except HookReturnError as exc:
            result, kind = invalid_output(call.name, str(exc)), FINAL
        except Exception as exc:
            # A wrapper raised: a wrapper failure (no post-execute). An
            # AbortError while cancellation is in force is cancellation.
            result, kind = exception_failure(exc), ABORT if isinstance(exc, AbortError) else FINAL
            run.skip_post = True
        except BaseException as exc:
            # KeyboardInterrupt (the caller's Ctrl-C, already delivered to the
            # dispatch signal by the join) or a SystemExit/GeneratorExit from
            # a wrapper or renderer: abort what is still dispatching, join it
            # (below), publish, re-raise.
            if run.interrupt is None:
                run.interrupt = exc
            signal = run.cancel_signal
            if run.attempts and signal is not call.signal:
                abort_owned(signal, exc)
            reason = signal.reason if signal.aborted else exc
            run.settle(aborted(reason, invoked=run.body_invoked), skip_post=True)
            raise
        else:
            if result is run.body_result:
                kind = run.body_kind  # the innermost next()'s own result, checked already
            else:
                result = check_result(call.name, run.definition, result)
                kind = kind_of(result)
        finally:
            run.settled = True
            if slot is not None:
                slot.signal = call.signal  # unconditionally, whatever a wrapper left
            try:
                if run.attempts:
                    # A wrapper returned while a next() it started on another
                    # thread is still dispatching: join it (quiescence).
                    run.join_attempts()
            finally:
                if watch is not None:
                    exit_watch(watch, entered, call)
        # Step 5: classification against the cancellation in force.
        if kind != FINAL:
            # In force: the dispatch signal's abort, else the caller's.
            in_force = run.cancel_signal
            if not in_force.aborted:
                in_force = call.signal
            if in_force.aborted:
                result, kind = classify(result, kind, in_force, run.body_invoked), FINAL
        run.result = result
        run.kind = kind
        return run

    # -- phase 3: steps 6-7 -------------------------------------------------

    def _complete(self, run: Run, *, waited: bool = False) -> ToolExecutionResult:
        """Steps 6-7: post-execute (unless skipped), caller cancellation over
        a success, ``finalize_content``, freezing, ``body_invoked``,
        observers (once). Returns the final result; never raises for hook
        faults. A ``BaseException`` that is not an ``Exception``
        (KeyboardInterrupt, SystemExit, ...) from post-execute or the
        finalizer makes a success ``ABORTED`` and is recorded on
        ``run.interrupt``. ``waited``: the call's dispatch settled before
        and it waited for its model-order turn (a batch); an abort that
        arrived during that wait does not replace its success
        (docs/contract.md#a1)."""
        if run.published:
            assert run.result is not None
            return run.result
        result = run.result
        if result is None:  # pragma: no cover - defensive: a phase was skipped
            result = failure("internal error: the call has no result", name="RuntimeError", code=None)
        signal = run.call.signal
        # Aborted while waiting for its turn: not this call's own time.
        waited_out = waited and signal.aborted
        view: ToolExecution | None = None  # built once for the hooks and the observers
        try:
            if not run.skip_post and run.hooks.post_execute:
                view = run.view
                result = self._post_execute(run, view, result)
            if signal.aborted and not waited_out:
                # The kind of what post-execute passed on, or of its own result.
                kind = run.kind if result is run.result else kind_of(result)
                if kind != FINAL:
                    result = classify(result, kind, signal, run.body_invoked)
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
        if run.killed or run.overrun_s is not None or run.report_meta:
            result = run.backend_meta(result)
        if result.body_invoked is not run.body_invoked:
            result = attrs.evolve(result, body_invoked=run.body_invoked)
        if run.journal is not None:
            result = run.journal.settle(result)  # committed before anyone sees it
        run.result = result
        run.published = True
        observers, watch = run.hooks.observers, run.watch
        if observers or watch is not None:
            run.watch = None
            if observers and view is None:
                view = run.view
            interrupt = notify_published(observers, view, watch, result)
            if run.interrupt is None:
                run.interrupt = interrupt
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

    def _check_open(self) -> None:
        """Raise ``RuntimeError`` when the registry is closed (and the caller
        is not one of its in-flight bodies)."""
        if self._closed and not on_worker_of(self):
            raise RuntimeError("ToolRegistry is closed: execute() after close() is not allowed")


def registered(registry: ToolRegistry) -> tuple[ToolDefinition, ...]:
    """The definitions registered on ``registry``, in registration order:
    one snapshot (one read of the copy-on-write map; a registration from
    another thread is wholly in it or wholly out of it). Package-internal
    (the command line's checks, the provider listings:
    docs/contract.md#a24)."""
    return tuple(registry._definitions.values())


def around_dispatch_hooks(registry: ToolRegistry) -> tuple[hook_types.AroundDispatch, ...]:
    """The around-dispatch wrappers installed on ``registry``, outermost
    first (a snapshot). Package-internal (the command line's checks)."""
    return registry._hooks.around
