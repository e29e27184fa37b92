"""dshtools.openai: Chat Completions tools, tool_calls and tool messages
(docs/contract.md#interop-and-cli), exercised through a real ToolRegistry."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import random
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dshtools import (
    INVALID_ARGS,
    INVALID_CALL,
    AbortController,
    AbortSignal,
    ToolDefinition,
    ToolExecutionInput,
    ToolFailure,
    ToolRegistry,
    ToolRunContext,
    ToolSuccess,
)
from dshtools import openai as doa
from tests.helpers.calls import ADD_PARAMS, add, broken

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def registry_options() -> dict[str, Any]:
    return {"max_workers": 2}


@pytest.fixture
def registry(registry: ToolRegistry) -> ToolRegistry:
    registry.register(ToolDefinition("add", "Add two integers.", ADD_PARAMS, add))
    registry.register(ToolDefinition("fail", "Always fails.", {"type": "object"}, broken))
    return registry


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
    parameters: Any = tools[0]["function"].get("parameters")  # the SDK types it as a mapping of objects
    parameters["properties"]["a"]["type"] = "string"
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


def test_a_message_of_another_shape_that_holds_calls_is_refused_not_read_as_none() -> None:
    # Returning [] would end an agent loop as if the model had answered.
    sig = AbortController().signal
    message = {"role": "assistant", "tool_calls": [_call("a", "t", "{}")]}
    with pytest.raises(ValueError, match=r"pass response\.choices\[0\]\.message"):
        doa.calls_from_message({"id": "chatcmpl-1", "choices": [{"index": 0, "message": message}]}, signal=sig)
    anthropic_message = {
        "role": "assistant",
        "content": [{"type": "text", "text": "x"}, {"type": "tool_use", "id": "t1", "name": "t", "input": {}}],
    }
    with pytest.raises(ValueError, match=r"dshtools\.anthropic\.calls_from_message"):
        doa.calls_from_message(anthropic_message, signal=sig)
    # A message whose content is a list of text parts and has no calls is just that.
    text_parts = {"role": "assistant", "content": [{"type": "text", "text": "done"}], "tool_calls": []}
    assert doa.calls_from_message(text_parts, signal=sig) == []


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
    assert len(ran) == 1  # INVALID_ARGS skips every later phase (docs/contract.md#registry, pipeline step 1)
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
    with pytest.raises(TypeError, match=r"calls must hold ToolExecutionInput .* not ToolSuccess"):
        doa.tool_messages([ToolSuccess(None, "x")], calls)  # type: ignore[list-item, arg-type]


# ------------------------------------------- model output never raises (A11)


def _msg(*calls: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": list(calls)}


DEEP_ARRAY = "[" * 5000 + "]" * 5000
DEEP_OBJECT = '{"a":' * 5000 + "1" + "}" * 5000


@pytest.mark.timeout(30)
@pytest.mark.parametrize("raw", [DEEP_ARRAY, DEEP_OBJECT], ids=["array", "object"])
def test_b37_too_deep_arguments_are_invalid_args_and_the_body_never_runs(raw: str) -> None:
    ran: list[object] = []

    def body(args: Any, run: ToolRunContext) -> Any:
        ran.append(args)
        return "ran"

    with ToolRegistry(max_workers=1) as r:
        r.register(ToolDefinition("t", "", {"type": "object"}, body))
        calls = doa.calls_from_message(_msg(_call("deep", "t", raw)), signal=AbortController().signal)
        assert len(calls) == 1 and isinstance(calls[0].arguments, doa.MalformedArguments)
        result = r.execute(calls[0])
    assert isinstance(result, ToolFailure) and result.code == INVALID_ARGS
    assert "nested too deeply" in result.content[0]["text"]
    assert ran == []
    assert doa.tool_messages(calls, [result])[0]["tool_call_id"] == "deep"


def _in_a_deep_stack(depth: int, fn: Any) -> Any:
    if depth:
        return _in_a_deep_stack(depth - 1, fn)
    return fn()


@pytest.mark.timeout(30)
def test_b37_parsing_works_from_a_thread_already_800_frames_deep() -> None:
    """Text within the limit parses whatever the caller's stack depth; text
    beyond it is refused the same way from there too."""
    sig = AbortController().signal
    ok_text = "[" * 1000 + "]" * 1000  # exactly the limit
    near = "[" * 900 + "1" + "]" * 900  # under the bracket count that skips the C decoder
    out: dict[str, Any] = {}

    def work() -> None:
        for key, text in (("limit", ok_text), ("near", near), ("deep", DEEP_ARRAY), ("object", DEEP_OBJECT)):
            out[key] = _in_a_deep_stack(
                800, lambda t=text: doa.calls_from_message(_msg(_call("c", "t", t)), signal=sig)
            )

    def body(args: Any, run: ToolRunContext) -> Any:
        ran.append(args)
        return "ran"

    ran: list[object] = []
    registry = ToolRegistry(max_workers=1)
    registry.register(ToolDefinition("t", "", {"type": "object"}, body))

    def execute_deep() -> None:
        calls = doa.calls_from_message(_msg(_call("c", "t", DEEP_OBJECT)), signal=sig)
        out["executed"] = registry.execute(calls[0])

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    thread = threading.Thread(target=lambda: _in_a_deep_stack(800, execute_deep))
    thread.start()
    thread.join()
    registry.close()
    assert out.pop("executed").code == INVALID_ARGS and ran == []
    assert set(out) == {"limit", "near", "deep", "object"}
    limit = out["limit"][0].arguments
    depth = 0
    while isinstance(limit, list):
        depth, limit = depth + 1, limit[0] if limit else None
    assert depth == 1000
    near_value = out["near"][0].arguments
    for _ in range(900):
        near_value = near_value[0]
    assert near_value == 1
    for key in ("deep", "object"):
        assert isinstance(out[key][0].arguments, doa.MalformedArguments)
        assert "nested too deeply" in out[key][0].arguments.message


def test_many_shallow_brackets_are_not_mistaken_for_depth() -> None:
    """More than 1 000 brackets, a few levels deep, some inside strings."""
    data = [{"id": i, "name": f'item "[{i}', "tags": ["a", "]"]} for i in range(3000)]
    calls = doa.calls_from_message(_msg(_call("c", "t", json.dumps(data))), signal=AbortController().signal)
    assert calls[0].arguments == data


def test_the_limit_holds_whatever_the_parser_could_do() -> None:
    """1001 levels are refused even when the recursion limit would let the
    decoder through (docs/contract.md#a11)."""
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(20000)
    try:
        calls = doa.calls_from_message(_msg(_call("c", "t", "[" * 1001 + "]" * 1001)), signal=AbortController().signal)
    finally:
        sys.setrecursionlimit(old)
    assert isinstance(calls[0].arguments, doa.MalformedArguments)
    assert "nested too deeply" in calls[0].arguments.message


@pytest.mark.parametrize(
    "text",
    [
        '{"a": [1, 2.5, -3e2, "x\\u00e9\\n", true, false, null, {}, []], "b": {"c": {"d": [{}]}}}',
        "[" * 600 + '{"k": "v"}' + "]" * 600,
        ' { "s" : "[{" , "n" : [ 0 , -0.0 , 1E+2 ] } ',
    ],
)
def test_the_iterative_parser_agrees_with_json_loads(text: str) -> None:
    from dshtools._interop.json_text import parse_iterative

    assert parse_iterative(text) == json.loads(text)


@pytest.mark.parametrize(
    "text",
    [
        '{"a": 1,}',
        "[1,]",
        '{"a": 1 , }',
        "[1,\n ]",
        '{"a": [1,]}',
        '[{"a": 1,}]',
        '{"a": 1,,}',
        "[1,,]",
        '{"a" 1}',
        "[1 2]",
        "{",
        "[",
        '{"a":1} x',
        "[01]",
        "[NaN]",
    ],
)
def test_the_iterative_parser_rejects_what_json_rejects_with_the_same_message(text: str) -> None:
    """N19: the running interpreter's ``json`` messages and positions (3.13
    reports a trailing comma as such, at the comma)."""
    from dshtools._interop.json_text import parse_iterative

    with pytest.raises(ValueError) as iterative:
        parse_iterative(text)
    if "NaN" not in text:
        with pytest.raises(ValueError) as decoder:
            json.loads(text)
        assert str(iterative.value) == str(decoder.value)


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(_json_values, st.sampled_from([None, 0, 2]))
def test_the_iterative_parser_reads_what_json_dumps_writes(value: Any, indent: int | None) -> None:
    from dshtools._interop.json_text import parse_iterative

    text = json.dumps(value, indent=indent)
    assert parse_iterative(text) == json.loads(text)


@settings(max_examples=1000, deadline=None)
@given(
    st.lists(st.sampled_from(["{", "}", "[", "]", ",", ":", '"a"', "1", " ", "null", "tru", "-", '"x']), max_size=10)
)
def test_the_iterative_parser_fails_as_json_does_on_any_token_soup(tokens: list[str]) -> None:
    from dshtools._interop.json_text import parse_iterative

    text = "".join(tokens)
    try:
        expected: object = json.loads(text)
    except json.JSONDecodeError as exc:
        expected = (exc.msg, exc.pos)
    try:
        got: object = parse_iterative(text)
    except json.JSONDecodeError as exc:
        got = (exc.msg, exc.pos)
    assert got == expected


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet=st.sampled_from('[]{}",:0123456789.eE+-tfnrulasx \\ud800'), max_size=60))
def test_parse_arguments_never_raises_on_any_text(text: str) -> None:
    from dshtools._interop.calls import parse_arguments

    value = parse_arguments(text)
    if not isinstance(value, doa.MalformedArguments):
        assert value == ({} if not text.strip() else json.loads(text))


@pytest.mark.timeout(30)
def test_n4_lone_surrogate_arguments_are_invalid_args_and_messages_encode() -> None:
    with ToolRegistry(max_workers=1) as r:
        r.register(ToolDefinition("t", "", {"type": "object"}, lambda a, run: {"got": a["t"]}))
        message = _msg(_call("s1", "t", '{"t": "\\ud800x"}'), _call("s2", "t", '{"t": "\\ud83d\\ude00 ok"}'))
        calls = doa.calls_from_message(message, signal=AbortController().signal)
        results = [r.execute(c) for c in calls]
    assert results[0].code == INVALID_ARGS and "lone surrogate" in results[0].content[0]["text"]
    assert isinstance(results[1], ToolSuccess) and results[1].value == {"got": "😀 ok"}
    wire = json.dumps(doa.tool_messages(calls, results), ensure_ascii=False).encode("utf-8")
    assert "😀 ok" in wire.decode("utf-8")


def test_tool_messages_replace_lone_surrogates_a_body_returned() -> None:
    msg = doa.tool_message("id\udc00", ToolSuccess(None, "a\ud800b \ud83d\ude00"))
    json.dumps(msg, ensure_ascii=False).encode("utf-8")
    assert msg["content"] == "a\ufffdb 😀" and msg["tool_call_id"] == "id\ufffd"


@pytest.mark.timeout(30)
def test_ids_and_call_types_the_model_got_wrong_are_invalid_call_under_the_models_id_in_order() -> None:
    hooks: list[str] = []

    def pre(execution: Any, nxt: Any) -> Any:
        hooks.append(execution.call_id)
        return nxt()

    with ToolRegistry(max_workers=2) as r:
        r.register(ToolDefinition("add", "", ADD_PARAMS, add))
        r.add_pre_execute(pre)
        message = _msg(
            _call("c1", "add", '{"a": 1, "b": 2}'),
            _call("", "add", '{"a": 1, "b": 2}'),  # empty id
            _call("c1", "add", '{"a": 5, "b": 5}'),  # repeated: the first runs
            {"id": "c3", "type": "custom", "custom": {"name": "add", "input": "1+2"}},
            {"id": "c4", "type": "function", "function": {"arguments": "{}"}},  # no name
            {"type": "function", "function": {"name": "add", "arguments": "{}"}},  # no id
            "not a call",
            _call("c5", "add", "{"),
        )
        calls = doa.calls_from_message(message, signal=AbortController().signal)
        results = [r.execute(c) for c in calls]
    assert [c.call_id for c in calls] == ["c1", "", "c1", "c3", "c4", "", "", "c5"]
    assert [x.code for x in results] == [None] + [INVALID_CALL] * 6 + [INVALID_ARGS]
    assert results[0].value == {"sum": 3}  # type: ignore[union-attr]
    texts = [x.content[0]["text"] for x in results[1:7]]
    assert "call id is empty" in texts[0]
    assert "repeats an earlier call" in texts[1]
    assert "unsupported call type 'custom'" in texts[2]
    assert "no function name" in texts[3]
    assert "call id is missing" in texts[4]
    assert texts[5].endswith("tool_calls[6] is not a tool call object: got str")
    assert all(t.startswith("Error: invalid call: ") for t in texts)
    assert hooks == ["c1"]  # INVALID_CALL and INVALID_ARGS skip every hook
    msgs = doa.tool_messages(calls, results)
    assert len(msgs) == len(message["tool_calls"])
    assert [m["tool_call_id"] for m in msgs] == ["c1", "", "c1", "c3", "c4", "", "", "c5"]


@pytest.mark.timeout(30)
def test_the_sdk_message_object_is_accepted() -> None:
    chat = pytest.importorskip("openai.types.chat", reason="the openai SDK is in the test extra")
    message = chat.ChatCompletionMessage.model_validate(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}},
                {"id": "call_2", "type": "custom", "custom": {"name": "add", "input": "x"}},
                {"id": "call_3", "type": "function", "function": {"name": "add", "arguments": DEEP_ARRAY}},
            ],
        }
    )
    with ToolRegistry(max_workers=1) as r:
        r.register(ToolDefinition("add", "", ADD_PARAMS, add))
        calls = doa.calls_from_message(message, signal=AbortController().signal)
        results = [r.execute(c) for c in calls]
    assert [x.code for x in results] == [None, INVALID_CALL, INVALID_ARGS]
    from pydantic import TypeAdapter

    adapter: TypeAdapter[Any] = TypeAdapter(chat.ChatCompletionToolMessageParam)
    for m in doa.tool_messages(calls, results):
        assert adapter.validate_python(m) == m


def test_is_error_narrows_the_result_type() -> None:
    result = ToolSuccess({"v": 1}, "ok")
    r: ToolSuccess | ToolFailure = result
    if not r.is_error:
        assert r.value == {"v": 1}  # mypy: r is ToolSuccess here


# --------------------------------------------------- provider-valid names (A12)

NAME_RULE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
OBJ = {"type": "object", "properties": {"x": {"type": "integer"}}}


def _named(name: str) -> ToolDefinition:
    def body(args: Any, run: ToolRunContext) -> Any:
        return {"tool": name}

    return ToolDefinition(name, f"tool {name}", OBJ, body)


@pytest.mark.timeout(30)
def test_b45_names_are_aliased_distinct_and_mapped_back() -> None:
    long_name = "x" * 70
    exact_64 = "y" * 64
    names = ["get/whoami", "math.factorial", "ünïcode", long_name, "read_file-2", exact_64]
    with ToolRegistry(max_workers=2) as r:
        for n in names:
            r.register(_named(n))
        tools = doa.tools_param(r)
        sent = [t["function"]["name"] for t in tools]
        assert all(NAME_RULE.match(s) for s in sent), sent
        assert len(set(sent)) == len(sent)
        assert dict(zip(names, sent, strict=True))["read_file-2"] == "read_file-2"
        assert dict(zip(names, sent, strict=True))[exact_64] == exact_64
        # The registry keeps the user's names.
        assert [s["name"] for s in r.schemas()] == names
        message = _msg(*(_call(f"c{i}", alias, '{"x": 1}') for i, alias in enumerate(sent)))
        calls = doa.calls_from_message(message, signal=AbortController().signal, registry=r)
        assert [c.name for c in calls] == names
        results = [r.execute(c) for c in calls]
    assert [x.value for x in results] == [{"tool": n} for n in names]  # type: ignore[union-attr]


def test_b45_a_non_object_parameters_schema_raises_naming_the_tool() -> None:
    with ToolRegistry(max_workers=1) as r:
        r.register(ToolDefinition("ok", "", OBJ, lambda a, run: None))
        r.register(ToolDefinition("stringly", "", {"type": "string"}, lambda a, run: None))
        with pytest.raises(ValueError, match="'stringly'"):
            doa.tools_param(r)


def test_aliases_follow_the_documented_rule() -> None:
    table = doa.alias_names(["math.factorial", "get/whoami", "get_whoami", "a.b", "a/b", "é" * 3, "z" * 65])
    assert table["math.factorial"] == "math_factorial"
    assert table["get_whoami"] == "get_whoami"  # valid names are never changed
    digest = hashlib.sha256(b"get/whoami").hexdigest()[:8]
    assert table["get/whoami"] == f"get_whoami_{digest}"  # collides with a valid name
    assert table["a.b"] == "a_b_" + hashlib.sha256(b"a.b").hexdigest()[:8]  # two names map to a_b
    assert table["a/b"] == "a_b_" + hashlib.sha256(b"a/b").hexdigest()[:8]
    assert table["é" * 3] == "___"
    assert table["z" * 65] == "z" * 55 + "_" + hashlib.sha256(b"z" * 65).hexdigest()[:8]
    assert len(table["z" * 65]) == 64


def test_an_alias_that_is_another_tools_registered_name_gets_a_longer_suffix() -> None:
    # "get/whoami" would be get_whoami_<8 hex>; a tool registered under
    # exactly that name takes it, so the suffix grows by 4.
    digest = hashlib.sha256(b"get/whoami").hexdigest()
    squatter = f"get_whoami_{digest[:8]}"
    table = doa.alias_names(["get/whoami", "get_whoami", squatter])
    assert table[squatter] == squatter and table["get_whoami"] == "get_whoami"
    assert table["get/whoami"] == f"get_whoami_{digest[:12]}"
    assert len(set(table.values())) == 3


def _leaderboard_shaped_names(count: int) -> list[str]:
    """Names shaped like the Berkeley Function Calling Leaderboard's tool
    definitions (generated here, no third-party data): mostly snake_case,
    about one in ten dotted (``module.function``, ``pkg.sub.fn``), a few
    with characters providers reject and a few longer than 64."""
    rng = random.Random(8726)
    verbs = ["get", "calculate", "find", "search", "create", "update", "list", "convert", "book", "play"]
    nouns = ["weather", "area", "stock_price", "flight", "recipe", "distance", "factorial", "user", "movie", "song"]
    modules = ["math", "geometry", "finance", "spotify", "uber", "requests", "cmath", "sympy", "event_planner"]
    names: set[str] = set()
    while len(names) < count:
        base = f"{rng.choice(verbs)}_{rng.choice(nouns)}_{rng.randrange(100_000)}"
        roll = rng.random()
        if roll < 0.10:
            name = f"{rng.choice(modules)}.{base}"
        elif roll < 0.12:
            name = f"{rng.choice(modules)}.{rng.choice(modules)}.{base}"
        elif roll < 0.13:
            name = f"{base}/v2:{rng.choice(nouns)}"
        elif roll < 0.14:
            name = f"{rng.choice(modules)}.{base}_" + "detailed_" * 7
        else:
            name = base
        names.add(name)
    return sorted(names, key=lambda n: rng.random())


@pytest.mark.timeout(60)
def test_a_leaderboard_shaped_name_set_round_trips() -> None:
    names = _leaderboard_shaped_names(8726)
    assert sum("." in n for n in names) > 800
    with ToolRegistry(max_workers=1) as r:
        for n in names:
            r.register(ToolDefinition(n, "", OBJ, lambda a, run: None))
        sent = [t["function"]["name"] for t in doa.tools_param(r)]
        assert all(NAME_RULE.match(s) for s in sent)
        assert len(set(sent)) == len(names)
        message = _msg(*(_call(f"c{i}", s, "{}") for i, s in enumerate(sent[:2000])))
        calls = doa.calls_from_message(message, signal=AbortController().signal, registry=r)
        assert [c.name for c in calls] == names[:2000]
    # Deterministic: the same set in another order gives the same aliases.
    shuffled = list(reversed(names))
    again = doa.alias_names(shuffled)
    assert [again[n] for n in names] == sent


# ------------------------------------------ a user's script under mypy --strict

USER_SCRIPT = """from __future__ import annotations

from openai.types.chat import ChatCompletionMessage, ChatCompletionMessageParam, ChatCompletionToolMessageParam

from dshtools import AbortController, ToolRegistry, execute_batch
from dshtools import openai as dopenai


def answer(registry: ToolRegistry, message: ChatCompletionMessage, messages: list[ChatCompletionMessageParam]) -> None:
    controller = AbortController()
    calls = dopenai.calls_from_message(message, signal=controller.signal, registry=registry)
    results = execute_batch(registry, calls, signal=controller.signal)
    answers = dopenai.tool_messages(calls, results)
    messages.extend(answers)
    first: ChatCompletionToolMessageParam = answers[0]
    messages.append(first)
    broken: ChatCompletionToolMessageParam = {"role": "tool"}  # type: ignore[typeddict-item]
    print(broken)
    for result in results:
        if not result.is_error:
            print(result.value)
        else:
            print(result.error.message)
"""


@pytest.mark.timeout(300)
def test_a_user_script_with_the_openai_sdk_types_type_checks(tmp_path: Path) -> None:
    """A user's agent-loop step written against the OpenAI SDK's own types
    passes ``mypy --strict --warn-unused-ignores``: ``tool_messages`` is
    accepted where the SDK expects ``ChatCompletionToolMessageParam`` /
    ``ChatCompletionMessageParam``, ``calls_from_message`` takes the SDK's
    ``ChatCompletionMessage``, and ``is_error`` narrows a result
    (docs/contract.md#a11). The one ignore must stay used: it proves
    the SDK's TypedDicts were really checked. Kept out of tests/typing so
    the gate's mypy run does not analyse the whole SDK a second time; the
    repository's mypy cache makes later runs fast."""
    pytest.importorskip("openai", reason="the openai SDK is in the test extra")
    script = tmp_path / "agent_step.py"
    script.write_text(USER_SCRIPT, encoding="utf-8")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--warn-unused-ignores",
            str(script),
        ],
        cwd=ROOT,
        env={**os.environ, "MYPYPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "no issues found in 1 source file" in proc.stdout
