"""What the MCP server sends for a registry result (docs/mcp.md#content-and-structured-results):
content blocks, ``structuredContent`` and the ``outputSchema`` declared for
it. Pure functions; nothing here touches a connection.

Guarantees:

* **Blocks go out as themselves.** A content block that is a valid MCP
  ``ImageContent``, ``AudioContent``, ``EmbeddedResource`` or
  ``ResourceLink`` (MCP's own field names: ``mimeType``, ``data`` in
  base64, ``resource``, ``uri``) is sent as that block; a text block as
  text; any other block as its JSON text (it has no MCP form). Strings
  are made encodable as UTF-8 (a lone surrogate becomes ``?``).
* **Structured results.** A tool with an ``output_schema`` declares it as
  ``outputSchema`` when the schema's root is an object (MCP requires one);
  any other schema is declared wrapped, ``{"type": "object", "properties":
  {"result": <schema>}, "required": ["result"]}``, and its value sent as
  ``{"result": value}`` -- the convention of the SDK's own server. A
  success of such a tool carries the value as ``structuredContent`` next
  to its content blocks; a failure carries none.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

import mcp_types as types
from pydantic import TypeAdapter, ValidationError

from .._core.freeze import thaw

__all__ = ["OutputShape", "mcp_blocks", "output_shape", "text_block"]

_AS_THEMSELVES: Final = frozenset({"image", "audio", "resource", "resource_link"})

_BLOCK: TypeAdapter[types.ContentBlock] = TypeAdapter(types.ContentBlock)

_WRAP_KEY: Final = "result"


def _encodable(value: Any) -> Any:
    """``value`` with every string encodable as UTF-8."""
    if isinstance(value, str):
        return value.encode("utf-8", "replace").decode("utf-8")
    if isinstance(value, dict):
        return {_encodable(k): _encodable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_encodable(v) for v in value]
    return value


def text_block(block: Mapping[str, Any]) -> types.TextContent:
    """``block`` as an MCP text block: its text when it is a text block,
    else its JSON text."""
    if block.get("type") == "text" and isinstance(block.get("text"), str):
        text: str = block["text"]
    else:
        text = json.dumps(thaw(block), ensure_ascii=False, default=repr)
    return types.TextContent(type="text", text=_encodable(text))


def mcp_blocks(blocks: Sequence[Mapping[str, Any]]) -> list[types.ContentBlock]:
    """The MCP content blocks for a result's ``blocks``, one for one."""
    out: list[types.ContentBlock] = []
    for block in blocks:
        if block.get("type") in _AS_THEMSELVES:
            try:
                out.append(_BLOCK.validate_python(_encodable(thaw(block)), by_name=False))
                continue
            except ValidationError:
                pass  # not a valid MCP block of its type: sent as its JSON text
        out.append(text_block(block))
    return out


class OutputShape:
    """How one tool's output schema goes over MCP: ``schema`` to declare as
    ``outputSchema``, and ``structured(value)`` for ``structuredContent``."""

    __slots__ = ("_wrapped", "schema")

    def __init__(self, schema: dict[str, Any], wrapped: bool) -> None:
        self.schema = schema
        self._wrapped = wrapped

    def structured(self, value: Any) -> dict[str, Any]:
        plain = _encodable(thaw(value))
        if self._wrapped:
            return {_WRAP_KEY: plain}
        assert isinstance(plain, dict)  # the registry validated it against an object schema
        return plain


def output_shape(output_schema: Mapping[str, Any] | None) -> OutputShape | None:
    """The MCP shape of a tool's ``output_schema`` (``None`` without one)."""
    if output_schema is None:
        return None
    schema = thaw(output_schema)
    if schema.get("type") == "object":
        return OutputShape(schema, wrapped=False)
    wrapped: dict[str, Any] = {"type": "object", "properties": {_WRAP_KEY: schema}, "required": [_WRAP_KEY]}
    for keyword in ("$schema", "$defs", "definitions"):
        # Keywords that only mean something at the root stay there.
        if keyword in schema:
            wrapped[keyword] = schema.pop(keyword)
    return OutputShape(wrapped, wrapped=True)
