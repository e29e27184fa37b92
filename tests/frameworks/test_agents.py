"""``dshtools.agents.function_tools``, driven by the Agents SDK's own
``Runner`` and its ``ScriptedModel`` test double (no model, no network):
the schema the model is given, a call that succeeds, one that fails, and a
run cancelled the SDK's ways (its task cancelled; a streamed run's
``cancel()``) that stops and joins the body and leaves no process behind,
where the SDK's own sync tool keeps running (benchmarks/frameworks_cancel.py
measures both)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Callable, Coroutine
from functools import partial
from typing import Any

import pytest
from agents import Agent, FunctionTool, RunConfig, Runner
from agents.items import ToolCallOutputItem
from agents.testing import ScriptedModel, assistant_message, function_call

from dshtools import (
    TOOL_ABORTED,
    TOOL_ABORTED_BEFORE_DISPATCH,
    AbortSignal,
    ToolExecution,
    ToolExecutionResult,
    ToolRegistry,
)
from dshtools.agents import function_tools
from tests.frameworks.conftest import SLEEP
from tests.helpers.calls import tool
from tests.helpers.processes import alive, wait_for_descendant
from tests.helpers.recorders import CallEventRecorder

pytestmark = pytest.mark.timeout(60)

CONFIG = RunConfig(tracing_disabled=True)


def _outputs(items: list[Any]) -> list[object]:
    return [item.output for item in items if isinstance(item, ToolCallOutputItem)]


def _function_tools(registry: ToolRegistry, *names: str) -> list[FunctionTool]:
    tools = function_tools(registry, *names)
    assert all(isinstance(t, FunctionTool) for t in tools)
    return [t for t in tools if isinstance(t, FunctionTool)]


def test_the_tools_carry_the_registrys_names_descriptions_schemas_and_strictness(registry: ToolRegistry) -> None:
    tools = _function_tools(registry)
    assert [t.name for t in tools] == ["add", "fs_boom", "slow"]  # a dotted name goes as its alias
    by_name = {t.name: t for t in tools}
    schemas = {s["name"]: s for s in registry.schemas()}
    add, boom = by_name["add"], by_name["fs_boom"]
    assert add.description == schemas["add"]["description"]
    assert add.strict_json_schema is True
    assert add.params_json_schema == schemas["add"]["parameters"]
    assert boom.strict_json_schema is False  # the SDK leaves a non-strict schema as it is
    assert boom.params_json_schema == schemas["fs.boom"]["parameters"]
    assert [t.name for t in _function_tools(registry, "slow", "add")] == ["add", "slow"]


def test_a_name_the_registry_does_not_hold_or_a_schema_no_provider_takes_is_refused(registry: ToolRegistry) -> None:
    with pytest.raises(ValueError, match="'nope'"):
        function_tools(registry, "add", "nope")
    with pytest.raises(TypeError):
        function_tools(registry, 3)  # type: ignore[arg-type]
    registry.register(tool("scalar", lambda _a, _r: "ok", parameters={"type": "string"}))
    with pytest.raises(ValueError, match=r"'scalar'.*object"):
        function_tools(registry)
    assert [t.name for t in function_tools(registry, "add")] == ["add"]  # the others are not looked at


def test_a_run_calls_the_tool_through_the_registry_and_the_model_gets_its_output(
    registry: ToolRegistry, recorder: CallEventRecorder
) -> None:
    model = ScriptedModel([[function_call("add", {"a": 2, "b": 3}, call_id="call-7")], [assistant_message("5")]])
    agent = Agent(name="adder", model=model, tools=function_tools(registry))

    result = asyncio.run(Runner.run(agent, "add 2 and 3", run_config=CONFIG))

    assert result.final_output == "5"
    assert _outputs(result.new_items) == ["5"]
    assert recorder.counts("pre") == {"call-7": 1}  # the SDK's call id, through the pipeline
    (published,) = recorder.results["call-7"]
    assert not published.is_error and published.value == 5
    sent = model.calls[1].input[-1]  # the second model call carries the output
    assert sent["type"] == "function_call_output" and sent["call_id"] == "call-7" and sent["output"] == "5"


def test_a_failure_and_arguments_that_are_not_json_reach_the_model_as_error_text(registry: ToolRegistry) -> None:
    model = ScriptedModel(
        [
            [
                function_call("fs_boom", {"path": "/etc/x"}, call_id="c1"),
                function_call("add", '{"a": 1,', call_id="c2"),
            ],
            [assistant_message("sorry")],
        ]
    )
    agent = Agent(name="reader", model=model, tools=function_tools(registry))

    result = asyncio.run(Runner.run(agent, "read it", run_config=CONFIG))

    boom, broken = _outputs(result.new_items)
    assert boom == "Error: no such file: /etc/x"
    assert isinstance(broken, str) and broken.startswith("Error: invalid arguments")


def _slow_agent(registry: ToolRegistry) -> Agent[Any]:
    model = ScriptedModel([[function_call("slow", {}, call_id="slow-1")], [assistant_message("done")]])
    return Agent(name="sleeper", model=model, tools=function_tools(registry, "slow"))


async def _published(registry: ToolRegistry) -> asyncio.Event:
    """An event set (on the loop) when the registry publishes a result."""
    loop = asyncio.get_running_loop()
    event = asyncio.Event()

    def observe(_e: ToolExecution, _r: ToolExecutionResult) -> None:
        loop.call_soon_threadsafe(event.set)

    registry.add_result_observer(observe)
    return event


def _assert_stopped_and_joined(registry: ToolRegistry, recorder: CallEventRecorder, pids: list[int]) -> None:
    assert recorder.counts("aborted") == {"slow-1": 1}  # the body saw its signal aborted
    assert recorder.counts("aborted by TaskCancelled") == {"slow-1": 1}  # by the task's cancellation
    assert recorder.counts("body_end") == {"slow-1": 1}  # ... and returned
    (published,) = recorder.results["slow-1"]
    assert published.code == TOOL_ABORTED and published.body_invoked
    assert registry.statistics().bodies_in_flight == 0
    assert alive(pids) == []  # no sleep left behind


async def _cancel_once_sleeping(registry: ToolRegistry) -> list[int]:
    """Run the slow agent in a task, cancel the task once the tool's
    ``sleep`` runs, and expect the ``CancelledError``; returns the pids of
    that ``sleep``."""
    run = asyncio.create_task(Runner.run(_slow_agent(registry), "sleep", run_config=CONFIG))
    pids = await asyncio.to_thread(partial(wait_for_descendant, matching_only=True), os.getpid(), SLEEP, 10)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    return pids


async def _cancel_the_task(registry: ToolRegistry) -> list[int]:
    """Cancel the run's task while the tool sleeps."""
    published = await _published(registry)
    pids = await _cancel_once_sleeping(registry)
    # The SDK does not wait for a cancelled tool's task; the loop
    # finishes its join, and only then is the result published.
    await asyncio.wait_for(published.wait(), 10)
    return pids


async def _end_the_loop_after_the_cancel(registry: ToolRegistry) -> list[int]:
    """Cancel the run's task, then let ``asyncio.run`` end at once."""
    # The tool's task is (usually) still joining when this returns:
    # asyncio.run cancels it once more on the way out, and the join is
    # shielded from that.
    return await _cancel_once_sleeping(registry)


async def _cancel_the_stream(registry: ToolRegistry) -> list[int]:
    """``result.cancel()`` of a streamed run while the tool sleeps."""
    published = await _published(registry)
    result = Runner.run_streamed(_slow_agent(registry), "sleep", run_config=CONFIG)

    async def drain() -> None:
        async for _event in result.stream_events():
            pass

    drained = asyncio.create_task(drain())
    pids = await asyncio.to_thread(partial(wait_for_descendant, matching_only=True), os.getpid(), SLEEP, 10)
    result.cancel()
    await asyncio.wait_for(drained, 10)
    await asyncio.wait_for(published.wait(), 10)
    return pids


@pytest.mark.parametrize(
    "cancel",
    [
        pytest.param(_cancel_the_task, id="the-runs-task"),
        pytest.param(_end_the_loop_after_the_cancel, id="a-loop-that-ends-right-after"),
        pytest.param(_cancel_the_stream, id="a-streamed-run"),
    ],
)
def test_a_cancelled_run_aborts_and_joins_the_body(
    registry: ToolRegistry,
    recorder: CallEventRecorder,
    cancel: Callable[[ToolRegistry], Coroutine[Any, Any, list[int]]],
) -> None:
    pids = asyncio.run(cancel(registry))
    _assert_stopped_and_joined(registry, recorder, pids)


def test_a_callers_signal_that_is_aborted_stops_the_call_before_its_body(
    registry: ToolRegistry, recorder: CallEventRecorder
) -> None:
    model = ScriptedModel([[function_call("slow", {}, call_id="slow-2")], [assistant_message("stopped")]])
    agent = Agent(
        name="sleeper", model=model, tools=function_tools(registry, signal=AbortSignal.already_aborted("stop"))
    )

    result = asyncio.run(Runner.run(agent, "sleep", run_config=CONFIG))

    (output,) = _outputs(result.new_items)
    assert isinstance(output, str) and output.startswith("Error: ")
    assert recorder.counts("body_start") == {}
    (published,) = recorder.results["slow-2"]
    assert published.code == TOOL_ABORTED_BEFORE_DISPATCH


def test_import_dshtools_imports_no_framework() -> None:
    code = (
        "import sys, dshtools, dshtools.openai; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('agents', 'pydantic_ai', 'langchain_core')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
