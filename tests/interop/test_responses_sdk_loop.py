"""A Responses API agent loop through the official OpenAI SDK client,
against a local server that plays the API (offline,
tests.helpers.providers.FakeProvider):
``responses_tools_param`` goes out as ``tools=``, the SDK's ``Response``
goes into ``calls_from_response``, the calls run as one ``execute_batch``,
and ``function_call_outputs`` goes back as ``input=`` through the SDK's own
request serialization (docs/contract.md#responses). The server keeps each
request body, so the test sees exactly what would reach the API."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from dshtools import (
    INVALID_ARGS,
    AbortController,
    ToolDefinition,
    ToolExecutionInput,
    ToolRegistry,
    ToolRunContext,
    execute_batch,
)
from tests.helpers.providers import FakeProvider, output_message

openai = pytest.importorskip("openai", reason="the openai SDK is in the test extra")
from dshtools import openai as doa  # noqa: E402


class Bodies:
    """What the tool bodies were called with, per call id."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: dict[str, object] = {}

    def record(self, run: ToolRunContext, value: object) -> None:
        with self.lock:
            self.seen[run.call_id] = value


@pytest.fixture
def bodies() -> Bodies:
    return Bodies()


@pytest.fixture
def registry(bodies: Bodies) -> Iterator[ToolRegistry]:
    def weather(city: str, run: ToolRunContext) -> str:
        """The weather in a city."""
        bodies.record(run, city)
        return f"sunny in {city}"

    def save(args: Any, run: ToolRunContext) -> Any:
        bodies.record(run, dict(args))
        return {"saved": args["text"]}

    with ToolRegistry(max_workers=2) as r:
        r.register(ToolDefinition.from_function(weather, strict=True, concurrency_safe=True))
        r.register(ToolDefinition("notes.save", "Save a note.", {"type": "object"}, save))
        yield r


def _answer(*output: dict[str, Any], response_id: str = "resp_1") -> dict[str, Any]:
    return {
        "id": response_id,
        "object": "response",
        "created_at": 0,
        "model": "gpt-test",
        "status": "completed",
        "output": list(output),
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
    }


def _function_call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": f"fc_{call_id}",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": "completed",
    }


@contextlib.contextmanager
def _client(*answers: dict[str, Any]) -> Iterator[tuple[Any, FakeProvider]]:
    """The SDK client on a ``FakeProvider`` that gives ``answers`` in turn."""
    provider = FakeProvider(list(answers))
    client = openai.OpenAI(api_key="test", base_url=provider.url + "/v1", max_retries=0)
    try:
        yield client, provider
    finally:
        client.close()
        provider.close()


DONE = output_message("Done.", item_id="msg_2")


@pytest.mark.timeout(60)
def test_a_stateless_loop_sends_the_outputs_after_the_models_items(registry: ToolRegistry, bodies: Bodies) -> None:
    """The caller keeps the input list: the response's output items, then one
    ``function_call_output`` per ``function_call``, in order; the second
    answer is a message and the loop ends."""
    first = _answer(
        {"type": "reasoning", "id": "rs_1", "summary": []},
        _function_call("call_1", "weather", '{"city": "Oslo"}'),
        _function_call("call_2", "notes_save", '{"text": "pack an umbrella? no"}'),
    )
    turn = AbortController()
    with _client(first, _answer(DONE, response_id="resp_2")) as (client, provider):
        tools = doa.responses_tools_param(registry)
        history: list[Any] = [{"role": "user", "content": "Weather in Oslo, and save a note."}]
        ran: list[ToolExecutionInput] = []
        while True:
            response = client.responses.create(model="gpt-test", input=history, tools=tools)
            calls = doa.calls_from_response(response, signal=turn.signal, registry=registry)
            if not calls:
                break
            ran += calls
            results = execute_batch(registry, calls, signal=turn.signal)
            history += response.output
            history += doa.function_call_outputs(calls, results)

    assert response.output_text == "Done."
    assert [c.name for c in ran] == ["weather", "notes.save"]
    assert bodies.seen == {"call_1": "Oslo", "call_2": {"text": "pack an umbrella? no"}}
    sent_tools = provider.requests[0]["tools"]
    assert [(t["type"], t["name"], t["strict"]) for t in sent_tools] == [
        ("function", "weather", True),
        ("function", "notes_save", False),
    ]
    assert sent_tools[0]["parameters"]["additionalProperties"] is False
    assert provider.requests[1]["tools"] == sent_tools
    second = provider.requests[1]["input"]
    assert [item.get("type", item.get("role")) for item in second] == [
        "user",
        "reasoning",
        "function_call",
        "function_call",
        "function_call_output",
        "function_call_output",
    ]
    assert [i["call_id"] for i in second[2:4]] == ["call_1", "call_2"]
    assert second[4:] == [
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny in Oslo"},
        {"type": "function_call_output", "call_id": "call_2", "output": '{"saved": "pack an umbrella? no"}'},
    ]


@pytest.mark.timeout(60)
def test_a_stateful_loop_sends_only_the_outputs_with_previous_response_id(
    registry: ToolRegistry, bodies: Bodies
) -> None:
    """With ``previous_response_id`` the outputs alone are the next input;
    a call the model got wrong is answered under its id like the others."""
    first = _answer(
        _function_call("call_1", "weather", '{"city": "Bergen"}'),
        _function_call("call_2", "weather", '{"city": '),
    )
    turn = AbortController()
    with _client(first, _answer(DONE, response_id="resp_2")) as (client, provider):
        response = client.responses.create(model="gpt-test", input="go", tools=doa.responses_tools_param(registry))
        calls = doa.calls_from_response(response.output, signal=turn.signal, registry=registry)
        results = execute_batch(registry, calls, signal=turn.signal)
        final = client.responses.create(
            model="gpt-test", previous_response_id=response.id, input=doa.function_call_outputs(calls, results)
        )

    assert final.output_text == "Done."
    assert [r.code for r in results] == [None, INVALID_ARGS]
    assert bodies.seen == {"call_1": "Bergen"}
    sent = provider.requests[1]
    assert sent["previous_response_id"] == "resp_1"
    assert [(i["type"], i["call_id"]) for i in sent["input"]] == [
        ("function_call_output", "call_1"),
        ("function_call_output", "call_2"),
    ]
    assert sent["input"][0]["output"] == "sunny in Bergen"
    assert sent["input"][1]["output"].startswith("Error: invalid arguments: arguments are not valid JSON: ")
