"""Reading JSON-RPC 2.0 lines for the MCP server (docs/contract.md#mcp-stdio,
docs/contract.md#a19) before the SDK sees them; package-internal, no SDK
import.

Guarantees:

* ``read_line`` never raises. Each line is either handed on (``Forward``,
  a JSON object the SDK can take) or answered here (``Reply``) or dropped
  (a notification or response that cannot be read: JSON-RPC never answers
  those). So every line that carries a request id gets exactly one answer
  from somewhere: here, or the SDK's handler for the request.
* What is answered here: text that is not UTF-8 JSON → ``-32700`` with id
  ``null``; JSON that is not a request object, or a request whose id is
  not a string or an integer → ``-32600`` with id ``null``; a request with
  a usable id but a bad envelope (``jsonrpc`` not ``"2.0"``, ``method`` not
  a string, ``params`` neither absent, ``null`` nor an object) →
  ``-32600``, or ``-32602`` for ``params`` that is an array (valid JSON-RPC,
  but every MCP method takes named parameters), under its own id; a batch
  (an array) → ``-32600`` for each request in it (MCP does not batch); a
  request nested too deeply to read → ``-32602`` under its id; a request
  whose id is already in flight → ``-32600`` under that id (the first one
  keeps it).
* Strings are read as Python reads them: a lone surrogate escape
  (``"\\ud800"``) stays in the value, so the tool call that holds it is
  answered by the registry (``INVALID_ARGS``), not lost to a strict parser.
* Request ids are matched exactly as sent, type and value: ``RequestIds``
  gives each request in flight an id of its own for the SDK (which folds
  ``"10"`` into ``10`` and ``"1_0"`` into ``10`` with ``int()``), and maps a
  ``notifications/cancelled`` to the one request it names, or drops it.

Threads: ``read_line`` runs on the server's stdin thread; ``RequestIds``
is also used by the writer and the call handlers, so its two tables are
guarded by one lock.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Mapping
from typing import Any, Final

import attrs

from .json_text import MAX_DEPTH, TooDeep, decode_json, scanstring

__all__ = [
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "PARSE_ERROR",
    "Forward",
    "Reply",
    "RequestIds",
    "read_line",
]

PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
INVALID_PARAMS: Final = -32602

WireId = int | str
"""A request id as JSON-RPC 2.0 and MCP allow it: a string or an integer."""

_PREFIX: Final = "dshtools-"
"""Ids given to the SDK: never a digit string, so ``int()`` cannot fold two
of them together, and never a client's id (the table maps both ways)."""

# The envelope adds two levels (the message, its params) above the tool's
# arguments, which may be MAX_DEPTH deep (docs/contract.md#a11).
_MESSAGE_DEPTH: Final = MAX_DEPTH + 2


@attrs.frozen
class Reply:
    """An error response the transport sends itself: ``id`` as the client
    sent it (``None`` when it could not be read)."""

    id: WireId | None
    code: int
    message: str


@attrs.frozen
class Forward:
    """A JSON object for the SDK; a request's ``id`` is already its id for
    the SDK (``RequestIds.admit``)."""

    message: dict[str, Any]


def _usable_id(value: object) -> WireId | None:
    if isinstance(value, (str, int)) and not isinstance(value, bool):
        return value
    return None


def _key(request_id: WireId) -> tuple[type, WireId]:
    return (type(request_id), request_id)


class RequestIds:
    """Request ids as the client sent them ↔ the ids the SDK sees.

    Invariants (under ``_lock``): ``_inner`` and ``_outer`` are inverse
    maps of the requests that can still be answered; a client id is in
    ``_outer`` from ``admit`` until its answer is written (``answer``) or a
    cancellation names it (``cancel``), whichever comes first. After a
    cancellation nothing is written for the request, even if the SDK
    produces an answer anyway (JSON-RPC lets a cancelled request go
    unanswered; one answer too many would break the client).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards _next, _inner, _outer
        self._next = 0
        self._inner: dict[str, WireId] = {}
        self._outer: dict[tuple[type, WireId], str] = {}

    def admit(self, outer: WireId) -> str | None:
        """A new SDK id for the request ``outer``, or ``None`` when a request
        with that very id (same type and value) is still in flight."""
        key = _key(outer)
        with self._lock:
            if key in self._outer:
                return None
            self._next += 1
            inner = f"{_PREFIX}{self._next}"
            self._inner[inner] = outer
            self._outer[key] = inner
            return inner

    def cancel(self, outer: object) -> str | None:
        """The SDK id of the request in flight that a cancellation naming
        ``outer`` means, which is forgotten (it will not be answered); ``None``
        when no request in flight has exactly that id."""
        usable = _usable_id(outer)
        if usable is None:
            return None
        with self._lock:
            inner = self._outer.pop(_key(usable), None)
            if inner is not None:
                del self._inner[inner]
            return inner

    def outer_of(self, inner: object) -> WireId | None:
        """The client's id for SDK id ``inner`` while it can be answered."""
        with self._lock:
            return self._inner.get(inner) if isinstance(inner, str) else None

    def answer(self, inner: object) -> tuple[bool, WireId | None]:
        """For a response the SDK writes under ``inner``: ``(True, client
        id)`` to send it under, once (the id is then free again); ``(False,
        None)`` to drop it (its request was cancelled). An id the SDK did
        not get from ``admit`` passes through unchanged."""
        if not (isinstance(inner, str) and inner.startswith(_PREFIX)):
            return True, inner if inner is None else _usable_id(inner)
        with self._lock:
            outer = self._inner.pop(inner, None)
            if outer is None:
                return False, None
            del self._outer[_key(outer)]
            return True, outer

    def in_flight(self) -> int:
        """How many requests can still be answered."""
        with self._lock:
            return len(self._inner)


def _decode(line: bytes) -> object:
    """The JSON value of ``line``; ``ValueError`` (incl. ``UnicodeDecodeError``
    and ``json.JSONDecodeError``) when it is not UTF-8 JSON, ``TooDeep``
    past ``_MESSAGE_DEPTH`` levels. Lone surrogate escapes are kept."""
    return decode_json(line.decode("utf-8"), _MESSAGE_DEPTH)


def read_line(line: bytes, ids: RequestIds) -> Forward | list[Reply] | None:
    """What to do with one line of input: hand it on, answer it (one reply,
    or one per request of a batch), or drop it (``None``). A blank line is
    dropped: between newline-delimited messages it is no message at all.
    Never raises."""
    if not line.strip():
        return None
    try:
        value = _decode(line)
    except TooDeep:
        found = _skim_id(line)
        if found is None:
            return [Reply(None, INVALID_REQUEST, f"Invalid Request: nested more than {_MESSAGE_DEPTH} levels")]
        return [Reply(found, INVALID_PARAMS, f"Invalid params: nested more than {_MESSAGE_DEPTH} levels")]
    except (ValueError, RecursionError, MemoryError) as exc:
        return [Reply(None, PARSE_ERROR, f"Parse error: {_first_line(exc)}")]
    try:
        if isinstance(value, list):
            return _batch(value)
        if not isinstance(value, Mapping):
            return [
                Reply(None, INVALID_REQUEST, f"Invalid Request: a JSON-RPC message is an object, not {_kind(value)}")
            ]
        return _message(dict(value), ids)
    except Exception as exc:  # pragma: no cover - a bug here must not lose the request
        return [Reply(None, INVALID_REQUEST, f"Invalid Request: {type(exc).__name__}")]


def _message(message: dict[str, Any], ids: RequestIds) -> Forward | list[Reply] | None:
    if "method" not in message:
        if "result" in message or "error" in message:
            return Forward(message)  # a response to one of the server's requests
        shown = _usable_id(message.get("id"))
        return [Reply(shown, INVALID_REQUEST, "Invalid Request: neither a request, a notification nor a response")]
    if "id" not in message:
        return _notification(message, ids)
    request_id = _usable_id(message["id"])
    if request_id is None:
        return [
            Reply(
                None, INVALID_REQUEST, f"Invalid Request: the id is {_kind(message['id'])}, not a string or an integer"
            )
        ]
    problem = _envelope_problem(message)
    if problem is not None:
        code, text = problem
        return [Reply(request_id, code, text)]
    inner = ids.admit(request_id)
    if inner is None:
        return [Reply(request_id, INVALID_REQUEST, "Invalid Request: a request with this id is still in flight")]
    return Forward({**message, "id": inner})


def _envelope_problem(message: Mapping[str, Any]) -> tuple[int, str] | None:
    if message.get("jsonrpc") != "2.0":
        return INVALID_REQUEST, 'Invalid Request: "jsonrpc" must be "2.0"'
    if not isinstance(message["method"], str):
        return INVALID_REQUEST, f'Invalid Request: "method" is {_kind(message["method"])}, not a string'
    params = message.get("params")
    if params is None or isinstance(params, Mapping):
        return None
    if isinstance(params, list):
        return INVALID_PARAMS, 'Invalid params: "params" must be an object (MCP methods take named parameters)'
    return INVALID_REQUEST, f'Invalid Request: "params" is {_kind(params)}, not an object'


def _notification(message: dict[str, Any], ids: RequestIds) -> Forward | None:
    if message.get("method") != "notifications/cancelled":
        return Forward(message)
    params = message.get("params")
    if not isinstance(params, Mapping):
        return None
    inner = ids.cancel(params.get("requestId"))
    if inner is None:
        return None  # names no request in flight (exactly): nothing to cancel
    return Forward({**message, "params": {**params, "requestId": inner}})


def _batch(items: list[Any]) -> list[Reply]:
    replies = [
        Reply(request_id, INVALID_REQUEST, "Invalid Request: batches are not supported (MCP sends one message a line)")
        for item in items
        if isinstance(item, Mapping) and "method" in item and (request_id := _usable_id(item.get("id"))) is not None
    ]
    return replies or [Reply(None, INVALID_REQUEST, "Invalid Request: batches are not supported")]


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _first_line(exc: BaseException) -> str:
    text = str(exc).splitlines()
    return text[0][:200] if text else type(exc).__name__


def _skim_id(line: bytes) -> WireId | None:
    """The top-level ``"id"`` of a JSON object too deep to parse, read
    without building the nested values (bracket counting outside strings),
    or ``None``. Linear in the line; never recursive."""
    try:
        text = line.decode("utf-8")
        decoder = json.JSONDecoder()
        i = _skip_ws(text, 0)
        if text[i] != "{":
            return None
        i = _skip_ws(text, i + 1)
        while i < len(text) and text[i] == '"':
            key, i = scanstring(text, i + 1)
            i = _skip_ws(text, i)
            if text[i] != ":":
                return None
            i = _skip_ws(text, i + 1)
            if text[i] in "[{":
                i = _skip_container(text, i)
            else:
                value, i = decoder.raw_decode(text, i)
                if key == "id":
                    return _usable_id(value)
            i = _skip_ws(text, i)
            if text[i] != ",":
                return None
            i = _skip_ws(text, i + 1)
    except (ValueError, IndexError):
        pass
    return None


def _skip_ws(text: str, i: int) -> int:
    while i < len(text) and text[i] in " \t\n\r":
        i += 1
    return i


_TOKENS = re.compile(r'([\[{])|([\]}])|"[^"\\]*(?:\\.[^"\\]*)*"')


def _skip_container(text: str, i: int) -> int:
    """The index just after the array or object that starts at ``i``."""
    depth = 0
    for m in _TOKENS.finditer(text, i):
        kind = m.lastindex
        if kind == 1:
            depth += 1
        elif kind == 2:
            depth -= 1
            if depth == 0:
                return m.end()
    raise ValueError("unterminated container")
