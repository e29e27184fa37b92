"""The registry's trusted constructors of frozen objects.

The registry builds usually a success and, with hooks, the views on every
call (and the body's context, in ``Run.invoke``). ``attrs``' generated
``__init__`` of a frozen class runs converters and a slot-wrapper setattr
per field; these build the same frozen instances through a twin
(``dshtools/_core/construct.py``, the one way the package builds an object
without its ``__init__``) from values the registry produced itself, so
there is nothing to convert or check. A view takes the call's run and
reads its fields there; both views are built by one function, which writes
the fields they share once. Not public: users build results and views
with the classes. Tests compare each with the class's own ``__init__``,
field by field.
"""

from __future__ import annotations

from typing import Any, Final, Protocol, overload

from .._core.construct import twin
from .._types.calls import EMPTY_META, ContentBlock, ExecutionToken, ToolExecutionInput, ToolSuccess
from .._types.hooks import ToolDefinition
from .._types.tools import SignalSlot, ToolDispatchExecution, ToolExecution

__all__ = ["RunFields", "trusted_success", "trusted_view"]


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
    result.__class__ = ToolSuccess
    return result  # type: ignore[no-any-return]


@overload
def trusted_view(run: RunFields) -> ToolExecution: ...


@overload
def trusted_view(run: RunFields, slot: SignalSlot) -> ToolDispatchExecution: ...


def trusted_view(run: RunFields, slot: SignalSlot | None = None) -> ToolExecution | ToolDispatchExecution:
    """``ToolExecution(...)`` of ``run`` with the caller's signal; with a
    ``slot``, the around-dispatch ``ToolDispatchExecution(...)`` whose
    replaceable signal is ``slot``."""
    call = run.call
    view = _ExecutionTwin() if slot is None else _DispatchExecutionTwin()
    view.token = run.token
    view.call_id = call.call_id
    view.root_call_id = run.root_call_id
    view.name = call.name
    view.arguments = run.arguments
    view.agent = call.agent
    view.parent = call.parent
    view.definition = run.definition
    if slot is None:
        view.signal = call.signal
        view.__class__ = ToolExecution
    else:
        view._slot = slot
        view.__class__ = ToolDispatchExecution
    return view  # type: ignore[no-any-return]
