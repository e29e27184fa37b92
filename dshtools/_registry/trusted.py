"""The registry's trusted constructors of frozen objects (docs/decisions/0044).

The registry builds a context, usually a success and, with hooks, the views
on every call. ``attrs``' generated ``__init__`` of a frozen class runs
converters and a slot-wrapper setattr per field; these build the same frozen
instances through a twin (``dshtools/_twin.py``) from values the registry
produced itself, so there is nothing to convert or check. Not public: users
build results and views with the classes. Tests compare each with the
class's own ``__init__``, field by field.
"""

from __future__ import annotations

from typing import Any, Final

from .._core.construct import twin
from .._signal import AbortSignal
from .._types.calls import (
    ContentBlock,
    ExecutionToken,
    SignalSlot,
    ToolDefinition,
    ToolDispatchExecution,
    ToolExecution,
    ToolSuccess,
)

__all__ = ["trusted_dispatch_view", "trusted_success", "trusted_view"]

_SuccessTwin: Final = twin(ToolSuccess)
_ExecutionTwin: Final = twin(ToolExecution)
_DispatchExecutionTwin: Final = twin(ToolDispatchExecution)


def trusted_success(value: Any, content: tuple[ContentBlock, ...]) -> ToolSuccess:
    """``ToolSuccess(value, content)`` for a frozen ``value`` and frozen
    content blocks; no meta, no contexts."""
    result = _SuccessTwin()
    result.value = value
    result.content = content
    result.meta = None
    result.additional_contexts = ()
    result.__class__ = ToolSuccess
    return result  # type: ignore[no-any-return]


def trusted_view(
    token: ExecutionToken,
    call_id: str,
    root_call_id: str,
    name: str,
    arguments: Any,
    agent: str | None,
    parent: ExecutionToken | None,
    definition: ToolDefinition | None,
    signal: AbortSignal,
) -> ToolExecution:
    """``ToolExecution(...)`` from the registry's own values."""
    view = _ExecutionTwin()
    view.token = token
    view.call_id = call_id
    view.root_call_id = root_call_id
    view.name = name
    view.arguments = arguments
    view.agent = agent
    view.parent = parent
    view.definition = definition
    view.signal = signal
    view.__class__ = ToolExecution
    return view  # type: ignore[no-any-return]


def trusted_dispatch_view(
    token: ExecutionToken,
    call_id: str,
    root_call_id: str,
    name: str,
    arguments: Any,
    agent: str | None,
    parent: ExecutionToken | None,
    definition: ToolDefinition | None,
    slot: SignalSlot,
) -> ToolDispatchExecution:
    """``ToolDispatchExecution(...)`` from the registry's own values."""
    view = _DispatchExecutionTwin()
    view.token = token
    view.call_id = call_id
    view.root_call_id = root_call_id
    view.name = name
    view.arguments = arguments
    view.agent = agent
    view.parent = parent
    view.definition = definition
    view._slot = slot
    view.__class__ = ToolDispatchExecution
    return view  # type: ignore[no-any-return]
