"""One call as it passes the registry, and the dispatch of its body
(docs/contract.md#step-dispatch, docs/contract.md#step-classify,
docs/contract.md#backends).

``Run`` is private, mutable, and owned by the thread that runs the call's
pipeline (the caller of ``execute``, or a batch's dispatch thread for steps
4-5); the body's thread touches it only through ``ToolRunContext``
(``defer_context``, a nested ``dispatch``) while the pipeline waits for it.
Fields written by one phase and read by a later one are listed on the
class. A call takes no lock of its own on its way through, except the
registry's ``_idle`` condition when ``close()`` or a wrapper's join waits
for it; a first nested call and the overrun report take a module lock.

Guarantees of the dispatch (``Run.invoke``, the innermost ``next()``):

* Whether the body ran is decided by its backend, at one point (the thread
  backend's ``_Handoff.start()``); the run only reads the typed report
  (docs/backends.md) and records it in ``body_invoked``, the one record
  that decides ``ABORTED`` against ``ABORTED_BEFORE_DISPATCH`` and every
  result's ``body_invoked``.
* A started body is joined however long it takes, never raced or
  abandoned. On the main thread waits are sliced (``INTERRUPT_SLICE``) so
  a ``KeyboardInterrupt`` reaches it while blocked here; it aborts the
  dispatch signal and the wait goes on. Any other thread waits untimed
  where the dispatch allows it (``waits_untimed``), so waiting calls cost
  no CPU.
* The dispatch signal is ``any_of(caller, wrapper's exec.signal)``; it is
  closed as soon as the body settles, so no link stays on the caller's
  long-lived signal.
* A body that has not returned 1 s after its dispatch signal aborted is
  reported then, as a WARNING naming the tool and call id, while the
  caller still waits; one that returns more than 0.1 s after the abort is
  reported when it returns. Either way once per call
  (docs/contract.md#a21).
"""

from __future__ import annotations

import itertools
import logging
import threading
from _thread import get_ident
from typing import Any, Final, Literal, Protocol

import attrs

from .._backends.base import Backend, BodyReport, Dispatch, Error, ListeningBackend, NotInvoked, Value, WorkerLost
from .._backends.thread import enter_worker, leave_worker, worker_owners
from .._core.construct import RETYPE_IN_PLACE, frozen_copy, twin
from .._core.errors import AbortError, safe_str
from .._core.freeze import FrozenDict, freeze_with_height
from .._core.interrupts import INTERRUPT_SLICE, MAIN_IDENT, after_fork_in_child, interrupt_slice
from .._signal import AbortSignal, abort_owned, derive
from .._types.calls import (
    INVALID_ARGS,
    WORKER_LOST,
    ExecutionToken,
    ToolExecutionInput,
    ToolExecutionResult,
    ToolSuccess,
    aborted,
    exception_failure,
    failure,
)
from .._types.hooks import (
    AroundDispatch,
    Guard,
    PostExecuteHook,
    PreExecuteHook,
    ProgressObserver,
    ResultObserver,
    ToolDefinition,
)
from .._types.tools import SignalSlot, ToolExecution, ToolRunContext, frozen_deferred_context
from . import overrun
from .journaled import JournalCall
from .observer import watch_aborted
from .outcome import NULL_SUCCESS, check_success
from .progress import enqueue, post
from .trusted import trusted_view

_RunContextTwin: Final = twin(ToolRunContext)


class RegistryState(Protocol):
    """What a run reads and locks of the registry that made it (the
    registry implements it; ``run`` never imports the registry).

    ``_lock`` guards ``_bodies`` (the bodies in flight), ``_closed`` and
    ``_close_reason`` (the reason of ``close(abort=...)``, set before
    ``_closed``; ``None`` for a plain ``close()``); ``_idle`` (a condition
    on ``_lock``) is notified when a body settles, for ``close()``.
    ``_backend`` and ``_listening`` are fixed at construction."""

    _backend: Backend
    _listening: bool
    _lock: threading.Lock
    _idle: threading.Condition
    _bodies: set[object]
    _closed: bool
    _close_reason: object

    def execute(self, call: ToolExecutionInput) -> ToolExecutionResult: ...


__all__ = [
    "ABORT",
    "CLOSED_BEFORE_DISPATCH",
    "FINAL",
    "SUCCESS",
    "Hooks",
    "Kind",
    "Run",
    "classify",
    "closed_reason",
    "on_worker_of",
    "prepare_body_arguments",
]

_log: Final = logging.getLogger("dshtools")

CLOSED_BEFORE_DISPATCH: Final = "ToolRegistry closed before the call was dispatched"

# What cancellation in force does to a result (docs/contract.md#step-classify,
# docs/contract.md#precedence):
Kind = Literal["success", "abort", "final"]
SUCCESS: Final = "success"  # a success: cancellation in force makes it ABORTED
ABORT: Final = "abort"  # an AbortError (or a forced stop): cancellation makes it ABORTED
FINAL: Final = "final"  # any other failure, and every cancellation result: kept as it is

OVERRUN_REPORTED_S: Final = 0.1
"""Seconds: an overrun above this is reported (``meta["overrun_s"]`` and a WARNING)."""
OVERRUN_WARNING_S: Final = 1.0
"""Seconds after the abort at which a body that has not returned is reported while the caller waits."""

_CHILDREN_LOCK = threading.Lock()
_OVERRUN_LOCK = threading.Lock()


def _after_fork_in_child() -> None:
    # The locks may have been held by a thread that does not exist in the
    # child (docs/contract.md#a10).
    global _CHILDREN_LOCK, _OVERRUN_LOCK
    _CHILDREN_LOCK = threading.Lock()
    _OVERRUN_LOCK = threading.Lock()


after_fork_in_child(_after_fork_in_child)


def classify(result: ToolExecutionResult, kind: Kind, in_force: AbortSignal, invoked: bool) -> ToolExecutionResult:
    """The one rule of abort classification (docs/contract.md#step-classify,
    docs/contract.md#precedence):
    while cancellation is in force (``in_force`` aborted), a result of kind
    ``SUCCESS`` or ``ABORT`` becomes ``ABORTED`` when the body was invoked,
    else ``ABORTED_BEFORE_DISPATCH``, with ``in_force``'s reason; a
    ``FINAL`` one keeps its code. Which signal is in force is each phase's
    question: the dispatch signal for the body's own time, the caller's for
    the wrappers and post-execute, never an abort that arrived only while a
    settled call waited for its turn in a batch."""
    if kind == FINAL:
        return result
    return aborted(in_force.reason, invoked=invoked, additional_contexts=result.additional_contexts)


def kind_of(result: ToolExecutionResult) -> Kind:
    """The kind of a result the registry did not build (a hook's)."""
    return SUCCESS if isinstance(result, ToolSuccess) else FINAL


@attrs.frozen
class Hooks:
    """The hooks of a registry, snapshotted by each call at its start."""

    pre_execute: tuple[PreExecuteHook, ...] = ()
    guards: tuple[Guard, ...] = ()
    around: tuple[AroundDispatch, ...] = ()
    post_execute: tuple[PostExecuteHook, ...] = ()
    observers: tuple[ResultObserver, ...] = ()
    progress: tuple[ProgressObserver, ...] = ()


class _Attempt:
    """The dispatch signal's listener for one attempt (one innermost
    ``next()``): forwards the abort to the backend's withdrawal, if any,
    and hands the attempt to the overrun watch (``overrun.watch``), which
    calls ``_overdue`` 1 s later to report a body still running then.
    ``run`` and ``withdrawal`` are dropped (``None``) once the attempt's
    dispatch settled (``Run._run_body``); ``_overdue`` then does nothing.
    No ``__init__``: one is made per call."""

    __slots__ = ("run", "withdrawal")
    run: Run | None
    withdrawal: Any

    def __call__(self, signal: AbortSignal) -> None:
        withdrawal = self.withdrawal
        if withdrawal is not None:
            withdrawal(signal)
        run = self.run
        if run is not None:
            overrun.watch(self, OVERRUN_WARNING_S)
            observed = run.watch  # a call observer's: the abort this body sees
            if observed is not None:
                watch_aborted(observed, signal, run.call)

    def _overdue(self) -> None:
        run = self.run  # None once the attempt settled
        if run is not None and run.claim_overrun_log():
            _log.warning(
                "tool %r (call %r) has not returned %.1f s after its dispatch signal aborted; still waiting for it",
                run.call.name,
                run.call.call_id,
                OVERRUN_WARNING_S,
            )


class Run:
    """The private, mutable state of one call. ``execute_batch`` reads
    ``call``, ``result`` and ``interrupt``.

    ``body_invoked`` is the one record of whether the registry invoked the
    body (any attempt). ``body_result``/``body_kind`` are the last result
    the innermost ``next()`` returned and its kind; ``kind`` is the kind of
    ``result``."""

    __slots__ = (
        "_children",
        "_view",
        "arguments",
        "attempts",
        "body_arguments",
        "body_invoked",
        "body_kind",
        "body_result",
        "call",
        "cancel_signal",
        "definition",
        "drop_tool_contexts",
        "hooks",
        "interrupt",
        "joining",
        "journal",
        "killed",
        "kind",
        "overrun_logged",
        "overrun_s",
        "progress_latest",
        "progress_queued",
        "progress_sent",
        "published",
        "registry",
        "report_meta",
        "result",
        "root_call_id",
        "settled",
        "skip_post",
        "token",
        "tool_contexts",
        "watch",
    )

    def __init__(
        self, registry: RegistryState, call: ToolExecutionInput, definition: ToolDefinition | None, hooks: Hooks
    ) -> None:
        self.registry = registry
        self.call = call
        self.definition = definition
        self.hooks = hooks
        self.token = ExecutionToken()
        self.root_call_id = call.root_call_id if call.root_call_id is not None else call.call_id
        self.arguments: Any = None
        # What the body receives as ``args`` when the definition prepares
        # its arguments (a typed tool's typed values); else ``arguments``.
        self.body_arguments: Any = None
        self._view: ToolExecution | None = None
        self.result: ToolExecutionResult | None = None
        self.kind: Kind = FINAL
        self.body_invoked = False
        self.body_result: ToolExecutionResult | None = None
        self.body_kind: Kind = FINAL
        self.skip_post = False
        # A KeyboardInterrupt (or, from a hook, any BaseException that is not
        # an Exception) to re-raise once the call's result is published.
        self.interrupt: BaseException | None = None
        self.cancel_signal: AbortSignal = call.signal
        self.tool_contexts: list[FrozenDict] = []
        self.drop_tool_contexts = False
        self.settled = False
        self.published = False
        # Dispatch attempts (innermost next() calls) not yet returned; a
        # wrapper may call next() more than once, even concurrently.
        self.attempts: set[object] = set()
        self.joining = False
        self._children: itertools.count[int] | None = None  # made by the first nested dispatch
        self.killed = False  # a backend killed the body's process (docs/contract.md#forced-stop)
        self.overrun_s: float | None = None  # seconds the body ran on after its signal aborted
        self.report_meta: dict[str, object] | None = None  # a backend's own entries for the final meta
        self.overrun_logged = False
        # What a call observer watches this call with (observer.CallWatch), or None.
        self.watch: Any = None
        # The body's progress (progress.py): its latest update, whether the
        # call is queued for delivery, the update last delivered.
        self.progress_latest: Any = None
        self.progress_queued = False
        self.progress_sent: Any = None
        # The call's journal key (journaled.JournalCall) when the registry has a journal.
        self.journal: JournalCall | None = None

    @property
    def view(self) -> ToolExecution:
        """The read-only view for hooks and observers, built on first use
        (a registry without hooks never builds it)."""
        view = self._view
        if view is None:
            view = self._view = trusted_view(self)
        return view

    def settle(self, result: ToolExecutionResult, *, skip_post: bool, kind: Kind = FINAL) -> None:
        self.result = result
        self.kind = kind
        self.skip_post = skip_post

    def note_report(self, report: BodyReport) -> None:
        """Record what a backend reported beside the outcome: contexts the
        body deferred out of process, a kill, an overrun (added to ``meta``
        when the result is published, so a wrapper's own failure keeps them)."""
        for context in report.contexts:
            frozen, _ = freeze_with_height(context)
            self.tool_contexts.append(frozen)
        if report.killed:
            self.killed = True
        if report.overrun_s is not None:
            self.overrun_s = max(self.overrun_s or 0.0, report.overrun_s)
        if report.meta:
            self.report_meta = {**(self.report_meta or {}), **report.meta}

    def claim_overrun_log(self) -> bool:
        """True the first time it is asked: the overrun WARNING is logged once per call."""
        with _OVERRUN_LOCK:
            if self.overrun_logged:
                return False
            self.overrun_logged = True
            return True

    def backend_meta(self, result: ToolExecutionResult) -> ToolExecutionResult:
        """``result`` with the backend's own ``meta`` entries,
        ``meta["killed"]`` and ``meta["overrun_s"]`` (an overrun above
        0.1 s, also logged as a WARNING unless the 1 s watch did),
        whichever hook built it (docs/contract.md#backends,
        docs/contract.md#a21)."""
        extra: dict[str, object] = dict(self.report_meta) if self.report_meta else {}
        if self.killed:
            extra["killed"] = True
        overrun = self.overrun_s
        if overrun is not None and overrun > OVERRUN_REPORTED_S:
            extra["overrun_s"] = overrun
            if self.claim_overrun_log():
                _log.warning(
                    "tool %r (call %r) returned %.3f s after its dispatch signal aborted",
                    self.call.name,
                    self.call.call_id,
                    overrun,
                )
        if not extra:
            return result
        return attrs.evolve(result, meta={**result.meta, **extra})

    # -- the innermost next(): steps 4-5 for one attempt ----------------------

    def invoke(self, slot: SignalSlot | None) -> ToolExecutionResult:
        """The innermost ``next()``: fuse the signals, submit to the tool's
        backend, join. Records the result and its kind in
        ``body_result``/``body_kind``."""
        registry = self.registry
        call = self.call
        caller = call.signal
        outer = caller if slot is None else slot.signal
        definition = self.definition
        assert definition is not None
        own = definition.backend
        if own is None:
            backend: Backend = registry._backend
            listening = registry._listening
        else:
            backend = own
            listening = isinstance(own, ListeningBackend)
        attempt = _Attempt()
        attempt.run = self
        # A listening backend's withdrawal listens on the dispatch signal
        # from its birth (one lock round trip); another backend adds what it
        # needs in submit().
        withdrawal = backend.make_withdrawal() if listening else None  # type: ignore[attr-defined]
        attempt.withdrawal = withdrawal
        # The registry aborts `fused` itself on KeyboardInterrupt, so signals
        # a body derives from it must link to it (aborts_directly).
        fused = derive([caller] if outer is caller else [caller, outer], attempt, aborts_directly=True)
        self.cancel_signal = fused
        if fused.aborted:
            fused.close()
            result: ToolExecutionResult = aborted(fused.reason, invoked=False)
            self.body_result, self.body_kind = result, FINAL
            return result
        # The body's ``run``, built through a twin (dshtools/_core/construct.py):
        # every field is a value the registry produced itself, so there is
        # nothing to convert or check. Written out here, on every call.
        ctx = _RunContextTwin()
        ctx.token = self.token
        ctx.call_id = call.call_id
        ctx.root_call_id = self.root_call_id
        ctx.name = call.name
        ctx.arguments = self.arguments
        ctx.agent = call.agent
        ctx.parent = call.parent
        ctx.definition = definition
        ctx.signal = fused
        ctx._run = self
        if RETYPE_IN_PLACE:
            ctx.__class__ = ToolRunContext
        else:
            ctx = frozen_copy(ctx, ToolRunContext)
        bodies = registry._bodies
        # One attempt per next() call (a wrapper may retry or hedge): its run
        # context. Registered before the closed check (close() sets
        # `_closed`, then reads `_bodies`): either close() waits for this
        # attempt, or this call sees `_closed` and never dispatches.
        bodies.add(ctx)
        self.attempts.add(ctx)
        try:
            if registry._closed and not on_worker_of(registry):
                # close() ran while this call was in admission: its backend
                # may be gone. The body never runs; nothing was dispatched.
                result = aborted(closed_reason(registry), invoked=False)
                self.body_result, self.body_kind = result, FINAL
                attempt.run = None
                return result
            if slot is not None:
                slot.signal = fused
            journal = self.journal
            if journal is not None and not journal.claimed:
                # The claim is committed before the body is submitted: a
                # crash from here on leaves the key claimed, never silent.
                refused = journal.claim(fused, self.arguments)
                if refused is not None:
                    self.body_result, self.body_kind = refused, FINAL
                    attempt.run = None
                    return refused
            return self._run_body(backend, listening, definition, ctx, fused, attempt)
        finally:
            # Bookkeeping first, each step reached even if an interrupt lands
            # in the one before: a stale attempt would block close() and
            # join_attempts forever.
            try:
                try:
                    bodies.discard(ctx)
                finally:
                    self.attempts.discard(ctx)
                if (registry._closed and not bodies) or self.joining:
                    # close() or join_attempts may be waiting; a missed
                    # notify costs them one slice.
                    with registry._lock:
                        registry._idle.notify_all()
            finally:
                if slot is not None:
                    slot.signal = outer
                # Detaches from the caller's signal; a backend's listeners go
                # with the closed signal (it can no longer abort).
                fused.close()

    def _run_body(
        self,
        backend: Backend,
        listening: bool,
        definition: ToolDefinition,
        ctx: ToolRunContext,
        fused: AbortSignal,
        attempt: _Attempt,
    ) -> ToolExecutionResult:
        """Submit the body once, wait until its dispatch settles, and return
        the body's outcome as the result the innermost ``next()`` returns,
        classified against the dispatch signal (so wrappers see ``ABORTED``
        for a success or ``AbortError`` while it is aborted; a tool failure
        stays). A ``KeyboardInterrupt`` anywhere aborts the dispatch signal
        and the wait goes on; it is re-raised once the dispatch settled."""
        interrupt: KeyboardInterrupt | None = None
        dispatch: Dispatch | None = None
        submitted = False
        # `interrupt_slice()`, inline: this runs on every call.
        step = INTERRUPT_SLICE if get_ident() == MAIN_IDENT[0] else None
        try:
            while True:
                try:
                    if not submitted:
                        submitted = True
                        args = self.arguments if definition.prepare_arguments is None else self.body_arguments
                        try:
                            if listening:
                                dispatch = backend.submit_listening(  # type: ignore[attr-defined]
                                    definition.execute, args, ctx, attempt.withdrawal
                                )
                            else:
                                dispatch = backend.submit(definition.execute, args, ctx)
                        except Exception as exc:
                            # The backend refused: the body was not and will
                            # not be started.
                            report = BodyReport(outcome=NotInvoked(exc))
                            break
                        if step is None and not getattr(dispatch, "waits_untimed", False):
                            step = INTERRUPT_SLICE  # a backend whose wait takes seconds only
                    if interrupt is not None:
                        # Also runs listeners a second interrupt left pending.
                        abort_owned(fused, interrupt)
                    if dispatch is None:
                        # An interrupt inside submit() lost the handle: the
                        # abort above withdrew whatever the backend had queued.
                        report = BodyReport(outcome=NotInvoked())
                        break
                    if dispatch.wait(step):  # type: ignore[arg-type]  # None: `waits_untimed`
                        report = dispatch.report()
                        break
                except KeyboardInterrupt as ki:
                    # Abort the dispatch signal and keep joining: never abandon.
                    if interrupt is None:
                        interrupt = ki
        finally:
            # The attempt's dispatch settled: the overrun watch, if it holds
            # the attempt, finds nothing to report, and the listener lets go
            # of the run and the hand-off (no reference cycle through them,
            # nothing kept alive by a watch until it comes due).
            attempt.run = None
            attempt.withdrawal = None
        outcome = report.outcome
        if interrupt is not None:
            if type(outcome) is Value or type(outcome) is Error:
                self.body_invoked = True
            self.interrupt = interrupt
            self.note_report(report)
            raise interrupt
        if report.contexts or report.killed or report.overrun_s is not None or report.meta:
            self.note_report(report)
        result: ToolExecutionResult
        kind: Kind
        if type(outcome) is Value:
            self.body_invoked = True
            value = outcome.value
            content = report.content
            if value is None and content is None and definition.output_schema is None and definition.render is None:
                result, kind = NULL_SUCCESS, SUCCESS  # "done, nothing to say": never varies
            else:
                result = check_success(self.call.name, definition, value, content)
                kind = SUCCESS if isinstance(result, ToolSuccess) else FINAL
        elif type(outcome) is Error:
            self.body_invoked = True
            error = outcome.error
            if isinstance(error, WorkerLost):
                result, kind = failure(safe_str(error), name="WorkerLost", code=WORKER_LOST, body_invoked=True), FINAL
            else:
                result = exception_failure(error, body_invoked=True)
                if not isinstance(error, AbortError):
                    # The model gets the text and the class name; whoever
                    # debugs the tool gets the traceback.
                    _log.debug("tool %r (call %r) raised", self.call.name, self.call.call_id, exc_info=error)
                # A forced stop follows an abort: it is cancellation, as an
                # AbortError is.
                kind = ABORT if report.killed or isinstance(error, AbortError) else FINAL
        else:
            # Not invoked: withdrawn by the abort, or refused/dropped/failed
            # by the backend (its own error when it gave one).
            refusal: object = outcome.error if isinstance(outcome, NotInvoked) else None
            if fused.aborted:
                refusal = fused.reason
            elif refusal is None:
                refusal = RuntimeError("the backend shut down before the call was dispatched")
            result, kind = aborted(refusal, invoked=False), FINAL
        if kind != FINAL and fused.aborted:
            result, kind = classify(result, kind, fused, True), FINAL
        self.body_result, self.body_kind = result, kind
        return result

    def join_attempts(self) -> None:
        """Wait until every attempt a wrapper started has returned (a
        wrapper may return while a ``next()`` it started on another thread
        still dispatches). A ``KeyboardInterrupt`` is recorded and re-raised
        once they all returned."""
        # Dekker-style handshake with invoke's finally: we set `joining`
        # then read `attempts`; it discards its attempt then reads `joining`.
        # Either it sees `joining` and notifies, or we see the set empty.
        self.joining = True
        registry = self.registry
        interrupt: KeyboardInterrupt | None = None
        with registry._lock:
            while self.attempts:
                try:
                    registry._idle.wait(interrupt_slice())
                except KeyboardInterrupt as ki:  # keep joining: never abandon
                    interrupt = interrupt or ki
        if interrupt is not None:
            if self.interrupt is None:
                self.interrupt = interrupt
            raise interrupt

    # -- used by ToolRunContext (the body's thread) --

    def defer_context(self, context: object) -> None:
        self.tool_contexts.append(frozen_deferred_context(context, self.settled))

    # ``run.report_progress(progress, total, message)``: the function
    # itself, one call frame less on a body's hot path
    # (docs/policies.md#progress).
    report_progress = post

    # The call's delivery, when ``report_progress``'s inline path stored an
    # update and the call is not queued (``ToolRunContext.report_progress``).
    queue_progress = enqueue

    def dispatch(
        self, name: str, arguments: object, call_id: str | None, signal: AbortSignal, parent: ExecutionToken
    ) -> ToolExecutionResult:
        if self.settled:
            raise RuntimeError("run.dispatch() after the tool body settled: nested calls belong inside the body")
        if call_id is None:
            children = self._children
            if children is None:
                # A body's threads may make their first nested calls at once:
                # one counter per run, made under a lock (rare: nesting only).
                with _CHILDREN_LOCK:
                    children = self._children
                    if children is None:
                        children = self._children = itertools.count(1)
            call_id = f"{self.call.call_id}:{next(children)}"
        child = ToolExecutionInput(
            call_id,
            name,
            arguments,
            signal,
            agent=self.call.agent,
            parent=parent,
            root_call_id=self.root_call_id,
            session=self.call.session,
        )
        # The parent body occupies a worker and waits for this call, possibly
        # from a helper thread of its own: run the nested body inline in this
        # thread, never queued behind the parent (with max_workers=1 it would
        # wait forever).
        enter_worker(self)
        try:
            return self.registry.execute(child)
        finally:
            leave_worker()


def closed_reason(registry: RegistryState) -> object:
    """The reason a call of a closed registry settles with before its
    dispatch: ``close(abort=...)``'s reason, else a ``RuntimeError``."""
    reason = registry._close_reason
    return RuntimeError(CLOSED_BEFORE_DISPATCH) if reason is None else reason


def on_worker_of(registry: RegistryState) -> bool:
    """The current thread runs (or dispatches for) one of ``registry``'s bodies."""
    owners = worker_owners()
    if not owners:
        return False
    bodies = registry._bodies
    return any(owner in bodies or (isinstance(owner, Run) and owner.registry is registry) for owner in owners)


def prepare_body_arguments(run: Run, definition: ToolDefinition) -> bool:
    """Step 1's last part: the definition's ``prepare_arguments`` turns the
    validated arguments into the body's (``run.body_arguments``); a
    ``ValueError`` (or any fault of it) settles the call ``INVALID_ARGS``,
    the body not invoked. ``False`` when the call is settled."""
    prepare = definition.prepare_arguments
    assert prepare is not None
    try:
        run.body_arguments = prepare(run.arguments)
    except Exception as exc:
        run.settle(
            failure("invalid arguments: " + safe_str(exc), name="InvalidArgumentsError", code=INVALID_ARGS),
            skip_post=True,
        )
        return False
    return True
