"""The state of one call as it passes the pipeline (docs/contract.md §3).

``Run`` is private, mutable, and owned by the thread that runs the call's
pipeline (the caller of ``execute``, or a batch's dispatch thread for steps
4-5); the body's thread touches it only through ``ToolRunContext``
(``defer_context``, a nested ``dispatch``) while the pipeline waits for it.
Fields written by one phase and read by a later one are listed on the
class; nothing here takes a lock.
"""

from __future__ import annotations

import itertools
import os
import threading
from typing import Any, Final, Protocol

import attrs

from .._backends.base import BodyReport
from .._backends.thread import enter_worker, leave_worker
from .._core.construct import twin
from .._core.freeze import FrozenDict, freeze_with_height
from .._signal import AbortSignal
from .._types.calls import (
    ExecutionToken,
    RunLike,
    ToolExecution,
    ToolExecutionInput,
    ToolExecutionResult,
    ToolFailure,
    ToolRunContext,
    ToolSuccess,
    frozen_deferred_context,
)
from .._types.hooks import AroundDispatch, Guard, PostExecuteHook, PreExecuteHook, ResultObserver, ToolDefinition
from .trusted import trusted_view

__all__ = ["Hooks", "Run", "trusted_run_context"]


_CHILDREN_LOCK = threading.Lock()


def _after_fork_in_child() -> None:
    # The lock may have been held by a thread that does not exist in the
    # child (docs/contract.md §8 A10).
    global _CHILDREN_LOCK
    _CHILDREN_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


class _Executes(Protocol):
    def execute(self, call: ToolExecutionInput) -> ToolExecutionResult: ...


@attrs.frozen
class Hooks:
    """The hooks of a registry, snapshotted by each call at its start."""

    pre_execute: tuple[PreExecuteHook, ...] = ()
    guards: tuple[Guard, ...] = ()
    around: tuple[AroundDispatch, ...] = ()
    post_execute: tuple[PostExecuteHook, ...] = ()
    observers: tuple[ResultObserver, ...] = ()


class Run:
    """The private, mutable state of one call. ``execute_batch`` reads
    ``call``, ``result`` and ``interrupt``."""

    __slots__ = (
        "_children",
        "_view",
        "arguments",
        "attempts",
        "backend_meta",
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

    def __init__(
        self, registry: _Executes, call: ToolExecutionInput, definition: ToolDefinition | None, hooks: Hooks
    ) -> None:
        self.registry = registry
        self.call = call
        self.definition = definition
        self.hooks = hooks
        self.token = ExecutionToken()
        self.root_call_id = call.root_call_id if call.root_call_id is not None else call.call_id
        self.arguments: Any = None
        self._view: ToolExecution | None = None
        self.result: ToolExecutionResult | None = None
        self.body_invoked = False
        self.skip_post = False
        # A KeyboardInterrupt (or, from a hook, any BaseException that is not
        # an Exception) to re-raise once the call's result is published.
        self.interrupt: BaseException | None = None
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
        self._children: itertools.count[int] | None = None  # made by the first nested dispatch
        self.killed = False  # a backend killed the body's process (docs/contract.md §9)
        self.overrun_s: float | None = None  # seconds the body ran on after its signal aborted
        self.backend_meta: dict[str, object] | None = None  # a backend's own entries for the final meta

    @property
    def view(self) -> ToolExecution:
        """The read-only view for hooks and observers, built on first use
        (a registry without hooks never builds it)."""
        view = self._view
        if view is None:
            call = self.call
            view = self._view = trusted_view(
                self.token,
                call.call_id,
                self.root_call_id,
                call.name,
                self.arguments,
                call.agent,
                call.parent,
                self.definition,
                call.signal,
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
        if report.meta:
            self.backend_meta = {**(self.backend_meta or {}), **report.meta}

    # -- used by ToolRunContext (the body's thread) --

    def defer_context(self, context: object) -> None:
        self.tool_contexts.append(frozen_deferred_context(context, self.settled))

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
        child_id = call_id
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


_RunContextTwin: Final = twin(ToolRunContext)


# A trusted constructor: the pipeline builds a context on every dispatch from
# values it produced itself, so there is nothing to convert or check
# (dshtools/_twin.py).
def trusted_run_context(
    token: ExecutionToken,
    call_id: str,
    root_call_id: str,
    name: str,
    arguments: Any,
    agent: str | None,
    parent: ExecutionToken | None,
    definition: ToolDefinition | None,
    signal: AbortSignal,
    run: RunLike,
) -> ToolRunContext:
    ctx = _RunContextTwin()
    ctx.token = token
    ctx.call_id = call_id
    ctx.root_call_id = root_call_id
    ctx.name = name
    ctx.arguments = arguments
    ctx.agent = agent
    ctx.parent = parent
    ctx.definition = definition
    ctx.signal = signal
    ctx._run = run
    ctx.__class__ = ToolRunContext
    return ctx  # type: ignore[no-any-return]
