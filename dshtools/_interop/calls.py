"""What the provider formats share (docs/contract.md#openai,
docs/contract.md#a11, docs/contract.md#anthropic):
reading model output that never raises, and text that always encodes as
UTF-8; JSON text itself is read by ``json_text``, tool names are
``names``'. Used by ``dshtools.openai`` and ``dshtools.anthropic``;
package-internal.

Guarantees:

* ``parse_arguments`` and ``check_decoded`` never raise on any input: what
  the model wrote is either a JSON value or a ``MalformedArguments``
  placeholder, which the registry answers with ``INVALID_ARGS`` (its
  ``__json_problem__`` words the message).
* Nesting deeper than ``MAX_DEPTH`` (1 000) levels is refused as "nested too
  deeply", whatever the parser could do; shallower text parses whatever the
  calling thread's stack depth, because deep text is parsed by an iterative
  parser (no recursion) whenever the C decoder could run out of stack.
* An ``InvalidCall`` placeholder makes the registry answer the call with
  ``INVALID_CALL`` before anything else runs (no hook, no body).
* ``utf8_safe`` text always encodes as UTF-8: each lone surrogate becomes
  U+FFFD; valid pairs are kept as the character they encode.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from .._types.calls import InvalidCall, ToolExecutionInput
from .json_text import MAX_DEPTH, TooDeep, decode_json
from .names import Aliases, HasSchemas, alias_names, checked_name, registry_schemas

__all__ = [
    "CallIds",
    "ExposedTool",
    "MalformedArguments",
    "as_mapping",
    "assistant_fields",
    "check_decoded",
    "checked_call_id",
    "failure_text",
    "field",
    "listed_tools",
    "model_call",
    "object_schema_or_raise",
    "paired",
    "parse_arguments",
    "provider_text",
    "provider_tools",
    "refuse_other_shapes",
    "result_text",
    "utf8_safe",
]

# ---------------------------------------------------------------------------
# Placeholders the registry recognises


@attrs.frozen
class MalformedArguments:
    """The ``arguments`` of a call whose arguments cannot be a JSON value:
    not valid JSON, nested deeper than 1 000 levels, or holding a lone
    surrogate. ``raw`` is what the model sent (its ``repr`` when it was not
    a string); ``error`` says what is wrong; ``message`` is the whole text
    the model is shown (``<what>: <error>``).

    Not a JSON value, so the registry rejects it at materialization
    (docs/contract.md#step-validate) and the call's result is an ``INVALID_ARGS``
    failure, with precedence over everything else (docs/contract.md#precedence),
    whose text is ``Error: invalid arguments: <message> at $`` (the freeze
    step reads ``__json_problem__``).
    """

    raw: str
    error: str
    what: str = "arguments are not valid JSON"

    @property
    def message(self) -> str:
        """``<what>: <error>``, e.g. ``arguments are not valid JSON:
        Expecting value: line 1 column 1 (char 0)`` -- the text the model
        should see."""
        return f"{self.what}: {self.error}"

    @property
    def __json_problem__(self) -> str:
        """Read by the registry's materialization (``dshtools._core.freeze``) to
        word the ``INVALID_ARGS`` message."""
        return self.message

    def __str__(self) -> str:
        return self.message


def _too_deep(raw: str) -> MalformedArguments:
    return MalformedArguments(raw, f"more than {MAX_DEPTH} levels", "arguments are nested too deeply")


def _lone_surrogate(raw: str, where: str) -> MalformedArguments:
    return MalformedArguments(raw, f"{where} holds a lone surrogate (not Unicode text)", "arguments are not valid text")


# ---------------------------------------------------------------------------
# Parsing argument text


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _find_lone_surrogate(value: object) -> str | None:
    """The JSON path of the first string (key or value) in ``value`` that
    holds a lone surrogate, or ``None``. Iterative; ``value`` is at most
    ``MAX_DEPTH`` deep."""
    todo: list[tuple[object, str]] = [(value, "$")]
    while todo:
        item, path = todo.pop()
        if isinstance(item, str):
            if not _encodable(item):
                return path
        elif isinstance(item, Mapping):
            for k, v in item.items():
                if isinstance(k, str) and not _encodable(k):
                    return f"a key in {path}"
                todo.append((v, f"{path}.{k}" if isinstance(k, str) and k.isidentifier() else f"{path}[{k!r}]"))
        elif isinstance(item, (list, tuple)):
            todo.extend((v, f"{path}[{i}]") for i, v in enumerate(item))
    return None


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def parse_arguments(raw: object) -> object:
    """The model's arguments as a JSON value, or a ``MalformedArguments``.
    Never raises.

    * a ``str``: parsed as JSON (``NaN``/``Infinity`` are not JSON; an empty
      or blank string means ``{}``, as no-argument calls are often sent);
      invalid text, nesting deeper than 1 000 levels, or a lone surrogate
      (a ``\\ud800`` escape with no pair) give ``MalformedArguments``;
    * a mapping (some compatible servers send the object already decoded):
      checked as ``check_decoded`` does;
    * anything else: ``MalformedArguments`` ("expected a JSON string").
    Source: docs/contract.md#a11."""
    try:
        if isinstance(raw, Mapping):
            return check_decoded(raw)
        if not isinstance(raw, str):
            return MalformedArguments(_safe_repr(raw), f"expected a JSON string, got {type(raw).__name__}")
        if not raw.strip():
            return {}
        value = decode_json(raw)
        if _SURROGATE_ESCAPE.search(raw) is not None or not _encodable(raw):
            where = _find_lone_surrogate(value)
            if where is not None:
                return _lone_surrogate(raw, where)
        return value
    except TooDeep:
        return _too_deep(raw if isinstance(raw, str) else _safe_repr(raw))
    except ValueError as exc:  # json.JSONDecodeError, a rejected constant
        return MalformedArguments(raw if isinstance(raw, str) else _safe_repr(raw), str(exc))
    except (RecursionError, MemoryError) as exc:
        return MalformedArguments(raw if isinstance(raw, str) else _safe_repr(raw), type(exc).__name__)


def check_decoded(value: object) -> object:
    """An already decoded argument value (an Anthropic ``tool_use`` block's
    ``input``, or an object a compatible server sent): ``value`` itself when
    it is at most 1 000 levels deep and holds no lone surrogate, else a
    ``MalformedArguments``. A mapping is copied to a plain ``dict`` at the
    top level. Never raises. Source: docs/contract.md#a11,
    docs/contract.md#anthropic."""
    try:
        depth = _depth(value)
        if depth > MAX_DEPTH:
            return _too_deep(_safe_repr(value, shallow=True))
        where = _find_lone_surrogate(value)
        if where is not None:
            return _lone_surrogate(_safe_repr(value, shallow=True), where)
        return dict(value) if isinstance(value, Mapping) else value
    except Exception as exc:  # a hostile mapping or sequence
        return MalformedArguments(_safe_repr(value, shallow=True), f"cannot read the arguments: {type(exc).__name__}")


def _depth(value: object) -> int:
    """Nesting depth of containers (a scalar is 0), iterative; stops
    counting past ``MAX_DEPTH + 1``; a container seen twice on one path
    (a cycle) counts as too deep."""
    deepest = 0
    todo: list[tuple[object, int]] = [(value, 0)]
    seen: set[int] = set()
    while todo:
        item, level = todo.pop()
        if isinstance(item, (Mapping, list, tuple)):
            level += 1
            if level > MAX_DEPTH or id(item) in seen:
                return MAX_DEPTH + 1
            seen.add(id(item))
            deepest = max(deepest, level)
            children = item.values() if isinstance(item, Mapping) else item
            todo.extend((child, level) for child in children)
    return deepest


def _safe_repr(value: object, *, shallow: bool = False) -> str:
    if shallow:
        return f"<{type(value).__name__}>"
    try:
        return utf8_safe(repr(value))
    except Exception:
        return f"<{type(value).__name__}>"


# ---------------------------------------------------------------------------
# Reading SDK objects and dicts alike


def as_mapping(obj: object) -> Mapping[str, Any] | None:
    """``obj`` itself when it is a mapping; ``obj.model_dump()`` when it has
    one (pydantic models: the OpenAI and Anthropic SDKs' message objects);
    else ``None``. Never raises (a failing ``model_dump`` gives ``None``,
    and callers fall back to attribute access through ``field``)."""
    if isinstance(obj, Mapping):
        return obj
    dump = getattr(obj, "model_dump", None)
    if callable(dump):
        try:
            dumped = dump()
        except Exception:
            return None
        if isinstance(dumped, Mapping):
            return dumped
    return None


def field(obj: object, key: str, default: Any = None) -> Any:
    """``obj[key]`` for a mapping, else the attribute ``key``; ``default``
    when absent. Never raises."""
    try:
        if isinstance(obj, Mapping):
            return obj.get(key, default)
        return getattr(obj, key, default)
    except Exception:
        return default


# ---------------------------------------------------------------------------
# Text that always encodes


def utf8_safe(text: str) -> str:
    """``text`` with each lone surrogate replaced by U+FFFD (a valid
    surrogate pair becomes the character it encodes), so the result always
    encodes as UTF-8 (docs/contract.md#a11). ``text`` itself when it
    already encodes."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text


def model_call(
    call_id: str,
    problem: str | None,
    name: object,
    arguments: object,
    where: str,
    *,
    signal: Any,
    agent: str | None,
    aliases: Aliases | None,
    session: str | None = None,
) -> ToolExecutionInput:
    """One model function call under ``call_id`` with the caller's ``signal``
    (an ``AbortSignal``): ``arguments`` parsed, or an ``InvalidCall`` when
    the call has a ``problem`` or no name (``where`` locates it). Never
    raises on model output (docs/contract.md#a11). ``session`` is the
    journal's session (docs/contract.md#journal)."""
    name, problem = checked_name(name, problem, f"{where}: the call has no function name", aliases)
    parsed = InvalidCall(problem, arguments) if problem is not None else parse_arguments(arguments)
    return ToolExecutionInput(call_id, name, parsed, signal, agent=agent, session=session)


@attrs.frozen(kw_only=True)
class ExposedTool:
    """One registry tool as a provider or a framework is given it: ``name``
    (registered), ``sent`` (the provider-valid name the model sees),
    ``description``, ``parameters`` (a fresh, plain, mutable JSON Schema),
    ``strict`` (the tool was defined with ``strict=True``) and
    ``concurrency_safe`` (the tool has an ``is_concurrency_safe``
    predicate, so some of its calls may overlap; without one every call is
    exclusive, as in a batch)."""

    name: str
    sent: str
    description: str
    parameters: dict[str, Any]
    strict: bool
    concurrency_safe: bool


def listed_tools(registry: HasSchemas) -> list[ExposedTool]:
    """Every tool of ``registry``, in registration order, read from one
    snapshot of it (docs/contract.md#a24): a tool registered or
    unregistered meanwhile by another thread is wholly in the listing or
    wholly out of it, and each entry's fields are its own definition's.

    A ``ToolRegistry`` is read once (its tools are a copy-on-write map);
    any other object with ``schemas()`` is read through ``schemas()`` once,
    ``strict`` and ``concurrency_safe`` from its ``get(name)`` when it has
    one (``False`` otherwise). Raises ``TypeError`` for a ``registry``
    without ``schemas()``."""
    from .._core.freeze import thaw
    from .._registry.registry import ToolRegistry, registered

    if isinstance(registry, ToolRegistry):
        pairs: list[tuple[dict[str, Any], object]] = [(d.schema(), d) for d in registered(registry)]
    else:
        get = getattr(registry, "get", None)
        schemas = [thaw(schema) for schema in registry_schemas(registry)]
        pairs = [(schema, get(str(schema["name"])) if callable(get) else None) for schema in schemas]
    aliases = alias_names([str(schema["name"]) for schema, _ in pairs])
    return [
        ExposedTool(
            name=str(schema["name"]),
            sent=aliases[str(schema["name"])],
            description=schema.get("description", ""),
            parameters=schema.get("parameters", {"type": "object", "properties": {}}),
            strict=getattr(definition, "strict", False) is True,
            concurrency_safe=getattr(definition, "is_concurrency_safe", None) is not None,
        )
        for schema, definition in pairs
    ]


def provider_tools(registry: HasSchemas) -> list[ExposedTool]:
    """``listed_tools(registry)``, every tool's parameters checked: raises
    ``ValueError`` naming the first tool whose parameters are not an object
    schema (``object_schema_or_raise``), ``TypeError`` for a ``registry``
    without ``schemas()``."""
    tools = listed_tools(registry)
    for tool in tools:
        object_schema_or_raise(tool.name, tool.parameters)
    return tools


def object_schema_or_raise(name: str, parameters: object) -> None:
    """Raise ``ValueError`` naming the tool when ``parameters`` is not an
    object schema (providers take only ``{"type": "object", ...}``;
    docs/contract.md#a12)."""
    if not isinstance(parameters, Mapping) or parameters.get("type", "object") != "object":
        shown = parameters.get("type") if isinstance(parameters, Mapping) else type(parameters).__name__
        raise ValueError(
            f"tool {name!r}: parameters must be a JSON Schema of type 'object' "
            f"(providers accept only object schemas), got type {shown!r}"
        )


# ---------------------------------------------------------------------------
# Call ids within one message


class CallIds:
    """The id rules of one assistant message (docs/contract.md#a11): an
    id must be a non-empty string, and an id already used earlier in the
    same message is refused (the first call with it runs)."""

    def __init__(self) -> None:
        self._seen: set[str] = set()

    def check(self, call_id: object, where: str) -> tuple[str, str | None]:
        """``(id to answer under, problem or None)``. The answer id is the
        model's id when it is a string, else ``""``."""
        if not isinstance(call_id, str):
            shown = "missing" if call_id is None else f"a {type(call_id).__name__}, not a string"
            return "", f"{where}: the call id is {shown}"
        if not call_id:
            return "", f"{where}: the call id is empty"
        if call_id in self._seen:
            return (
                call_id,
                f"{where}: call id {utf8_safe(call_id)!r} repeats an earlier call in this message (only the first one runs)",
            )
        self._seen.add(call_id)
        return call_id, None


def assistant_fields(message: object, *, has: str, what: str, signal: object) -> object:
    """The fields of an assistant ``message`` to read with ``field``: the
    mapping ``as_mapping`` gives, else the SDK object itself when it has
    the attribute ``has`` (its ``model_dump()`` failed). Raises
    ``TypeError`` for a ``signal`` that is not an ``AbortSignal`` or a
    message that is neither, and ``ValueError`` for a ``role`` other than
    ``"assistant"`` (``what`` names the tool calls in that message)."""
    from .._signal import AbortSignal

    if not isinstance(signal, AbortSignal):
        raise TypeError(f"signal must be an AbortSignal, not {type(signal).__name__}")
    msg: object = as_mapping(message)
    if msg is None:
        if not hasattr(message, has):
            raise TypeError(
                f"message must be a JSON object or an object with model_dump(), not {type(message).__name__}"
            )
        msg = message
    role = field(msg, "role", "assistant")
    if role is not None and role != "assistant":
        raise ValueError(f'{what} come from an "assistant" message, not role {role!r}')
    return msg


def refuse_other_shapes(msg: object, *, reader: str) -> None:
    """Raise ``ValueError`` when an assistant message in which ``reader``
    (``"openai"`` or ``"anthropic"``) found no tool call is really another
    shape that holds some: a whole Chat Completions response (its
    ``choices``), a Responses API response (a non-empty ``output`` list),
    or the other provider's message. Returning ``[]`` for it would end the
    agent's loop as if the model had answered."""
    choices = field(msg, "choices")
    if isinstance(choices, (list, tuple)) and choices:
        raise ValueError(
            "this is a whole Chat Completions response, not its message: pass response.choices[0].message "
            "to dshtools.openai.calls_from_message"
        )
    output = field(msg, "output")
    if isinstance(output, (list, tuple)) and output:
        raise ValueError(
            "this is a Responses API response, not a message: read its function calls with "
            "dshtools.openai.calls_from_response"
        )
    if reader == "openai":
        content = field(msg, "content")
        if isinstance(content, (list, tuple)) and any(field(b, "type") == "tool_use" for b in content):
            raise ValueError(
                "this message holds Anthropic tool_use blocks: read it with dshtools.anthropic.calls_from_message"
            )
    else:
        tool_calls = field(msg, "tool_calls")
        if isinstance(tool_calls, (list, tuple)) and tool_calls:
            raise ValueError(
                "this message holds Chat Completions tool_calls: read it with dshtools.openai.calls_from_message"
            )


def checked_call_id(call_id: object) -> str:
    """``call_id`` made UTF-8 safe; ``TypeError`` when it is not a ``str``."""
    if not isinstance(call_id, str):
        raise TypeError(f"call_id must be a str, not {type(call_id).__name__}")
    return utf8_safe(call_id)


def paired(calls: Sequence[Any], results: Iterable[Any]) -> list[tuple[Any, Any]]:
    """``(call, result)`` pairs in order; ``ValueError`` when the two
    lengths differ, ``TypeError`` when ``calls`` holds something other than
    ``ToolExecutionInput`` (the two arguments swapped, say)."""
    from .._types.calls import ToolExecutionInput

    for call in calls:
        if not isinstance(call, ToolExecutionInput):
            raise TypeError(
                f"calls must hold ToolExecutionInput (the calls, then their results), not {type(call).__name__}"
            )
    results = list(results)
    if len(results) != len(calls):
        raise ValueError(f"{len(calls)} calls but {len(results)} results")
    return list(zip(calls, results, strict=True))


def result_text(content: Iterable[Mapping[str, Any]]) -> str:
    """The text of a result's content blocks joined with ``"\\n"``: a text
    block's text; any other block (an image, a resource link) rendered as
    its JSON, never dropped. Always encodes as UTF-8. Never raises."""
    parts: list[str] = []
    for block in content:
        try:
            if isinstance(block, Mapping) and block.get("type") == "text" and isinstance(block.get("text"), str):
                parts.append(block["text"])
            else:
                from .._core.freeze import thaw

                parts.append(json.dumps(thaw(block), ensure_ascii=False, sort_keys=True, default=repr))
        except Exception as exc:
            parts.append(f"<unprintable content block: {type(exc).__name__}>")
    return utf8_safe("\n".join(parts))


def failure_text(content: Iterable[Mapping[str, Any]], code: str | None) -> str:
    """``result_text`` of a failure's content, made to say something: when
    that text is empty, blank or only ``Error:`` (a post-execute
    ``Block("")``, a ``ToolError("")``), ``Error: the tool call failed with
    no message`` (naming ``code`` when there is one).
    Providers reject an error result without text (Anthropic answers HTTP
    400 and the turn is lost; docs/contract.md#a18). Never raises."""
    text = result_text(content)
    if text.strip().removeprefix("Error:").strip():
        return text
    if code:
        return f"Error: the tool call failed ({utf8_safe(code)}) with no message"
    return "Error: the tool call failed with no message"


def provider_text(result: Any) -> str:
    """The text a provider is sent for ``result`` (a ``ToolExecutionResult``):
    ``result_text`` of its content, and for a failure ``failure_text``.
    Raises ``TypeError`` for anything else (a result's text, ``None``)."""
    from .._types.calls import ToolFailure, ToolSuccess

    if not isinstance(result, (ToolSuccess, ToolFailure)):
        raise TypeError(
            f"result must be a ToolSuccess or ToolFailure (what execute returned), not {type(result).__name__}"
        )
    if result.is_error:
        return failure_text(result.content, result.code)
    return result_text(result.content)
