"""The registry's trusted constructors of frozen objects.

The registry builds usually a success and, with hooks, the views on every
call (and the body's context, in ``Run.invoke``). ``attrs``' generated
``__init__`` of a frozen class runs converters and a slot-wrapper setattr
per field; these build the same frozen instances through a twin
(``dshtools/_core/construct.py``, the one way the package builds an object
without its ``__init__``) from values the registry produced itself, so
there is nothing to convert or check. The views take the call's run and
read its fields there; each constructor writes the fields it shares with
the others itself, so that each store site sees one class and CPython
specializes it: one builder for both views (its sites seeing two classes)
or a shared step per view is measurably slower on the path of every call
with hooks (``benchmarks.instructions``, case ``execute_hooks``). Not
public: users build results and views with the classes. Tests compare
each with the class's own ``__init__``, field by field.
"""

from __future__ import annotations

from typing import Any, Final, Protocol

from .._core.construct import RETYPE_IN_PLACE, frozen_copy, twin
from .._types.calls import EMPTY_META, ContentBlock, ExecutionToken, ToolExecutionInput, ToolSuccess
from .._types.hooks import ToolDefinition
from .._types.tools import SignalSlot, ToolDispatchExecution, ToolExecution

__all__ = ["RunFields", "trusted_dispatch_view", "trusted_success", "trusted_view"]


class RunFields(Protocol):
    """The fields of a call's run that its views copy (``run.Run`` has them)."""

    call: ToolExecutionInput
    token: ExecutionToken
    root_call_id: str
    arguments: Any
    definition: ToolDefinition | None


_SuccessTwin: Final = twin(ToolSuccess)
_ExecutionTwin: Final = twin(ToolExecution)
_DispatchExecutionTwin: Final = twin(ToolDispatchExecution)


def trusted_success(value: Any, content: tuple[ContentBlock, ...]) -> ToolSuccess:
    """``ToolSuccess(value, content, body_invoked=True)`` for a frozen
    ``value`` and frozen content blocks of a body's return; empty meta, no
    contexts."""
    result = _SuccessTwin()
    result.value = value
    result.content = content
    result.meta = EMPTY_META
    result.additional_contexts = ()
    result.body_invoked = True
    if RETYPE_IN_PLACE:
        result.__class__ = ToolSuccess
    else:
        result = frozen_copy(result, ToolSuccess)
    return result  # type: ignore[no-any-return]


def trusted_view(run: RunFields) -> ToolExecution:
    """``ToolExecution(...)`` of ``run``, with the caller's signal."""
    call = run.call
    view = _ExecutionTwin()
    view.token = run.token
    view.call_id = call.call_id
    view.root_call_id = run.root_call_id
    view.name = call.name
    view.arguments = run.arguments
    view.agent = call.agent
    view.parent = call.parent
    view.definition = run.definition
    view.signal = call.signal
    if RETYPE_IN_PLACE:
        view.__class__ = ToolExecution
    else:
        view = frozen_copy(view, ToolExecution)
    return view  # type: ignore[no-any-return]


def trusted_dispatch_view(run: RunFields, slot: SignalSlot) -> ToolDispatchExecution:
    """``ToolDispatchExecution(...)`` of ``run``, whose replaceable signal is ``slot``."""
    call = run.call
    view = _DispatchExecutionTwin()
    view.token = run.token
    view.call_id = call.call_id
    view.root_call_id = run.root_call_id
    view.name = call.name
    view.arguments = run.arguments
    view.agent = call.agent
    view.parent = call.parent
    view.definition = run.definition
    view._slot = slot
    if RETYPE_IN_PLACE:
        view.__class__ = ToolDispatchExecution
    else:
        view = frozen_copy(view, ToolDispatchExecution)
    return view  # type: ignore[no-any-return]
