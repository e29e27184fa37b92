"""The comparison in docs/repair.md, run: one history cut short by a crash
(a call never run, a call stopped after it started, a call in flight when
the process died, a call answered, and an orphan result) repaired by
dshtools, by pydantic-ai's dangling-call repair and by openai-agents'
orphan drop. Each assertion is a row of the page's table; when a peer's
behaviour changes, this test says the page is out of date."""

from __future__ import annotations

from typing import Any

import pytest

from dshtools import openai as doa
from dshtools._interop.repair import NEVER_RUN_TEXT, STARTED_AND_STOPPED_TEXT, UNKNOWN_OUTCOME_TEXT
from dshtools._types.calls import aborted
from tests.interop.provider_rules import responses_problem
from tests.interop.test_repair import Journal, Record

CALLS = ("never_run", "stopped", "in_flight", "answered")
SESSION = "conversation-42"


def _items() -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = [{"role": "user", "content": "save the files"}]
    items += [{"type": "function_call", "call_id": c, "name": "write", "arguments": "{}"} for c in CALLS]
    items.append({"type": "function_call_output", "call_id": "answered", "output": "saved"})
    items.append({"type": "function_call_output", "call_id": "orphan", "output": "from a lost turn"})
    return items


def test_dshtools_gives_each_missing_result_what_happened_to_it() -> None:
    records = Journal(
        Record("stopped", "settled", aborted("stop button", invoked=True)),
        Record("in_flight", "claimed", None),
    )
    repaired: list[Any] = doa.repair_response_items(_items(), journal=records, session=SESSION)
    outputs = {i["call_id"]: i["output"] for i in repaired if i.get("type") == "function_call_output"}
    assert outputs == {
        "never_run": NEVER_RUN_TEXT,
        "stopped": STARTED_AND_STOPPED_TEXT,
        "in_flight": UNKNOWN_OUTCOME_TEXT,
        "answered": "saved",
    }
    assert responses_problem(repaired) is None


def test_pydantic_ai_gives_every_missing_result_one_text_whether_or_not_the_tool_ran() -> None:
    messages = pytest.importorskip("pydantic_ai.messages")
    history = [
        messages.ModelRequest(parts=[messages.UserPromptPart("save the files")]),
        messages.ModelResponse(parts=[messages.ToolCallPart("write", {}, tool_call_id=c) for c in CALLS]),
        messages.ModelRequest(parts=[messages.ToolReturnPart("write", "saved", tool_call_id="answered")]),
    ]
    repaired = messages._repair_dangling_tool_calls(history, repair_last_response=True)
    returns = {p.tool_call_id: p.content for m in repaired for p in m.parts if isinstance(p, messages.ToolReturnPart)}
    interrupted = "The tool call was interrupted before a result was produced."
    assert returns == {"never_run": interrupted, "stopped": interrupted, "in_flight": interrupted, "answered": "saved"}


def test_openai_agents_drops_the_unanswered_calls_and_keeps_the_orphan_output() -> None:
    items_module = pytest.importorskip("agents.run_internal.items")
    kept = items_module.drop_orphan_function_calls(_items())
    assert [i["call_id"] for i in kept if i.get("type") == "function_call"] == ["answered"]
    assert "orphan" in [i["call_id"] for i in kept if i.get("type") == "function_call_output"]
    assert responses_problem(kept) == "No tool call found for function call output with call_id orphan."
