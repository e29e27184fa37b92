"""The workflow of the openai-agents Temporal runner test: one agent turn,
run by openai-agents' ``Runner`` under temporalio's OpenAI Agents plugin,
whose one tool is ``dshtools.temporal.activity_as_tool``. Imported by the
workflow sandbox, so it imports dshtools the documented way (passed
through)."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from agents import Agent, Runner

    from dshtools import ToolDefinition
    from dshtools import temporal as dtemporal


@workflow.defn
class AgentTurn:
    """``request``: ``name`` and ``parameters`` of the registry's tool the
    agent is given, the user's ``input``, and ``join``: whether a cancelled
    turn awaits ``join_tool_calls()`` before it re-raises (the recipe of
    docs/temporal.md#agent-runners). Returns the agent's final output and
    the outputs its tool calls were answered with."""

    @workflow.run
    async def run(self, request: dict[str, Any]) -> dict[str, Any]:
        definition = ToolDefinition(request["name"], "A registry tool.", request["parameters"], lambda args, run: None)
        tool = dtemporal.activity_as_tool(definition, start_to_close_timeout=timedelta(seconds=60))
        agent = Agent(name="assistant", instructions="Use the tool.", tools=[tool])
        try:
            result = await Runner.run(agent, request["input"])
        except asyncio.CancelledError:
            if request.get("join"):
                await dtemporal.join_tool_calls()
            raise
        outputs = [item.output for item in result.new_items if item.type == "tool_call_output_item"]
        return {"final": str(result.final_output), "tool_outputs": outputs}
