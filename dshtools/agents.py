"""openai-agents adapter: a registry's tools as the Agents SDK's
``FunctionTool``s (docs/frameworks.md, docs/contract.md#async).

Install the extra: ``pip install 'dshtools[agents]'``. ``import dshtools``
never imports this module or the SDK.

Guarantees:

* **The registry's schema.** Each ``FunctionTool`` has the tool's
  provider-valid name (docs/contract.md#a12), description and parameters;
  ``strict_json_schema`` is the tool's ``strict`` (``True`` for a typed
  tool defined with ``strict=True``, whose schema already follows strict
  mode; ``False`` otherwise, so the SDK does not rewrite the schema).
* **Every invocation is one registry call.** ``on_invoke_tool(ctx,
  arguments_json)`` runs ``await registry.aexecute(call)`` with the call id
  the model gave (``ctx.tool_call_id``): pre-execute hooks, the approver,
  guards, around-dispatch wrappers, post-execute hooks and result observers
  all apply, and the body runs on the registry's backend.
* **A cancelled run stops the body.** When the SDK cancels the task that
  runs the tool (the run's task cancelled, a streamed run's ``cancel()``),
  ``aexecute`` aborts the call's signal and joins the body before the
  tool's task ends; a body blocked in ``dshtools.io`` stops at once. The
  SDK does not wait for a cancelled tool's task, so the run's caller may
  see ``CancelledError`` a moment before that join completes: the loop
  finishes it, and ``registry.close()`` waits for it.
* **Failures are tool output.** A ``ToolFailure`` is returned as its model
  text (``Error: <message>``), the output the SDK sends back to the model;
  a success as its content's text. Arguments that are not JSON are an
  ``INVALID_ARGS`` failure, never an exception (docs/contract.md#a11).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agents import FunctionTool, Tool
from agents.tool_context import ToolContext

from ._interop.frameworks import ExposedTool, exposed, framework_call, model_text
from ._signal import AbortSignal

if TYPE_CHECKING:
    from ._registry.registry import ToolRegistry

__all__ = ["function_tools"]


def function_tools(registry: ToolRegistry, *names: str, signal: AbortSignal | None = None) -> list[Tool]:
    """The tools ``names`` of ``registry`` (every tool when none is named),
    in registration order, as openai-agents ``FunctionTool``s for
    ``Agent(tools=...)`` (annotated as the SDK's ``list[Tool]``, the type
    that parameter takes, so the list goes there as it is).

    ``signal`` (optional) is the caller's signal every call carries: aborting
    it aborts the calls in flight. Without it each call gets a fresh
    controller's signal, aborted only when the SDK cancels the tool's task.
    The tools are a snapshot: a tool registered later is not among them, one
    unregistered later answers ``UNKNOWN_TOOL``.

    ``on_invoke_tool`` runs on the event loop of the run and never blocks it
    (the body runs on the registry's backend); it returns a ``str``. Raises
    ``TypeError`` for a name that is not a ``str``, ``ValueError`` for a name
    the registry does not hold or a tool whose parameters are not an object
    schema."""
    return [_function_tool(registry, tool, signal) for tool in exposed(registry, names)]


def _function_tool(registry: ToolRegistry, tool: ExposedTool, signal: AbortSignal | None) -> FunctionTool:
    async def on_invoke_tool(ctx: ToolContext[Any], arguments: str) -> str:
        agent = getattr(ctx.agent, "name", None)
        call = framework_call(
            tool,
            arguments,
            call_id=ctx.tool_call_id,
            signal=signal,
            agent=agent if isinstance(agent, str) else None,
        )
        return model_text(await registry.aexecute(call))

    return FunctionTool(
        name=tool.sent,
        description=tool.description,
        params_json_schema=tool.parameters,
        on_invoke_tool=on_invoke_tool,
        strict_json_schema=tool.strict,
    )
