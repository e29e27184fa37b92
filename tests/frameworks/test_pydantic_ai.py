"""``dshtools.pydantic_ai.toolset``, driven by pydantic-ai's own ``Agent``
and its ``FunctionModel`` test double (no model, no network): the tool
definitions the model is given, a call that succeeds, one that fails, and
``Agent.run``'s task cancelled, which stops and joins the body before the
cancellation reaches the caller and leaves no process behind, where
pydantic-ai's own sync tool keeps running (benchmarks/frameworks_cancel.py
measures both)."""

from __future__ import annotations

import asyncio
import os
from functools import partial
from typing import Any

import pytest
from pydantic_ai import Agent, FunctionToolset, RunContext
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.usage import RunUsage

from dshtools import TOOL_ABORTED, ToolRegistry
from dshtools.pydantic_ai import RegistryToolset, toolset
from tests.frameworks.conftest import SLEEP
from tests.helpers.calls import tool
from tests.helpers.processes import alive, wait_for_descendant
from tests.helpers.recorders import CallEventRecorder

pytestmark = pytest.mark.timeout(60)


class Script:
    """A ``FunctionModel`` function: the first request gets ``calls``, any
    later one ends the run; records the tool definitions it was given and
    the tool returns it received."""

    def __init__(self, *calls: ToolCallPart) -> None:
        self.calls = calls
        self.tools: list[ToolDefinition] = []
        self.returns: list[ToolReturnPart] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.tools = list(info.function_tools)
        if len(messages) == 1:
            return ModelResponse(parts=list(self.calls))
        last = messages[-1]
        assert isinstance(last, ModelRequest)
        self.returns = [p for p in last.parts if isinstance(p, ToolReturnPart)]
        return ModelResponse(parts=[TextPart("done")])


def _run(registry: ToolRegistry, script: Script, *names: str) -> Any:
    agent = Agent(FunctionModel(script), toolsets=[toolset(registry, *names)])
    return asyncio.run(agent.run("go")).output


def test_the_model_is_given_the_registrys_names_descriptions_schemas_and_strictness(registry: ToolRegistry) -> None:
    script = Script()
    _run(registry, script)
    by_name = {t.name: t for t in script.tools}
    assert list(by_name) == ["add", "fs_boom", "slow"]  # a dotted name goes as its alias
    schemas = {s["name"]: s for s in registry.schemas()}
    assert by_name["add"].description == schemas["add"]["description"]
    assert by_name["add"].parameters_json_schema == schemas["add"]["parameters"]
    assert by_name["add"].strict is True
    assert by_name["fs_boom"].strict is None  # left to pydantic-ai's provider default
    assert by_name["fs_boom"].parameters_json_schema == schemas["fs.boom"]["parameters"]
    assert by_name["fs_boom"].sequential  # no is_concurrency_safe: it runs alone
    assert not by_name["slow"].sequential


def test_the_listing_follows_the_registry_and_a_wrong_name_is_refused(registry: ToolRegistry) -> None:
    script = Script()
    unregister = registry.register(tool("later", lambda _a, _r: "ok"))
    agent = Agent(FunctionModel(script), toolsets=[toolset(registry, "later", "slow")])
    only_later = Script()
    alone = Agent(FunctionModel(only_later), toolsets=[toolset(registry, "later")])
    asyncio.run(agent.run("go"))
    assert [t.name for t in script.tools] == ["slow", "later"]  # registration order
    unregister()
    asyncio.run(agent.run("go"))
    assert [t.name for t in script.tools] == ["slow"]  # asked again at each step
    asyncio.run(alone.run("go"))
    assert only_later.tools == []  # every named tool gone: none listed, not all
    with pytest.raises(ValueError, match="'nope'"):
        toolset(registry, "nope")
    mine = toolset(registry, id="mine")
    assert isinstance(mine, RegistryToolset) and mine.id == "mine"


def test_a_tool_another_toolset_listed_is_refused(registry: ToolRegistry) -> None:
    ours, other = toolset(registry), FunctionToolset([lambda: "x"])

    async def main() -> None:
        context = RunContext(deps=None, model=TestModel(), usage=RunUsage())
        (foreign,) = (await other.get_tools(context)).values()
        with pytest.raises(TypeError, match="not listed by this toolset"):
            await ours.call_tool(foreign.tool_def.name, {}, context, foreign)

    asyncio.run(main())


def test_a_run_calls_the_tool_through_the_registry_and_the_model_gets_its_output(
    registry: ToolRegistry, recorder: CallEventRecorder
) -> None:
    script = Script(ToolCallPart("add", {"a": 2, "b": 3}, tool_call_id="call-7"))

    assert _run(registry, script) == "done"

    (returned,) = script.returns
    assert returned.tool_call_id == "call-7" and returned.content == "5" and returned.outcome == "success"
    assert recorder.counts("pre") == {"call-7": 1}  # pydantic-ai's call id, through the pipeline
    (published,) = recorder.results["call-7"]
    assert not published.is_error and published.value == 5


def test_a_failure_reaches_the_model_as_a_failed_tool_return_with_the_error_text(registry: ToolRegistry) -> None:
    script = Script(
        ToolCallPart("fs_boom", {"path": "/etc/x"}, tool_call_id="c1"),
        ToolCallPart("add", {"a": 1, "b": "two"}, tool_call_id="c2"),
    )

    _run(registry, script)

    boom, invalid = sorted(script.returns, key=lambda p: p.tool_call_id)
    assert boom.outcome == "failed" and boom.content == "Error: no such file: /etc/x"
    assert invalid.outcome == "failed"
    assert isinstance(invalid.content, str) and invalid.content.startswith("Error: invalid arguments")


def test_cancelling_agent_runs_task_aborts_and_joins_the_body_before_the_cancellation_returns(
    registry: ToolRegistry, recorder: CallEventRecorder
) -> None:
    agent = Agent(FunctionModel(Script(ToolCallPart("slow", {}, tool_call_id="slow-1"))), toolsets=[toolset(registry)])

    async def main() -> tuple[list[int], dict[str, int]]:
        run = asyncio.create_task(agent.run("sleep"))
        pids = await asyncio.to_thread(partial(wait_for_descendant, matching_only=True), os.getpid(), SLEEP, 10)
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
        return pids, dict(recorder.counts("body_end"))  # what had ended when the caller saw the cancel

    pids, ended = asyncio.run(main())

    assert ended == {"slow-1": 1}  # joined before the cancellation reached the caller
    assert recorder.counts("aborted by TaskCancelled") == {"slow-1": 1}  # the body saw the task's cancellation
    (published,) = recorder.results["slow-1"]
    assert published.code == TOOL_ABORTED and published.body_invoked
    assert registry.statistics().bodies_in_flight == 0
    assert alive(pids) == []
