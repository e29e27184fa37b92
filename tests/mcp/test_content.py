"""What dshtools' MCP server sends for a result, over stdio
(docs/mcp.md#content-and-structured-results): image, audio and embedded-resource
blocks as themselves, ``outputSchema`` and ``structuredContent`` for tools
with an output schema. One server process (``conformance_tools:registry``)
serves every test of the module, read through the SDK's own client session
so the assertions see the wire's fields, not our client's mapping."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed (pip install 'dshtools[mcp]')")

import anyio
import mcp_types as types
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from dshtools._mcp.content import mcp_blocks, output_shape
from tests.mcp.client_support import ROOT, TESTS
from tests.mcp.conformance_tools import AUDIO, IMAGE, RESOURCE

pytestmark = pytest.mark.timeout(60)


@asynccontextmanager
async def session() -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "dshtools", "mcp", "--tools", "conformance_tools:registry"],
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), str(ROOT)])},
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as client:
        await client.initialize()
        yield client


def _wire(result: types.CallToolResult) -> dict[str, Any]:
    dumped: dict[str, Any] = result.model_dump(by_alias=True, exclude_none=True)
    return dumped


@pytest.fixture(scope="module")
def answers() -> Iterator[dict[str, Any]]:
    """Every call of the module, made over one stdio connection."""
    calls: dict[str, dict[str, Any]] = {
        "test_image_content": {},
        "test_audio_content": {},
        "test_embedded_resource": {},
        "test_multiple_content_types": {},
        "structured_point": {"x": 3, "y": 4},
        "structured_count": {"n": 41},
        "structured_hand": {},
        "not_an_image": {},
        "test_error_handling": {},
        "structured_point ": {"x": "not an int", "y": 4},
    }

    async def run() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with session() as client:
            listed = await client.list_tools()
            out["tools/list"] = {tool.name: tool.model_dump(by_alias=True) for tool in listed.tools}
            for key, arguments in calls.items():
                out[key] = _wire(await client.call_tool(key.strip(), arguments))
        return out

    yield anyio.run(run)


def test_image_audio_and_embedded_resource_blocks_go_out_as_themselves(answers: dict[str, Any]) -> None:
    assert answers["test_image_content"]["content"] == [IMAGE]
    assert answers["test_audio_content"]["content"] == [AUDIO]
    assert answers["test_embedded_resource"]["content"] == [RESOURCE]
    mixed = answers["test_multiple_content_types"]["content"]
    assert [block["type"] for block in mixed] == ["text", "image", "resource"]
    assert mixed[1:] == [IMAGE, RESOURCE]
    for key in ("test_image_content", "test_audio_content", "test_embedded_resource"):
        assert answers[key]["isError"] is False
        assert "structuredContent" not in answers[key]  # no output schema: no structured content


def test_a_block_with_no_valid_mcp_form_goes_out_as_its_json_text(answers: dict[str, Any]) -> None:
    content = answers["not_an_image"]["content"]
    assert [block["type"] for block in content] == ["text", "text"]
    assert content[0]["text"] == '{"type": "image", "mimeType": "image/png"}'
    assert content[1]["text"] == '{"type": "thinking", "text": "hm"}'


def test_an_object_output_schema_is_declared_and_answered_as_structured_content(answers: dict[str, Any]) -> None:
    tools = answers["tools/list"]
    point = tools["structured_point"]["outputSchema"]
    assert point["type"] == "object" and point["required"] == ["x", "y"]
    assert tools["structured_hand"]["outputSchema"] == {
        "type": "object",
        "properties": {"ok": {"type": "boolean"}},
        "required": ["ok"],
    }
    assert tools["test_image_content"]["outputSchema"] is None  # no output schema, none declared
    answer = answers["structured_point"]
    assert answer["structuredContent"] == {"x": 3, "y": 4}
    assert answer["content"] == [{"type": "text", "text": '{"x": 3, "y": 4}'}]  # the text form alongside
    assert answers["structured_hand"]["structuredContent"] == {"ok": True}


def test_a_schema_whose_root_is_not_an_object_is_wrapped_in_result(answers: dict[str, Any]) -> None:
    declared = answers["tools/list"]["structured_count"]["outputSchema"]
    assert declared == {"type": "object", "properties": {"result": {"type": "integer"}}, "required": ["result"]}
    assert answers["structured_count"]["structuredContent"] == {"result": 42}


def test_a_failure_carries_no_structured_content(answers: dict[str, Any]) -> None:
    failed = answers["structured_point "]  # bad arguments: INVALID_ARGS
    assert failed["isError"] is True and "structuredContent" not in failed
    assert "INVALID_ARGS" in failed["content"][0]["text"] or "invalid" in failed["content"][0]["text"].lower()
    error = answers["test_error_handling"]
    assert error["isError"] is True
    assert error["content"] == [{"type": "text", "text": "Error: This tool intentionally returns an error for testing"}]


def test_root_keywords_stay_at_the_root_of_a_wrapped_schema() -> None:
    shape = output_shape({"$defs": {"n": {"type": "integer"}}, "type": "array", "items": {"$ref": "#/$defs/n"}})
    assert shape is not None
    assert shape.schema == {
        "type": "object",
        "properties": {"result": {"type": "array", "items": {"$ref": "#/$defs/n"}}},
        "required": ["result"],
        "$defs": {"n": {"type": "integer"}},
    }
    assert shape.structured((1, 2)) == {"result": [1, 2]}
    assert output_shape(None) is None


def test_lone_surrogates_in_blocks_are_made_encodable() -> None:
    (image,) = mcp_blocks([{"type": "image", "data": "AAAA", "mimeType": "image/\ud800png"}])
    assert isinstance(image, types.ImageContent) and image.mime_type == "image/?png"
    (text,) = mcp_blocks([{"type": "text", "text": "a\udc00b"}])
    assert isinstance(text, types.TextContent) and text.text == "a?b"
