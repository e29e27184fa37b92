"""The ``run`` services of a body that runs outside the caller's process
(docs/contract.md §9): a ``ProcessBackend`` worker or a Ray worker.

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

from ._freeze import freeze_with_height, thaw
from ._signal import AbortSignal
from ._types import ExecutionToken, ToolExecutionResult

__all__ = ["RemoteRun"]


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

    def defer_context(self, context: object) -> None:
        if self.settled:
            raise RuntimeError("defer_context() after the tool body settled")
        if not isinstance(context, dict):
            raise TypeError(f"a deferred context must be a JSON object (dict), not {type(context).__name__}")
        frozen, _ = freeze_with_height(context)
        self.contexts.append(thaw(frozen) if self._thaw else frozen)

    def dispatch(
        self, name: str, arguments: object, call_id: str | None, signal: AbortSignal, parent: ExecutionToken
    ) -> ToolExecutionResult:
        raise RuntimeError(
            f"run.dispatch() is not available in a tool running on {self._where}: "
            "nested calls need the thread backend (docs/contract.md §9)"
        )
