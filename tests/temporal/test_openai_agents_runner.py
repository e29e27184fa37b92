"""``dshtools.temporal.activity_as_tool`` under openai-agents' own Temporal
runner (temporalio's OpenAI Agents plugin, ``temporalio-openai-agents``)
against the real dev server, with the plugin's offline test model: the
agent's tool call runs through dshtools' activity and the model is
answered with the tool's text; a cancelled turn ends while the body still
runs (the runner drops its cancelled tool tasks) unless the workflow awaits
``join_tool_calls()``, and then only after the body was joined.

``temporalio-openai-agents`` pins an openai-agents release older than the
test extra's, so this module runs in its own ``.ci/run`` stage and venv
(docs/temporal.md#openai-agents-runner); elsewhere it is skipped."""

from __future__ import annotations

import concurrent.futures
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import pytest

from dshtools import ToolRegistry

pytest.importorskip(
    "temporalio.openai_agents",
    reason="temporalio-openai-agents pins an older openai-agents than the test extra; .ci/run runs this in its own stage",
)
from temporalio.client import Client
from temporalio.openai_agents.testing import AgentEnvironment, ResponseBuilders, TestModel
from temporalio.worker import Worker

from dshtools import temporal as dtemporal
from tests.temporal.agents_workflows import AgentTurn
from tests.temporal.test_execute_tool import finished_before_the_cancelled_end
from tests.temporal.tools import Bodies

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

ADD = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}


@asynccontextmanager
async def agent_worker(temporal_target: str, registry: ToolRegistry, model: TestModel) -> AsyncIterator[Client]:
    """A worker with the OpenAI Agents plugin (its model activity answered
    by ``model``) hosting ``AgentTurn`` and dshtools' activity; yields the
    plugged client, whose ``task_queue`` is ``client.queue``."""
    async with AgentEnvironment(model=model) as env:
        client = env.applied_on_client(await Client.connect(temporal_target))
        with concurrent.futures.ThreadPoolExecutor(8) as executor:
            async with Worker(
                client,
                task_queue=QUEUE,
                workflows=[AgentTurn],
                activities=[dtemporal.tool_activity(registry)],
                activity_executor=executor,
                graceful_shutdown_timeout=timedelta(seconds=5),
            ):
                yield client


QUEUE = f"agents-{uuid.uuid4()}"


async def test_the_runners_tool_call_runs_through_the_activity_and_the_model_reads_its_text(
    temporal_target: str, tools: ToolRegistry
) -> None:
    model = TestModel.returning_responses(
        [
            ResponseBuilders.tool_call('{"a": 40, "b": 2}', "add", call_id="call_7"),
            ResponseBuilders.tool_call('{"a": 40, "b": "two"}', "add", call_id="call_8"),
            ResponseBuilders.output_message("done"),
        ]
    )
    async with agent_worker(temporal_target, tools, model) as client:
        result: dict[str, Any] = await client.execute_workflow(
            AgentTurn.run,
            {"name": "add", "parameters": ADD, "input": "add 40 and 2"},
            id=f"wf-{uuid.uuid4()}",
            task_queue=QUEUE,
        )
    assert result["final"] == "done"
    assert result["tool_outputs"][0] == "42"
    assert result["tool_outputs"][1].startswith("Error: ") and "b" in result["tool_outputs"][1]


@pytest.mark.parametrize(("body", "join"), [("held", False), ("wait_for_abort", True)])
async def test_a_cancelled_turn_ends_before_the_tool_body_unless_the_workflow_joins_the_tool_calls(
    temporal_target: str, tools: ToolRegistry, bodies: Bodies, body: str, join: bool
) -> None:
    """openai-agents' runner alone ends the cancelled turn while a ``held``
    body still runs; with ``join_tool_calls()`` the turn ends only after a
    body that honours its abort has returned."""
    model = TestModel.returning_responses([ResponseBuilders.tool_call("{}", body, call_id="call_9")])
    request = {"name": body, "parameters": {"type": "object"}, "input": "wait", "join": join}
    async with agent_worker(temporal_target, tools, model) as client:
        finished = await finished_before_the_cancelled_end(client, AgentTurn.run, request, queue=QUEUE, bodies=bodies)
    assert finished is join
    assert bodies.runs == ["call_9"]
    if join:
        assert bodies.reasons == [dtemporal.WORKFLOW_CANCELLED]
