"""Result mapping of the MCP client: what the server answered to one
``tools/call`` as the registry's ``BodyReport`` (docs/mcp.md#the-client).

Owns the two error codes of remote calls (``REMOTE_TOOL_ERROR``,
``REMOTE_PROTOCOL_ERROR``) and ``report_of``, a pure function of the SDK's
answer; it sends nothing and touches no connection.

Guarantees:

* ``isError`` → ``REMOTE_TOOL_ERROR`` with the text of the server's text
  blocks; ``structuredContent`` → ``value`` (else the text of a single text
  block, else ``None``); the server's content blocks are the report's
  content, exactly as sent.
* A JSON-RPC error, or a result that is not a valid ``CallToolResult`` →
  ``REMOTE_PROTOCOL_ERROR`` (an HTTP error status the transport saw is
  named in place of the SDK's generic stand-in for it), whatever its code
  (``-32000`` included); only the end of the connection (``lost``: the
  transport closed or the process died) → ``WorkerLost``
  (docs/contract.md#a26).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

import mcp_types as types
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from .._backends.base import BodyReport, Error, Value, WorkerLost
from .._core.errors import safe_repr, safe_str
from .._types.calls import ToolError

__all__ = ["REMOTE_PROTOCOL_ERROR", "REMOTE_TOOL_ERROR", "first_leaf", "reason_text", "report_of"]

REMOTE_TOOL_ERROR: Final = "REMOTE_TOOL_ERROR"
"""The code of a remote tool's own failure (its result had ``isError``)."""

REMOTE_PROTOCOL_ERROR: Final = "REMOTE_PROTOCOL_ERROR"
"""The code of a remote call the server answered with a JSON-RPC error, or
with a result that is not a valid ``CallToolResult``."""

# The SDK's error message for a request its HTTP transport saw refused.
_HTTP_STAND_IN: Final = "Server returned an error response"


def _texts(blocks: Sequence[Mapping[str, Any]]) -> str:
    return "\n".join(str(b["text"]) for b in blocks if b.get("type") == "text" and isinstance(b.get("text"), str))


def report_of(outcome: object, remote: str | None, http_status: str | None = None, *, lost: bool = False) -> BodyReport:
    """The registry's report for the SDK's answer to one ``tools/call``
    (``http_status``: the HTTP error status the transport last saw, named
    in place of the SDK's generic stand-in for it; ``lost``: the answer is
    the SDK's error for a connection that ended, not the server's)."""
    meta = None if remote is None else {"remote": remote}
    if isinstance(outcome, MCPError):
        if lost:
            ended = WorkerLost(f"the MCP server closed the connection during the call ({outcome.error.message})")
            return BodyReport(outcome=Error(ended), meta=meta)
        text = f"the MCP server answered with JSON-RPC error {outcome.error.code}: {outcome.error.message}"
        if http_status is not None and outcome.error.message == _HTTP_STAND_IN:
            text = f"the MCP server refused the request: {http_status}"
        problem = ToolError(text, code=REMOTE_PROTOCOL_ERROR)
        return BodyReport(outcome=Error(problem), meta=meta)
    if isinstance(outcome, BaseException):
        return BodyReport(outcome=Error(outcome), meta=meta)
    try:
        result = types.CallToolResult.model_validate(outcome, by_name=False)
    except ValidationError as exc:
        problem = ToolError(
            f"the MCP server's result is not a valid CallToolResult: {exc.error_count()} problem(s), "
            f"first: {exc.errors()[0]['msg']} at {'.'.join(map(str, exc.errors()[0]['loc'])) or '$'}",
            code=REMOTE_PROTOCOL_ERROR,
        )
        return BodyReport(outcome=Error(problem), meta=meta)
    # The blocks as the server sent them (validated above as content blocks).
    blocks: tuple[Mapping[str, Any], ...] = tuple(outcome["content"])  # type: ignore[index]
    if result.is_error:
        text = _texts(blocks) or "the remote tool failed without a message"
        return BodyReport(outcome=Error(ToolError(text, code=REMOTE_TOOL_ERROR)), meta=meta)
    if result.structured_content is not None:
        value: object = result.structured_content
    elif len(blocks) == 1 and blocks[0].get("type") == "text":
        value = blocks[0].get("text")
    else:
        value = None
    return BodyReport(outcome=Value(value), content=blocks, meta=meta)


def first_leaf(error: BaseException) -> BaseException:
    """The first exception inside ``error`` that is not an exception group
    (the SDK's task groups wrap the reason a connection failed); ``error``
    itself when it is not a group. A group is recognised by its
    ``exceptions`` tuple, so the ``exceptiongroup`` backport counts too."""
    inner = getattr(error, "exceptions", None)
    while isinstance(inner, tuple) and inner and isinstance(inner[0], BaseException):
        error = inner[0]
        inner = getattr(error, "exceptions", None)
    return error


def reason_text(reason: object) -> str:
    """The abort reason as the cancel notification's ``reason`` (at most
    500 characters)."""
    if isinstance(reason, str):
        text = reason
    elif isinstance(reason, BaseException):
        text = safe_str(reason) or type(reason).__name__
    else:
        text = safe_repr(reason)
    return text[:500]
