"""dshtools.openai for the Responses API: ``function`` tools, ``function_call``
items and ``function_call_output`` items (docs/contract.md#responses), with the
never-raise rules of the Chat Completions reader (docs/contract.md#a11) on the same
malformed-output matrix as tests/interop/test_openai.py, dicts and the
SDK's own objects alike."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dshtools import (
    INVALID_ARGS,
    INVALID_CALL,
    AbortController,
    AbortSignal,
    ErrorDetail,
    ErrorInfo,
    ToolDefinition,
    ToolExecutionInput,
    ToolFailure,
    ToolRegistry,
    ToolSuccess,
    execute_batch,
)
from dshtools import openai as doa
from tests.helpers.calls import ADD_PARAMS, add, broken, error_of, tool, value_of
from tests.helpers.providers import output_message

DEEP_ARRAY = "[" * 5000 + "]" * 5000
DEEP_OBJECT = '{"a":' * 5000 + "1" + "}" * 5000


@pytest.fixture
def registry(registry: ToolRegistry) -> ToolRegistry:
    """``add`` (two required integers) and ``fail`` (raises a ``ToolError``)."""
    for definition in (tool("add", add, parameters=ADD_PARAMS), tool("fail", broken)):
        registry.register(definition)
    return registry


def _fc(call_id: Any, name: Any, arguments: Any) -> dict[str, Any]:
    """A ``function_call`` output item."""
    return {"type": "function_call", "id": f"fc_{call_id}", "call_id": call_id, "name": name, "arguments": arguments}


def _chat_call(call_id: Any, name: Any, arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


MESSAGE = output_message("Working on it.")
REASONING = {"type": "reasoning", "id": "rs_1", "summary": []}
WEB_SEARCH = {
    "type": "web_search_call",
    "id": "ws_1",
    "status": "completed",
    "action": {"type": "search", "query": "q"},
}
CUSTOM = {"type": "custom_tool_call", "call_id": "ct_1", "name": "add", "input": "1+2"}


def _response(*output: Any) -> dict[str, Any]:
    return {
        "id": "resp_1",
        "object": "response",
        "created_at": 0,
        "model": "gpt-test",
        "output": list(output),
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
    }


# ------------------------------------------------------------------- tools


def test_responses_tools_are_flat_function_tools_with_strict_always_present() -> None:
    def lookup(city: str, units: str = "metric") -> str:
        """Look the weather up."""
        return city

    with ToolRegistry(max_workers=1) as r:
        r.register(ToolDefinition("add", "Add two integers.", ADD_PARAMS, add))
        r.register(ToolDefinition.from_function(lookup, strict=True))
        r.register(ToolDefinition("math.factorial", "n!", {"type": "object"}, broken))
        tools = doa.responses_tools_param(r)
        chat = doa.tools_param(r)
    assert tools[0] == {
        "type": "function",
        "name": "add",
        "description": "Add two integers.",
        "parameters": ADD_PARAMS,
        "strict": False,
    }
    assert [(t["name"], t["strict"]) for t in tools] == [("add", False), ("lookup", True), ("math_factorial", False)]
    # The same names, descriptions and parameters as the Chat Completions tools.
    assert [{k: t[k] for k in ("name", "description", "parameters")} for t in tools] == [
        {k: c["function"][k] for k in ("name", "description", "parameters")} for c in chat
    ]
    assert json.loads(json.dumps(tools)) == tools


def test_responses_tools_of_named_tools_in_the_order_given_keep_the_whole_registrys_aliases() -> None:
    with ToolRegistry(max_workers=1) as r:
        for name in ("a.b", "a/b", "c"):
            r.register(ToolDefinition(name, name, {"type": "object"}, lambda args, run: None))
        every = {t["name"] for t in doa.responses_tools_param(r)}
        some = doa.responses_tools_param(r, "c", "a/b", "c")
        # The alias of a/b is the one it has beside a.b, whatever the selection.
        assert [t["name"] for t in some] == ["c", doa.alias_names(["a.b", "a/b", "c"])["a/b"]]
        assert {t["name"] for t in some} < every
        calls = doa.calls_from_response([_fc("x", some[1]["name"], "{}")], signal=AbortController().signal, registry=r)
        assert calls[0].name == "a/b"
        with pytest.raises(ValueError, match="no tool named 'nope'"):
            doa.responses_tools_param(r, "c", "nope")


def test_responses_tools_are_a_fresh_copy_and_refuse_a_non_object_schema(registry: ToolRegistry) -> None:
    tools = doa.responses_tools_param(registry)
    parameters: Any = tools[0]["parameters"]
    parameters["properties"]["a"]["type"] = "string"
    assert doa.responses_tools_param(registry)[0]["parameters"] == ADD_PARAMS
    registry.register(ToolDefinition("stringly", "", {"type": "string"}, add))
    with pytest.raises(ValueError, match="'stringly'"):
        doa.responses_tools_param(registry)


# ------------------------------------------------------ function_call items


def test_function_calls_become_inputs_in_order_and_other_items_are_skipped() -> None:
    c = AbortController()
    response = _response(
        REASONING, MESSAGE, _fc("call_1", "add", '{"a": 1, "b": 2}'), WEB_SEARCH, CUSTOM, _fc("call_2", "fail", "")
    )
    for given_as in (response, response["output"], tuple(response["output"])):
        calls = doa.calls_from_response(given_as, signal=c.signal, agent="planner")
        assert all(type(x) is ToolExecutionInput for x in calls)
        assert [(x.call_id, x.name, x.arguments, x.agent, x.signal) for x in calls] == [
            ("call_1", "add", {"a": 1, "b": 2}, "planner", c.signal),
            ("call_2", "fail", {}, "planner", c.signal),
        ]


def test_a_response_without_function_calls_is_no_calls() -> None:
    sig = AbortController().signal
    assert doa.calls_from_response(_response(MESSAGE), signal=sig) == []
    assert doa.calls_from_response(_response(), signal=sig) == []
    assert doa.calls_from_response({**_response(), "output": None}, signal=sig) == []
    assert doa.calls_from_response([], signal=sig) == []


@pytest.mark.parametrize(
    ("given", "error", "match"),
    [
        ({"id": "chatcmpl-1", "choices": [{"index": 0, "message": {}}]}, ValueError, r"choices\[0\]\.message"),
        (
            {"role": "assistant", "tool_calls": [_chat_call("a", "t", "{}")]},
            ValueError,
            r"dshtools\.openai\.calls_from_message",
        ),
        (
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "t", "input": {}}]},
            ValueError,
            r"dshtools\.anthropic\.calls_from_message",
        ),
        (_fc("a", "t", "{}"), ValueError, r"one output item: pass a list"),
        ({"role": "assistant", "content": "hi"}, ValueError, r'without "output"'),
        ({**_response(), "output": {"type": "function_call"}}, TypeError, r'"output" must be a list, not dict'),
        ("function_call", TypeError, r"not str"),
        (42, TypeError, r"not int"),
    ],
    ids=["chat-response", "chat-message", "anthropic-message", "one-item", "no-output", "output-dict", "str", "int"],
)
def test_what_is_not_a_response_raises_naming_what_to_pass(given: Any, error: type[Exception], match: str) -> None:
    """Returning [] for these would end an agent loop as if the model had
    answered (decision 0049)."""
    with pytest.raises(error, match=match):
        doa.calls_from_response(given, signal=AbortController().signal)


def test_calls_from_response_requires_a_signal() -> None:
    with pytest.raises(TypeError, match="signal must be an AbortSignal"):
        doa.calls_from_response([], signal=None)  # type: ignore[arg-type]


def test_calls_from_response_does_not_mutate_the_response() -> None:
    response = _response(_fc("a", "t", '{"k": [1, 2]}'), _fc("b", "t", {"x": {"y": 1}}), MESSAGE)
    before = copy.deepcopy(response)
    doa.calls_from_response(response, signal=AbortController().signal)
    assert response == before


# ------------------------------------- the malformed-output matrix (A11)


@pytest.mark.parametrize(
    "raw",
    ['{"a": 1, "b": ', "{'a': 1}", '{"a": NaN, "b": 1}', "not json", '{"a": 1} trailing', 42],
)
def test_malformed_arguments_become_a_sentinel_not_an_exception(raw: Any) -> None:
    calls = doa.calls_from_response([_fc("c1", "add", raw)], signal=AbortController().signal)
    args = calls[0].arguments
    assert isinstance(args, doa.MalformedArguments)
    assert args.raw == (raw if isinstance(raw, str) else repr(raw))
    assert args.error and "not valid JSON" in args.message


def test_empty_or_decoded_arguments_are_read_as_the_chat_reader_reads_them() -> None:
    calls = doa.calls_from_response(
        [_fc("a", "t", ""), _fc("b", "t", {"x": 1}), {"type": "function_call", "call_id": "c", "name": "t"}],
        signal=AbortController().signal,
    )
    assert [x.arguments for x in calls] == [{}, {"x": 1}, {}]


# The same model mistakes in both APIs: (Chat Completions tool call, Responses item).
MISTAKES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("bad-json", _chat_call("k1", "add", '{"a": 1, "b": '), _fc("k1", "add", '{"a": 1, "b": ')),
    ("nan", _chat_call("k2", "add", '{"a": NaN, "b": 1}'), _fc("k2", "add", '{"a": NaN, "b": 1}')),
    ("not-text", _chat_call("k3", "add", 42), _fc("k3", "add", 42)),
    ("deep-array", _chat_call("k4", "add", DEEP_ARRAY), _fc("k4", "add", DEEP_ARRAY)),
    ("deep-object", _chat_call("k5", "add", DEEP_OBJECT), _fc("k5", "add", DEEP_OBJECT)),
    ("lone-surrogate", _chat_call("k6", "add", '{"a": "\\ud800x"}'), _fc("k6", "add", '{"a": "\\ud800x"}')),
    ("empty-id", _chat_call("", "add", "{}"), _fc("", "add", "{}")),
    ("missing-id", {"type": "function", "function": {"name": "add", "arguments": "{}"}}, _fc(None, "add", "{}")),
    ("number-id", _chat_call(7, "add", "{}"), _fc(7, "add", "{}")),
    ("repeated-id", _chat_call("k0", "add", '{"a": 5, "b": 5}'), _fc("k0", "add", '{"a": 5, "b": 5}')),
    ("no-name", _chat_call("k7", None, "{}"), _fc("k7", None, "{}")),
    ("empty-name", _chat_call("k8", "", "{}"), _fc("k8", "", "{}")),
]


@pytest.mark.timeout(60)
def test_every_mistake_is_the_same_coded_failure_with_the_same_text_as_in_chat_completions() -> None:
    """Each mistake of the Chat Completions matrix, as a Responses item after
    a good call with id ``k0``: the same code and the same model text, only
    the place named as ``output[i]`` where the Chat reader says
    ``tool_calls[i]``; no hook and no body runs for any of them."""
    hooks: list[str] = []

    def pre(execution: Any, nxt: Any) -> Any:
        hooks.append(execution.call_id)
        return nxt()

    sig = AbortController().signal
    good_chat, good_item = _chat_call("k0", "add", '{"a": 1, "b": 2}'), _fc("k0", "add", '{"a": 1, "b": 2}')
    with ToolRegistry(max_workers=2) as r:
        r.register(ToolDefinition("add", "", ADD_PARAMS, add))
        r.add_pre_execute(pre)
        chat = doa.calls_from_message(
            {"role": "assistant", "tool_calls": [good_chat] + [m[1] for m in MISTAKES]}, signal=sig
        )
        ours = doa.calls_from_response([good_item] + [m[2] for m in MISTAKES], signal=sig)
        chat_results = execute_batch(r, chat, signal=sig)
        our_results = execute_batch(r, ours, signal=sig)
    assert value_of(our_results[0]) == {"sum": 3}
    assert [c.call_id for c in ours] == [c.call_id for c in chat]
    assert hooks == ["k0", "k0"]  # INVALID_CALL and INVALID_ARGS skip every hook
    codes = {m[0]: r.code for m, r in zip(MISTAKES, our_results[1:], strict=True)}
    assert codes == {
        "bad-json": INVALID_ARGS,
        "nan": INVALID_ARGS,
        "not-text": INVALID_ARGS,
        "deep-array": INVALID_ARGS,
        "deep-object": INVALID_ARGS,
        "lone-surrogate": INVALID_ARGS,
        "empty-id": INVALID_CALL,
        "missing-id": INVALID_CALL,
        "number-id": INVALID_CALL,
        "repeated-id": INVALID_CALL,
        "no-name": INVALID_CALL,
        "empty-name": INVALID_CALL,
    }
    for (case, _, _), theirs, mine in zip(MISTAKES, chat_results[1:], our_results[1:], strict=True):
        assert mine.code == theirs.code, case
        assert error_of(mine).message == error_of(theirs).message.replace("tool_calls[", "output["), case
    texts = {m[0]: error_of(r).message for m, r in zip(MISTAKES, our_results[1:], strict=True)}
    assert "nested too deeply" in texts["deep-array"] and "nested too deeply" in texts["deep-object"]
    assert "lone surrogate" in texts["lone-surrogate"]
    assert texts["empty-id"].endswith("output[7]: the call id is empty")
    assert texts["missing-id"].endswith("output[8]: the call id is missing")
    assert "repeats an earlier call" in texts["repeated-id"]
    assert texts["no-name"].endswith("output[11]: the call has no function name")
    outputs: list[Any] = doa.function_call_outputs(ours, our_results)  # read back as plain dicts
    assert [o["call_id"] for o in outputs] == [c.call_id for c in ours]


@pytest.mark.timeout(30)
def test_malformed_json_executes_to_invalid_args_naming_the_json_error(registry: ToolRegistry) -> None:
    c = AbortController()
    calls = doa.calls_from_response(
        _response(_fc("bad", "add", '{"a": 1, "b": '), _fc("ok", "add", '{"a": 2, "b": 3}')), signal=c.signal
    )
    bad, ok = (registry.execute(x) for x in calls)
    sentinel = calls[0].arguments
    assert isinstance(bad, ToolFailure) and bad.code == INVALID_ARGS
    assert isinstance(sentinel, doa.MalformedArguments)
    assert bad.content[0]["text"] == f"Error: invalid arguments: arguments are not valid JSON: {sentinel.error} at $"
    assert isinstance(ok, ToolSuccess) and ok.value == {"sum": 5}
    outputs: list[Any] = doa.function_call_outputs(calls, [bad, ok])
    bad_out, ok_out = outputs
    assert bad_out["call_id"] == "bad" and bad_out["output"].startswith("Error: invalid arguments")
    assert ok_out["call_id"] == "ok" and json.loads(ok_out["output"]) == {"sum": 5}


@pytest.mark.timeout(30)
def test_malformed_json_wins_over_an_already_aborted_signal(registry: ToolRegistry) -> None:
    calls = doa.calls_from_response([_fc("x", "add", "{")], signal=AbortSignal.already_aborted())
    assert registry.execute(calls[0]).code == INVALID_ARGS


def test_aliases_map_back_with_the_registry() -> None:
    with ToolRegistry(max_workers=1) as r:
        r.register(ToolDefinition("math.factorial", "n!", {"type": "object"}, lambda a, run: 120))
        alias = doa.responses_tools_param(r)[0]["name"]
        assert alias == "math_factorial"
        calls = doa.calls_from_response([_fc("c9", alias, "{}")], signal=AbortController().signal, registry=r)
        assert calls[0].name == "math.factorial"
        assert value_of(r.execute(calls[0])) == 120
        unmapped = doa.calls_from_response([_fc("c9", alias, "{}")], signal=AbortController().signal)
        assert unmapped[0].name == "math_factorial"


# -------------------------------------------------- function_call_output


@pytest.mark.timeout(30)
def test_outputs_have_the_function_call_output_shape_and_the_tool_message_text(registry: ToolRegistry) -> None:
    c = AbortController()
    calls = doa.calls_from_response([_fc("c1", "add", '{"a": 1, "b": 2}'), _fc("c2", "fail", "{}")], signal=c.signal)
    results = execute_batch(registry, calls, signal=c.signal)
    outputs: list[Any] = doa.function_call_outputs(calls, results)
    assert outputs == [
        {"type": "function_call_output", "call_id": "c1", "output": '{"sum": 3}'},
        {"type": "function_call_output", "call_id": "c2", "output": "Error: it broke"},
    ]
    assert [o["output"] for o in outputs] == [m["content"] for m in doa.tool_messages(calls, results)]
    assert json.loads(json.dumps(outputs)) == outputs


def test_an_output_joins_text_blocks_says_something_for_a_silent_failure_and_encodes() -> None:
    blocks = ({"type": "text", "text": "first"}, {"type": "image", "url": "u"}, {"type": "text", "text": "second"})
    assert (
        doa.function_call_output("id", ToolSuccess(None, blocks))["output"]
        == 'first\n{"type": "image", "url": "u"}\nsecond'
    )
    silent = ToolFailure(ErrorDetail("", ErrorInfo("ToolError", "QUIET")), "Error: ")
    assert doa.function_call_output("id", silent)["output"] == "Error: the tool call failed (QUIET) with no message"
    odd = doa.function_call_output("id\udc00", ToolSuccess(None, "a\ud800b \ud83d\ude00"))
    json.dumps(odd, ensure_ascii=False).encode("utf-8")
    assert odd == {"type": "function_call_output", "call_id": "id\ufffd", "output": "a\ufffdb 😀"}


def test_outputs_refuse_mismatched_lengths_swapped_arguments_and_a_non_str_id() -> None:
    calls = doa.calls_from_response([_fc("a", "t", "{}")], signal=AbortController().signal)
    with pytest.raises(ValueError, match="1 calls but 0 results"):
        doa.function_call_outputs(calls, [])
    with pytest.raises(TypeError, match=r"calls must hold ToolExecutionInput .* not ToolSuccess"):
        doa.function_call_outputs([ToolSuccess(None, "x")], calls)  # type: ignore[list-item, arg-type]
    with pytest.raises(TypeError, match="call_id must be a str"):
        doa.function_call_output(1, ToolSuccess(None, "x"))  # type: ignore[arg-type]


# ------------------------------------------------------------ SDK objects


@pytest.mark.timeout(30)
def test_the_sdks_response_its_output_and_its_items_are_read_alike() -> None:
    responses = pytest.importorskip("openai.types.responses", reason="the openai SDK is in the test extra")
    from openai.types.responses.response_input_param import FunctionCallOutput
    from pydantic import TypeAdapter

    response = responses.Response.model_validate(
        _response(
            REASONING,
            MESSAGE,
            _fc("call_1", "add", '{"a": 1, "b": 2}'),
            WEB_SEARCH,
            _fc("call_2", "add", DEEP_ARRAY),
            _fc("call_1", "add", "{}"),
            _fc("call_3", "", "{}"),
        )
    )
    assert isinstance(response.output[2], responses.ResponseFunctionToolCall)
    function_items = [i for i in response.output if isinstance(i, responses.ResponseFunctionToolCall)]
    sig = AbortController().signal
    with ToolRegistry(max_workers=1) as r:
        r.register(ToolDefinition("add", "", ADD_PARAMS, add))
        read = [
            doa.calls_from_response(given, signal=sig)
            for given in (response, response.output, function_items, [i.model_dump() for i in function_items])
        ]
        results = execute_batch(r, read[0], signal=sig)
    expected = [("call_1", "add"), ("call_2", "add"), ("call_1", "add"), ("call_3", "")]
    for calls in read:
        assert [(c.call_id, c.name) for c in calls] == expected
    assert [x.code for x in results] == [None, INVALID_ARGS, INVALID_CALL, INVALID_CALL]
    item: TypeAdapter[Any] = TypeAdapter(FunctionCallOutput)
    any_item: TypeAdapter[Any] = TypeAdapter(responses.ResponseInputItemParam)
    for output in doa.function_call_outputs(read[0], results):
        assert item.validate_python(output) == output
        assert any_item.validate_python(output) == output


def test_the_sdks_chat_completion_is_refused_naming_the_chat_reader() -> None:
    chat = pytest.importorskip("openai.types.chat", reason="the openai SDK is in the test extra")
    completion = chat.ChatCompletion.model_validate(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 0,
            "model": "gpt-test",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "tool_calls",
                    "message": {"role": "assistant", "tool_calls": [_chat_call("c1", "add", "{}")]},
                }
            ],
        }
    )
    sig = AbortController().signal
    with pytest.raises(ValueError, match=r"pass response\.choices\[0\]\.message"):
        doa.calls_from_response(completion, signal=sig)
    with pytest.raises(ValueError, match=r"dshtools\.openai\.calls_from_message"):
        doa.calls_from_response(completion.choices[0].message, signal=sig)


class _NoDump:
    """An SDK-like item whose ``model_dump()`` fails: read by attribute."""

    type = "function_call"
    call_id = "attr_1"
    name = "add"
    arguments = '{"a": 4, "b": 5}'

    def model_dump(self) -> dict[str, Any]:
        raise RuntimeError("broken dump")


def test_an_item_whose_model_dump_fails_is_read_by_attribute() -> None:
    calls = doa.calls_from_response([_NoDump(), object()], signal=AbortController().signal)
    assert [(c.call_id, c.name, c.arguments) for c in calls] == [("attr_1", "add", {"a": 4, "b": 5})]


# ---------------------------------------- arbitrary model output never raises

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3),
    max_leaves=8,
)
_text = st.text(max_size=20) | st.sampled_from(["function_call", "message", "choices", "tool_calls", "", "{}"])
_function_call = st.fixed_dictionaries(
    {
        "type": st.just("function_call"),
        "call_id": st.none() | _text | st.integers(),
        "name": st.none() | _text | _json,
        "arguments": st.none() | _text | _json | _json.map(json.dumps),
    },
    optional={"id": _text, "status": st.sampled_from(["completed", "incomplete", "in_progress"])},
)
_other_item = st.fixed_dictionaries(
    {"type": st.sampled_from(["message", "reasoning", "web_search_call", "custom_tool_call", "function_call_output"])},
    optional={"content": _json, "call_id": _text, "name": _text},
)
_item = _function_call | _other_item | st.dictionaries(st.text(max_size=6), _json, max_size=3) | _json


@settings(max_examples=200, deadline=None)
@given(st.lists(_item, max_size=5), st.booleans())
def test_arbitrary_output_items_never_raise_and_give_one_call_per_function_call(
    items: list[Any], wrapped: bool
) -> None:
    given_as: Any = _response(*items) if wrapped else items
    calls = doa.calls_from_response(given_as, signal=AbortController().signal)
    expected = [i for i in items if isinstance(i, dict) and i.get("type") == "function_call"]
    assert len(calls) == len(expected)
    for call, item in zip(calls, expected, strict=True):
        assert call.call_id == (item["call_id"] if isinstance(item["call_id"], str) else "")
        assert isinstance(call, ToolExecutionInput)
    outputs = doa.function_call_outputs(calls, [ToolSuccess(None, "ok")] * len(calls))
    json.dumps(outputs, ensure_ascii=False).encode("utf-8")
