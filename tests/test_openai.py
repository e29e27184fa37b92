"""dshtools.openai: Chat Completions tools, tool_calls and tool messages
(docs/contract.md §6), exercised through a real ToolRegistry."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest

from dshtools import (
    INVALID_ARGS,
    AbortController,
    AbortSignal,
    ToolDefinition,
    ToolError,
    ToolExecutionInput,
    ToolFailure,
    ToolRegistry,
    ToolRunContext,
    ToolSuccess,
)
from dshtools import openai as doa

ADD_PARAMS = {
    "type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
    "required": ["a", "b"],
    "additionalProperties": False,
}


def _add(args: Any, run: ToolRunContext) -> Any:
    return {"sum": args["a"] + args["b"]}


def _fail(args: Any, run: ToolRunContext) -> Any:
    raise ToolError("it broke", "BROKEN")


@pytest.fixture
def registry() -> Iterator[ToolRegistry]:
    with ToolRegistry(max_workers=2) as r:
        r.register(ToolDefinition("add", "Add two integers.", ADD_PARAMS, _add))
        r.register(ToolDefinition("fail", "Always fails.", {"type": "object"}, _fail))
        yield r


def _call(call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


# ------------------------------------------------------------------- tools


def test_tools_param_wraps_every_schema_as_a_function_tool(registry: ToolRegistry) -> None:
    tools = doa.tools_param(registry)
    assert tools == [
        {"type": "function", "function": {"name": "add", "description": "Add two integers.", "parameters": ADD_PARAMS}},
        {
            "type": "function",
            "function": {"name": "fail", "description": "Always fails.", "parameters": {"type": "object"}},
        },
    ]
    # Round trip: plain JSON, and each entry carries exactly registry.schemas().
    assert json.loads(json.dumps(tools)) == tools
    assert [t["function"] for t in tools] == registry.schemas()


def test_tools_param_is_a_fresh_copy_the_caller_may_edit(registry: ToolRegistry) -> None:
    tools = doa.tools_param(registry)
    tools[0]["function"]["parameters"]["properties"]["a"]["type"] = "string"
    assert doa.tools_param(registry)[0]["function"]["parameters"] == ADD_PARAMS


# -------------------------------------------------------------- tool_calls


def test_calls_from_message_builds_inputs_in_order_with_the_callers_signal() -> None:
    c = AbortController()
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [_call("call_1", "add", '{"a": 1, "b": 2}'), _call("call_2", "fail", "{}")],
    }
    calls = doa.calls_from_message(message, signal=c.signal, agent="planner")
    assert [(x.call_id, x.name, x.arguments, x.agent) for x in calls] == [
        ("call_1", "add", {"a": 1, "b": 2}, "planner"),
        ("call_2", "fail", {}, "planner"),
    ]
    assert all(isinstance(x, ToolExecutionInput) and x.signal is c.signal for x in calls)


def test_calls_from_message_without_tool_calls_is_empty() -> None:
    sig = AbortController().signal
    assert doa.calls_from_message({"role": "assistant", "content": "hi"}, signal=sig) == []
    assert doa.calls_from_message({"role": "assistant", "tool_calls": None}, signal=sig) == []
    assert doa.calls_from_message({"role": "assistant", "tool_calls": []}, signal=sig) == []


def test_calls_from_message_accepts_empty_or_decoded_arguments() -> None:
    sig = AbortController().signal
    calls = doa.calls_from_message({"tool_calls": [_call("a", "t", ""), _call("b", "t", {"x": 1})]}, signal=sig)
    assert [x.arguments for x in calls] == [{}, {"x": 1}]


@pytest.mark.parametrize(
    "raw",
    ['{"a": 1, "b": ', "{'a': 1}", '{"a": NaN, "b": 1}', "not json", '{"a": 1} trailing', 42],
)
def test_malformed_arguments_become_a_sentinel_not_an_exception(raw: Any) -> None:
    calls = doa.calls_from_message({"tool_calls": [_call("c1", "add", raw)]}, signal=AbortController().signal)
    args = calls[0].arguments
    assert isinstance(args, doa.MalformedArguments)
    assert args.raw == (raw if isinstance(raw, str) else repr(raw))
    assert args.error and "not valid JSON" in args.message


@pytest.mark.timeout(30)
def test_malformed_json_arguments_execute_to_invalid_args_through_a_real_registry(registry: ToolRegistry) -> None:
    ran: list[object] = []

    def pre(exec_: Any, nxt: Any) -> Any:
        ran.append(exec_)
        return nxt()

    registry.add_pre_execute(pre)
    c = AbortController()
    message = {
        "role": "assistant",
        "tool_calls": [_call("bad", "add", '{"a": 1, "b": '), _call("ok", "add", '{"a": 2, "b": 3}')],
    }
    calls = doa.calls_from_message(message, signal=c.signal)
    bad, ok = (registry.execute(x) for x in calls)
    assert isinstance(bad, ToolFailure) and bad.code == INVALID_ARGS
    assert bad.error.info is not None and bad.error.info.code == INVALID_ARGS
    text = bad.content[0]["text"]
    assert text.startswith("Error: invalid arguments")
    # The model is told what is wrong with its JSON, with line and column.
    sentinel = calls[0].arguments
    assert isinstance(sentinel, doa.MalformedArguments)
    assert text == f"Error: invalid arguments: arguments are not valid JSON: {sentinel.error} at $"
    assert "line 1 column" in text
    assert isinstance(ok, ToolSuccess) and ok.value == {"sum": 5}
    assert len(ran) == 1  # INVALID_ARGS skips every later phase (DESIGN §3 step 1)
    msgs = doa.tool_messages(calls, [bad, ok])
    assert msgs[0]["tool_call_id"] == "bad" and msgs[0]["content"].startswith("Error: invalid arguments")
    assert msgs[1]["tool_call_id"] == "ok" and json.loads(msgs[1]["content"]) == {"sum": 5}


@pytest.mark.timeout(30)
def test_malformed_json_wins_over_an_already_aborted_signal(registry: ToolRegistry) -> None:
    calls = doa.calls_from_message({"tool_calls": [_call("x", "add", "{")]}, signal=AbortSignal.already_aborted())
    assert registry.execute(calls[0]).code == INVALID_ARGS


@pytest.mark.parametrize(
    ("message", "error"),
    [
        ([], TypeError),
        ({"role": "user", "tool_calls": []}, ValueError),
        ({"tool_calls": {"id": "x"}}, TypeError),
    ],
)
def test_calls_from_message_rejects_what_is_not_an_assistant_message(message: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        doa.calls_from_message(message, signal=AbortController().signal)


def test_calls_from_message_requires_a_signal() -> None:
    with pytest.raises(TypeError):
        doa.calls_from_message({"tool_calls": []}, signal=None)  # type: ignore[arg-type]


def test_calls_from_message_does_not_mutate_the_message() -> None:
    message = {"role": "assistant", "tool_calls": [_call("a", "t", '{"k": [1, 2]}'), _call("b", "t", {"x": {"y": 1}})]}
    before = copy.deepcopy(message)
    doa.calls_from_message(message, signal=AbortController().signal)
    assert message == before


# ----------------------------------------------------------- tool messages


@pytest.mark.timeout(30)
def test_tool_messages_have_the_chat_completions_shape(registry: ToolRegistry) -> None:
    c = AbortController()
    calls = doa.calls_from_message(
        {"tool_calls": [_call("c1", "add", '{"a": 1, "b": 2}'), _call("c2", "fail", "{}")]}, signal=c.signal
    )
    results = [registry.execute(x) for x in calls]
    msgs = doa.tool_messages(calls, results)
    assert [set(m) for m in msgs] == [{"role", "tool_call_id", "content"}] * 2
    assert [m["role"] for m in msgs] == ["tool", "tool"]
    assert [m["tool_call_id"] for m in msgs] == ["c1", "c2"]
    assert all(isinstance(m["content"], str) for m in msgs)
    assert msgs[1]["content"] == "Error: it broke"
    assert json.loads(json.dumps(msgs)) == msgs  # plain JSON


def test_tool_message_joins_text_blocks_and_renders_other_blocks_as_json() -> None:
    result = ToolSuccess(
        None, ({"type": "text", "text": "first"}, {"type": "image", "url": "u"}, {"type": "text", "text": "second"})
    )
    assert doa.tool_message("id", result) == {
        "role": "tool",
        "tool_call_id": "id",
        "content": 'first\n{"type": "image", "url": "u"}\nsecond',
    }
    assert doa.tool_message("id", ToolSuccess(None, ()))["content"] == ""


def test_tool_messages_rejects_mismatched_lengths() -> None:
    calls = doa.calls_from_message({"tool_calls": [_call("a", "t", "{}")]}, signal=AbortController().signal)
    with pytest.raises(ValueError):
        doa.tool_messages(calls, [])
    with pytest.raises(TypeError):
        doa.tool_message(1, ToolSuccess(None, "x"))  # type: ignore[arg-type]
