"""The registry the MCP conformance suite (``@modelcontextprotocol/conformance``)
is run against: ``python -m dshtools mcp --http 127.0.0.1:0 --tools
conformance_tools:registry`` (``tests/mcp`` on the path). Each tool is the one
a server scenario calls by name, written as a user would write it with
dshtools: content blocks in MCP's own shape through ``render``, a failure as
a ``ToolError``, a hand-written JSON Schema 2020-12 input schema, progress
through ``run.report_progress``. The ``structured_*`` and ``not_an_image``
tools are for ``tests/mcp/test_content.py``.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

from dshtools import ToolDefinition, ToolError, ToolRegistry, ToolRunContext

# A 1x1 transparent PNG and a silent 1-sample WAV: real files of their types.
PNG = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
        "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082"
    )
).decode()
WAV = base64.b64encode(
    b"RIFF"
    + (38).to_bytes(4, "little")
    + b"WAVEfmt "
    + (16).to_bytes(4, "little")
    + bytes.fromhex("01000100401f0000803e00000200100064617461")
    + (2).to_bytes(4, "little")
    + b"\x00\x00"
).decode()

IMAGE = {"type": "image", "data": PNG, "mimeType": "image/png"}
AUDIO = {"type": "audio", "data": WAV, "mimeType": "audio/wav"}
RESOURCE = {
    "type": "resource",
    "resource": {"uri": "test://embedded-resource", "mimeType": "text/plain", "text": "This is an embedded resource."},
}
NO_ARGS: dict[str, Any] = {"type": "object", "properties": {}}

JSON_SCHEMA_2020_12 = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {"address": {"type": "object", "properties": {"street": {"type": "string"}, "city": {"type": "string"}}}},
    "properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"}},
    "additionalProperties": False,
}


def _blocks(value: Any) -> Any:
    """A body's value that is already a list of content blocks."""
    return value


def _returning(value: Any) -> Any:
    """A body that returns ``value``."""

    def body(_args: Any, _run: ToolRunContext) -> Any:
        return value

    return body


def _fail(_args: Any, _run: ToolRunContext) -> None:
    raise ToolError("This tool intentionally returns an error for testing")


def _progress(_args: Any, run: ToolRunContext) -> str:
    # Progress is coalesced for a consumer that is behind: the scenario
    # counts three notifications, so the steps are apart in time, as a real
    # body's would be.
    for step in (0, 50, 100):
        run.report_progress(step, 100, f"step {step}")
        run.signal.wait(0.2)
    return "Progress reported: 0, 50, 100 of 100"


registry = ToolRegistry()
registry.register(
    ToolDefinition(
        "test_simple_text",
        "Returns a text block",
        NO_ARGS,
        _returning("This is a simple text response for testing."),
    )
)
registry.register(
    ToolDefinition("test_image_content", "Returns an image block", NO_ARGS, _returning([IMAGE]), render=_blocks)
)
registry.register(
    ToolDefinition("test_audio_content", "Returns an audio block", NO_ARGS, _returning([AUDIO]), render=_blocks)
)
registry.register(
    ToolDefinition(
        "test_embedded_resource", "Returns an embedded resource", NO_ARGS, _returning([RESOURCE]), render=_blocks
    )
)
registry.register(
    ToolDefinition(
        "test_multiple_content_types",
        "Returns text, an image and an embedded resource",
        NO_ARGS,
        _returning([{"type": "text", "text": "Multiple content types test:"}, IMAGE, RESOURCE]),
        render=_blocks,
    )
)
registry.register(ToolDefinition("test_error_handling", "Always fails", NO_ARGS, _fail))
registry.register(ToolDefinition("test_tool_with_progress", "Reports progress three times", NO_ARGS, _progress))
registry.register(
    ToolDefinition(
        "json_schema_2020_12_tool",
        "Tool with JSON Schema 2020-12 features",
        JSON_SCHEMA_2020_12,
        _returning("Hello"),
    )
)


# Tools with an output schema (tests/mcp/test_content.py; no scenario calls
# them): an object-rooted one answers its value as structuredContent, any
# other root is wrapped as {"result": value}.


@dataclass
class Point:
    x: int
    y: int


@registry.tool(output_schema=True)
def structured_point(x: int, y: int) -> Point:
    """The point (x, y) as an object."""
    return Point(x, y)


@registry.tool(output_schema=True)
def structured_count(n: int) -> int:
    """n + 1 (a schema whose root is not an object)."""
    return n + 1


registry.register(
    ToolDefinition(
        "structured_hand",
        "A hand-written output schema",
        NO_ARGS,
        _returning({"ok": True}),
        output_schema={"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]},
    )
)
registry.register(
    ToolDefinition(
        "not_an_image",
        "An image block without data, and a block MCP has no type for",
        NO_ARGS,
        _returning([{"type": "image", "mimeType": "image/png"}, {"type": "thinking", "text": "hm"}]),
        render=_blocks,
    )
)
