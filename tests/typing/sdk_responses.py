"""Typing cases (mypy --strict, no cast): what the Responses API half of
``dshtools.openai`` builds is accepted by the official SDK's parameter
types (docs/contract.md#responses, docs/contract.md#a18): ``responses_tools_param`` as
``tools=``, ``function_call_outputs`` as ``input=`` of
``client.responses.create`` and as items of a ``ResponseInputParam``
history, ``function_call_output`` as one ``FunctionCallOutput`` item;
``calls_from_response`` takes the SDK's ``Response`` and its ``output``.
Valid usage only: under ``--strict`` an SDK that mypy cannot resolve is an
error of its own, so these lines are checked against the real types.
Checked by ``test_case_files.py`` (in one mypy run with ``sdk_params.py``);
never run."""

from __future__ import annotations

from openai import OpenAI
from openai.types.responses import (
    FunctionToolParam,
    ResponseInputItemParam,
    ResponseInputParam,
    ToolParam,
)
from openai.types.responses.response_input_param import FunctionCallOutput

import dshtools.openai
from dshtools import AbortController, ToolRegistry, execute_batch


def stateful_turn(client: OpenAI, registry: ToolRegistry) -> None:
    """previous_response_id: the outputs alone are the next input."""
    controller = AbortController()
    tools: list[FunctionToolParam] = dshtools.openai.responses_tools_param(registry)
    any_tools: list[ToolParam] = [*dshtools.openai.responses_tools_param(registry, "search")]
    response = client.responses.create(model="gpt-5", input="go", tools=dshtools.openai.responses_tools_param(registry))
    calls = dshtools.openai.calls_from_response(response, signal=controller.signal, registry=registry)
    results = execute_batch(registry, calls, signal=controller.signal)
    client.responses.create(
        model="gpt-5",
        previous_response_id=response.id,
        input=dshtools.openai.function_call_outputs(calls, results),
        tools=tools,
    )
    del any_tools


def stateless_turn(client: OpenAI, registry: ToolRegistry, history: ResponseInputParam) -> None:
    """The caller keeps the whole input list."""
    controller = AbortController()
    response = client.responses.create(
        model="gpt-5", input=history, tools=dshtools.openai.responses_tools_param(registry)
    )
    calls = dshtools.openai.calls_from_response(response.output, signal=controller.signal, registry=registry)
    results = execute_batch(registry, calls, signal=controller.signal)
    history.extend(dshtools.openai.function_call_outputs(calls, results))
    history += dshtools.openai.function_call_outputs(calls, results)
    items: list[ResponseInputItemParam] = dshtools.openai.function_call_outputs(calls, results)
    one: FunctionCallOutput = dshtools.openai.function_call_output(calls[0].call_id, results[0])
    history.append(one)
    history.append(dshtools.openai.function_call_output(calls[0].call_id, results[0]))
    client.responses.create(model="gpt-5", input=[*history, *items])
