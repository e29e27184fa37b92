"""Model output never raises in either provider reader (docs/contract.md#a11), with the refusal of other shapes in place (decision 0049): any text,
ids, names and arguments a model can put in a message of the reader's own
shape give calls (or none), never an exception."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from dshtools import AbortController, ToolExecutionInput
from dshtools import anthropic as dan
from dshtools import openai as doa

_SIGNAL = AbortController().signal

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3),
    max_leaves=8,
)
# What a model writes: free text, and strings that look like the fields
# the refusal looks for.
_text = st.text(max_size=20) | st.sampled_from(["tool_use", "tool_calls", "choices", "function", "", "{}"])
_maybe_text = st.none() | _text


def _openai_call() -> st.SearchStrategy[dict[str, Any]]:
    function = st.fixed_dictionaries(
        {"name": _maybe_text, "arguments": _maybe_text | _json.map(lambda v: __import__("json").dumps(v))}
    )
    return st.fixed_dictionaries({"id": _maybe_text, "type": st.just("function"), "function": function})


_openai_message = st.fixed_dictionaries(
    {
        "role": st.just("assistant"),
        "content": _maybe_text,
        "tool_calls": st.none() | st.lists(_openai_call(), max_size=3),
    },
    optional={"refusal": _maybe_text},
)

_anthropic_block = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": _text}),
    st.fixed_dictionaries({"type": st.just("thinking"), "thinking": _text, "signature": _text}),
    st.fixed_dictionaries(
        {"type": st.just("tool_use"), "id": _maybe_text, "name": _maybe_text, "input": _json | _text},
    ),
)
_anthropic_message = st.fixed_dictionaries(
    {"role": st.just("assistant"), "content": _text | st.lists(_anthropic_block, max_size=4)},
    optional={"stop_reason": _maybe_text, "type": st.just("message"), "id": _text},
)


@settings(max_examples=300, deadline=None)
@given(_openai_message)
def test_openai_reader_never_raises_on_model_output(message: dict[str, Any]) -> None:
    calls = doa.calls_from_message(message, signal=_SIGNAL)
    assert len(calls) == len(message["tool_calls"] or [])
    assert all(isinstance(c, ToolExecutionInput) for c in calls)


@settings(max_examples=300, deadline=None)
@given(_anthropic_message)
def test_anthropic_reader_never_raises_on_model_output(message: dict[str, Any]) -> None:
    calls = dan.calls_from_message(message, signal=_SIGNAL)
    content = message["content"]
    expected = 0 if isinstance(content, str) else sum(b["type"] == "tool_use" for b in content)
    assert len(calls) == expected
