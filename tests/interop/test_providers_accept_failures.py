"""What crosses to a provider is accepted by it (docs/contract.md#a18):
a failure that says nothing still goes out with text (field case B51:
Anthropic answers an ``is_error`` ``tool_result`` with empty content with
HTTP 400, and the session stays stuck)."""

from __future__ import annotations

from typing import Any

import pytest

from dshtools import (
    AbortController,
    Accept,
    Block,
    ToolDefinition,
    ToolError,
    ToolExecution,
    ToolExecutionResult,
    ToolRegistry,
    ToolRunContext,
    execute_batch,
)
from dshtools import anthropic as dan
from dshtools import openai as doa

EMPTY = {"type": "object", "properties": {}}


def _tool_error(args: Any, run: ToolRunContext) -> Any:
    raise ToolError("", "QUIET")


def _value_error(args: Any, run: ToolRunContext) -> Any:
    raise ValueError()


def _blank_error(args: Any, run: ToolRunContext) -> Any:
    raise RuntimeError("   ")


def _fine(args: Any, run: ToolRunContext) -> Any:
    return "fine"


def _blocked(args: Any, run: ToolRunContext) -> Any:
    return "the hook replaces this"


def _post(execution: ToolExecution, result: ToolExecutionResult, next_: Any) -> Accept | Block:
    if execution.name == "blocked":
        return Block("")
    decision: Accept | Block = next_()
    return decision


def _registry() -> ToolRegistry:
    registry = ToolRegistry()
    for name, body in [
        ("tool_error", _tool_error),
        ("value_error", _value_error),
        ("blank_error", _blank_error),
        ("fine", _fine),
        ("blocked", _blocked),
    ]:
        registry.register(ToolDefinition(name, f"{name} tool", EMPTY, body))
    registry.add_post_execute(_post)
    return registry


ORDER = ["tool_error", "value_error", "blank_error", "fine", "blocked"]


def _says_something(text: str) -> bool:
    return bool(text.strip().removeprefix("Error:").strip())


@pytest.mark.timeout(30)
def test_b51_every_error_block_says_something_and_the_blocks_keep_model_order() -> None:
    """B51: ``ToolError("", code)``, ``ValueError()``, ``RuntimeError("   ")``,
    a success and a post-execute ``Block("")``: five blocks in model order,
    every ``is_error`` block with text that says something; the OpenAI
    messages the same, with string content."""
    controller = AbortController()
    with _registry() as registry:
        message = {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": f"toolu_{i}", "name": name, "input": {}} for i, name in enumerate(ORDER)
            ],
        }
        calls = dan.calls_from_message(message, signal=controller.signal, registry=registry)
        results = execute_batch(registry, calls, signal=controller.signal)
    blocks = dan.tool_results(calls, results)
    assert [b["tool_use_id"] for b in blocks] == [f"toolu_{i}" for i in range(5)]
    assert [b.get("is_error") for b in blocks] == [True, True, True, False, True]
    for block in blocks:
        content = block.get("content")
        assert isinstance(content, str) and content.strip()
        if block.get("is_error"):
            assert _says_something(content), block
    # The Block("") and the ToolError("") had nothing to say; what goes out says so.
    assert blocks[4]["content"] == "Error: the tool call failed with no message"
    assert blocks[0]["content"] == "Error: the tool call failed (QUIET) with no message"
    assert blocks[3]["content"] == "fine"

    messages = doa.tool_messages(calls, results)
    assert [m["tool_call_id"] for m in messages] == [f"toolu_{i}" for i in range(5)]
    assert [m["content"] for m in messages] == [b["content"] for b in blocks]
    assert all(isinstance(m["content"], str) and m["content"].strip() for m in messages)


@pytest.mark.timeout(30)
def test_b51_the_anthropic_sdk_accepts_every_block_of_the_turn() -> None:
    anthropic_types = pytest.importorskip("anthropic.types", reason="the anthropic SDK is in the test extra")
    from pydantic import TypeAdapter

    controller = AbortController()
    with _registry() as registry:
        message = {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": f"t{i}", "name": name, "input": {}} for i, name in enumerate(ORDER)],
        }
        calls = dan.calls_from_message(message, signal=controller.signal)
        results = execute_batch(registry, calls, signal=controller.signal)
    adapter: TypeAdapter[Any] = TypeAdapter(anthropic_types.MessageParam)
    user = {"role": "user", "content": dan.tool_results(calls, results)}
    validated = adapter.validate_python(user)
    assert list(validated["content"]) == user["content"]


@pytest.mark.timeout(30)
def test_a_failure_that_says_something_goes_out_as_written() -> None:
    controller = AbortController()
    registry = ToolRegistry()

    def body(args: Any, run: ToolRunContext) -> Any:
        raise ToolError("disk full", "NO_SPACE")

    registry.register(ToolDefinition("t", "t", EMPTY, body))
    with registry:
        result = registry.execute(doa.calls_from_message(_openai_call("t"), signal=controller.signal)[0])
    assert dan.tool_result("c", result)["content"] == "Error: disk full"
    assert doa.tool_message("c", result)["content"] == "Error: disk full"


def _openai_call(name: str) -> dict[str, Any]:
    return {
        "role": "assistant",
        "tool_calls": [{"id": "c", "type": "function", "function": {"name": name, "arguments": "{}"}}],
    }
