"""A Responses API response handed to a *message* reader is refused.

Found in a new user's trial: ``dshtools.openai.calls_from_message`` given a
Responses API response (the ``client.responses.create`` result, dumped or
as the SDK object) returned ``[]``, so an agent loop written as ``if not
calls: break`` ended the turn as if the model had answered, with its
function calls never run. The other direction (a Chat Completions
response handed to ``calls_from_response``) already raised naming the
reader to use; the message readers now do the same (docs/contract.md#responses).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from openai.types.responses import Response

from dshtools import AbortController
from dshtools import anthropic as dan
from dshtools import openai as doa
from tests.helpers.providers import output_message

FUNCTION_CALL = {
    "type": "function_call",
    "id": "fc_1",
    "call_id": "call_1",
    "name": "fetch",
    "arguments": json.dumps({"page": 1}),
    "status": "completed",
}
TEXT = output_message("done")


def _response(*items: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "resp_1",
        "object": "response",
        "created_at": 0,
        "model": "gpt-5",
        "status": "completed",
        "output": list(items),
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
    }


@pytest.mark.parametrize(
    "response",
    [
        _response(FUNCTION_CALL),
        _response(TEXT, FUNCTION_CALL),
        _response(TEXT),
        Response.model_validate(_response(FUNCTION_CALL)),
    ],
    ids=["function-call", "text-and-call", "text-only", "sdk-object"],
)
@pytest.mark.parametrize("reader", [doa.calls_from_message, dan.calls_from_message], ids=["openai", "anthropic"])
def test_a_responses_api_response_is_refused_naming_calls_from_response(reader: Any, response: object) -> None:
    with pytest.raises(ValueError, match=r"Responses API response.*dshtools\.openai\.calls_from_response"):
        reader(response, signal=AbortController().signal)


def test_the_responses_reader_still_reads_the_same_response() -> None:
    calls = doa.calls_from_response(_response(TEXT, FUNCTION_CALL), signal=AbortController().signal)
    assert [(c.call_id, c.name) for c in calls] == [("call_1", "fetch")]


@pytest.mark.parametrize("reader", [doa.calls_from_message, dan.calls_from_message], ids=["openai", "anthropic"])
def test_a_message_with_an_empty_output_field_still_reads_as_no_calls(reader: Any) -> None:
    """Only a non-empty ``output`` list marks a Responses response; an
    assistant message carrying an unrelated empty ``output`` key is read
    as before."""
    assert reader({"role": "assistant", "content": "hi", "output": []}, signal=AbortController().signal) == []
