"""Anthropic Messages API interop, without the SDK (docs/contract.md#anthropic,
docs/contract.md#a11, docs/contract.md#a12).

Three conversions, plain JSON in and out (SDK objects accepted on input):

* ``tools_param(registry)`` -- the registry's schemas as the ``tools``
  request parameter: ``[{"name", "description", "input_schema"}, ...]``,
  every name provider-valid.
* ``calls_from_message(message, signal=..., registry=...)`` -- the
  ``tool_use`` blocks of an assistant message's ``content`` as
  ``ToolExecutionInput``s: exactly one per block, in order.
* ``tool_results(calls, results)`` -- the ``content`` list of the next
  ``role: "user"`` message: one ``tool_result`` block per ``tool_use``, in
  order (``tool_use_id``, ``content``, ``is_error``).

Guarantees (the same rules as ``dshtools.openai``):

* **Model output never raises** (docs/contract.md#a11). A ``tool_use``
  block's ``input`` is an object already decoded by the API; one nested
  deeper than 1 000 levels ("nested too deeply") or holding a lone
  surrogate carries a ``MalformedArguments`` placeholder (``INVALID_ARGS``
  when executed; an ``input`` sent as a JSON string is parsed like OpenAI
  arguments). An empty or missing ``id``, an ``id`` already used earlier in
  the same message (the first block with it runs), or a block without a
  ``name`` carries an ``InvalidCall`` placeholder (``INVALID_CALL``). Other
  blocks (``text``, ``thinking``, server tool blocks the API runs itself)
  are not tool calls for this process and are skipped.
* **Results always encode as UTF-8**: lone surrogates become U+FFFD.
* **Names the API accepts** (docs/contract.md#a12): the same alias
  scheme as ``dshtools.openai`` (``alias_names``), mapped back by
  ``calls_from_message(..., registry=registry)``.
* Nothing here runs a tool, blocks, or touches the signal beyond handing it
  on.

Content shape: a ``tool_result``'s ``content`` is a **string** (the text
of the result's content blocks joined with ``"\\n"``, non-text blocks as
their JSON), which the API always accepts, including when it is empty.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypedDict

from ._interop.calls import (
    CallIds,
    MalformedArguments,
    as_mapping,
    assistant_fields,
    check_decoded,
    checked_call_id,
    field,
    paired,
    parse_arguments,
    provider_text,
    provider_tools,
    refuse_other_shapes,
)
from ._interop.names import Aliases, HasSchemas, alias_names, checked_name
from ._interop.repair import ReadsCalls, answers_for, repair_anthropic
from ._signal import AbortSignal
from ._types.calls import INVALID_CALL, InvalidCall, ToolExecutionInput, ToolExecutionResult

__all__ = [
    "INVALID_CALL",
    "InvalidCall",
    "MalformedArguments",
    "ToolParam",
    "ToolResultBlock",
    "alias_names",
    "calls_from_message",
    "repair_messages",
    "tool_result",
    "tool_results",
    "tools_param",
]


if TYPE_CHECKING:
    # mypy checks what is built here against the SDK's own parameter types,
    # so a user's code passes them to the SDK with no cast
    # (docs/contract.md#a18); nothing imports the SDK at run time.
    from anthropic.types import MessageParam, ToolParam
    from anthropic.types import ToolResultBlockParam as ToolResultBlock
else:

    class ToolParam(TypedDict):
        """One entry of the Messages API ``tools`` parameter (for type
        checkers: the SDK's ``anthropic.types.ToolParam``)."""

        name: str
        description: str
        input_schema: dict[str, Any]

    class ToolResultBlock(TypedDict):
        """One ``tool_result`` content block. ``is_error`` is ``True``
        exactly for failures (for type checkers: the SDK's
        ``anthropic.types.ToolResultBlockParam``)."""

        type: Literal["tool_result"]
        tool_use_id: str
        content: str
        is_error: bool


def tools_param(registry: HasSchemas) -> list[ToolParam]:
    """The Messages API ``tools`` parameter for every tool in ``registry``
    (a ``ToolRegistry``), in ``registry.schemas()`` order: ``{"name": ...,
    "description": ..., "input_schema": <JSON Schema object>}``.

    ``name`` matches ``^[a-zA-Z0-9_-]{1,64}$``: a registered name that does
    is sent unchanged, any other under its alias (``alias_names``;
    docs/contract.md#a12). Raises ``ValueError`` naming the tool when its
    ``parameters`` is not an object schema. The result is fresh, plain,
    mutable JSON: editing it does not touch the registry. Source:
    docs/contract.md#anthropic."""
    return [
        {"name": tool.sent, "description": tool.description, "input_schema": tool.parameters}
        for tool in provider_tools(registry)  # one snapshot (docs/contract.md#a24)
    ]


def calls_from_message(
    message: Mapping[str, Any] | object,
    *,
    signal: AbortSignal,
    agent: str | None = None,
    registry: HasSchemas | None = None,
    session: str | None = None,
) -> list[ToolExecutionInput]:
    """The ``tool_use`` blocks of an assistant message as
    ``ToolExecutionInput``s: one per block, in order, each with ``call_id``
    = the block's ``id`` (``""`` when it has none), ``name`` = its ``name``
    (an alias mapped back to its registered name when ``registry`` is
    given), ``arguments`` = its ``input``, the caller's ``signal``,
    ``agent`` and ``session`` (the journal's session:
    docs/contract.md#journal).

    ``message`` is a dict or any object with ``model_dump()`` (the SDK's
    ``Message``); a ``content`` that is a string has no tool calls (``[]``).
    Model output never raises (see the module docstring). Raises
    ``TypeError`` for a ``message`` that is neither a mapping nor an object
    with ``model_dump()``, a ``content`` that is neither a string nor a
    list, or a non-``AbortSignal``; ``ValueError`` for a ``role`` other than
    ``"assistant"``, and for a message with no ``tool_use`` block that
    holds Chat Completions ``tool_calls`` or ``choices``, or a Responses
    API ``output``: the error names the reader to use. Source:
    docs/contract.md#anthropic, docs/contract.md#a11, docs/contract.md#a12."""
    msg = assistant_fields(message, has="content", what="tool_use blocks", signal=signal)
    content = field(msg, "content")
    if content is None or isinstance(content, str):
        refuse_other_shapes(msg, reader="anthropic")
        return []
    if not isinstance(content, (list, tuple)):
        raise TypeError(f'"content" must be a string or a list of blocks, not {type(content).__name__}')
    aliases = Aliases.of(registry) if registry is not None else None
    ids = CallIds()
    out: list[ToolExecutionInput] = []
    for index, raw_block in enumerate(content):
        block = as_mapping(raw_block)
        if block is None:
            block = raw_block
        if field(block, "type") != "tool_use":
            continue
        where = f"content[{index}]"
        problem: str | None
        call_id, problem = ids.check(field(block, "id"), where)
        name, problem = checked_name(field(block, "name"), problem, f"{where}: the tool_use block has no name", aliases)
        raw_input = field(block, "input")
        if problem is not None:
            arguments: object = InvalidCall(problem, raw_input)
        elif isinstance(raw_input, str):
            arguments = parse_arguments(raw_input)
        else:
            arguments = check_decoded(raw_input)
        out.append(ToolExecutionInput(call_id, name, arguments, signal, agent=agent, session=session))
    if not out:
        refuse_other_shapes(msg, reader="anthropic")
    return out


def tool_result(call_id: str, result: ToolExecutionResult) -> ToolResultBlock:
    """``{"type": "tool_result", "tool_use_id": call_id, "content": <str>,
    "is_error": <bool>}`` for one result: ``content`` is the text of each of
    ``result.content``'s blocks joined with ``"\\n"`` (a failure's is
    ``"Error: <message>"``; a non-text block as its JSON); ``is_error`` is
    ``result.is_error``. Lone surrogates become U+FFFD. Raises
    ``TypeError`` for a non-``str`` ``call_id``. Source:
    docs/contract.md#anthropic."""
    return {
        "type": "tool_result",
        "tool_use_id": checked_call_id(call_id),
        "content": provider_text(result),
        "is_error": bool(result.is_error),
    }


def tool_results(calls: Sequence[ToolExecutionInput], results: Iterable[ToolExecutionResult]) -> list[ToolResultBlock]:
    """``tool_result`` for each ``(call, result)`` pair, in order: the
    ``content`` of the ``role: "user"`` message that answers the assistant
    message (one block per ``tool_use``, as the API requires). Raises
    ``ValueError`` when the two lengths differ, ``TypeError`` when
    ``calls`` holds something else (the arguments swapped). Source:
    docs/contract.md#anthropic."""
    return [tool_result(call.call_id, result) for call, result in paired(calls, results)]


def repair_messages(
    messages: Iterable[object], *, journal: ReadsCalls | None = None, session: str | None = None
) -> list[MessageParam]:
    """``messages`` (Anthropic Messages) made acceptable to the API and
    honest to the model: the message after each assistant message with
    ``tool_use`` blocks is a user message that opens with exactly one
    ``tool_result`` per ``tool_use``, in call order (a new user message
    when the next one is not a user's); a ``tool_result`` that answers no
    earlier ``tool_use`` is dropped, and a user message left empty goes
    with it (docs/contract.md#repair).

    A missing result is the journal's settled result for ``(session,
    id)`` where ``journal`` has one (``is_error`` as recorded), else an
    ``Error:`` text with ``is_error: true`` saying which of three things
    happened: the call never ran (safe to run again), it started and was
    stopped (effects possible), or its outcome is unknown (interrupted by a
    crash); without a journal, that no result was recorded and the call may
    have run.

    Returns a new list; ``messages`` and its messages are not changed (a
    user message whose blocks move is a new dict); repairing the result
    again gives an equal list; no clock data. Raises ``TypeError`` for
    something that is not a list of messages, ``ValueError`` for
    ``journal`` without ``session`` or the reverse. Runs on the calling
    thread; reads the journal once."""
    return repair_anthropic(messages, answers_for(journal, session))
