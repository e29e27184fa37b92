"""A Responses API transcript given to ``replay`` says it is not a format replay reads.

Found in a new user's trial: ``replay`` on the items of a Responses API
conversation (``function_call`` items, or a response's ``output``) said
only ``no assistant message with tool_calls (OpenAI) or tool_use blocks
(Anthropic)``, which reads as "your transcript has no calls" although it
has some. The usage error now names the Responses API items and the
formats replay reads (docs/batch-and-openai.md, the transcript format).
"""

from __future__ import annotations

from typing import Any

import pytest

from dshtools._cli.inputs import UsageError, transcript_batches

CALL = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "fetch", "arguments": "{}"}


@pytest.mark.parametrize(
    "data",
    [
        [{"role": "user", "content": "hi"}, CALL],
        {"id": "resp_1", "object": "response", "output": [CALL]},
        {"messages": [{"role": "user", "content": "hi"}, CALL]},
    ],
    ids=["item-list", "response", "messages-object"],
)
def test_responses_items_are_named_as_not_a_transcript_format(data: Any) -> None:
    with pytest.raises(UsageError, match=r"Responses API function_call items.*Chat Completions or Anthropic"):
        transcript_batches(data, "t.json")


def test_a_transcript_without_calls_keeps_its_message() -> None:
    with pytest.raises(UsageError) as caught:
        transcript_batches([{"role": "user", "content": "hi"}], "t.json")
    assert str(caught.value) == "t.json: no assistant message with tool_calls (OpenAI) or tool_use blocks (Anthropic)"
