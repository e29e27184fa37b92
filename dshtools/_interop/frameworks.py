"""What the framework adapters (``dshtools.agents``, ``dshtools.pydantic_ai``,
``dshtools.langchain``) share: which tools a framework is given, under which
name, and the one call each framework invocation becomes
(docs/contract.md#async). Package-internal; imports no framework.

Guarantees:

* ``exposed(registry, names)`` lists each selected tool once, in
  registration order, under a provider-valid name (the alias of
  docs/contract.md#a12); the registry keeps the user's name, and the call
  is made under it.
* ``framework_call`` never raises on what the model wrote: arguments that
  are not JSON become the ``MalformedArguments`` placeholder, answered with
  ``INVALID_ARGS`` by the registry (docs/contract.md#a11).
* Every call carries its own signal: the caller's when one was given to the
  adapter, otherwise a fresh controller's that nothing but the awaiting
  task's cancellation (inside ``aexecute``) aborts. No signal is shared by
  two calls unless the caller shared it.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING

from .._signal import AbortController, AbortSignal
from .._types.calls import ToolExecutionInput, ToolExecutionResult
from .calls import ExposedTool, listed_tools, object_schema_or_raise, parse_arguments, provider_text

if TYPE_CHECKING:
    from .._registry.registry import ToolRegistry

__all__ = ["ExposedTool", "call_signal", "exposed", "framework_call", "model_text"]


def exposed(registry: ToolRegistry, names: tuple[str, ...]) -> list[ExposedTool]:
    """The tools ``names`` of ``registry`` (every tool when ``names`` is
    empty), each once, in registration order, from one snapshot of the
    registry (``listed_tools``; docs/contract.md#a24). Raises ``TypeError``
    for a name that is not a ``str``, ``ValueError`` for one the registry
    does not hold, or when a selected tool's parameters are not an object
    schema."""
    for name in names:
        if not isinstance(name, str):
            raise TypeError(f"tool names must be str, not {type(name).__name__}")
    tools = listed_tools(registry)
    known = {tool.name for tool in tools}
    missing = [name for name in names if name not in known]
    if missing:
        raise ValueError(f"the registry has no tool named {missing[0]!r}")
    wanted = set(names) if names else known
    out = [tool for tool in tools if tool.name in wanted]
    for tool in out:
        object_schema_or_raise(tool.name, tool.parameters)
    return out


def call_signal(signal: AbortSignal | None) -> AbortSignal:
    """The signal of one call: ``signal`` itself, or a fresh controller's
    when the adapter was given none."""
    return AbortController().signal if signal is None else signal


def framework_call(
    tool: ExposedTool,
    arguments: object,
    *,
    call_id: str | None,
    signal: AbortSignal | None,
    agent: str | None = None,
    prefix: str = "call",
) -> ToolExecutionInput:
    """The call one framework invocation of ``tool`` becomes, on
    ``call_signal(signal)``. ``arguments`` is the model's JSON text or an
    already decoded mapping (checked as ``parse_arguments`` does, never
    raising); ``call_id`` is the framework's id for the call, or ``None``
    (or ``""``) for a fresh ``"<prefix>-<32 hex digits>"``."""
    if not call_id:
        call_id = f"{prefix}-{uuid.uuid4().hex}"
    if isinstance(arguments, Mapping) and not arguments:
        parsed: object = {}
    else:
        parsed = parse_arguments(arguments)
    return ToolExecutionInput(call_id, tool.name, parsed, call_signal(signal), agent=agent)


def model_text(result: ToolExecutionResult) -> str:
    """The text the model is sent for ``result``: its content's text, or a
    failure's ``Error: ...`` text (as every provider format sends it)."""
    return provider_text(result)
