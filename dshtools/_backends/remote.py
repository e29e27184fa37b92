"""The ``run`` services of a body that runs outside the caller's process
(docs/contract.md §9): a ``ProcessBackend`` worker or a Ray worker.

* ``run.signal`` is the signal of ``call_controller``: aborted by the
  caller's abort message; when the caller's dispatch signal had a timer
  (a tool ``timeout``, a caller's ``AbortSignal.timeout``), it also reports
  that budget as ``deadline``/``time_left()``, re-based on this process's
  clock at receipt (docs/contract.md §8 A9; decision 0047).
* ``run.defer_context(ctx)`` works: the JSON object is deep-frozen at once
  (a non-object or non-JSON value raises ``TypeError``/``ValueError`` in the
  body, as in a thread) and kept in ``contexts`` for the trip back; after the
  body settled it raises ``RuntimeError``.
* ``run.dispatch(...)`` raises ``RuntimeError``: nested calls need the
  registry, which lives in the caller's process (the thread backend).

Threads: the body's thread, or threads it joins before returning.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._core.freeze import thaw
from .._signal import AbortController, AbortSignal, budget_controller
from .._types.calls import ExecutionToken, ToolExecutionResult, ToolRunContext, frozen_deferred_context

__all__ = ["RemoteRun", "call_controller"]


def call_controller(left: float | None, received: float) -> AbortController:
    """The controller whose signal a remote body gets as ``run.signal``.
    ``left``: the seconds the caller's dispatch signal had left when the
    call was sent (its ``time_left()``), or ``None`` when no timer could
    abort it; ``received``: this process's ``time.monotonic()`` when the
    call arrived. With a budget the signal reports ``deadline ==
    received + left``: the clocks of two processes (two machines, on Ray)
    are never compared, only a duration crosses. It never aborts by itself:
    the caller's timer does, through the abort message (decision 0047)."""
    if left is None:
        return AbortController()
    return budget_controller(received + left)


class RemoteRun:
    """What ``ToolRunContext`` needs from its run, out of process.
    ``where`` names the place in the ``run.dispatch`` refusal;
    ``thaw_contexts`` keeps contexts as plain ``dict`` (for a wire that
    pickles with the standard library) instead of frozen mappings."""

    __slots__ = ("_thaw", "_where", "contexts", "settled")

    def __init__(self, where: str, *, thaw_contexts: bool) -> None:
        self._where = where
        self._thaw = thaw_contexts
        self.contexts: list[Mapping[str, Any]] = []
        self.settled = False

    def context(
        self, call_id: str, root_call_id: str, name: str, agent: str | None, args: Any, signal: AbortSignal
    ) -> ToolRunContext:
        """The body's ``run``: a top-level call (no parent, no definition:
        both stay in the caller's process) served by this run."""
        return ToolRunContext(
            token=ExecutionToken(),
            call_id=call_id,
            root_call_id=root_call_id,
            name=name,
            arguments=args,
            agent=agent,
            parent=None,
            definition=None,
            signal=signal,
            run=self,
        )

    def defer_context(self, context: object) -> None:
        frozen = frozen_deferred_context(context, self.settled)
        self.contexts.append(thaw(frozen) if self._thaw else frozen)

    def dispatch(
        self, name: str, arguments: object, call_id: str | None, signal: AbortSignal, parent: ExecutionToken
    ) -> ToolExecutionResult:
        raise RuntimeError(
            f"run.dispatch() is not available in a tool running on {self._where}: "
            "nested calls need the thread backend (docs/contract.md §9)"
        )
