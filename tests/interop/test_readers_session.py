"""The interop readers pass the journal's session on to every call they
read (docs/contract.md#journal)."""

from __future__ import annotations

from dshtools import AbortController, anthropic, openai


def test_the_chat_completions_reader_passes_the_session_on() -> None:
    message = {
        "role": "assistant",
        "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "t", "arguments": "{}"}},
            "not a call",
        ],
    }
    calls = openai.calls_from_message(message, signal=AbortController().signal, session="conv-1")
    assert [c.session for c in calls] == ["conv-1", "conv-1"]
    assert openai.calls_from_message(message, signal=AbortController().signal)[0].session is None


def test_the_responses_reader_passes_the_session_on() -> None:
    items = [{"type": "function_call", "call_id": "a", "name": "t", "arguments": "{}"}]
    [call] = openai.calls_from_response(items, signal=AbortController().signal, session="conv-2")
    assert call.session == "conv-2"


def test_the_anthropic_reader_passes_the_session_on() -> None:
    message = {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "t", "input": {}}]}
    [call] = anthropic.calls_from_message(message, signal=AbortController().signal, session="conv-3")
    assert call.session == "conv-3"
