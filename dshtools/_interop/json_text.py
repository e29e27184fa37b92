"""JSON text read whatever the calling thread's stack depth, so that model
output never raises (docs/contract.md#a11): the model's arguments and the
MCP server's input lines are parsed here. Package-internal.

Guarantees:

* ``decode_json`` is ``json.loads`` without ``NaN``/``Infinity``, with a
  nesting limit that does not move with ``sys.setrecursionlimit``: text
  nested deeper than its ``limit`` raises ``TooDeep``, shallower text parses
  even when the caller is already deep in its stack.
* Deep text never reaches the C decoder (whose limit is the interpreter's
  recursion limit): it goes to ``parse_iterative``, which keeps its own
  stack and gives ``json.loads``'s messages and positions.
* Strings are read as ``json.loads`` reads them: a lone surrogate escape
  (``"\\ud800"``) stays in the value; rejecting it is the caller's rule.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

__all__ = ["MAX_DEPTH", "TooDeep", "decode_json", "nesting_depth", "parse_iterative", "scanstring"]

MAX_DEPTH: Final = 1000
"""Deepest nesting of model arguments accepted (docs/contract.md#a11)."""


def _reject_constant(name: str) -> object:
    raise ValueError(f"{name} is not valid JSON")


_WS = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"(-?(?:0|[1-9][0-9]*))(\.[0-9]+)?([eE][-+]?[0-9]+)?")
scanstring: Any = json.decoder.scanstring  # type: ignore[attr-defined]
"""The C decoder's string scanner: ``scanstring(s, end_of_quote)`` gives
``(the string, index after its closing quote)``; never recursive."""


def _trailing_comma_error(empty_member: str, open_: str, close: str) -> tuple[str, bool]:
    """How this interpreter's ``json`` reports a comma right before the
    closing bracket: (its message, whether its position is the comma's
    rather than the bracket's). Read from ``json`` itself, as its wording
    differs between Python versions."""
    text = f"{open_}{empty_member}, {close}"
    try:
        json.loads(text)
    except json.JSONDecodeError as exc:
        return exc.msg, exc.pos == text.index(",")
    # A json that accepted the comma: read it as a missing value.
    return ("Expecting value" if close == "]" else "Expecting property name enclosed in double quotes"), False


_TRAILING_COMMA: Final = {"]": _trailing_comma_error("0", "[", "]"), "}": _trailing_comma_error('"":0', "{", "}")}
"""Closing bracket -> how ``json`` reports a trailing comma before it."""


class TooDeep(Exception):
    """Raised by ``parse_iterative`` past its depth limit."""


def _member_key(s: str, idx: int) -> tuple[str, int]:
    """The key of an object member starting at ``idx`` (whitespace already
    skipped), and where its value starts: after the ``:`` and whitespace.
    Raises ``json.JSONDecodeError`` with ``json.loads``'s messages."""
    ws = _WS.match
    if idx >= len(s) or s[idx] != '"':
        raise json.JSONDecodeError("Expecting property name enclosed in double quotes", s, idx)
    key, idx = scanstring(s, idx + 1, True)
    idx = ws(s, idx).end()  # type: ignore[union-attr]
    if idx >= len(s) or s[idx] != ":":
        raise json.JSONDecodeError("Expecting ':' delimiter", s, idx)
    return key, ws(s, idx + 1).end()  # type: ignore[union-attr]


def parse_iterative(s: str, limit: int = MAX_DEPTH) -> Any:
    """``json.loads(s)`` without recursion (so the caller's stack depth
    does not matter) and without ``NaN``/``Infinity``. Raises
    ``json.JSONDecodeError`` like ``json.loads`` (same messages and
    positions) and ``TooDeep`` past ``limit`` levels."""
    ws = _WS.match
    n = len(s)
    err = json.JSONDecodeError
    # Each frame: [container, its closing bracket, pending key (objects only)].
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
                stack.append([[], close, None])
                continue
            else:
                key, idx = _member_key(s, idx)
                stack.append([{}, close, key])
                continue
        elif c == '"':
            value, idx = scanstring(s, idx + 1, True)
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
            container, close = frame[0], frame[1]
            if close == "]":
                container.append(value)
            else:
                container[frame[2]] = value
            if idx < n and s[idx] == ",":
                comma = idx
                idx = ws(s, idx + 1).end()  # type: ignore[union-attr]
                if idx < n and s[idx] == close:
                    message, at_comma = _TRAILING_COMMA[close]
                    raise err(message, s, comma if at_comma else idx)
                if close == "}":
                    frame[2], idx = _member_key(s, idx)
                break
            if idx < n and s[idx] == close:
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


def decode_json(text: str, limit: int = MAX_DEPTH) -> Any:
    """The JSON value of ``text``. Raises ``json.JSONDecodeError`` (a
    ``ValueError``) for text that is not JSON, ``ValueError`` for ``NaN`` or
    ``Infinity``, and ``TooDeep`` past ``limit`` levels of nesting."""
    if text.count("[") + text.count("{") > limit and nesting_depth(text) > limit:
        # Too deep: never hand it to the C decoder (its limit moves with
        # sys.setrecursionlimit); the iterative parser refuses it.
        return parse_iterative(text, limit)
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except RecursionError:  # the caller is already deep in its stack
        return parse_iterative(text, limit)
