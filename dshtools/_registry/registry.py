"""``ToolRegistry``: registered tools, their policies and backends
(docs/contract.md §3, §9).

The call path itself (``execute`` and its phases) is ``Pipeline``, the
registry's base class in ``_pipeline.py``; this module holds registration,
hooks, the backends' lifecycle and ``statistics()``. Hook registration and
``execute`` are thread-safe; each call snapshots the hooks at its start.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Executor
from types import TracebackType
from typing import Any, Literal, ParamSpec, TypeVar, overload

import attrs

from .._backends.base import Backend
from .._backends.thread import DEFAULT_MAX_WORKERS, ThreadBackend
from .._core.freeze import freeze_with_height
from .._types.calls import BackendLike, ToolExecutionInput
from .._types.hooks import (
    Accept,
    Allow,
    ApprovalRequest,
    Approver,
    AroundDispatch,
    Ask,
    Block,
    Deny,
    Guard,
    PostExecuteHook,
    PreExecuteHook,
    ResultObserver,
    ToolDefinition,
)
from .pipeline import _SLICE, Pipeline, on_worker_of

_log = logging.getLogger("dshtools")
_P = ParamSpec("_P")
_R = TypeVar("_R")

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


class ToolRegistry(Pipeline):
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
        # The thread pool (created on first use) serves a batch's
        # overlapping dispatches and, without `backend`, the bodies.
        threads = ThreadBackend(max_workers, executor=executor)
        super().__init__(threads=threads, backend=threads if backend is None else backend, approver=approver)
        # Every backend this registry uses, closed (when its last registry
        # closes) by close(). Guarded by _lock.
        self._backends: list[Backend] = [threads]
        if backend is not None:
            _adopt(backend)
            self._backends.append(backend)
        self._closing: list[Backend] | None = None  # backends close() still has to close

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

    @overload
    def tool(self, fn: Callable[_P, _R], /) -> Callable[_P, _R]: ...

    @overload
    def tool(
        self,
        /,
        *,
        name: str | None = None,
        description: str | None = None,
        timeout: float | None = None,
        concurrency_safe: bool = False,
        backend: BackendLike | None = None,
        strict: bool = False,
        output_schema: bool = False,
    ) -> Callable[[Callable[_P, _R]], Callable[_P, _R]]: ...

    def tool(
        self,
        fn: Callable[..., Any] | None = None,
        /,
        *,
        name: str | None = None,
        description: str | None = None,
        timeout: float | None = None,
        concurrency_safe: bool = False,
        backend: BackendLike | None = None,
        strict: bool = False,
        output_schema: bool = False,
    ) -> Any:
        """``@registry.tool`` or ``@registry.tool(name=..., ...)``: register
        ``ToolDefinition.from_function(fn, **options)`` and return ``fn``
        unchanged (still callable directly). Raises what ``from_function``
        and ``register`` raise, at decoration (docs/contract.md#typed-tools)."""
        from .._types.functions import register_function

        options = {
            "name": name,
            "description": description,
            "timeout": timeout,
            "concurrency_safe": concurrency_safe,
            "backend": backend,
            "strict": strict,
            "output_schema": output_schema,
        }
        return register_function(self.register, fn, options)

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
        if isinstance(fn, type) and any("__call__" in vars(k) for k in fn.__mro__[:-1]):
            # Its instances are the hooks (TimeoutPolicy, say): registered
            # as it is, every call would construct one instead of running.
            raise TypeError(f"{kind} hook {fn.__name__} is a class whose instances are hooks: pass {fn.__name__}(...)")
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

    def close(self) -> None:
        """Refuse new calls and registrations, wait for every in-flight body
        to return, then close the backends: the own thread backend (its pool
        shut down; a supplied executor is left running) and every backend
        given to this registry or its tools, a shared one only when the last
        registry using it closes (docs/contract.md §9). Idempotent; a close()
        interrupted by Ctrl-C is finished by the next. A nested call made by
        a body still running is allowed to finish. Raises ``RuntimeError``
        when called from a registry worker (it would wait for itself)."""
        if on_worker_of(self):
            raise RuntimeError("ToolRegistry.close() called from a tool body would wait for that body forever")
        # Not "already closed" by the flag alone: a close() interrupted by
        # Ctrl-C while waiting left `_closed` set, and the next one must
        # still wait for the bodies and close the backends.
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


def registered(registry: ToolRegistry) -> tuple[ToolDefinition, ...]:
    """The definitions registered on ``registry``, in registration order (a
    snapshot). Package-internal (the command line's checks)."""
    return tuple(registry._definitions.values())


def around_dispatch_hooks(registry: ToolRegistry) -> tuple[AroundDispatch, ...]:
    """The around-dispatch wrappers installed on ``registry``, outermost
    first (a snapshot). Package-internal (the command line's checks)."""
    return registry._hooks.around
