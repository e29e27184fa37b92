"""Honest transcript repair (docs/contract.md#repair): ``dshtools.openai.
repair_messages``, ``repair_response_items`` and
``dshtools.anthropic.repair_messages`` give every tool call exactly one
result in its provider's required place, with the journal's settled result
or one of the honest texts for a missing one; orphans are dropped; the
input is never changed; repairing twice changes nothing. A fake provider
that enforces each API's rule with its real error text (tests/interop/
provider_rules.py) refuses each broken history through the official SDK
client and takes the repaired one."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dshtools import ToolFailure, ToolSuccess
from dshtools import anthropic as dan
from dshtools import openai as doa
from dshtools._interop.repair import (
    NEVER_RUN_TEXT,
    NO_RESULT_TEXT,
    STARTED_AND_STOPPED_TEXT,
    STILL_RUNNING_TEXT,
    UNKNOWN_OUTCOME_TEXT,
)
from dshtools._types.calls import aborted, failure
from tests.helpers.providers import FakeProvider, output_message
from tests.interop.provider_rules import CHECKS, anthropic_problem, chat_problem, responses_problem

SESSION = "conversation-42"

# the SDKs' parameter types, read here as plain JSON
repair_chat: Callable[..., list[Any]] = doa.repair_messages
repair_items: Callable[..., list[Any]] = doa.repair_response_items
repair_anthropic: Callable[..., list[Any]] = dan.repair_messages


@attrs.frozen
class Record:
    """A journal record as ``dshtools.durable.CallRecord`` has it (the
    fields repair reads)."""

    call_id: str
    state: str
    result: ToolSuccess | ToolFailure | None


class Journal:
    """The read side of a journal: the records of one session."""

    def __init__(self, *records: Record) -> None:
        self.records = records
        self.sessions: list[str] = []

    def calls(self, session: str) -> Iterable[Record]:
        self.sessions.append(session)
        return self.records if session == SESSION else ()


def journal() -> Journal:
    """c1 settled with a success, c3 claimed and never settled (its owner
    died), c4 settled ``ABORTED``, c6 settled with a tool error; c5 has no
    record (never claimed: never run)."""
    return Journal(
        Record("c1", "settled", ToolSuccess(value="one", content=({"type": "text", "text": "one"},))),
        Record("c3", "claimed", None),
        Record("c4", "settled", aborted("user pressed stop", invoked=True)),
        Record("c6", "settled", failure("disk full", name="OSError", code=None, body_invoked=True)),
    )


EXPECTED_TEXTS = {
    "c1": ("one", False),
    "c3": (UNKNOWN_OUTCOME_TEXT, True),
    "c4": (STARTED_AND_STOPPED_TEXT, True),
    "c5": (NEVER_RUN_TEXT, True),
    "c6": ("Error: disk full", True),
}


# ------------------------------------------------------------------ histories


def chat_call(call_id: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "write", "arguments": "{}"}}


def chat_history(ids: Iterable[str] = ("c1", "c2", "c3", "c4", "c5", "c6")) -> list[dict[str, Any]]:
    """A turn cut short: c2 answered, then a user message, then an orphan
    result and a duplicate of c2's."""
    return [
        {"role": "user", "content": "save the files"},
        {"role": "assistant", "content": None, "tool_calls": [chat_call(i) for i in ids]},
        {"role": "tool", "tool_call_id": "c2", "content": "two"},
        {"role": "user", "content": "hurry up"},
        {"role": "tool", "tool_call_id": "zz", "content": "orphan"},
        {"role": "tool", "tool_call_id": "c2", "content": "two again"},
    ]


def response_items(ids: Iterable[str] = ("c1", "c2", "c3", "c4", "c5", "c6")) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = [{"role": "user", "content": "save the files"}]
    items.append({"type": "reasoning", "id": "rs_1", "summary": []})
    items += [{"type": "function_call", "call_id": i, "name": "write", "arguments": "{}"} for i in ids]
    items.append({"type": "function_call_output", "call_id": "zz", "output": "orphan"})
    items.append({"type": "function_call_output", "call_id": "c2", "output": "two"})
    items.append({"type": "function_call_output", "call_id": "c2", "output": "two again"})
    return items


def anthropic_history(ids: Iterable[str] = ("c1", "c2", "c3", "c4", "c5", "c6")) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "save the files"},
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "Saving."}]
            + [{"type": "tool_use", "id": i, "name": "write", "input": {}} for i in ids],
        },
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "hurry up"},
                {"type": "tool_result", "tool_use_id": "c2", "content": "two"},
                {"type": "tool_result", "tool_use_id": "zz", "content": "orphan"},
            ],
        },
    ]


def chat_answers(messages: list[Any]) -> dict[str, tuple[str, bool]]:
    return {m["tool_call_id"]: (m["content"], True) for m in messages if m.get("role") == "tool"}


# ------------------------------------------------------------------ Chat Completions


def test_chat_results_follow_their_call_in_call_order_with_the_journals_texts() -> None:
    history = chat_history()
    before = copy.deepcopy(history)
    repaired = repair_chat(history, journal=journal(), session=SESSION)
    assert history == before
    assert [m["role"] for m in repaired] == ["user", "assistant"] + ["tool"] * 6 + ["user"]
    assert [m.get("tool_call_id") for m in repaired[2:8]] == ["c1", "c2", "c3", "c4", "c5", "c6"]
    assert repaired[3] is history[2]  # the history's own result, moved, not copied
    texts = {m["tool_call_id"]: m["content"] for m in repaired[2:8]}
    assert texts == {"c2": "two"} | {i: text for i, (text, _) in EXPECTED_TEXTS.items()}
    assert chat_problem(repaired) is None
    assert repair_chat(repaired, journal=journal(), session=SESSION) == repaired


def test_chat_without_a_journal_says_no_result_was_recorded_and_the_call_may_have_run() -> None:
    repaired = repair_chat(chat_history(("c1", "c2")))
    assert [(m["tool_call_id"], m["content"]) for m in repaired if m["role"] == "tool"] == [
        ("c1", NO_RESULT_TEXT),
        ("c2", "two"),
    ]


def test_chat_a_result_answers_the_oldest_open_call_with_its_id_and_a_result_before_its_call_is_an_orphan() -> None:
    history = [
        {"role": "tool", "tool_call_id": "a", "content": "too early"},
        {"role": "assistant", "content": None, "tool_calls": [chat_call("a")]},
        {"role": "user", "content": "again"},
        {"role": "assistant", "content": None, "tool_calls": [chat_call("a")]},
        {"role": "tool", "tool_call_id": "a", "content": "first"},
        {"role": "tool", "tool_call_id": "a", "content": "second"},
    ]
    repaired = repair_chat(history)
    assert [(m["role"], m.get("content")) for m in repaired] == [
        ("assistant", None),
        ("tool", "first"),
        ("user", "again"),
        ("assistant", None),
        ("tool", "second"),
    ]


def test_chat_an_interrupted_last_turn_gets_its_results_at_the_end() -> None:
    history = chat_history(("c5",))[:2]
    repaired = repair_chat(history, journal=journal(), session=SESSION)
    assert repaired[-1] == {"role": "tool", "tool_call_id": "c5", "content": NEVER_RUN_TEXT}


def test_chat_sdk_message_objects_are_kept_as_they_are() -> None:
    openai = pytest.importorskip("openai")
    message = openai.types.chat.ChatCompletionMessage.model_validate(
        {"role": "assistant", "content": None, "tool_calls": [chat_call("c1")]}
    )
    repaired = repair_chat([{"role": "user", "content": "go"}, message])
    assert repaired[1] is message
    assert repaired[2] == {"role": "tool", "tool_call_id": "c1", "content": NO_RESULT_TEXT}


# ------------------------------------------------------------------ Responses API


def test_responses_missing_outputs_follow_the_call_run_and_orphans_are_dropped() -> None:
    items = response_items()
    before = copy.deepcopy(items)
    repaired = repair_items(items, journal=journal(), session=SESSION)
    assert items == before
    kinds = [(i.get("type"), i.get("call_id")) for i in repaired]
    assert kinds == [
        (None, None),
        ("reasoning", None),
        *[("function_call", i) for i in ("c1", "c2", "c3", "c4", "c5", "c6")],
        *[("function_call_output", i) for i in ("c1", "c3", "c4", "c5", "c6")],
        ("function_call_output", "c2"),
    ]
    outputs = {i["call_id"]: i["output"] for i in repaired if i.get("type") == "function_call_output"}
    assert outputs == {"c2": "two"} | {i: text for i, (text, _) in EXPECTED_TEXTS.items()}
    assert responses_problem(repaired) is None
    assert repair_items(repaired, journal=journal(), session=SESSION) == repaired


def test_responses_an_output_goes_after_the_last_call_of_its_run_even_past_a_reasoning_item() -> None:
    items = [
        {"type": "function_call", "call_id": "a", "name": "n", "arguments": "{}"},
        {"type": "reasoning", "id": "rs_2", "summary": []},
        {"type": "function_call", "call_id": "b", "name": "n", "arguments": "{}"},
        output_message("done"),
    ]
    repaired = repair_items(items)
    assert [(i.get("type"), i.get("call_id")) for i in repaired] == [
        ("function_call", "a"),
        ("reasoning", None),
        ("function_call", "b"),
        ("function_call_output", "a"),
        ("function_call_output", "b"),
        ("message", None),
    ]


# ------------------------------------------------------------------ Anthropic


def test_anthropic_results_open_the_next_user_message_in_call_order() -> None:
    history = anthropic_history()
    before = copy.deepcopy(history)
    repaired = repair_anthropic(history, journal=journal(), session=SESSION)
    assert history == before
    assert len(repaired) == 3
    blocks = repaired[2]["content"]
    assert [b.get("tool_use_id") for b in blocks] == ["c1", "c2", "c3", "c4", "c5", "c6", None]
    assert blocks[1] is history[2]["content"][1]
    assert blocks[-1] == {"type": "text", "text": "hurry up"}
    got = {b["tool_use_id"]: (b["content"], b.get("is_error", False)) for b in blocks[:-1]}
    assert got == {"c2": ("two", False)} | EXPECTED_TEXTS
    assert anthropic_problem(repaired) is None
    assert repair_anthropic(repaired, journal=journal(), session=SESSION) == repaired


def test_anthropic_a_turn_followed_by_no_user_message_gets_a_new_one() -> None:
    history = anthropic_history(("c1",))[:2] + [{"role": "assistant", "content": "still there?"}]
    repaired = repair_anthropic(history)
    assert repaired[2] == {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "c1", "content": NO_RESULT_TEXT, "is_error": True}],
    }
    assert repaired[3] is history[2]


def test_anthropic_a_user_message_holding_only_orphans_is_dropped_and_string_content_is_kept() -> None:
    history = [
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "zz", "content": "x"}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "n", "input": {}}]},
        {"role": "user", "content": "and then?"},
    ]
    repaired = repair_anthropic(history)
    assert repaired[0] is history[1]
    assert repaired[1]["content"] == [
        {"type": "tool_result", "tool_use_id": "a", "content": NO_RESULT_TEXT, "is_error": True},
        {"type": "text", "text": "and then?"},
    ]


# ------------------------------------------------------------------ through the SDKs, against the rules


def _ok(provider: str) -> dict[str, Any]:
    if provider == "chat":
        message = {"role": "assistant", "content": "ok"}
        return {
            "id": "c",
            "object": "chat.completion",
            "created": 0,
            "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop", "message": message}],
        }
    if provider == "responses":
        return {
            "id": "r",
            "object": "response",
            "created_at": 0,
            "model": "m",
            "status": "completed",
            "output": [output_message("ok")],
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
        }
    return {
        "id": "m",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": [{"type": "text", "text": "ok"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }


def _send(provider: str, url: str) -> Callable[[list[Any]], object]:
    if provider == "anthropic":
        anthropic = pytest.importorskip("anthropic")
        client = anthropic.Anthropic(api_key="test", base_url=url, max_retries=0)
        return lambda history: client.messages.create(model="m", max_tokens=10, messages=history)
    openai = pytest.importorskip("openai")
    oclient = openai.OpenAI(api_key="test", base_url=url + "/v1", max_retries=0)
    if provider == "chat":
        return lambda history: oclient.chat.completions.create(model="m", messages=history)
    return lambda history: oclient.responses.create(model="m", input=history)


CASES: dict[str, tuple[Callable[[], list[Any]], Callable[..., list[Any]], str]] = {
    "chat": (chat_history, doa.repair_messages, "did not have response messages: c1, c3, c4, c5, c6"),
    "responses": (response_items, doa.repair_response_items, "No tool call found for function call output"),
    "anthropic": (anthropic_history, dan.repair_messages, "unexpected `tool_use_id` found in `tool_result` blocks: zz"),
}


@pytest.mark.timeout(30)
@pytest.mark.parametrize("provider", sorted(CASES))
def test_the_api_refuses_the_broken_history_with_its_own_error_and_takes_the_repaired_one(provider: str) -> None:
    history, repair, error = CASES[provider]
    server = FakeProvider([_ok(provider)], check=CHECKS[provider])
    try:
        send = _send(provider, server.url)
        with pytest.raises(Exception, match="400") as refused:
            send(history())
        assert error in str(refused.value)
        send(repair(history(), journal=journal(), session=SESSION))
        assert len(server.requests) == 2  # both reached the server; the second was taken
    finally:
        server.close()


# ------------------------------------------------------------------ any history


_ID = st.sampled_from(["a", "b", "c", "d"])


@st.composite
def chat_histories(draw: st.DrawFn) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for kind in draw(st.lists(st.sampled_from(["user", "calls", "result"]), max_size=12)):
        if kind == "user":
            out.append({"role": "user", "content": "u"})
        elif kind == "calls":
            out.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [chat_call(i) for i in draw(st.lists(_ID, min_size=1, max_size=3))],
                }
            )
        else:
            out.append({"role": "tool", "tool_call_id": draw(_ID), "content": "r"})
    return out


@st.composite
def item_histories(draw: st.DrawFn) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for kind in draw(st.lists(st.sampled_from(["message", "call", "reasoning", "output"]), max_size=12)):
        if kind == "message":
            out.append({"role": "user", "content": "u"})
        elif kind == "call":
            out.append({"type": "function_call", "call_id": draw(_ID), "name": "n", "arguments": "{}"})
        elif kind == "reasoning":
            out.append({"type": "reasoning", "id": "rs", "summary": []})
        else:
            out.append({"type": "function_call_output", "call_id": draw(_ID), "output": "r"})
    return out


@st.composite
def anthropic_histories(draw: st.DrawFn) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for kind in draw(st.lists(st.sampled_from(["user", "calls", "results"]), max_size=10)):
        if kind == "user":
            out.append({"role": "user", "content": "u"})
        elif kind == "calls":
            uses = [
                {"type": "tool_use", "id": i, "name": "n", "input": {}}
                for i in draw(st.lists(_ID, min_size=1, max_size=3, unique=True))
            ]
            out.append({"role": "assistant", "content": [{"type": "text", "text": "t"}, *uses]})
        else:
            results = [
                {"type": "tool_result", "tool_use_id": i, "content": "r"} for i in draw(st.lists(_ID, max_size=3))
            ]
            out.append({"role": "user", "content": results + [{"type": "text", "text": "u"}]})
    return out


def _calls(history: list[dict[str, Any]], provider: str) -> int:
    if provider == "chat":
        return sum(len(m.get("tool_calls") or []) for m in history)
    if provider == "responses":
        return sum(i.get("type") == "function_call" for i in history)
    return sum(b.get("type") == "tool_use" for m in history if isinstance(m["content"], list) for b in m["content"])


def _results(history: list[dict[str, Any]], provider: str) -> int:
    if provider == "chat":
        return sum(m.get("role") == "tool" for m in history)
    if provider == "responses":
        return sum(i.get("type") == "function_call_output" for i in history)
    return sum(b.get("type") == "tool_result" for m in history if isinstance(m["content"], list) for b in m["content"])


def _property(provider: str, history: list[dict[str, Any]]) -> None:
    repair = CASES[provider][1]
    problem = {"chat": chat_problem, "responses": responses_problem, "anthropic": anthropic_problem}[provider]
    before = copy.deepcopy(history)
    repaired = repair(history)
    assert history == before
    assert _results(repaired, provider) == _calls(repaired, provider) == _calls(history, provider)
    if provider != "anthropic" or all(m.get("content") for m in history):
        assert problem(repaired) is None
    assert repair(repaired) == repaired


@settings(max_examples=300, deadline=None)
@given(chat_histories())
def test_any_chat_history_comes_out_valid_with_one_result_per_call_and_repairs_to_itself(
    history: list[dict[str, Any]],
) -> None:
    _property("chat", history)


@settings(max_examples=300, deadline=None)
@given(item_histories())
def test_any_responses_history_comes_out_valid_with_one_output_per_call_and_repairs_to_itself(
    history: list[dict[str, Any]],
) -> None:
    _property("responses", history)


@settings(max_examples=300, deadline=None)
@given(anthropic_histories())
def test_any_anthropic_history_comes_out_valid_with_one_result_per_use_and_repairs_to_itself(
    history: list[dict[str, Any]],
) -> None:
    _property("anthropic", history)


# ------------------------------------------------------------------ what is refused


@pytest.mark.parametrize("repair", [doa.repair_messages, doa.repair_response_items, dan.repair_messages])
def test_a_journal_and_its_session_come_together_and_a_history_is_a_list(repair: Callable[..., object]) -> None:
    with pytest.raises(ValueError, match="pass session="):
        repair([], journal=journal())
    with pytest.raises(ValueError, match="pass journal="):
        repair([], session=SESSION)
    with pytest.raises(TypeError, match="must be a list"):
        repair({"role": "user", "content": "one message, not a list"})
    with pytest.raises(TypeError, match=r"\[1\] must be an object"):
        repair([{"role": "user", "content": "x"}, "text"])


def test_the_journal_is_read_once_for_the_session_named() -> None:
    records = journal()
    repair_chat(chat_history(), journal=records, session=SESSION)
    assert records.sessions == [SESSION]


def test_a_claim_whose_owner_is_alive_is_still_running_not_a_crash() -> None:
    """A journal that knows its owners (``owner_alive``): a key claimed by
    a live owner is said to be still running; one whose owner died, that
    its outcome is unknown."""

    class Owners(Journal):
        def owner_alive(self, record: Record) -> bool:
            return record.call_id == "live"

    records = Owners(Record("live", "claimed", None), Record("dead", "claimed", None))
    repaired = repair_chat(chat_history(("live", "dead"))[:2], journal=records, session=SESSION)
    assert [(m["tool_call_id"], m["content"]) for m in repaired[2:]] == [
        ("live", STILL_RUNNING_TEXT),
        ("dead", UNKNOWN_OUTCOME_TEXT),
    ]
