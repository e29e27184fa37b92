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
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from types import TracebackType
from typing import Any, Final, Literal, TypeVar

import attrs

from ._admission import HookReturnError, admit, describe
from ._backend import Backend, BodyReport, Dispatch, Error, NotInvoked, Value, WorkerLost
from ._errors import AbortError, report_unraisable, safe_repr, safe_str
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
from ._outcome import apply_post_decision, check_result, check_success, finalize, invalid_output
from ._signal import AbortSignal, abort_owned, derive
from ._thread_backend import DEFAULT_MAX_WORKERS, ThreadBackend, enter_worker, leave_worker, worker_owners
from ._types import (
    INVALID_ARGS,
    WORKER_LOST,
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
    "RegistryStatistics",
    # defined in _hooks, re-exported here (the registry's vocabulary)
    "ToolDefinition",
    "ToolRegistry",
]

_SLICE: Final = 0.25
_T = TypeVar("_T")


def _on_worker_of(registry: ToolRegistry) -> bool:
    """The current thread runs (or dispatches for) one of ``registry``'s bodies."""
    owners = worker_owners()
    if not owners:
        return False
    bodies = registry._bodies
    return any(owner in bodies or (isinstance(owner, _Run) and owner.registry is registry) for owner in owners)


_CLOSED_BEFORE_DISPATCH: Final = "ToolRegistry closed before the call was dispatched"


_ACCEPT: Final = Accept()

# How many open registries use each backend (by identity): a backend shared
# by several registries is closed when the last of them closes.
# Must be held while reading or mutating _backend_users.
_users_lock = threading.Lock()
_backend_users: dict[int, tuple[Backend, int]] = {}


def _adopt(backend: Backend) -> None:
    with _users_lock:
        _, count = _backend_users.get(id(backend), (backend, 0))
        _backend_users[id(backend)] = (backend, count + 1)


def _release(backend: Backend) -> bool:
    """Drop one registry's use; True when it was the last one."""
    with _users_lock:
        _, count = _backend_users.get(id(backend), (backend, 1))
        if count <= 1:
            _backend_users.pop(id(backend), None)
            return True
        _backend_users[id(backend)] = (backend, count - 1)
        return False


_log: Final = logging.getLogger("dshtools")
_OVERRUN_REPORTED_S: Final = 0.1


def _with_backend_meta(run: _Run, result: ToolExecutionResult) -> ToolExecutionResult:
    """Add ``meta["killed"]`` and ``meta["overrun_s"]`` (an overrun above
    0.1 s, also logged as a WARNING) to the call's final result, whichever
    hook built it (docs/contract.md §8 A8, §9)."""
    extra: dict[str, object] = {}
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


@attrs.frozen(kw_only=True)
class RegistryStatistics:
    """``ToolRegistry.statistics()``: ``bodies_in_flight`` (dispatch attempts
    submitted and not yet joined), ``tools``, the number of hooks of each
    kind, ``backends`` (the backends the registry will close) and
    ``closed``."""

    bodies_in_flight: int
    tools: int
    pre_execute_hooks: int
    guards: int
    around_dispatch_hooks: int
    post_execute_hooks: int
    result_observers: int
    backends: int
    closed: bool


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
        "call",
        "cancel_signal",
        "definition",
        "drop_tool_contexts",
        "hooks",
        "interrupt",
        "joining",
        "killed",
        "overrun_s",
        "published",
        "registry",
        "result",
        "root_call_id",
        "settled",
        "skip_post",
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
        self.killed = False  # a backend killed the body's process (docs/contract.md §9)
        self.overrun_s: float | None = None  # seconds the body ran on after its signal aborted

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

    def note_report(self, report: BodyReport) -> None:
        """Record what a backend reported beside the outcome: contexts the
        body deferred out of process, a kill, an overrun (added to ``meta``
        when the result is classified, so a wrapper's own failure keeps them)."""
        for context in report.contexts:
            frozen, _ = freeze_with_height(context)
            self.tool_contexts.append(frozen)
        if report.killed:
            self.killed = True
        if report.overrun_s is not None:
            self.overrun_s = max(self.overrun_s or 0.0, report.overrun_s)

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
        enter_worker(self)
        try:
            return self.registry.execute(child)
        finally:
            leave_worker()


class ToolRegistry:
    """Registered tools, their policies, and the backend their bodies run on.

    ``ToolRegistry(*, max_workers=None, executor=None, approver=None,
    backend=None)``: bodies run on ``backend`` (any ``Backend``,
    docs/backends.md) unless their ``ToolDefinition`` names its own. Without
    ``backend`` the registry owns a ``ThreadBackend``: a
    ``ThreadPoolExecutor`` of ``max_workers`` (default
    ``DEFAULT_MAX_WORKERS`` = 32), shut down in ``close()``; or, with
    ``executor``, that executor used as is and never shut down (``close()``
    then waits for this registry's in-flight bodies only). Giving
    ``max_workers``/``executor`` together, or either with ``backend``,
    raises ``ValueError``. Hook registration and ``execute`` are
    thread-safe; each call snapshots the hooks at its start. Source:
    docs/contract.md §3, §9.
    """

    def __init__(
        self,
        *,
        max_workers: int | None = None,
        executor: Executor | None = None,
        approver: Approver | None = None,
        backend: Backend | None = None,
    ) -> None:
        if approver is not None and not callable(approver):
            raise TypeError(f"approver must be callable, not {type(approver).__name__}")
        if backend is not None:
            if max_workers is not None or executor is not None:
                raise ValueError("give backend, or max_workers/executor for the thread backend, not both")
            if not isinstance(backend, Backend):
                raise TypeError(f"backend must implement the Backend protocol, not {type(backend).__name__}")
        # Thread pool for a batch's overlapping dispatches (and the bodies'
        # default backend): its executor is created on first use.
        self._threads = ThreadBackend(max_workers, executor=executor)
        self._backend: Backend = self._threads if backend is None else backend
        # Every backend this registry uses, closed (when its last registry
        # closes) by close(). Guarded by _lock.
        self._backends: list[Backend] = [self._threads]
        if backend is not None:
            _adopt(backend)
            self._backends.append(backend)
        self._approver = approver
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        # Run contexts of the dispatch attempts in flight (set.add/discard are
        # atomic under the GIL: no lock on the hot path; close() waits on _idle).
        self._bodies: set[object] = set()
        self._closed = False
        self._closing: list[Backend] | None = None  # backends close() still has to close
        self._definitions: dict[str, ToolDefinition] = {}
        self._hooks = _Hooks()

    def statistics(self) -> RegistryStatistics:
        """A snapshot of the registry's state, for tests, monitoring and
        quiescence checks (nothing here is a lock-protected invariant: read
        it after the calls you care about returned)."""
        hooks = self._hooks
        return RegistryStatistics(
            bodies_in_flight=len(self._bodies),
            tools=len(self._definitions),
            pre_execute_hooks=len(hooks.pre_execute),
            guards=len(hooks.guards),
            around_dispatch_hooks=len(hooks.around),
            post_execute_hooks=len(hooks.post_execute),
            result_observers=len(hooks.observers),
            backends=len(self._backends),
            closed=self._closed,
        )

    # ------------------------------------------------------------ registration

    def register(self, definition: ToolDefinition) -> Callable[[], None]:
        """Add a tool. Returns an idempotent ``unregister()``. Raises
        ``TypeError`` for a non-``ToolDefinition``, ``ValueError`` for a name
        already registered or a body its backend cannot run
        (``Backend.validate``), ``RuntimeError`` after ``close()``
        (docs/contract.md §8 A13)."""
        if not isinstance(definition, ToolDefinition):
            raise TypeError(f"register() takes a ToolDefinition, not {type(definition).__name__}")
        if self._closed:
            raise RuntimeError("ToolRegistry is closed: register() after close() is not allowed")
        own = definition.backend
        (own or self._backend).validate(definition.name, definition.execute)
        with self._lock:
            if self._closed:
                raise RuntimeError("ToolRegistry is closed: register() after close() is not allowed")
            if definition.name in self._definitions:
                raise ValueError(f"a tool named {definition.name!r} is already registered")
            if own is not None and not any(b is own for b in self._backends):
                _adopt(own)
                self._backends.append(own)
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
            if self._closing is None:
                # Decided once: the own thread backend is this registry's
                # alone; another backend is closed by the last registry that
                # uses it. A close() interrupted below is finished by the next.
                self._closing = [b for b in self._backends if b is self._threads or _release(b)]
            closing = self._closing
        while closing:
            closing[0].close()  # idempotent
            closing.pop(0)

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
        """The innermost ``next()``: fuse, submit to the tool's backend, join."""
        call = run.call
        caller = call.signal
        outer = slot.signal
        # The registry aborts `fused` itself on KeyboardInterrupt, so signals
        # a body derives from it must link to it (aborts_directly).
        fused = derive([caller] if outer is caller else [caller, outer], None, aborts_directly=True)
        run.cancel_signal = fused
        if fused.aborted:
            fused.close()
            return aborted(fused.reason, invoked=False)
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
        bodies = self._bodies
        # One attempt per next() call (a wrapper may retry or hedge): its run
        # context. Registered before the closed check (close() sets
        # `_closed`, then reads `_bodies`): either close() waits for this
        # attempt, or this call sees `_closed` and never dispatches.
        bodies.add(ctx)
        run.attempts.add(ctx)
        try:
            if self._closed and not _on_worker_of(self):
                # close() ran while this call was in admission: its backend
                # may be gone. The body never runs; nothing was dispatched.
                return aborted(RuntimeError(_CLOSED_BEFORE_DISPATCH), invoked=False)
            slot.signal = fused
            report = self._submit_and_join(run, definition.backend or self._backend, definition, ctx, fused)
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
                slot.signal = outer
                # Detaches from the caller's signal; a backend's listeners go
                # with the closed signal (it can no longer abort).
                fused.close()
        return self._to_result(run, definition, report, fused)

    def _submit_and_join(
        self, run: _Run, backend: Backend, definition: ToolDefinition, ctx: ToolRunContext, fused: AbortSignal
    ) -> BodyReport:
        # Submit once, then wait in slices until the dispatch settles. A
        # KeyboardInterrupt anywhere aborts the dispatch signal (the backend
        # withdraws a queued body or tells a running one) and the wait goes
        # on: a started body is never abandoned.
        interrupt: KeyboardInterrupt | None = None
        dispatch: Dispatch | None = None
        submitted = False
        while True:
            try:
                if not submitted:
                    submitted = True
                    try:
                        dispatch = backend.submit(definition.execute, run.arguments, ctx)
                    except Exception as exc:
                        # The backend refused: the body was not and will not
                        # be started.
                        return BodyReport(outcome=NotInvoked(exc))
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
        return report

    def _to_result(
        self, run: _Run, definition: ToolDefinition, report: BodyReport, fused: AbortSignal
    ) -> ToolExecutionResult:
        """The body's outcome as the result the innermost ``next()`` returns.
        Classified already here (step 5), so wrappers see ``ABORTED`` for a
        success or ``AbortError`` while the fused signal is aborted; a tool
        failure (``ToolError``, other exceptions, invalid output) stays."""
        outcome = report.outcome
        if report.contexts or report.killed or report.overrun_s is not None:
            run.note_report(report)
        if type(outcome) is Value:
            run.body_invoked = True
            checked = check_success(run.call.name, definition, outcome.value, None)
            if isinstance(checked, ToolSuccess):
                if fused.aborted:
                    return aborted(fused.reason, invoked=True)
                run.body_success = checked
            return checked
        if type(outcome) is Error:
            run.body_invoked = True
            error = outcome.error
            if report.killed or isinstance(error, AbortError):
                if fused.aborted:
                    return aborted(fused.reason, invoked=True)
                if isinstance(error, AbortError):
                    result = exception_failure(error)
                    run.body_abort = result
                    return result
            if isinstance(error, WorkerLost):
                return failure(safe_str(error), name="WorkerLost", code=WORKER_LOST)
            return exception_failure(error)
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
        if run.killed or run.overrun_s is not None:
            result = _with_backend_meta(run, result)
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
        """Run ``fn`` on the registry's thread pool with the worker thread
        marked as a registry worker (so ``_dispatch`` there runs bodies of
        the thread backend inline)."""
        return self._threads.run_marked(fn)
