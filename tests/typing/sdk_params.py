"""Typing cases (mypy --strict, no cast): what ``dshtools.openai`` and
``dshtools.anthropic`` build is accepted by the official SDKs' parameter
types (docs/contract.md#a18; field case N11). Checked by
``test_case_files.py``; never run."""

from __future__ import annotations

from anthropic import Anthropic
from anthropic.types import MessageParam, ToolParam, ToolResultBlockParam
from openai import OpenAI
from openai.types.chat import (
    ChatCompletionMessageParam,
    ChatCompletionToolMessageParam,
    ChatCompletionToolParam,
)
from openai.types.responses import ResponseInputParam

import dshtools.anthropic
import dshtools.openai
from dshtools import AbortController, ToolRegistry, execute_batch


def openai_turn(client: OpenAI, registry: ToolRegistry, messages: list[ChatCompletionMessageParam]) -> None:
    controller = AbortController()
    tools: list[ChatCompletionToolParam] = dshtools.openai.tools_param(registry)
    response = client.chat.completions.create(
        model="gpt-4.1", messages=messages, tools=dshtools.openai.tools_param(registry)
    )
    message = response.choices[0].message
    calls = dshtools.openai.calls_from_message(message, signal=controller.signal, registry=registry)
    results = execute_batch(registry, calls, signal=controller.signal)
    replies: list[ChatCompletionToolMessageParam] = dshtools.openai.tool_messages(calls, results)
    one: ChatCompletionToolMessageParam = dshtools.openai.tool_message(calls[0].call_id, results[0])
    messages.extend(replies)
    messages.append(dshtools.openai.tool_message(calls[0].call_id, results[0]))
    del tools, one


def anthropic_turn(client: Anthropic, registry: ToolRegistry, messages: list[MessageParam]) -> None:
    controller = AbortController()
    tools: list[ToolParam] = dshtools.anthropic.tools_param(registry)
    response = client.messages.create(
        model="claude-sonnet-4-5", max_tokens=1024, messages=messages, tools=dshtools.anthropic.tools_param(registry)
    )
    calls = dshtools.anthropic.calls_from_message(response, signal=controller.signal, registry=registry)
    results = execute_batch(registry, calls, signal=controller.signal)
    blocks: list[ToolResultBlockParam] = dshtools.anthropic.tool_results(calls, results)
    messages.append({"role": "user", "content": dshtools.anthropic.tool_results(calls, results)})
    del tools, blocks


def repaired_histories(
    openai_client: OpenAI,
    anthropic_client: Anthropic,
    chat: list[ChatCompletionMessageParam],
    items: ResponseInputParam,
    messages: list[MessageParam],
) -> None:
    """A repaired history goes straight back to the API (docs/contract.md#repair)."""
    fixed: list[ChatCompletionMessageParam] = dshtools.openai.repair_messages(chat)
    openai_client.chat.completions.create(model="gpt-4.1", messages=fixed)
    openai_client.responses.create(model="gpt-4.1", input=dshtools.openai.repair_response_items(items))
    anthropic_client.messages.create(
        model="claude-sonnet-4-5", max_tokens=1024, messages=dshtools.anthropic.repair_messages(messages)
    )
