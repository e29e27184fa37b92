"""The rules the provider APIs enforce on a history's tool calls and results,
with the error texts they answer (HTTP 400) when one is broken, for
``tests.helpers.providers.FakeProvider(check=...)``: a request the real API would
refuse is refused the same way, so a test through the official SDK client
sees the SDK's own ``BadRequestError``.

Each ``*_problem`` function takes a history (plain JSON, as the SDK sent
it) and returns the first error text, or ``None`` when the API would take
it. Each ``*_check`` wraps it as a ``FakeProvider`` check."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def chat_problem(messages: list[dict[str, Any]]) -> str | None:
    """Chat Completions: the tool messages right after an assistant message
    with ``tool_calls`` answer each of its ids; a tool message anywhere else
    is refused."""
    expected: set[str] = set()
    allowed: set[str] = set()
    for message in messages:
        if message.get("role") == "tool":
            if message.get("tool_call_id") not in allowed:
                return (
                    "Invalid parameter: messages with role 'tool' must be a response to a preceeding message "
                    "with 'tool_calls'."
                )
            expected.discard(message["tool_call_id"])
            continue
        if expected:
            return _chat_missing(expected)
        calls = (message.get("tool_calls") or []) if message.get("role") == "assistant" else []
        allowed = {call["id"] for call in calls}
        expected = set(allowed)
    return _chat_missing(expected) if expected else None


def _chat_missing(ids: set[str]) -> str:
    return (
        "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
        f"'tool_call_id'. The following tool_call_ids did not have response messages: {', '.join(sorted(ids))}"
    )


def responses_problem(items: list[dict[str, Any]]) -> str | None:
    """Responses API: every ``function_call_output`` follows a
    ``function_call`` with its ``call_id``; every ``function_call`` has an
    output."""
    calls: list[str] = []
    answered: set[str] = set()
    for item in items:
        if item.get("type") == "function_call":
            calls.append(item["call_id"])
        elif item.get("type") == "function_call_output":
            if item["call_id"] not in calls:
                return f"No tool call found for function call output with call_id {item['call_id']}."
            answered.add(item["call_id"])
    for call_id in calls:
        if call_id not in answered:
            return f"No tool output found for function call {call_id}."
    return None


def anthropic_problem(messages: list[dict[str, Any]]) -> str | None:
    """Anthropic Messages: the message after an assistant message with
    ``tool_use`` blocks holds a ``tool_result`` for each; a ``tool_result``
    answers a ``tool_use`` of the message before it; no message is empty
    (but a final assistant message)."""
    previous: set[str] = set()
    for index, message in enumerate(messages):
        content = message.get("content")
        blocks = content if isinstance(content, list) else []
        if not content and not (index == len(messages) - 1 and message.get("role") == "assistant"):
            return f"messages.{index}: all messages must have non-empty content except for the optional final assistant message"
        results = [block for block in blocks if block.get("type") == "tool_result"]
        for position, block in enumerate(blocks):
            if block.get("type") == "tool_result" and block.get("tool_use_id") not in previous:
                return (
                    f"messages.{index}.content.{position}: unexpected `tool_use_id` found in `tool_result` blocks: "
                    f"{block.get('tool_use_id')}. Each `tool_result` block must have a corresponding `tool_use` "
                    "block in the previous message."
                )
        missing = previous - {block["tool_use_id"] for block in results}
        if missing:
            return _anthropic_missing(index - 1, missing)
        uses = [block["id"] for block in blocks if block.get("type") == "tool_use"]
        previous = set(uses) if message.get("role") == "assistant" else set()
    return _anthropic_missing(len(messages) - 1, previous) if previous else None


def _anthropic_missing(index: int, ids: set[str]) -> str:
    return (
        f"messages.{index}: `tool_use` ids were found without `tool_result` blocks immediately after: "
        f"{', '.join(sorted(ids))}. Each `tool_use` block must have a corresponding `tool_result` block in the "
        "next message."
    )


def _openai_error(message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": None}}


def chat_check(body: dict[str, Any]) -> dict[str, Any] | None:
    problem = chat_problem(body["messages"])
    return None if problem is None else _openai_error(problem)


def responses_check(body: dict[str, Any]) -> dict[str, Any] | None:
    problem = responses_problem(body["input"])
    return None if problem is None else _openai_error(problem)


def anthropic_check(body: dict[str, Any]) -> dict[str, Any] | None:
    problem = anthropic_problem(body["messages"])
    if problem is None:
        return None
    return {"type": "error", "error": {"type": "invalid_request_error", "message": problem}}


CHECKS: dict[str, Callable[[dict[str, Any]], dict[str, Any] | None]] = {
    "chat": chat_check,
    "responses": responses_check,
    "anthropic": anthropic_check,
}
