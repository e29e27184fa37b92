"""Arguments in every shape an OpenAI-compatible server (or an Anthropic
proxy) sends them: already decoded, ``null``, blank, JSON text, JSON that is
not an object. The reader never raises, every model call is answered under
its own id in model order, and only an object reaches the body
(docs/contract.md#a11)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from dshtools import INVALID_ARGS, AbortController, ToolRegistry, ToolRunContext, execute_batch
from dshtools import anthropic as dan
from dshtools import openai as doa
from tests.helpers.calls import error_of, tool, value_of

CITY = {"type": "object", "properties": {"city": {"type": "string"}}}
"""A tool with one optional argument."""


class Seen:
    """What the ``weather`` body was called with, per call id."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.args: dict[str, dict[str, Any]] = {}

    def body(self, args: Any, run: ToolRunContext) -> str:
        with self.lock:
            self.args[run.call_id] = dict(args)
        return f"weather in {args['city']}" if "city" in args else "weather here"


def _registry(seen: Seen) -> ToolRegistry:
    registry = ToolRegistry()
    registry.register(tool("weather", seen.body, parameters=CITY, is_concurrency_safe=lambda _a: True))
    return registry


OPENAI_ARGUMENTS: list[object] = [
    {"city": "London"},
    None,
    "",
    "   ",
    '{"city": "Oslo"}',
    "[1, 2]",
    "null",
]


@pytest.mark.timeout(30)
def test_openai_arguments_of_every_shape_are_answered_under_the_model_ids_in_order() -> None:
    """B61: seven calls whose ``function.arguments`` are a dict, ``None``,
    ``""``, ``"   "``, ``'{"city": "Oslo"}'``, ``"[1, 2]"`` and ``"null"``.
    Nothing raises; one call per tool call, under the model's id, in order;
    the dict is used as given, blank text is ``{}``, the JSON text is
    decoded; ``None`` is ``{}`` or ``INVALID_ARGS``; ``[1, 2]`` and ``null``
    are ``INVALID_ARGS`` and the body never runs for them."""
    ids = [f"call_{i}" for i in range(len(OPENAI_ARGUMENTS))]
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": "weather", "arguments": arguments}}
            for call_id, arguments in zip(ids, OPENAI_ARGUMENTS, strict=True)
        ],
    }
    seen = Seen()
    controller = AbortController()
    with _registry(seen) as registry:
        calls = doa.calls_from_message(message, signal=controller.signal, registry=registry)
        assert [c.call_id for c in calls] == ids
        assert [c.name for c in calls] == ["weather"] * len(ids)
        results = execute_batch(registry, calls, signal=controller.signal)
    assert len(results) == len(ids)
    london, none, empty, blank, oslo, array, null = results

    assert value_of(london) == "weather in London"
    assert seen.args["call_0"] == {"city": "London"}
    assert value_of(empty) == value_of(blank) == "weather here"
    assert seen.args["call_2"] == seen.args["call_3"] == {}
    assert value_of(oslo) == "weather in Oslo"
    assert seen.args["call_4"] == {"city": "Oslo"}
    if none.code == INVALID_ARGS:
        assert "call_1" not in seen.args
    else:
        assert value_of(none) == "weather here" and seen.args["call_1"] == {}
    for failed, call_id in ((array, "call_5"), (null, "call_6")):
        assert failed.code == INVALID_ARGS, failed
        assert error_of(failed).message
        assert call_id not in seen.args

    messages = doa.tool_messages(calls, results)
    assert [m["tool_call_id"] for m in messages] == ids
    assert all(isinstance(m["content"], str) and m["content"].strip() for m in messages)
    assert messages[0]["content"] == "weather in London"
    assert messages[4]["content"] == "weather in Oslo"
    assert messages[5]["content"].startswith("Error: invalid arguments")
    assert messages[6]["content"].startswith("Error: invalid arguments")


@pytest.mark.timeout(30)
def test_anthropic_input_as_text_missing_or_null_each_gets_a_result_block_in_order() -> None:
    """B61: ``tool_use`` blocks whose ``input`` is JSON text, absent, and
    ``null``. Nothing raises; the text is decoded; every block gets one
    ``tool_result`` under its id, in order; an input that is not an object
    is ``{}`` or ``INVALID_ARGS`` (the body never sees it)."""
    message = {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "toolu_text", "name": "weather", "input": '{"city": "Oslo"}'},
            {"type": "tool_use", "id": "toolu_missing", "name": "weather"},
            {"type": "tool_use", "id": "toolu_null", "name": "weather", "input": None},
        ],
    }
    ids = ["toolu_text", "toolu_missing", "toolu_null"]
    seen = Seen()
    controller = AbortController()
    with _registry(seen) as registry:
        calls = dan.calls_from_message(message, signal=controller.signal, registry=registry)
        assert [c.call_id for c in calls] == ids
        results = execute_batch(registry, calls, signal=controller.signal)
    text, missing, null = results
    assert value_of(text) == "weather in Oslo"
    assert seen.args["toolu_text"] == {"city": "Oslo"}
    for result, call_id in ((missing, "toolu_missing"), (null, "toolu_null")):
        if result.code == INVALID_ARGS:
            assert call_id not in seen.args
        else:
            assert value_of(result) == "weather here" and seen.args[call_id] == {}

    blocks = dan.tool_results(calls, results)
    assert [b["type"] for b in blocks] == ["tool_result"] * 3
    assert [b["tool_use_id"] for b in blocks] == ids
    assert blocks[0]["content"] == "weather in Oslo" and not blocks[0].get("is_error")
    for block, result in zip(blocks[1:], (missing, null), strict=True):
        assert bool(block.get("is_error")) is (result.code == INVALID_ARGS)
        content = block.get("content")
        assert isinstance(content, str) and content.strip()
