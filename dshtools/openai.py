"""OpenAI interop, without the SDK: Chat Completions (docs/contract.md#openai,
docs/contract.md#a11, docs/contract.md#a12) and the Responses API
(docs/contract.md#responses).

Three conversions for each API, plain JSON in and out (SDK objects accepted
on input):

* ``tools_param(registry)`` -- the registry's schemas as the Chat
  Completions ``tools`` request parameter: ``[{"type": "function",
  "function": {"name", "description", "parameters"}}, ...]``, every name
  provider-valid; ``responses_tools_param(registry, *names)`` -- the same
  as Responses ``function`` tools (``{"type": "function", "name",
  "description", "parameters", "strict"}``).
* ``calls_from_message(message, signal=..., registry=...)`` -- an assistant
  message's ``tool_calls`` as ``ToolExecutionInput``s: exactly one per model
  tool call, in order, all carrying the given caller signal;
  ``calls_from_response(response_or_items, signal=..., registry=...)`` --
  the same for a response's ``function_call`` output items.
* ``tool_message(call_id, result)`` / ``tool_messages(calls, results)`` --
  results as ``{"role": "tool", "tool_call_id": ..., "content": ...}``;
  ``function_call_output(s)`` -- as ``{"type": "function_call_output",
  "call_id": ..., "output": ...}`` input items.

Guarantees:

* **Model output never raises** (docs/contract.md#a11). Whatever the
  model wrote, each of its tool calls becomes one ``ToolExecutionInput``
  answered under the model's id:

  - arguments that are not valid JSON, nested deeper than 1 000 levels
    ("nested too deeply"), or holding a lone surrogate carry a
    ``MalformedArguments`` placeholder: executing the call gives
    ``INVALID_ARGS`` whose text says what is wrong, and the body never runs;
  - an empty or missing call id, an id already used earlier in the same
    message (the first call with it runs), a call type other than
    ``"function"`` (e.g. ``"custom"``), or a call without a function name
    carry an ``InvalidCall`` placeholder: executing the call gives
    ``INVALID_CALL``, no hook and no body runs.

  Only what is not model output raises: ``message`` that is neither a
  mapping nor an object with ``model_dump()``, a ``role`` other than
  ``"assistant"``, ``tool_calls`` that is not a list, a non-signal.
  ``calls_from_response`` follows the same rules for each ``function_call``
  item (ids from ``call_id``) and skips every other output item.
* **Tool messages and outputs always encode as UTF-8**: lone surrogates in
  a result's text or in an id become U+FFFD.
* **Names the provider accepts** (docs/contract.md#a12): ``tools_param``
  sends a name breaking ``^[a-zA-Z0-9_-]{1,64}$`` under an alias
  (``dshtools._interop.names.alias_names`` states the rule; the registry keeps
  the user's names), and ``calls_from_message(..., registry=registry)``
  maps aliases back.
* Nothing here runs a tool, blocks, or touches the signal beyond handing it
  on.

Content shape: a tool message's ``content`` (and a
``function_call_output``'s ``output``) is a **string**, the text of
the result's content blocks joined with ``"\\n"``; Chat Completions takes
only text for ``role: "tool"``, and every compatible server takes a string.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, Literal, TypedDict

from ._interop.calls import (
    CallIds,
    MalformedArguments,
    as_mapping,
    assistant_fields,
    checked_call_id,
    field,
    model_call,
    paired,
    provider_text,
    provider_tools,
    refuse_other_shapes,
    utf8_safe,
)
from ._interop.names import Aliases, HasSchemas, alias_names
from ._interop.repair import ReadsCalls, answers_for, repair_chat, repair_items
from ._interop.responses import function_calls, output_items
from ._signal import AbortSignal
from ._types.calls import INVALID_CALL, InvalidCall, ToolExecutionInput, ToolExecutionResult

if TYPE_CHECKING:
    # mypy checks what tools_param, responses_tools_param and
    # function_call_output(s) build against the SDK's own parameter types,
    # so each goes to client.chat.completions.create(tools=...) or
    # client.responses.create(tools=..., input=...) with no cast
    # (docs/contract.md#a18); nothing imports the SDK at run time.
    from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolParam
    from openai.types.responses import FunctionToolParam, ResponseInputItemParam, ResponseInputParam
    from openai.types.responses.response_input_param import FunctionCallOutput

__all__ = [
    "INVALID_CALL",
    "InvalidCall",
    "MalformedArguments",
    "ToolMessage",
    "alias_names",
    "calls_from_message",
    "calls_from_response",
    "function_call_output",
    "function_call_outputs",
    "repair_messages",
    "repair_response_items",
    "responses_tools_param",
    "tool_message",
    "tool_messages",
    "tools_param",
]


class ToolMessage(TypedDict):
    """One ``role: "tool"`` message. ``content`` is always a ``str`` at run
    time; it is annotated ``Any`` so that the dict is accepted wherever the
    OpenAI SDK expects ``ChatCompletionToolMessageParam`` (a ``TypedDict``'s
    items are invariant, and the SDK's ``content`` is a union whose members
    change between SDK versions)."""

    role: Literal["tool"]
    tool_call_id: str
    content: Any


def tools_param(registry: HasSchemas) -> list[ChatCompletionToolParam]:
    """The Chat Completions ``tools`` parameter for every tool in
    ``registry`` (a ``ToolRegistry``), in ``registry.schemas()`` order:
    ``{"type": "function", "function": {"name": ..., "description": ...,
    "parameters": <JSON Schema object>}}``.

    ``name`` matches ``^[a-zA-Z0-9_-]{1,64}$``: a registered name that does
    is sent unchanged, any other under its alias (``alias_names``;
    docs/contract.md#a12). Raises ``ValueError`` naming the tool when its
    ``parameters`` is not an object schema (providers reject the whole
    request otherwise). The result is a fresh, plain, mutable JSON
    structure: editing it does not touch the registry. A tool defined with
    ``strict=True`` also has ``"strict": true`` (docs/contract.md#typed-tools)."""
    tools: list[ChatCompletionToolParam] = []
    for tool in provider_tools(registry):  # one snapshot (docs/contract.md#a24)
        entry: ChatCompletionToolParam = {
            "type": "function",
            "function": {"name": tool.sent, "description": tool.description, "parameters": tool.parameters},
        }
        # A tool defined with strict=True (its parameters follow strict
        # mode's rules) is marked so: OpenAI then guarantees arguments
        # matching them.
        if tool.strict:
            entry["function"]["strict"] = True
        tools.append(entry)
    return tools


def calls_from_message(
    message: Mapping[str, Any] | object,
    *,
    signal: AbortSignal,
    agent: str | None = None,
    registry: HasSchemas | None = None,
    session: str | None = None,
) -> list[ToolExecutionInput]:
    """An assistant message's ``tool_calls`` as ``ToolExecutionInput``s: one
    per model tool call, in order, each with ``call_id`` = the call's ``id``
    (``""`` when it has none), ``name`` = ``function.name`` (an alias mapped
    back to its registered name when ``registry`` is given), the caller's
    ``signal``, ``agent`` and ``session`` (the journal's session, required
    by a journaled registry: docs/contract.md#journal).

    ``message`` is a dict or any object with ``model_dump()`` (the OpenAI
    SDK's ``ChatCompletionMessage``). ``function.arguments`` is parsed as
    JSON (``NaN``/``Infinity`` are not JSON; an empty string means ``{}``;
    an object already decoded is taken as is). Model output never raises
    (see the module docstring): a call that is wrong carries a placeholder
    and its execution is an ``INVALID_ARGS`` or ``INVALID_CALL`` failure.

    A message without ``tool_calls`` (or with ``null``/``[]``) gives ``[]``.
    Raises ``TypeError`` for a ``message`` that is neither a mapping nor an
    object with ``model_dump()``, ``tool_calls`` that is not a list, or a
    non-``AbortSignal``; ``ValueError`` for a ``role`` other than
    ``"assistant"``, and for a message with no ``tool_calls`` that is a
    whole response (``choices``), a Responses API response (``output``)
    or holds Anthropic ``tool_use`` blocks: the error names the reader
    to use. Source: docs/contract.md#openai, docs/contract.md#a11,
    docs/contract.md#a12."""
    msg = assistant_fields(message, has="tool_calls", what="tool calls", signal=signal)
    calls = field(msg, "tool_calls")
    if not calls:
        refuse_other_shapes(msg, reader="openai")
    if calls is None:
        return []
    if not isinstance(calls, (list, tuple)):
        raise TypeError(f'"tool_calls" must be a list, not {type(calls).__name__}')
    aliases = Aliases.of(registry) if registry is not None else None
    ids = CallIds()
    model = partial(model_call, signal=signal, agent=agent, aliases=aliases, session=session)
    out: list[ToolExecutionInput] = []
    for index, raw_call in enumerate(calls):
        where = f"tool_calls[{index}]"
        call = as_mapping(raw_call)
        if call is None:
            call = raw_call if hasattr(raw_call, "id") else None
        if call is None:
            shape = f"{where} is not a tool call object: got {type(raw_call).__name__}"
            out.append(ToolExecutionInput("", "", InvalidCall(shape), signal, agent=agent, session=session))
            continue
        problem: str | None
        call_id, problem = ids.check(field(call, "id"), where)
        kind = field(call, "type", "function")
        function = field(call, "function") if kind in ("function", None) else field(call, kind)
        if problem is None and kind not in ("function", None):
            problem = f'{where}: unsupported call type {utf8_safe(str(kind))!r} (only "function" tool calls run)'
        raw_name = field(function, "name") if function is not None else None
        # A custom tool call carries "input" text where a function call has "arguments".
        raw_arguments = field(function, "arguments", field(function, "input", "")) if function is not None else ""
        out.append(model(call_id, problem, raw_name, raw_arguments, where))
    return out


def tool_message(call_id: str, result: ToolExecutionResult) -> ToolMessage:
    """``{"role": "tool", "tool_call_id": call_id, "content": <str>}`` for
    one result.

    ``content`` is a **string**: the text of each of ``result.content``'s
    blocks joined with ``"\\n"`` (a failure's is ``"Error: <message>"``).
    A non-text block is rendered as its JSON, never dropped. Lone
    surrogates (in the text or the id) become U+FFFD, so the message always
    encodes as UTF-8. The result's ``additional_contexts`` are not part of
    the tool message: where they go in the conversation is the agent
    loop's decision. Raises ``TypeError`` for a non-``str`` ``call_id``.
    Source: docs/contract.md#openai, docs/contract.md#a11."""
    return {"role": "tool", "tool_call_id": checked_call_id(call_id), "content": provider_text(result)}


def tool_messages(calls: Sequence[ToolExecutionInput], results: Iterable[ToolExecutionResult]) -> list[ToolMessage]:
    """``tool_message`` for each ``(call, result)`` pair, in order (the
    order Chat Completions expects after the assistant message): one message
    per model tool call, since ``calls_from_message`` gave one input per
    call. Raises ``ValueError`` when the two lengths differ, ``TypeError``
    when ``calls`` holds something else (the arguments swapped). Source:
    docs/contract.md#openai, docs/contract.md#a11."""
    return [tool_message(call.call_id, result) for call, result in paired(calls, results)]


# ---------------------------------------------------------------------------
# The Responses API (docs/contract.md#responses)


def responses_tools_param(registry: HasSchemas, *names: str) -> list[FunctionToolParam]:
    """The Responses API ``tools`` parameter: ``{"type": "function",
    "name": ..., "description": ..., "parameters": <JSON Schema object>,
    "strict": <bool>}`` for every tool in ``registry`` (a ``ToolRegistry``),
    in ``registry.schemas()`` order, or for the tools ``names`` (registered
    names) in that order, each once.

    ``strict`` is always present: ``True`` for a tool defined with
    ``strict=True`` (docs/contract.md#typed-tools), else ``False``. The
    Responses API reads a missing ``strict`` as "make the schema strict
    where it can" (every property required, no other properties), which
    would make the model fill in optional arguments (docs/batch-and-openai.md). Names
    follow ``tools_param``'s alias rule, computed over the whole registry
    whatever ``names`` selects, so ``calls_from_response(...,
    registry=registry)`` maps them back. Raises ``ValueError`` for a name
    not in the registry and, as ``tools_param``, for a tool whose
    ``parameters`` is not an object schema. The result is fresh, plain,
    mutable JSON. Source: docs/contract.md#a12, docs/contract.md#responses."""
    listed = provider_tools(registry)  # one snapshot (docs/contract.md#a24)
    tools: list[FunctionToolParam] = [
        {
            "type": "function",
            "name": tool.sent,
            "description": tool.description,
            "parameters": tool.parameters,
            "strict": tool.strict,
        }
        for tool in listed
    ]
    if not names:
        return tools
    index = {tool.name: i for i, tool in enumerate(listed)}
    for name in names:
        if name not in index:
            raise ValueError(f"no tool named {name!r} in the registry")
    return [tools[index[name]] for name in dict.fromkeys(names)]


def calls_from_response(
    response_or_items: object,
    *,
    signal: AbortSignal,
    agent: str | None = None,
    registry: HasSchemas | None = None,
    session: str | None = None,
) -> list[ToolExecutionInput]:
    """The ``function_call`` items of a Responses API response as
    ``ToolExecutionInput``s: one per item, in output order, each with
    ``call_id`` = the item's ``call_id`` (``""`` when it has none),
    ``name`` = its ``name`` (an alias mapped back to its registered name
    when ``registry`` is given), the caller's ``signal``, ``agent`` and
    ``session`` (the journal's session: docs/contract.md#journal).

    ``response_or_items`` is the SDK's ``Response`` (or its JSON), its
    ``output`` list, or a list of items (dicts or SDK objects). Other items
    (``message``, ``reasoning``, ``web_search_call``, a custom tool's
    call, ...) are skipped. ``arguments`` is parsed as ``calls_from_message``
    parses ``function.arguments``, and model output never raises: a call
    whose arguments are not JSON, too deep or hold a lone surrogate
    executes to ``INVALID_ARGS``; one whose ``call_id`` is missing, empty
    or repeats an earlier one, or that has no ``name``, to ``INVALID_CALL``,
    with the texts of the Chat Completions reader (docs/contract.md#a11).

    Raises ``TypeError`` for a non-``AbortSignal``, for an argument that is
    neither a response nor a list, and for an ``output`` that is not a
    list; ``ValueError`` for a mapping without ``output`` (a Chat
    Completions response or message, an Anthropic message: the error names
    the reader to use). Source: docs/contract.md#responses."""
    if not isinstance(signal, AbortSignal):
        raise TypeError(f"signal must be an AbortSignal, not {type(signal).__name__}")
    items = output_items(response_or_items)
    aliases = Aliases.of(registry) if registry is not None else None
    return function_calls(items, signal=signal, agent=agent, aliases=aliases, session=session)


def function_call_output(call_id: str, result: ToolExecutionResult) -> FunctionCallOutput:
    """``{"type": "function_call_output", "call_id": call_id, "output":
    <str>}`` for one result: ``output`` is the text ``tool_message`` gives
    as ``content`` (text blocks joined with ``"\\n"``, other blocks as
    JSON, a failure's ``Error: <message>``, never empty for a failure,
    always UTF-8). Raises ``TypeError`` for a non-``str`` ``call_id``.
    Source: docs/contract.md#responses, docs/contract.md#a18."""
    return {"type": "function_call_output", "call_id": checked_call_id(call_id), "output": provider_text(result)}


def function_call_outputs(
    calls: Sequence[ToolExecutionInput], results: Iterable[ToolExecutionResult]
) -> ResponseInputParam:
    """``function_call_output`` for each ``(call, result)`` pair, in order:
    the input items of the next ``client.responses.create(input=...)``
    (after the response's output items, or alone with
    ``previous_response_id``). Typed as the SDK's ``ResponseInputParam``
    (a list of ``ResponseInputItemParam``), so it is accepted as ``input=``
    as it is. Raises ``ValueError`` when the two lengths differ,
    ``TypeError`` when ``calls`` holds something else. Source:
    docs/contract.md#responses."""
    return [function_call_output(call.call_id, result) for call, result in paired(calls, results)]


def repair_messages(
    messages: Iterable[object], *, journal: ReadsCalls | None = None, session: str | None = None
) -> list[ChatCompletionMessageParam]:
    """``messages`` (Chat Completions) made acceptable to the API and honest
    to the model: each assistant message's ``tool_calls`` followed by
    exactly one ``role: "tool"`` message per call, in call order; a tool
    message that answers no earlier call dropped (docs/contract.md#repair).

    A missing result is the journal's settled result for ``(session,
    call_id)`` where ``journal`` (``dshtools.durable.SqliteJournal`` or
    ``PostgresJournal``) has one, else an ``Error:`` text saying which of
    three things happened: the call never ran (safe to run again), it
    started and was stopped (effects possible), or its outcome is unknown
    (interrupted by a crash). Without a journal the text says no result was
    recorded and the call may have run.

    Returns a new list holding the input's own message objects and the new
    tool messages; ``messages`` is not changed; repairing the result again
    gives an equal list; no clock data. Raises ``TypeError`` for something
    that is not a list of messages, ``ValueError`` for ``journal`` without
    ``session`` or the reverse. Runs on the calling thread; reads the
    journal once."""
    return repair_chat(messages, answers_for(journal, session))


def repair_response_items(
    items: Iterable[object], *, journal: ReadsCalls | None = None, session: str | None = None
) -> list[ResponseInputItemParam]:
    """Responses API input ``items`` with every ``function_call`` item
    answered by exactly one later ``function_call_output``: a missing one
    is placed right after its call's run of ``function_call`` (and
    ``reasoning``) items, with the text ``repair_messages`` would give; an
    output answering no earlier call is dropped; present outputs stay where
    they are (docs/contract.md#repair). Same guarantees and errors as
    ``repair_messages``."""
    return repair_items(items, answers_for(journal, session))
