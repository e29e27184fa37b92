"""One agent turn through the real OpenAI and Anthropic SDK clients, against
a local HTTP server that plays the provider (offline): the SDK's own
response objects go into ``calls_from_message``, and what ``tool_messages``
/ ``tool_results`` and ``tools_param`` produce goes out through the SDK's
own request serialization (docs/contract.md#interop-and-cli, docs/contract.md#a11, docs/contract.md#a12, docs/contract.md#more-interop).

The server records each request body, so the test sees exactly what would
reach the provider: every model tool call answered under its id, in order,
names provider-valid, text UTF-8."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from dshtools import INVALID_ARGS, INVALID_CALL, AbortController, ToolDefinition, ToolRegistry, execute_batch
from tests.helpers.providers import FakeProvider

NAME_RULE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
OBJ = {"type": "object", "properties": {"n": {"type": "integer"}}}


@pytest.fixture
def registry() -> Iterator[ToolRegistry]:
    with ToolRegistry(max_workers=2) as r:
        r.register(ToolDefinition("math.factorial", "n!", OBJ, lambda args, run: {"value": 120}))
        r.register(ToolDefinition("get/whoami", "who", {"type": "object"}, lambda args, run: "user \ud800 x"))
        yield r


@pytest.mark.timeout(60)
def test_an_openai_turn_through_the_sdk_client(registry: ToolRegistry) -> None:
    openai = pytest.importorskip("openai", reason="the openai SDK is in the test extra")
    from dshtools import openai as dopenai

    tools = dopenai.tools_param(registry)
    aliases = [t["function"]["name"] for t in tools]
    assert all(NAME_RULE.match(a) for a in aliases)

    def completion(message: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 0,
            "model": "gpt-test",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": message}],
        }

    tool_calls = [
        {"id": "call_1", "type": "function", "function": {"name": aliases[0], "arguments": '{"n": 5}'}},
        {"id": "call_2", "type": "function", "function": {"name": aliases[1], "arguments": "{}"}},
        {"id": "call_3", "type": "function", "function": {"name": aliases[0], "arguments": "[" * 5000 + "]" * 5000}},
        {"id": "call_1", "type": "function", "function": {"name": aliases[0], "arguments": '{"n": 1}'}},
        {"id": "call_4", "type": "custom", "custom": {"name": aliases[0], "input": "5"}},
    ]
    provider = FakeProvider(
        [
            completion({"role": "assistant", "content": None, "tool_calls": tool_calls}),
            completion({"role": "assistant", "content": "done"}),
        ]
    )
    try:
        client = openai.OpenAI(api_key="test", base_url=provider.url + "/v1", max_retries=0)
        messages: list[Any] = [{"role": "user", "content": "go"}]
        first = client.chat.completions.create(model="gpt-test", messages=messages, tools=tools)
        message = first.choices[0].message
        controller = AbortController()
        calls = dopenai.calls_from_message(message, signal=controller.signal, registry=registry)
        results = execute_batch(registry, calls, signal=controller.signal)
        messages.append(message)
        messages.extend(dopenai.tool_messages(calls, results))
        client.chat.completions.create(model="gpt-test", messages=messages, tools=tools)
    finally:
        provider.close()

    assert [c.name for c in calls] == [
        "math.factorial",
        "get/whoami",
        "math.factorial",
        "math.factorial",
        "math.factorial",
    ]
    assert [r.code for r in results] == [None, None, INVALID_ARGS, INVALID_CALL, INVALID_CALL]
    sent_tools = provider.requests[0]["tools"]
    assert [t["function"]["name"] for t in sent_tools] == aliases
    answered = [m for m in provider.requests[1]["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in answered] == ["call_1", "call_2", "call_3", "call_1", "call_4"]
    assert json.loads(answered[0]["content"]) == {"value": 120}
    assert answered[1]["content"] == "user \ufffd x"
    assert "nested too deeply" in answered[2]["content"]


@pytest.mark.timeout(60)
def test_an_anthropic_turn_through_the_sdk_client(registry: ToolRegistry) -> None:
    anthropic = pytest.importorskip("anthropic", reason="the anthropic SDK is in the test extra")
    from dshtools import anthropic as danthropic

    tools = danthropic.tools_param(registry)
    aliases = [t["name"] for t in tools]
    assert all(NAME_RULE.match(a) for a in aliases)

    def reply(content: list[dict[str, Any]], stop: str) -> dict[str, Any]:
        return {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-test",
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {"input_tokens": 1, "output_tokens": 1},
        }

    content: list[dict[str, Any]] = [
        {"type": "text", "text": "Working."},
        {"type": "tool_use", "id": "toolu_1", "name": aliases[0], "input": {"n": 5}},
        {"type": "tool_use", "id": "toolu_2", "name": aliases[1], "input": {}},
        {"type": "tool_use", "id": "toolu_1", "name": aliases[0], "input": {"n": 1}},
        {"type": "tool_use", "id": "", "name": aliases[0], "input": {"n": 2}},
    ]
    provider = FakeProvider([reply(content, "tool_use"), reply([{"type": "text", "text": "done"}], "end_turn")])
    try:
        client = anthropic.Anthropic(api_key="test", base_url=provider.url, max_retries=0)
        messages: list[Any] = [{"role": "user", "content": "go"}]
        first = client.messages.create(model="claude-test", max_tokens=100, messages=messages, tools=tools)
        controller = AbortController()
        calls = danthropic.calls_from_message(first, signal=controller.signal, registry=registry)
        results = execute_batch(registry, calls, signal=controller.signal)
        messages.append({"role": "assistant", "content": first.content})
        messages.append({"role": "user", "content": danthropic.tool_results(calls, results)})
        client.messages.create(model="claude-test", max_tokens=100, messages=messages, tools=tools)
    finally:
        provider.close()

    assert [c.name for c in calls] == ["math.factorial", "get/whoami", "math.factorial", "math.factorial"]
    assert [r.code for r in results] == [None, None, INVALID_CALL, INVALID_CALL]
    assert [t["name"] for t in provider.requests[0]["tools"]] == aliases
    blocks = provider.requests[1]["messages"][-1]["content"]
    assert [(b["type"], b["tool_use_id"], b["is_error"]) for b in blocks] == [
        ("tool_result", "toolu_1", False),
        ("tool_result", "toolu_2", False),
        ("tool_result", "toolu_1", True),
        ("tool_result", "", True),
    ]
    assert blocks[1]["content"] == "user \ufffd x"
    assert "call id is empty" in blocks[3]["content"]
