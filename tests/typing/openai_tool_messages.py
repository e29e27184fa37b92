"""A user's agent-loop step written against the OpenAI SDK's own types,
checked by ``mypy --strict --warn-unused-ignores`` (tests/test_typing.py and
the gate): ``tool_messages`` is accepted where the SDK expects
``ChatCompletionToolMessageParam`` / ``ChatCompletionMessageParam``,
``calls_from_message`` takes the SDK's ``ChatCompletionMessage``, and
``is_error`` narrows a result (docs/contract.md §8 A11). The one ignore
must stay used: it proves the SDK's TypedDicts are really checked."""

from __future__ import annotations

from openai.types.chat import ChatCompletionMessage, ChatCompletionMessageParam, ChatCompletionToolMessageParam

from dshtools import AbortController, ToolRegistry, execute_batch
from dshtools import openai as dopenai


def answer(registry: ToolRegistry, message: ChatCompletionMessage, messages: list[ChatCompletionMessageParam]) -> None:
    controller = AbortController()
    calls = dopenai.calls_from_message(message, signal=controller.signal, registry=registry)
    results = execute_batch(registry, calls, signal=controller.signal)
    answers = dopenai.tool_messages(calls, results)
    messages.extend(answers)
    first: ChatCompletionToolMessageParam = answers[0]
    messages.append(first)
    broken: ChatCompletionToolMessageParam = {"role": "tool"}  # type: ignore[typeddict-item]
    print(broken)
    for result in results:
        if not result.is_error:
            print(result.value)
        else:
            print(result.error.message)
