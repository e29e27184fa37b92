"""A typed tool that returns bytes which are not UTF-8 is INVALID_TOOL_OUTPUT.

Found in a new user's trial: ``def read(...) -> bytes`` returning
``b"\\xff\\x00"`` gave ``TOOL_ERROR`` with ``Error: 'utf-8' codec can't
decode byte 0xff ...``, as if the tool had failed, while every other value
that is not JSON (``object()``, ``nan``) is ``INVALID_TOOL_OUTPUT`` naming
the tool and the place. Bytes that are UTF-8 stay text, as pydantic's JSON
mode makes them.
"""

from __future__ import annotations

from dshtools import INVALID_TOOL_OUTPUT, AbortController, ToolExecutionInput, ToolRegistry


def test_bytes_that_are_not_utf8_are_invalid_output_not_a_tool_error() -> None:
    with ToolRegistry() as registry:

        @registry.tool
        def raw() -> bytes:
            """Some bytes."""
            return b"\xff\x00"

        result = registry.execute(ToolExecutionInput("c1", "raw", {}, AbortController().signal))
    assert result.code == INVALID_TOOL_OUTPUT
    assert result.body_invoked is True
    assert result.content[0]["text"].startswith('Error: tool "raw" returned invalid output: ')
    assert "bytes" in result.content[0]["text"]


def test_bytes_that_are_utf8_are_their_text() -> None:
    with ToolRegistry() as registry:

        @registry.tool
        def text() -> bytes:
            """Some bytes."""
            return "größe".encode()

        result = registry.execute(ToolExecutionInput("c1", "text", {}, AbortController().signal))
    assert result.code is None
    assert result.content[0]["text"] == "größe"
