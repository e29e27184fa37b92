"""OpenAI Chat Completions interop, without the SDK (docs/contract.md §6).

Three conversions, all plain ``dict``/``list`` JSON in and out:

* ``tools_param(registry)`` -- the registry's schemas as the ``tools``
  request parameter: ``[{"type": "function", "function": {"name",
  "description", "parameters"}}, ...]``.
* ``calls_from_message(message, signal=...)`` -- an assistant message's
  ``tool_calls`` as ``ToolExecutionInput``s, in order, all carrying the
  given caller signal.
* ``tool_message(call_id, result)`` / ``tool_messages(calls, results)`` --
  results as ``{"role": "tool", "tool_call_id": ..., "content": ...}``.

Guarantees:

* **Malformed model output is a tool result, never an exception.** The
  model writes ``function.arguments`` as a JSON *string*, and it can be
  broken (truncated, single-quoted, ``NaN``). Such a call still becomes a
  ``ToolExecutionInput``; its ``arguments`` is a ``MalformedArguments``
  value, which the registry's materialization (docs/contract.md §3 step 1) rejects,
  so executing the call yields an ``INVALID_ARGS`` failure whose message
  names the JSON error. The model sees what it got wrong and can retry.
* Only the *shape* of the message is the caller's problem: a message that
  is not an object, ``tool_calls`` that is not a list, a call without
  ``id`` or ``function.name``, duplicate ids -- these raise ``TypeError``/
  ``ValueError`` (they mean the transcript itself is broken).
* Nothing here runs a tool, blocks, or touches the signal beyond handing it
  on.

Content shape (a decision, see ``tool_message``): a tool message's
``content`` is a **string**, the text of the result's content blocks
joined with ``"\\n"``; Chat Completions accepts only text for ``role:
"tool"``, and every compatible server accepts a string.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

import attrs

from ._freeze import thaw
from ._signal import AbortSignal
from ._types import ToolExecutionInput, ToolExecutionResult

__all__ = [
    "MalformedArguments",
    "calls_from_message",
    "tool_message",
    "tool_messages",
    "tools_param",
]


class _HasSchemas(Protocol):
    def schemas(self) -> list[dict[str, Any]]: ...


def tools_param(registry: _HasSchemas) -> list[dict[str, Any]]:
    """The Chat Completions ``tools`` parameter for every tool in
    ``registry`` (a ``ToolRegistry``), in ``registry.schemas()`` order:
    ``{"type": "function", "function": {"name": ..., "description": ...,
    "parameters": <JSON Schema object>}}``. The result is a fresh, plain,
    mutable JSON structure (``dict``/``list``): editing it does not touch
    the registry. Source: docs/contract.md §6."""
    out: list[dict[str, Any]] = []
    for schema in registry.schemas():
        plain = thaw(schema)
        out.append(
            {
                "type": "function",
                "function": {
                    "name": plain["name"],
                    "description": plain.get("description", ""),
                    "parameters": plain.get("parameters", {"type": "object", "properties": {}}),
                },
            }
        )
    return out


@attrs.frozen
class MalformedArguments:
    """The ``arguments`` of a call whose ``function.arguments`` string is not
    valid JSON. ``raw`` is the string exactly as the model sent it;
    ``error`` says what is wrong (``json.JSONDecodeError``'s message, with
    line and column).

    Not a JSON value, so the registry rejects it at materialization
    (docs/contract.md §3 step 1) and the call's result is an ``INVALID_ARGS``
    failure, with precedence over everything else (docs/contract.md §7), whose
    text is ``Error: invalid arguments: arguments are not valid JSON:
    <error> at $`` (the freeze step reads ``__json_problem__``).
    """

    raw: str
    error: str

    @property
    def message(self) -> str:
        """``arguments are not valid JSON: <error>`` -- the text the model
        should see."""
        return f"arguments are not valid JSON: {self.error}"

    @property
    def __json_problem__(self) -> str:
        """Read by the registry's materialization (``dshtools._freeze``) to
        word the ``INVALID_ARGS`` message."""
        return self.message

    def __str__(self) -> str:
        return self.message


def _reject_constant(name: str) -> object:
    raise ValueError(f"{name} is not valid JSON")


def _parse_arguments(raw: object) -> object:
    if isinstance(raw, Mapping):
        return dict(raw)  # some compatible servers send an object already
    if not isinstance(raw, str):
        return MalformedArguments(repr(raw), f"expected a JSON string, got {type(raw).__name__}")
    if not raw.strip():
        return {}  # a call of a no-argument tool is often sent with ""
    try:
        return json.loads(raw, parse_constant=_reject_constant)
    except ValueError as exc:  # json.JSONDecodeError is a ValueError
        return MalformedArguments(raw, str(exc))


def calls_from_message(
    message: Mapping[str, Any], *, signal: AbortSignal, agent: str | None = None
) -> list[ToolExecutionInput]:
    """Turn an assistant message's ``tool_calls`` into ``ToolExecutionInput``s
    (one per call, in order), each with ``call_id`` = the call's ``id``,
    ``name`` = ``function.name``, the caller's ``signal`` (required; a
    non-``AbortSignal`` raises ``TypeError``) and ``agent``.

    ``function.arguments`` is parsed as JSON (``NaN``/``Infinity`` are not
    JSON); an empty string means ``{}``; an object already decoded is taken
    as is. Anything unparsable becomes ``MalformedArguments`` and surfaces
    as an ``INVALID_ARGS`` result when the call is executed -- never as an
    exception here.

    A message without ``tool_calls`` (or with ``null``/``[]``) gives ``[]``.
    Raises ``TypeError`` when ``message``, ``tool_calls`` or a call has the
    wrong JSON type, and ``ValueError`` for a message whose ``role`` is not
    ``"assistant"``, a call whose ``type`` is not ``"function"``, a missing
    or empty ``id``/``function.name``, or ids repeated within the message.
    Source: docs/contract.md §6.
    """
    if not isinstance(signal, AbortSignal):
        raise TypeError(f"signal must be an AbortSignal, not {type(signal).__name__}")
    if not isinstance(message, Mapping):
        raise TypeError(f"message must be a JSON object, not {type(message).__name__}")
    role = message.get("role", "assistant")
    if role != "assistant":
        raise ValueError(f'tool calls come from an "assistant" message, not role {role!r}')
    calls = message.get("tool_calls")
    if calls is None:
        return []
    if not isinstance(calls, list):
        raise TypeError(f'"tool_calls" must be a list, not {type(calls).__name__}')
    out: list[ToolExecutionInput] = []
    seen: set[str] = set()
    for index, call in enumerate(calls):
        where = f"tool_calls[{index}]"
        if not isinstance(call, Mapping):
            raise TypeError(f"{where} must be a JSON object, not {type(call).__name__}")
        kind = call.get("type", "function")
        if kind != "function":
            raise ValueError(f'{where}: unsupported call type {kind!r} (only "function")')
        call_id = call.get("id")
        if not isinstance(call_id, str) or not call_id:
            raise ValueError(f'{where}: "id" must be a non-empty string')
        if call_id in seen:
            raise ValueError(f"{where}: duplicate call id {call_id!r}")
        seen.add(call_id)
        function = call.get("function")
        if not isinstance(function, Mapping):
            raise ValueError(f'{where}: "function" must be a JSON object')
        name = function.get("name")
        if not isinstance(name, str) or not name:
            raise ValueError(f'{where}: "function.name" must be a non-empty string')
        arguments = _parse_arguments(function.get("arguments", ""))
        out.append(ToolExecutionInput(call_id, name, arguments, signal, agent=agent))
    return out


def _block_text(block: object) -> str:
    if isinstance(block, Mapping) and block.get("type") == "text" and isinstance(block.get("text"), str):
        text: str = block["text"]
        return text
    # A non-text block (an image, a resource link) has no place in a
    # Chat Completions tool message: render it as JSON rather than drop it.
    return json.dumps(thaw(block), ensure_ascii=False, sort_keys=True)


def tool_message(call_id: str, result: ToolExecutionResult) -> dict[str, Any]:
    """``{"role": "tool", "tool_call_id": call_id, "content": <str>}`` for
    one result.

    ``content`` is a **string**: the text of each of ``result.content``'s
    blocks joined with ``"\\n"`` (a failure's is ``"Error: <message>"``).
    A non-text block is rendered as its JSON, never dropped. The result's
    ``additional_contexts`` are not part of the tool message: where they go
    in the conversation is the agent loop's decision. Raises ``TypeError``
    for a non-``str`` ``call_id``. Source: docs/contract.md §6.
    """
    if not isinstance(call_id, str):
        raise TypeError(f"call_id must be a str, not {type(call_id).__name__}")
    return {
        "role": "tool",
        "tool_call_id": call_id,
        "content": "\n".join(_block_text(b) for b in result.content),
    }


def tool_messages(calls: Sequence[ToolExecutionInput], results: Iterable[ToolExecutionResult]) -> list[dict[str, Any]]:
    """``tool_message`` for each ``(call, result)`` pair, in order (the
    order Chat Completions expects after the assistant message). Raises
    ``ValueError`` when the two lengths differ. Source: docs/contract.md §6."""
    results = list(results)
    if len(results) != len(calls):
        raise ValueError(f"{len(calls)} calls but {len(results)} results")
    return [tool_message(call.call_id, result) for call, result in zip(calls, results, strict=False)]
