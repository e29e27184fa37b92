"""pydantic-ai adapter: a registry as a pydantic-ai toolset
(docs/frameworks.md, docs/contract.md#async).

Install the extra: ``pip install 'dshtools[pydantic-ai]'``. ``import
dshtools`` never imports this module or pydantic-ai.

Guarantees:

* **The registry's schema, listed per run step.** ``get_tools`` lists the
  selected tools the registry holds at that moment, each under its
  provider-valid name (docs/contract.md#a12) with its description and
  parameters; ``strict`` is ``True`` for a tool defined with
  ``strict=True`` and left to pydantic-ai (``None``) otherwise. A tool
  without an ``is_concurrency_safe`` predicate is ``sequential`` (it runs
  alone, as such a tool does in a batch). Arguments are validated by the
  registry (``INVALID_ARGS``), not by pydantic-ai.
* **Every tool call is one registry call.** ``call_tool`` runs ``await
  registry.aexecute(call)`` with pydantic-ai's tool call id: the
  registry's hooks, approver, guards, wrappers and observers all apply, and
  the body runs on the registry's backend, never on the event loop.
* **A cancelled run stops the body.** Cancelling the task that awaits
  ``Agent.run`` (or anything that cancels the tool's task) aborts the
  call's signal; the body is joined before the cancellation goes on.
* **Failures reach the model.** A ``ToolFailure`` is raised as
  pydantic-ai's ``ToolFailed`` with its model text (``Error: <message>``):
  the model sees the failure and the tool's retry budget is not spent. A
  success returns its content's text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic_ai import RunContext, ToolDefinition
from pydantic_ai.exceptions import ToolFailed
from pydantic_ai.toolsets import AbstractToolset, ToolsetTool
from pydantic_core import SchemaValidator, core_schema

from ._interop.frameworks import ExposedTool, exposed, framework_call, model_text
from ._signal import AbortSignal

if TYPE_CHECKING:
    from ._registry.registry import ToolRegistry

__all__ = ["RegistryToolset", "toolset"]

# The registry validates the arguments (docs/contract.md#step-validate): pydantic-ai
# passes the decoded object through unchanged.
_ANY_ARGUMENTS = SchemaValidator(core_schema.dict_schema(core_schema.str_schema(), core_schema.any_schema()))


class RegistryToolset(AbstractToolset[Any]):
    """A pydantic-ai toolset whose tools are a ``ToolRegistry``'s
    (``toolset(registry, ...)`` builds one; see the module docstring for its
    guarantees). ``id`` is the id given, ``None`` by default."""

    def __init__(
        self,
        registry: ToolRegistry,
        names: tuple[str, ...] = (),
        *,
        signal: AbortSignal | None = None,
        id: str | None = None,
    ) -> None:
        exposed(registry, names)  # a wrong name is the caller's mistake, named here
        self._registry = registry
        self._names = names
        self._signal = signal
        self._id = id

    @property
    def id(self) -> str | None:
        return self._id

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        names = tuple(n for n in self._names if self._registry.get(n) is not None)
        if self._names and not names:
            return {}
        tools: dict[str, ToolsetTool[Any]] = {}
        for tool in exposed(self._registry, names):
            tools[tool.sent] = _ExposedToolsetTool(
                toolset=self,
                tool_def=ToolDefinition(
                    name=tool.sent,
                    parameters_json_schema=tool.parameters,
                    description=tool.description,
                    strict=True if tool.strict else None,
                    sequential=not tool.concurrency_safe,
                ),
                max_retries=1,
                args_validator=_ANY_ARGUMENTS,
                exposed=tool,
            )
        return tools

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        if not isinstance(tool, _ExposedToolsetTool):
            raise TypeError(f"tool {name!r} was not listed by this toolset")
        call = framework_call(tool.exposed, tool_args, call_id=ctx.tool_call_id, signal=self._signal)
        result = await self._registry.aexecute(call)
        if result.is_error:
            raise ToolFailed(model_text(result))
        return model_text(result)


@dataclass(kw_only=True)
class _ExposedToolsetTool(ToolsetTool[Any]):
    """A listed tool that remembers the registry tool it stands for."""

    exposed: ExposedTool


def toolset(
    registry: ToolRegistry, *names: str, signal: AbortSignal | None = None, id: str | None = None
) -> RegistryToolset:
    """The tools ``names`` of ``registry`` (every tool when none is named) as
    a pydantic-ai toolset, for ``Agent(toolsets=[...])``.

    ``signal`` (optional) is the caller's signal every call carries:
    aborting it aborts the calls in flight. Without it each call gets a fresh
    controller's signal, aborted only when its task is cancelled. ``id`` is
    the toolset's id (pydantic-ai needs one for durable execution). The
    listing is live: ``get_tools`` asks the registry on every run step.
    Calls run on the run's event loop and never block it. Raises
    ``TypeError`` for a name that is not a ``str``, ``ValueError`` for a
    name the registry does not hold."""
    return RegistryToolset(registry, names, signal=signal, id=id)
