"""``ToolRegistry``: the policy pipeline of one call (docs/contract.md §3, §7).

Guarantees:

* ``execute`` publishes **exactly one** result per call, to the caller and
  to every result observer, and only after the body (if it ever started)
  has returned: a started body is joined however long it takes, never
  raced or abandoned. Tool, policy and input faults become failure
  results; ``execute`` raises only for misuse (a non-call argument,
  ``RuntimeError`` after ``close()``) and re-raises ``KeyboardInterrupt``
  after publishing.
* "Body invoked" is decided at one point: the worker's trampoline claims
  the call's hand-off (``_Handoff``: one atomic ``dict.setdefault``), then
  re-checks the dispatch-scoped signal and only then records the
  invocation and calls the body. A call still queued when that signal
  aborts is withdrawn (the withdrawal claims the hand-off first, from the
  abort listener) and reports ``ABORTED_BEFORE_DISPATCH`` (decision 0016).
* The dispatch-scoped signal is ``any_of(caller, wrapper's exec.signal)``;
  it is closed as soon as the body settles, so no link stays on the
  caller's long-lived signal (``listener_count`` back to its value before
  the call, field case B03).
* A nested call made from a registry worker thread (any registry's) runs
  its body inline in that worker, so a full pool cannot deadlock (B17).
* The registry never injects exceptions into worker threads and uses no
  process signals; cancellation is cooperative, through the signal only.

Threads: ``execute`` runs steps 1-3 and 6-7 and the around-dispatch
waterfall in the calling thread; bodies run on the executor (default: an
own ``ThreadPoolExecutor`` of 32 workers, suited to I/O-bound tools).
Waits are sliced (0.25 s) so ``KeyboardInterrupt`` reaches a main thread
blocked in ``execute`` promptly on every platform (B19).

Layout: step 3 (admission) lives in ``_admission.py``; checking and
building results (output validation, content blocks, contexts,
post-execute decisions, ``finalize_content``) in ``_outcome.py``; this
module holds the registry, the phases and dispatch/joining.

Private phase API (used by ``execute_batch``): ``execute(call)`` is
``_complete(_dispatch(_begin(call)))``, where a ``KeyboardInterrupt``
raised by ``_dispatch`` leaves the run holding its ``ABORTED`` (or
``ABORTED_BEFORE_DISPATCH``) result, so ``_complete`` can still publish it
before the interrupt is re-raised; see ``execute``.
"""

from __future__ import annotations

import itertools
import threading
from _thread import get_ident
from collections.abc import Callable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from types import TracebackType
from typing import Any, Final, Literal, TypeVar

import attrs

from ._admission import HookReturnError, admit, describe
from ._errors import AbortError, report_unraisable, safe_repr
from ._freeze import FreezeError, FrozenDict, freeze_with_height
from ._hooks import (
    Accept,
    Allow,
    ApprovalRequest,
    Approver,
    AroundDispatch,
    Ask,
    Block,
    Deny,
    Guard,
    PostExecuteDecision,
    PostExecuteHook,
    PreExecuteHook,
    ResultObserver,
    ToolDefinition,
)
from ._interop import INVALID_CALL, InvalidCall
from ._outcome import apply_post_decision, check_result, check_success, finalize, invalid_output
from ._signal import AbortSignal, abort_owned, derive
from ._types import (
    INVALID_ARGS,
    ExecutionToken,
    ToolDispatchExecution,
    ToolExecution,
    ToolExecutionInput,
    ToolExecutionResult,
    ToolFailure,
    ToolRunContext,
    ToolSuccess,
    _run_context,
    _SignalSlot,
    aborted,
    exception_failure,
    failure,
)

__all__ = [
    "DEFAULT_MAX_WORKERS",
    "Accept",
    "Allow",
    "ApprovalRequest",
    "Ask",
    "Block",
    "Deny",
    # defined in _hooks, re-exported here (the registry's vocabulary)
    "ToolDefinition",
    "ToolRegistry",
]

DEFAULT_MAX_WORKERS: Final = 32
_SLICE: Final = 0.25
_T = TypeVar("_T")


# Threads currently running registry work (a body, a function given to
# _submit, or a nested run.dispatch): the registries they work for, innermost
# last. Dispatch from such a thread runs the body inline (any registry's
# worker: registries may share one executor); close() and the closed check
# look only for their own registry.
class _WorkerState(threading.local):
    # A class-level default: on a thread that never ran registry work,
    # reading `stack` finds None here instead of raising (and catching)
    # AttributeError, which is what `getattr(local, name, default)` cost on
    # every execute() from a plain thread (~0.9 us of ~1 us for the check).
    stack: list[ToolRegistry] | None = None


_tls = _WorkerState()


def _stack() -> list[ToolRegistry]:
    stack: list[ToolRegistry] | None = getattr(_tls, "stack", None)
    if stack is None:
        stack = _tls.stack = []
    return stack


def _on_worker() -> bool:
    return bool(getattr(_tls, "stack", None))


def _on_worker_of(registry: ToolRegistry) -> bool:
    stack: list[ToolRegistry] | None = getattr(_tls, "stack", None)
    return bool(stack) and registry in stack  # type: ignore[operator]


def _enter_worker(registry: ToolRegistry) -> None:
    _stack().append(registry)


def _leave_worker() -> None:
    _stack().pop()


_CLOSED_BEFORE_DISPATCH: Final = "ToolRegistry closed before the call was dispatched"


_ACCEPT: Final = Accept()
_NOT_INVOKED: Final = object()


_WORKER: Final = object()  # the claim's value when the worker won it


class _Handoff:
    """One body's hand-off between the calling thread and a worker.

    ``claim`` gets one entry, by ``dict.setdefault`` (one atomic step): the
    first to insert decides the call - the worker (``_WORKER``: the body
    runs) or a withdrawal (a fresh token: it never runs) - and the entry
    stays, so the decision can be re-read. ``done`` is acquired at creation
    and released once: by the worker after the body returned (``finished``
    is set first) or by the withdrawal that won. ``settled()`` re-reads the
    decision, so a ``KeyboardInterrupt`` that lands just after the waiter
    consumed ``done`` (or between a withdrawal's claim and its release)
    cannot leave the waiter blocked on a lock nobody will release again.
    ``outcome`` is ``_NOT_INVOKED`` or ``(ok, value)``."""

    __slots__ = ("claim", "done", "finished", "outcome")

    def __init__(self) -> None:
        self.claim: dict[int, object] = {}
        self.done = threading.Lock()
        self.done.acquire()
        self.outcome: Any = _NOT_INVOKED
        self.finished = False

    def withdraw(self, _signal: object = None) -> None:
        """Withdraw a call still queued (also the fused signal's listener);
        a no-op once the worker claimed it."""
        mine = object()
        if self.claim.setdefault(0, mine) is mine:
            self.done.release()

    def settled(self) -> bool:
        """The body returned, or the call was withdrawn before it started."""
        winner = self.claim.get(0)
        return self.finished or (winner is not None and winner is not _WORKER)


@attrs.frozen
class _Hooks:
    pre_execute: tuple[PreExecuteHook, ...] = ()
    guards: tuple[Guard, ...] = ()
    around: tuple[AroundDispatch, ...] = ()
    post_execute: tuple[PostExecuteHook, ...] = ()
    observers: tuple[ResultObserver, ...] = ()


class _Run:
    """The private, mutable state of one call. The lead's batch reads
    ``call``, ``definition``, ``result``, ``body_invoked`` and
    ``interrupt``."""

    __slots__ = (
        "_children",
        "_view",
        "arguments",
        "attempts",
        "body_abort",
        "body_invoked",
        "body_success",
        "body_thread",
        "call",
        "cancel_signal",
        "definition",
        "drop_tool_contexts",
        "hooks",
        "interrupt",
        "joining",
        "published",
        "registry",
        "result",
        "root_call_id",
        "settled",
        "skip_post",
        "submit_error",
        "token",
        "tool_contexts",
    )

    def __init__(self, registry: ToolRegistry, call: ToolExecutionInput, hooks: _Hooks) -> None:
        self.registry = registry
        self.call = call
        self.definition: ToolDefinition | None = registry._definitions.get(call.name)
        self.hooks = hooks
        self.token = ExecutionToken()
        self.root_call_id = call.root_call_id if call.root_call_id is not None else call.call_id
        self.arguments: Any = None
        self._view: ToolExecution | None = None
        self.result: ToolExecutionResult | None = None
        self.body_invoked = False
        self.skip_post = False
        self.interrupt: KeyboardInterrupt | None = None
        self.cancel_signal: AbortSignal = call.signal
        self.tool_contexts: list[FrozenDict] = []
        self.drop_tool_contexts = False
        self.body_success: ToolSuccess | None = None
        self.body_abort: ToolFailure | None = None
        self.settled = False
        self.published = False
        # Dispatch attempts (innermost next() calls) not yet returned; a
        # wrapper may call next() more than once, even concurrently.
        self.attempts: set[object] = set()
        self.joining = False
        self._children = itertools.count(1)
        self.body_thread = 0  # threading.get_ident() of the thread that ran the body
        self.submit_error: BaseException | None = None

    @property
    def view(self) -> ToolExecution:
        """The read-only view for hooks and observers, built on first use
        (a registry without hooks never builds it)."""
        view = self._view
        if view is None:
            call = self.call
            view = self._view = ToolExecution(
                token=self.token,
                call_id=call.call_id,
                root_call_id=self.root_call_id,
                name=call.name,
                arguments=self.arguments,
                agent=call.agent,
                parent=call.parent,
                definition=self.definition,
                signal=call.signal,
            )
        return view

    def settle(self, result: ToolExecutionResult, *, skip_post: bool) -> None:
        self.result = result
        self.skip_post = skip_post

    # -- used by ToolRunContext (the body's thread) --

    def defer_context(self, context: object) -> None:
        if self.settled:
            raise RuntimeError("defer_context() after the tool body settled")
        if not isinstance(context, dict):
            raise TypeError(f"a deferred context must be a JSON object (dict), not {type(context).__name__}")
        frozen, _ = freeze_with_height(context)
        self.tool_contexts.append(frozen)

    def dispatch(
        self, name: str, arguments: object, call_id: str | None, signal: AbortSignal, parent: ExecutionToken
    ) -> ToolExecutionResult:
        if self.settled:
            raise RuntimeError("run.dispatch() after the tool body settled: nested calls belong inside the body")
        child_id = call_id if call_id is not None else f"{self.call.call_id}:{next(self._children)}"
        child = ToolExecutionInput(
            child_id, name, arguments, signal, agent=self.call.agent, parent=parent, root_call_id=self.root_call_id
        )
        # The parent body occupies a worker and waits for this call, possibly
        # from a helper thread of its own: run the nested body inline in this
        # thread, never queued behind the parent (B17 with max_workers=1).
        _enter_worker(self.registry)
        try:
            return self.registry.execute(child)
        finally:
            _leave_worker()


class ToolRegistry:
    """Registered tools, their policies, and the executor their bodies run on.

    ``ToolRegistry(*, max_workers=None, executor=None, approver=None)``:
    without ``executor`` the registry owns a ``ThreadPoolExecutor`` of
    ``max_workers`` (default ``DEFAULT_MAX_WORKERS`` = 32) and shuts it down
    in ``close()``; a supplied executor is used as is and never shut down
    (``close()`` then waits for this registry's in-flight bodies only).
    Giving both raises ``ValueError``. Hook registration and ``execute`` are
    thread-safe; each call snapshots the hooks at its start. Source:
    docs/contract.md §3.
    """

    def __init__(
        self,
        *,
        max_workers: int | None = None,
        executor: Executor | None = None,
        approver: Approver | None = None,
    ) -> None:
        if executor is not None and max_workers is not None:
            raise ValueError("give max_workers or executor, not both")
        if max_workers is not None and (isinstance(max_workers, bool) or not isinstance(max_workers, int)):
            raise TypeError(f"max_workers must be an int, not {type(max_workers).__name__}")
        if max_workers is not None and max_workers < 1:
            raise ValueError(f"max_workers must be >= 1, got {max_workers}")
        if executor is not None and not isinstance(executor, Executor):
            raise TypeError(f"executor must be a concurrent.futures.Executor, not {type(executor).__name__}")
        if approver is not None and not callable(approver):
            raise TypeError(f"approver must be callable, not {type(approver).__name__}")
        self._owns_executor = executor is None
        self._executor: Executor = executor or ThreadPoolExecutor(
            max_workers=max_workers or DEFAULT_MAX_WORKERS, thread_name_prefix="dshtools-tool"
        )
        self._approver = approver
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        # Runs whose body is submitted or running (set.add/discard are atomic
        # under the GIL: no lock on the hot path; close() waits on _idle).
        self._bodies: set[object] = set()  # dispatch attempts in flight
        self._closed = False
        self._definitions: dict[str, ToolDefinition] = {}
        self._hooks = _Hooks()

    # ------------------------------------------------------------ registration

    def register(self, definition: ToolDefinition) -> Callable[[], None]:
        """Add a tool. Returns an idempotent ``unregister()``. Raises
        ``TypeError`` for a non-``ToolDefinition``, ``ValueError`` for a name
        already registered."""
        if not isinstance(definition, ToolDefinition):
            raise TypeError(f"register() takes a ToolDefinition, not {type(definition).__name__}")
        with self._lock:
            if definition.name in self._definitions:
                raise ValueError(f"a tool named {definition.name!r} is already registered")
            # Copy-on-write: a call's definition lookup never sees a half-update.
            defs = dict(self._definitions)
            defs[definition.name] = definition
            self._definitions = defs

        def unregister() -> None:
            with self._lock:
                if self._definitions.get(definition.name) is definition:
                    defs = dict(self._definitions)
                    del defs[definition.name]
                    self._definitions = defs

        return unregister

    def get(self, name: str) -> ToolDefinition | None:
        """The definition registered under ``name``, or ``None``."""
        return self._definitions.get(name)

    def schemas(self) -> list[dict[str, Any]]:
        """``[{"name", "description", "parameters"}, ...]`` in registration
        order, as fresh mutable data."""
        return [d.schema() for d in self._definitions.values()]

    def _add(self, kind: str, fn: object) -> Callable[[], None]:
        if not callable(fn):
            raise TypeError(f"{kind} hook must be callable, not {type(fn).__name__}")
        with self._lock:
            added: dict[str, Any] = {kind: getattr(self._hooks, kind) + (fn,)}
            self._hooks = attrs.evolve(self._hooks, **added)
        removed = False

        def unregister() -> None:
            nonlocal removed
            with self._lock:
                if removed:
                    return
                removed = True
                current: tuple[object, ...] = getattr(self._hooks, kind)
                for i in range(len(current) - 1, -1, -1):
                    if current[i] is fn:
                        changes: dict[str, Any] = {kind: current[:i] + current[i + 1 :]}
                        self._hooks = attrs.evolve(self._hooks, **changes)
                        return

        return unregister

    def add_pre_execute(self, fn: PreExecuteHook) -> Callable[[], None]:
        """``fn(exec, next) -> Allow() | Deny(reason) | Ask(reason=None)``;
        first registered runs outermost. Returns ``unregister()``."""
        return self._add("pre_execute", fn)

    def add_guard(self, fn: Guard) -> Callable[[], None]:
        """``fn(exec) -> str | None``: a string denies (final)."""
        return self._add("guards", fn)

    def add_around_dispatch(self, fn: AroundDispatch) -> Callable[[], None]:
        """``fn(exec: ToolDispatchExecution, next) -> result``; may replace
        ``exec.signal`` (and must restore it) or return without ``next()``."""
        return self._add("around", fn)

    def add_post_execute(self, fn: PostExecuteHook) -> Callable[[], None]:
        """``fn(exec, result, next) -> Accept(...) | Block(...)``."""
        return self._add("post_execute", fn)

    def add_result_observer(self, fn: ResultObserver) -> Callable[[], None]:
        """``fn(exec, result) -> None``: sees each call's frozen final result
        exactly once; an exception goes to ``sys.unraisablehook``."""
        return self._add("observers", fn)

    def execution_mode(self, call: ToolExecutionInput) -> Literal["parallel", "exclusive"]:
        """``"parallel"`` when the tool's ``is_concurrency_safe(args)``
        returns exactly ``True`` for the frozen arguments, else
        ``"exclusive"`` (unknown tool, bad arguments, a raising predicate)."""
        definition = self._definitions.get(call.name)
        if definition is None or definition.is_concurrency_safe is None:
            return "exclusive"
        try:
            args, _ = freeze_with_height(call.arguments)
            return "parallel" if definition.is_concurrency_safe(args) is True else "exclusive"
        except Exception:
            return "exclusive"

    # ------------------------------------------------------------- lifecycle

    def close(self) -> None:
        """Refuse new calls, then wait for every in-flight body to return
        (and shut the own executor down). Idempotent. A nested call made by
        a body still running is allowed to finish. Raises ``RuntimeError``
        when called from a registry worker (it would wait for itself)."""
        if _on_worker_of(self):
            raise RuntimeError("ToolRegistry.close() called from a tool body would wait for that body forever")
        # Not "already closed" by the flag alone: a close() interrupted by
        # Ctrl-C while waiting left `_closed` set, and the next one must
        # still wait for the bodies and shut the executor down.
        with self._lock:
            self._closed = True
            while self._bodies:
                self._idle.wait(_SLICE)
        if self._owns_executor:
            self._executor.shutdown(wait=True)  # idempotent

    def __enter__(self) -> ToolRegistry:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

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
        except KeyboardInterrupt:
            # The run holds its cancellation result; publish it, then re-raise.
            self._complete(run)
            raise
        result = self._complete(run)
        if run.interrupt is not None:  # arrived during post-execute/observers
            raise run.interrupt
        return result

    # -- phase 1: steps 1-3 -------------------------------------------------

    def _begin(self, call: ToolExecutionInput, *, allow_closed: bool = False) -> _Run:
        """Steps 1-3. Never raises for faults; a ``KeyboardInterrupt`` during
        step 3 is recorded on ``run.interrupt`` (with an
        ``ABORTED_BEFORE_DISPATCH`` result) and re-raised by ``_dispatch``.
        With ``allow_closed`` (a batch that started before ``close()``), a
        closed registry settles the call ``ABORTED_BEFORE_DISPATCH`` instead
        of raising, so the batch still publishes one result per call."""
        if not isinstance(call, ToolExecutionInput):
            raise TypeError(f"execute() takes a ToolExecutionInput, not {type(call).__name__}")
        if not allow_closed:
            self._check_open()
        run = _Run(self, call, self._hooks)
        if allow_closed and self._closed and not _on_worker_of(self):
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
        if definition is not None:
            problems = definition._parameters_validator.problems(run.arguments, height)
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
        try:
            admit(run, self._approver)
        except KeyboardInterrupt as ki:
            run.interrupt = ki
            run.settle(aborted(ki, invoked=False), skip_post=True)
        return run

    # -- phase 2: steps 4-5 -------------------------------------------------

    def _dispatch(self, run: _Run) -> _Run:
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
        slot = _SignalSlot(call.signal)
        around = run.hooks.around
        # The view exists only for wrappers (none: the hot path skips it).
        view = (
            ToolDispatchExecution(
                token=run.token,
                call_id=call.call_id,
                root_call_id=run.root_call_id,
                name=call.name,
                arguments=run.arguments,
                agent=call.agent,
                parent=call.parent,
                definition=run.definition,
                slot=slot,
            )
            if around
            else None
        )

        def call_at(i: int) -> ToolExecutionResult:
            if run.settled:
                raise RuntimeError("next() called after the around-dispatch waterfall settled")
            if i == len(around):
                return self._invoke(run, slot)
            fn = around[i]
            r = fn(view, lambda: call_at(i + 1))  # type: ignore[arg-type]
            if not isinstance(r, (ToolSuccess, ToolFailure)):
                raise HookReturnError(
                    f"around-dispatch hook {describe(fn)} returned {type(r).__name__}, expected ToolSuccess or ToolFailure"
                )
            return r

        try:
            # No wrapper: the innermost next() directly (no closure frame).
            result = call_at(0) if around else self._invoke(run, slot)
        except KeyboardInterrupt as ki:
            if run.interrupt is None:
                run.interrupt = ki
            signal = run.cancel_signal
            reason = signal.reason if signal.aborted else ki
            run.settle(aborted(reason, invoked=run.body_invoked), skip_post=True)
            raise
        except HookReturnError as exc:
            run.settle(invalid_output(call.name, str(exc)), skip_post=False)
            return run
        except Exception as exc:
            # A wrapper raised: a wrapper failure (no post-execute). An
            # AbortError while cancellation is in force is cancellation.
            cancel = self._cancellation(run)
            if isinstance(exc, AbortError) and cancel is not None:
                run.settle(aborted(cancel.reason, invoked=run.body_invoked), skip_post=True)
            else:
                run.settle(exception_failure(exc), skip_post=True)
            return run
        finally:
            run.settled = True
            slot.signal = call.signal  # unconditionally, whatever a wrapper left
            if run.attempts:
                # A wrapper returned while a next() it started on another
                # thread is still dispatching: join it (quiescence).
                self._join_attempts(run)
        # Step 5: classification.
        # Registry-built body results are valid already; re-checking would
        # copy them and lose the identity test against run.body_abort below.
        if result is not run.body_success and result is not run.body_abort:
            result = check_result(run.call.name, run.definition, result)
        cancel = self._cancellation(run)
        if cancel is not None and (isinstance(result, ToolSuccess) or result is run.body_abort):
            result = aborted(cancel.reason, invoked=run.body_invoked, additional_contexts=result.additional_contexts)
        run.settle(result, skip_post=False)
        return run

    def _join_attempts(self, run: _Run) -> None:
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

    def _cancellation(self, run: _Run) -> AbortSignal | None:
        """The signal whose abort is "cancellation in force", if any."""
        if run.cancel_signal.aborted:
            return run.cancel_signal
        if run.call.signal.aborted:
            return run.call.signal
        return None

    def _invoke(self, run: _Run, slot: _SignalSlot) -> ToolExecutionResult:
        """The innermost ``next()``: fuse, submit (or run inline), join."""
        call = run.call
        caller = call.signal
        outer = slot.signal
        # On a registry worker the body runs inline (nothing is queued, so
        # there is nothing to withdraw); otherwise the hand-off's withdrawal
        # is the fused signal's listener from birth (one lock round trip).
        # The registry aborts `fused` itself on KeyboardInterrupt, so signals
        # a body derives from it must link to it (aborts_directly).
        handoff = None if _on_worker() else _Handoff()
        fused = derive(
            [caller] if outer is caller else [caller, outer],
            None if handoff is None else handoff.withdraw,
            aborts_directly=True,
        )
        run.cancel_signal = fused
        if fused.aborted:
            fused.close()
            return aborted(fused.reason, invoked=False)
        bodies = self._bodies
        attempt = object()  # one per next() call: a wrapper may retry or hedge
        # Registered before the closed check (close() sets `_closed`, then
        # reads `_bodies`): either close() waits for this attempt, or this
        # call sees `_closed` and never dispatches.
        bodies.add(attempt)
        run.attempts.add(attempt)
        try:
            if self._closed and not _on_worker_of(self):
                # close() ran while this call was in admission: its executor
                # may be gone. The body never runs; nothing was dispatched.
                return aborted(RuntimeError(_CLOSED_BEFORE_DISPATCH), invoked=False)
            definition = run.definition
            assert definition is not None
            ctx = _run_context(
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
            slot.signal = fused
            if handoff is None:
                outcome = self._body(run, definition, ctx, fused)
            else:
                outcome = self._submit_and_join(run, definition, ctx, fused, handoff)
        finally:
            # Bookkeeping first, each step reached even if an interrupt lands
            # in the one before: a stale attempt would block close() and
            # _join_attempts forever.
            try:
                try:
                    bodies.discard(attempt)
                finally:
                    run.attempts.discard(attempt)
                if (self._closed and not bodies) or run.joining:
                    # close() or _join_attempts may be waiting; a missed
                    # notify costs them one slice.
                    with self._lock:
                        self._idle.notify_all()
            finally:
                slot.signal = outer
                # Detaches from the caller's signal; the withdrawal listener
                # goes with the closed signal (it can no longer abort).
                fused.close()
        return self._to_result(run, definition, outcome, fused)

    def _body(self, run: _Run, definition: ToolDefinition, ctx: ToolRunContext, fused: AbortSignal) -> Any:
        # Runs on the worker, after the trampoline claimed the hand-off: the one
        # point where "queued" became "running".
        if fused.aborted:
            return _NOT_INVOKED
        run.body_invoked = True
        run.body_thread = get_ident()
        try:
            return (True, definition.execute(run.arguments, ctx))
        except BaseException as exc:  # every body fault is a result, never a crash
            return (False, exc)

    def _trampoline(
        self, handoff: _Handoff, run: _Run, definition: ToolDefinition, ctx: ToolRunContext, fused: AbortSignal
    ) -> None:
        # Runs on an executor worker. Claiming the hand-off is the single
        # point where the call goes from queued to running: if the call was
        # withdrawn first, nothing runs (the waiter was released already).
        if handoff.claim.setdefault(0, _WORKER) is not _WORKER:
            return
        try:
            _enter_worker(self)
            try:
                handoff.outcome = self._body(run, definition, ctx, fused)
            finally:
                _leave_worker()
        finally:
            # Last: the waiting thread resumes with the GIL nearly free.
            handoff.finished = True
            handoff.done.release()

    def _submit_and_join(
        self, run: _Run, definition: ToolDefinition, ctx: ToolRunContext, fused: AbortSignal, handoff: _Handoff
    ) -> Any:
        # The registry owns the hand-off it joins (the executor only runs the
        # trampoline), so a KeyboardInterrupt landing anywhere - even inside
        # executor.submit() - cannot lose the handle on the call: the retry
        # below withdraws it if it is still queued (or never got queued) and
        # otherwise joins the running body.
        # `fused` withdraws the call if it aborts while queued (its listener
        # since _invoke derived it). The withdrawal loses the claim once the
        # worker took it; the worker then sees `fused` aborted (it is marked
        # before listeners run) or the body does.
        interrupt: KeyboardInterrupt | None = None
        work: Future[None] | None = None
        submitted = False
        done = handoff.done
        while True:
            try:
                if not submitted:
                    submitted = True
                    try:
                        work = self._executor.submit(self._trampoline, handoff, run, definition, ctx, fused)
                    except Exception as exc:
                        # Shut down (RuntimeError: a supplied executor, or ours
                        # by close() during admission) or otherwise refused. It
                        # may have queued the work before raising: withdraw,
                        # and keep joining if the worker claimed it anyway.
                        run.submit_error = exc
                        handoff.withdraw()
                if interrupt is not None:
                    # Also runs listeners a second interrupt left pending.
                    abort_owned(fused, interrupt)
                    handoff.withdraw()
                # After an interrupt `done` may already have been consumed
                # (the interrupt landed just after acquire() returned): read
                # the recorded decision first. The common path waits at once.
                if (interrupt is not None and handoff.settled()) or done.acquire(True, _SLICE):
                    break
                if handoff.settled():
                    break
                if work is not None and work.done():
                    # The executor finished the work item without running the
                    # trampoline to the end: dropped it (shutdown with
                    # cancel_futures=True) or failed it (a broken pool).
                    # Withdrawing is a no-op if the trampoline claimed.
                    if not work.cancelled():
                        run.submit_error = work.exception()
                    handoff.withdraw()
            except KeyboardInterrupt as ki:
                # Abort the dispatch signal and keep joining: never abandon.
                if interrupt is None:
                    interrupt = ki
        outcome = handoff.outcome
        if (
            interrupt is None
            and outcome is not _NOT_INVOKED
            and not outcome[0]
            and isinstance(outcome[1], KeyboardInterrupt)
            and run.body_thread == get_ident()
        ):
            # An executor that ran the body in this very thread (inline):
            # a Ctrl-C inside the body is this thread's interrupt, not a
            # tool fault.
            interrupt = outcome[1]
            abort_owned(fused, interrupt)
        if interrupt is not None:
            run.interrupt = interrupt
            raise interrupt
        return outcome

    def _to_result(
        self, run: _Run, definition: ToolDefinition, outcome: Any, fused: AbortSignal
    ) -> ToolExecutionResult:
        """The body's outcome as the result the innermost ``next()`` returns.
        Classified already here (step 5), so wrappers see ``ABORTED`` for a
        success or ``AbortError`` while the fused signal is aborted; a tool
        failure (``ToolError``, other exceptions, invalid output) stays."""
        if outcome is _NOT_INVOKED:
            if not fused.aborted:  # withdrawn: the executor refused, dropped or failed it
                # The executor's own error when it gave one (refused,
                # failed); a drop by shutdown(cancel_futures=True) gives none.
                error = run.submit_error
                if error is None:
                    error = RuntimeError("the executor shut down before the call was dispatched")
                return aborted(error, invoked=False)
            return aborted(fused.reason, invoked=False)
        ok, payload = outcome
        if not ok:
            if isinstance(payload, AbortError):
                if fused.aborted:
                    return aborted(fused.reason, invoked=True)
                result = exception_failure(payload)
                run.body_abort = result
                return result
            return exception_failure(payload)
        checked = check_success(run.call.name, definition, payload, None)
        if isinstance(checked, ToolSuccess):
            if fused.aborted:
                return aborted(fused.reason, invoked=True)
            run.body_success = checked
        return checked

    # -- result checking ----------------------------------------------------

    # -- phase 3: steps 6-7 -------------------------------------------------

    def _complete(self, run: _Run) -> ToolExecutionResult:
        """Steps 6-7: post-execute (unless skipped), caller cancellation over
        a success, ``finalize_content``, freezing, observers (once).
        Returns the final result; never raises for hook faults. A
        ``KeyboardInterrupt`` here is recorded on ``run.interrupt``."""
        if run.published:
            assert run.result is not None
            return run.result
        result = run.result
        if result is None:  # pragma: no cover - defensive: a phase was skipped
            result = failure("internal error: the call has no result", name="RuntimeError", code=None)
        try:
            if not run.skip_post and run.hooks.post_execute:
                result = self._post_execute(run, run.view, result)
            signal = run.call.signal
            if isinstance(result, ToolSuccess) and signal.aborted:
                result = aborted(
                    signal.reason, invoked=run.body_invoked, additional_contexts=result.additional_contexts
                )
            definition = run.definition
            if isinstance(result, ToolSuccess) and definition is not None and definition.finalize_content is not None:
                result = finalize(definition, run.view, result)
        except KeyboardInterrupt as ki:
            if run.interrupt is None:
                run.interrupt = ki
            assert result is not None
        if run.tool_contexts and not run.drop_tool_contexts:
            result = attrs.evolve(result, additional_contexts=tuple(run.tool_contexts) + result.additional_contexts)
        run.result = result
        run.published = True
        for observer in run.hooks.observers:
            try:
                observer(run.view, result)
            except KeyboardInterrupt as ki:
                if run.interrupt is None:
                    run.interrupt = ki
            except BaseException as exc:
                report_unraisable(exc, "Exception in result observer " + safe_repr(observer), result)
        return result

    def _post_execute(self, run: _Run, view: ToolExecution, result: ToolExecutionResult) -> ToolExecutionResult:
        hooks = run.hooks.post_execute

        def call_at(i: int) -> PostExecuteDecision:
            if i == len(hooks):
                return _ACCEPT
            fn = hooks[i]
            d = fn(view, result, lambda: call_at(i + 1))
            if not isinstance(d, (Accept, Block)):
                raise HookReturnError(
                    f"post-execute hook {describe(fn)} returned {type(d).__name__}, expected Accept or Block"
                )
            return d

        try:
            decision = call_at(0)
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
        if self._closed and not _on_worker_of(self):
            raise RuntimeError("ToolRegistry is closed: execute() after close() is not allowed")

    def _submit(self, fn: Callable[[], _T]) -> Future[_T]:
        """Run ``fn`` on the registry's executor with the worker thread marked
        as a registry worker (so ``_dispatch`` there runs bodies inline)."""

        def marked() -> _T:
            _enter_worker(self)
            try:
                return fn()
            finally:
                _leave_worker()

        return self._executor.submit(marked)
