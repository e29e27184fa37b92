"""dshtools.anthropic: Messages API tools, tool_use blocks and tool_result
blocks (docs/contract.md#more-interop, docs/contract.md#a11, docs/contract.md#a12), exercised through a real
ToolRegistry and checked against the Anthropic SDK's own types."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from dshtools import (
    INVALID_ARGS,
    INVALID_CALL,
    AbortController,
    ToolDefinition,
    ToolRegistry,
    ToolSuccess,
    execute_batch,
)
from dshtools import anthropic as dan
from tests.helpers.calls import ADD_PARAMS, add, broken

NAME_RULE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


@pytest.fixture
def registry() -> Iterator[ToolRegistry]:
    with ToolRegistry(max_workers=2) as r:
        r.register(ToolDefinition("add", "Add two integers.", ADD_PARAMS, add))
        r.register(ToolDefinition("math.fail", "Always fails.", {"type": "object"}, broken))
        yield r


def _use(block_id: Any, name: Any, input: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": block_id, "name": name, "input": input}


def _assistant(*blocks: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": list(blocks)}


def test_tools_param_has_the_messages_api_shape_with_aliases(registry: ToolRegistry) -> None:
    tools = dan.tools_param(registry)
    assert tools == [
        {"name": "add", "description": "Add two integers.", "input_schema": ADD_PARAMS},
        {"name": "math_fail", "description": "Always fails.", "input_schema": {"type": "object"}},
    ]
    assert all(NAME_RULE.match(t["name"]) for t in tools)
    schema: Any = tools[0]["input_schema"]  # the SDK types it as a mapping of objects
    schema["properties"]["a"]["type"] = "string"
    assert dan.tools_param(registry)[0]["input_schema"] == ADD_PARAMS


def test_tools_param_refuses_a_non_object_schema_naming_the_tool() -> None:
    with ToolRegistry(max_workers=1) as r:
        r.register(ToolDefinition("stringly", "", {"type": "string"}, add))
        with pytest.raises(ValueError, match="'stringly'"):
            dan.tools_param(r)


@pytest.mark.timeout(30)
def test_tool_use_blocks_become_calls_in_order_and_results_become_tool_result_blocks(registry: ToolRegistry) -> None:
    c = AbortController()
    message = _assistant(
        {"type": "text", "text": "Let me add."},
        _use("toolu_1", "add", {"a": 1, "b": 2}),
        {"type": "thinking", "thinking": "...", "signature": "x"},
        _use("toolu_2", "math_fail", {}),
    )
    calls = dan.calls_from_message(message, signal=c.signal, registry=registry, agent="a")
    assert [(x.call_id, x.name, x.arguments, x.agent) for x in calls] == [
        ("toolu_1", "add", {"a": 1, "b": 2}, "a"),
        ("toolu_2", "math.fail", {}, "a"),
    ]
    results = execute_batch(registry, calls, signal=c.signal)
    blocks = dan.tool_results(calls, results)
    assert blocks == [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": '{"sum": 3}', "is_error": False},
        {"type": "tool_result", "tool_use_id": "toolu_2", "content": "Error: it broke", "is_error": True},
    ]


def test_a_message_without_tool_use_gives_no_calls() -> None:
    sig = AbortController().signal
    assert dan.calls_from_message({"role": "assistant", "content": "hi"}, signal=sig) == []
    assert dan.calls_from_message(_assistant({"type": "text", "text": "hi"}), signal=sig) == []


@pytest.mark.parametrize(("message", "error"), [([], TypeError), ({"role": "user", "content": []}, ValueError)])
def test_what_is_not_an_assistant_message_raises(message: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        dan.calls_from_message(message, signal=AbortController().signal)


def _deep(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = {"a": value}
    return value


@pytest.mark.timeout(30)
def test_a_message_of_another_shape_that_holds_calls_is_refused_not_read_as_none() -> None:
    sig = AbortController().signal
    openai_message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "t", "arguments": "{}"}}],
    }
    with pytest.raises(ValueError, match=r"dshtools\.openai\.calls_from_message"):
        dan.calls_from_message(openai_message, signal=sig)
    with pytest.raises(ValueError, match="whole Chat Completions response"):
        dan.calls_from_message({"choices": [{"message": openai_message}], "content": []}, signal=sig)
    text_only = {"role": "assistant", "content": [{"type": "text", "text": "done"}]}
    assert dan.calls_from_message(text_only, signal=sig) == []


def test_model_output_never_raises_and_each_block_is_answered_under_its_id(registry: ToolRegistry) -> None:
    ran: list[object] = []

    def pre(execution: Any, nxt: Any) -> Any:
        ran.append(execution.call_id)
        return nxt()

    registry.add_pre_execute(pre)
    message = _assistant(
        _use("u1", "add", {"a": 1, "b": 2}),
        _use("", "add", {"a": 1, "b": 2}),  # empty id
        _use("u1", "add", {"a": 3, "b": 4}),  # repeated: the first runs
        _use("u2", None, {}),  # no name
        _use("u3", "add", _deep(5000)),  # field case B37, object form
        _use("u4", "add", {"a": 1, "b": 2, "t": "\ud800x"}),  # field case N4
        _use("u5", "add", '{"a": 2, "b": 2}'),  # input sent as JSON text
        _use("u6", "add", "[" * 5000 + "]" * 5000),
    )
    calls = dan.calls_from_message(message, signal=AbortController().signal)
    results = execute_batch(registry, calls, signal=AbortController().signal)
    assert [x.code for x in results] == [None, *[INVALID_CALL] * 3, *[INVALID_ARGS] * 2, None, INVALID_ARGS]
    assert "nested too deeply" in results[4].content[0]["text"]
    assert "lone surrogate" in results[5].content[0]["text"]
    assert "nested too deeply" in results[7].content[0]["text"]
    assert ran == ["u1", "u5"]
    blocks = dan.tool_results(calls, results)
    assert [b["tool_use_id"] for b in blocks] == ["u1", "", "u1", "u2", "u3", "u4", "u5", "u6"]
    assert [b["is_error"] for b in blocks] == [False, True, True, True, True, True, False, True]
    json.dumps(blocks, ensure_ascii=False).encode("utf-8")


def test_tool_results_always_encode_as_utf8() -> None:
    block = dan.tool_result("toolu_\ud800", ToolSuccess(None, "bad \udfff text"))
    assert json.dumps(block, ensure_ascii=False).encode("utf-8")
    assert block["content"] == "bad \ufffd text" and block["tool_use_id"] == "toolu_\ufffd"


def test_tool_results_rejects_mismatched_lengths(registry: ToolRegistry) -> None:
    calls = dan.calls_from_message(_assistant(_use("u", "add", {})), signal=AbortController().signal)
    with pytest.raises(ValueError):
        dan.tool_results(calls, [])
    results = [ToolSuccess(None, "x")]
    with pytest.raises(TypeError, match="calls must hold ToolExecutionInput"):
        dan.tool_results(results, calls)  # type: ignore[arg-type]


# ---------------------------------------------------- against the real SDK


@pytest.mark.timeout(30)
def test_the_sdk_validates_what_tools_param_and_tool_results_produce(registry: ToolRegistry) -> None:
    anthropic_types = pytest.importorskip("anthropic.types", reason="the anthropic SDK is in the test extra")
    from pydantic import TypeAdapter

    tools = dan.tools_param(registry)
    tool_adapter: TypeAdapter[Any] = TypeAdapter(anthropic_types.ToolParam)
    for tool in tools:
        assert tool_adapter.validate_python(tool) == tool

    message = anthropic_types.Message.model_validate(
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-test",
            "content": [
                {"type": "text", "text": "Adding."},
                {"type": "tool_use", "id": "toolu_01", "name": "add", "input": {"a": 2, "b": 3}},
                {"type": "tool_use", "id": "toolu_02", "name": "math_fail", "input": {}},
                {"type": "tool_use", "id": "toolu_01", "name": "add", "input": {"a": 0, "b": 0}},
            ],
            "stop_reason": "tool_use",
            "stop_sequence": None,
            "usage": {"input_tokens": 1, "output_tokens": 1},
        }
    )
    c = AbortController()
    calls = dan.calls_from_message(message, signal=c.signal, registry=registry)
    assert [x.name for x in calls] == ["add", "math.fail", "add"]
    results = execute_batch(registry, calls, signal=c.signal)
    assert [x.code for x in results] == [None, "BROKEN", INVALID_CALL]
    content = dan.tool_results(calls, results)
    block_adapter: TypeAdapter[Any] = TypeAdapter(anthropic_types.ToolResultBlockParam)
    for block in content:
        assert block_adapter.validate_python(block) == block
    user_message = {"role": "user", "content": content}
    message_adapter: TypeAdapter[Any] = TypeAdapter(anthropic_types.MessageParam)
    validated = message_adapter.validate_python(user_message)
    assert validated["role"] == "user"
    assert list(validated["content"]) == content  # the SDK validates an Iterable lazily
