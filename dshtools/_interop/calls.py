"""What the provider formats share (docs/contract.md §6, §8 A11, A12, §11):
reading model output that never raises, the tool-name alias scheme, and
text that always encodes as UTF-8. Used by ``dshtools.openai`` and
``dshtools.anthropic``; package-internal.

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
* ``Aliases`` maps every registered name to a name matching
  ``^[a-zA-Z0-9_-]{1,64}$`` and back; see ``alias_names`` for the rule.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Any, Final, Protocol

import attrs

from .._types.calls import INVALID_CALL, InvalidCall, ToolExecutionInput

__all__ = [
    "INVALID_CALL",
    "MAX_DEPTH",
    "Aliases",
    "InvalidCall",
    "MalformedArguments",
    "TooDeep",
    "alias_names",
    "as_mapping",
    "check_decoded",
    "checked_name",
    "failure_text",
    "field",
    "nesting_depth",
    "parse_arguments",
    "parse_iterative",
    "provider_text",
    "utf8_safe",
]

MAX_DEPTH: Final = 1000
"""Deepest nesting of model arguments accepted (docs/contract.md §8 A11)."""


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
    (docs/contract.md §3 step 1) and the call's result is an ``INVALID_ARGS``
    failure, with precedence over everything else (docs/contract.md §7),
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


def _reject_constant(name: str) -> object:
    raise ValueError(f"{name} is not valid JSON")


_WS = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"(-?(?:0|[1-9][0-9]*))(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_scanstring: Any = json.decoder.scanstring  # type: ignore[attr-defined]


class TooDeep(Exception):
    """Raised by ``parse_iterative`` past its depth limit."""


def parse_iterative(s: str, limit: int = MAX_DEPTH) -> Any:
    """``json.loads(s)`` without recursion (so the caller's stack depth
    does not matter) and without ``NaN``/``Infinity``. Raises
    ``json.JSONDecodeError`` like ``json.loads`` (same messages and
    positions) and ``TooDeep`` past ``limit`` levels."""
    ws = _WS.match
    n = len(s)
    err = json.JSONDecodeError
    # Each frame: [container, pending key (objects only)].
    stack: list[list[Any]] = []
    idx = ws(s, 0).end()  # type: ignore[union-attr]
    while True:
        # A value starts at idx.
        if idx >= n:
            raise err("Expecting value", s, idx)
        c = s[idx]
        if c in "{[":
            if len(stack) >= limit:
                raise TooDeep
            close = "}" if c == "{" else "]"
            idx = ws(s, idx + 1).end()  # type: ignore[union-attr]
            if idx < n and s[idx] == close:
                value: Any = {} if c == "{" else []
                idx += 1
            elif c == "[":
                stack.append([[], None])
                continue
            else:
                if idx >= n or s[idx] != '"':
                    raise err("Expecting property name enclosed in double quotes", s, idx)
                key, idx = _scanstring(s, idx + 1, True)
                idx = ws(s, idx).end()  # type: ignore[union-attr]
                if idx >= n or s[idx] != ":":
                    raise err("Expecting ':' delimiter", s, idx)
                idx = ws(s, idx + 1).end()  # type: ignore[union-attr]
                stack.append([{}, key])
                continue
        elif c == '"':
            value, idx = _scanstring(s, idx + 1, True)
        elif s.startswith("null", idx):
            value, idx = None, idx + 4
        elif s.startswith("true", idx):
            value, idx = True, idx + 4
        elif s.startswith("false", idx):
            value, idx = False, idx + 5
        else:
            m = _NUMBER.match(s, idx)
            if m is None:
                raise err("Expecting value", s, idx)
            integer, frac, exp = m.groups()
            value = float(integer + (frac or "") + (exp or "")) if frac or exp else int(integer)
            idx = m.end()
        # Hand the value to its container; close every container that ends here.
        while True:
            idx = ws(s, idx).end()  # type: ignore[union-attr]
            if not stack:
                if idx != n:
                    raise err("Extra data", s, idx)
                return value
            frame = stack[-1]
            container = frame[0]
            if isinstance(container, list):
                container.append(value)
                if idx < n and s[idx] == ",":
                    idx = ws(s, idx + 1).end()  # type: ignore[union-attr]
                    break
                if idx < n and s[idx] == "]":
                    idx += 1
                    value = stack.pop()[0]
                    continue
                raise err("Expecting ',' delimiter", s, idx)
            container[frame[1]] = value
            if idx < n and s[idx] == ",":
                idx = ws(s, idx + 1).end()  # type: ignore[union-attr]
                if idx >= n or s[idx] != '"':
                    raise err("Expecting property name enclosed in double quotes", s, idx)
                frame[1], idx = _scanstring(s, idx + 1, True)
                idx = ws(s, idx).end()  # type: ignore[union-attr]
                if idx >= n or s[idx] != ":":
                    raise err("Expecting ':' delimiter", s, idx)
                idx = ws(s, idx + 1).end()  # type: ignore[union-attr]
                break
            if idx < n and s[idx] == "}":
                idx += 1
                value = stack.pop()[0]
                continue
            raise err("Expecting ',' delimiter", s, idx)


_NESTING_TOKENS = re.compile(r'([\[{])|([\]}])|"[^"\\]*(?:\\.[^"\\]*)*"')


def nesting_depth(s: str) -> int:
    """The deepest nesting of ``s``'s brackets outside JSON strings: exact
    for valid JSON (the only text ``json.loads`` accepts), an estimate for
    anything else. Never recursive."""
    depth = deepest = 0
    for m in _NESTING_TOKENS.finditer(s):
        kind = m.lastindex
        if kind == 1:
            depth += 1
            deepest = max(deepest, depth)
        elif kind == 2:
            depth -= 1
    return deepest


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
    Source: docs/contract.md §8 A11."""
    try:
        if isinstance(raw, Mapping):
            return check_decoded(raw)
        if not isinstance(raw, str):
            return MalformedArguments(_safe_repr(raw), f"expected a JSON string, got {type(raw).__name__}")
        if not raw.strip():
            return {}
        if raw.count("[") + raw.count("{") > MAX_DEPTH and nesting_depth(raw) > MAX_DEPTH:
            # Too deep: never hand it to the C decoder (its limit moves with
            # sys.setrecursionlimit); the iterative parser refuses it.
            value = parse_iterative(raw)
        else:
            try:
                value = json.loads(raw, parse_constant=_reject_constant)
            except RecursionError:  # the caller is already deep in its stack
                value = parse_iterative(raw)
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
    top level. Never raises. Source: docs/contract.md §8 A11, §11."""
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
    encodes as UTF-8 (docs/contract.md §8 A11). ``text`` itself when it
    already encodes."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text


# ---------------------------------------------------------------------------
# Provider-valid tool names (docs/contract.md §8 A12)

NAME_RULE: Final = re.compile(r"[a-zA-Z0-9_-]{1,64}")
_OUTSIDE = re.compile(r"[^a-zA-Z0-9_-]")
_MAX_NAME: Final = 64
_HASH_LEN: Final = 8


def _digest(name: str, length: int) -> str:
    return hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:length]


def _with_suffix(base: str, name: str, length: int) -> str:
    suffix = "_" + _digest(name, length)
    return base[: _MAX_NAME - len(suffix)] + suffix


@lru_cache(maxsize=16)
def _alias_table(names: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    valid = {n for n in names if NAME_RULE.fullmatch(n)}
    mapped: dict[str, str] = {}
    for name in names:
        if name not in valid:
            mapped[name] = _OUTSIDE.sub("_", name)
    counts: dict[str, int] = {}
    for base in mapped.values():
        counts[base] = counts.get(base, 0) + 1
    taken = set(valid)
    out: dict[str, str] = {n: n for n in valid}
    # Names whose mapping is valid, unique and free keep it; the others
    # (too long, empty, or colliding) get the hash suffix, in sorted order
    # so the outcome does not depend on registration order.
    needs_suffix: list[str] = []
    for name, base in mapped.items():
        if 1 <= len(base) <= _MAX_NAME and counts[base] == 1 and base not in valid:
            out[name] = base
            taken.add(base)
        else:
            needs_suffix.append(name)
    for name in sorted(needs_suffix):
        length = _HASH_LEN
        alias = _with_suffix(mapped[name], name, length)
        while alias in taken:  # a hash collision: lengthen the suffix
            length += 4
            alias = _with_suffix(mapped[name], name, length)
        out[name] = alias
        taken.add(alias)
    return tuple((n, out[n]) for n in names)


def alias_names(names: Iterable[str]) -> dict[str, str]:
    """``{registered name: name sent to the provider}`` for ``names``.

    The rule (docs/contract.md §8 A12), deterministic for a given set of
    names, whatever their order:

    1. a name matching ``^[a-zA-Z0-9_-]{1,64}$`` is sent unchanged;
    2. otherwise each character outside ``a-z A-Z 0-9 _ -`` becomes ``_``
       (``math.factorial`` → ``math_factorial``, ``get/whoami`` →
       ``get_whoami``);
    3. when that is empty, longer than 64 characters, or equal to another
       tool's name or mapped name, the alias is its first characters, then
       ``_`` and the first 8 hex digits of the SHA-256 of the registered
       name (UTF-8), 64 characters at most in all (longer digests only in
       the unlikely case that this too collides).
    """
    return dict(_alias_table(tuple(names)))


class _HasSchemas(Protocol):
    def schemas(self) -> list[dict[str, Any]]: ...


@attrs.frozen
class Aliases:
    """Both directions of ``alias_names`` for one registry's tools."""

    to_alias: Mapping[str, str]
    to_name: Mapping[str, str]

    @classmethod
    def of(cls, registry: _HasSchemas) -> Aliases:
        names = [str(schema["name"]) for schema in registry_schemas(registry)]
        forward = alias_names(names)
        return cls(forward, {alias: name for name, alias in forward.items()})

    def name_of(self, sent: str) -> str:
        """The registered name for a name the model used: an alias maps
        back; anything else (an unknown name) is kept as is."""
        return self.to_name.get(sent, sent)


def checked_name(name: object, problem: str | None, missing: str, aliases: Aliases | None) -> tuple[str, str | None]:
    """``(registered name, problem or None)`` for the name a model call
    carries: a non-string counts as ``""``; an empty name is the problem
    ``missing`` unless the call already has one; an alias maps back when
    ``aliases`` is given (``Aliases.name_of``)."""
    name = name if isinstance(name, str) else ""
    if problem is None and not name:
        problem = missing
    if aliases is not None and name:
        name = aliases.name_of(name)
    return name, problem


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
) -> ToolExecutionInput:
    """One model function call under ``call_id`` with the caller's ``signal``
    (an ``AbortSignal``): ``arguments`` parsed, or an ``InvalidCall`` when
    the call has a ``problem`` or no name (``where`` locates it). Never
    raises on model output (docs/contract.md §8 A11)."""
    name, problem = checked_name(name, problem, f"{where}: the call has no function name", aliases)
    parsed = InvalidCall(problem, arguments) if problem is not None else parse_arguments(arguments)
    return ToolExecutionInput(call_id, name, parsed, signal, agent=agent)


def registry_schemas(registry: _HasSchemas) -> Sequence[Mapping[str, Any]]:
    """``registry.schemas()``; ``TypeError`` naming the ``ToolRegistry``
    expected when ``registry`` has no ``schemas()`` (a list of tools, a
    dict, ``None``)."""
    schemas = getattr(registry, "schemas", None)
    if not callable(schemas):
        raise TypeError(f"registry must be a ToolRegistry (anything with schemas()), not {type(registry).__name__}")
    return schemas()  # type: ignore[no-any-return]


def provider_tools(registry: _HasSchemas) -> list[tuple[str, str, dict[str, Any]]]:
    """``(name as sent, description, parameters)`` for every tool in
    ``registry``, in ``registry.schemas()`` order: the name is the tool's
    alias (``alias_names``), the parameters a fresh, plain, mutable copy of
    its object schema (an empty one when it has none). Raises
    ``TypeError`` for a ``registry`` without ``schemas()`` and
    ``ValueError`` naming the first tool whose parameters are not an object
    schema (``object_schema_or_raise``)."""
    from .._core.freeze import thaw

    schemas = [thaw(schema) for schema in registry_schemas(registry)]
    aliases = alias_names([str(s["name"]) for s in schemas])
    out: list[tuple[str, str, dict[str, Any]]] = []
    for plain in schemas:
        name = str(plain["name"])
        parameters = plain.get("parameters", {"type": "object", "properties": {}})
        object_schema_or_raise(name, parameters)
        out.append((aliases[name], plain.get("description", ""), parameters))
    return out


def object_schema_or_raise(name: str, parameters: object) -> None:
    """Raise ``ValueError`` naming the tool when ``parameters`` is not an
    object schema (providers take only ``{"type": "object", ...}``;
    docs/contract.md §8 A12)."""
    if not isinstance(parameters, Mapping) or parameters.get("type", "object") != "object":
        shown = parameters.get("type") if isinstance(parameters, Mapping) else type(parameters).__name__
        raise ValueError(
            f"tool {name!r}: parameters must be a JSON Schema of type 'object' "
            f"(providers accept only object schemas), got type {shown!r}"
        )


# ---------------------------------------------------------------------------
# Call ids within one message


class CallIds:
    """The id rules of one assistant message (docs/contract.md §8 A11): an
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
