"""LangChain adapter: a registry's tools as LangChain ``StructuredTool``s,
sync and async (docs/frameworks.md, docs/contract.md#async).

Install the extra: ``pip install 'dshtools[langchain]'``. ``import
dshtools`` never imports this module or LangChain.

Guarantees:

* **The registry's schema.** Each tool has the registry tool's
  provider-valid name (docs/contract.md#a12), description and parameters
  (``args_schema`` is the tool's JSON Schema itself, which a chat model's
  ``bind_tools`` sends without its ``title`` annotations); the registry
  validates the arguments (``INVALID_ARGS``).
* **Both entry points are one registry call.** ``tool.invoke`` runs
  ``func``, which calls ``registry.execute(call)`` in the calling thread;
  ``tool.ainvoke`` runs ``coroutine``, which awaits
  ``registry.aexecute(call)`` and never blocks the loop. Hooks, approver,
  guards, wrappers and observers all apply either way.
* **A cancelled ``ainvoke`` stops the body.** Cancelling the task that
  awaits ``ainvoke`` (or a chain or graph running it) aborts the call's
  signal and joins the body before the cancellation goes on. A sync
  ``invoke`` has no task to cancel: give ``tools(..., signal=...)`` and
  abort that signal to stop it.
* **Failures reach the model as an error message.** A ``ToolFailure`` is
  raised as ``ToolException`` with its model text (``Error: <message>``)
  and the tool handles it, so a ``ToolCall`` input gives a ``ToolMessage``
  with ``status="error"`` and that text. A success gives its content's
  text as the message content and the ``ToolExecutionResult`` as its
  ``artifact``.

LangChain gives a tool function no call id, so each call's id is a fresh
``langchain-<hex>``. Tool arguments named ``config``, ``callbacks`` or
``run_manager`` collide with LangChain's own keyword arguments and are not
supported (``ValueError`` when the tools are built).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from langchain_core.tools import StructuredTool, ToolException

from ._interop.frameworks import ExposedTool, exposed, framework_call, model_text
from ._signal import AbortSignal
from ._types.calls import ToolExecutionResult

if TYPE_CHECKING:
    from ._registry.registry import ToolRegistry

__all__ = ["tools"]

# Keyword arguments LangChain passes to a tool function itself.
_LANGCHAIN_KEYWORDS = frozenset({"config", "callbacks", "run_manager"})


def tools(registry: ToolRegistry, *names: str, signal: AbortSignal | None = None) -> list[StructuredTool]:
    """The tools ``names`` of ``registry`` (every tool when none is named),
    in registration order, as LangChain ``StructuredTool``s with both
    ``func`` (sync, ``registry.execute``) and ``coroutine`` (async,
    ``registry.aexecute``).

    ``signal`` (optional) is the caller's signal every call carries:
    aborting it aborts the calls in flight, sync ones included. Without it
    each call gets a fresh controller's signal, aborted only when the
    awaiting task is cancelled. The tools are a snapshot: a tool registered
    later is not among them, one unregistered later answers
    ``UNKNOWN_TOOL``. Raises ``TypeError`` for a name that is not a
    ``str``, ``ValueError`` for a name the registry does not hold, a tool
    whose parameters are not an object schema, or one with a parameter
    named ``config``, ``callbacks`` or ``run_manager``."""
    return [_structured_tool(registry, tool, signal) for tool in exposed(registry, names)]


def _structured_tool(registry: ToolRegistry, tool: ExposedTool, signal: AbortSignal | None) -> StructuredTool:
    properties = tool.parameters.get("properties")
    clash = sorted(_LANGCHAIN_KEYWORDS.intersection(properties)) if isinstance(properties, dict) else []
    if clash:
        raise ValueError(
            f"tool {tool.name!r}: a parameter named {clash[0]!r} collides with LangChain's own "
            "keyword argument of that name"
        )

    def func(**arguments: Any) -> tuple[str, ToolExecutionResult]:
        call = framework_call(tool, arguments, call_id=None, signal=signal, prefix="langchain")
        return _output(registry.execute(call))

    async def coroutine(**arguments: Any) -> tuple[str, ToolExecutionResult]:
        call = framework_call(tool, arguments, call_id=None, signal=signal, prefix="langchain")
        return _output(await registry.aexecute(call))

    return StructuredTool.from_function(
        func=func,
        coroutine=coroutine,
        name=tool.sent,
        description=tool.description,
        args_schema=tool.parameters,
        infer_schema=False,
        response_format="content_and_artifact",
        handle_tool_error=True,
    )


def _output(result: ToolExecutionResult) -> tuple[str, ToolExecutionResult]:
    if result.is_error:
        raise ToolException(model_text(result))
    return model_text(result), result
