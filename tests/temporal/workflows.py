"""The workflows the Temporal tests run: each calls one tool through
``dshtools.temporal.execute_tool`` and returns its result. Imported by the
workflow sandbox, so it imports dshtools the documented way (passed
through)."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from agents.tool_context import ToolContext

    from dshtools import ToolDefinition
    from dshtools import temporal as dtemporal


@workflow.defn
class CallTool:
    """``request``: ``name``, ``arguments``, ``call_id``, and optionally
    ``timeout`` (seconds per attempt), ``attempts``, ``task_queue``,
    ``heartbeat`` (seconds), ``cancellation`` (a cancellation type's name)."""

    @workflow.run
    async def run(self, request: dict[str, Any]) -> dict[str, Any]:
        cancellation = workflow.ActivityCancellationType[request.get("cancellation", "WAIT_CANCELLATION_COMPLETED")]
        result = await dtemporal.execute_tool(
            request["name"],
            request["arguments"],
            call_id=request["call_id"],
            start_to_close_timeout=timedelta(seconds=request.get("timeout", 60)),
            heartbeat_timeout=timedelta(seconds=request.get("heartbeat", 2)),
            retry_policy=RetryPolicy(maximum_attempts=request.get("attempts", 1)),
            task_queue=request.get("task_queue"),
            cancellation_type=cancellation,
        )
        return dict(result)


@workflow.defn
class RunnerLikeToolTask:
    """Runs one tool call in a task of its own and, when the workflow is
    cancelled, cancels that task and re-raises without awaiting it, as
    openai-agents' ``Runner.run`` does with its tool tasks; with
    ``request["join"]`` it awaits ``join_tool_calls()`` before re-raising.
    ``request``: ``name``, ``call_id``, ``join``."""

    @workflow.run
    async def run(self, request: dict[str, Any]) -> dict[str, Any]:
        call = dtemporal.execute_tool(
            request["name"], {}, call_id=request["call_id"], start_to_close_timeout=timedelta(seconds=60)
        )
        task = asyncio.create_task(call)
        try:
            await workflow.wait({task})
        except asyncio.CancelledError:
            task.cancel()
            if request["join"]:
                await dtemporal.join_tool_calls()
            raise
        return dict(task.result())


@workflow.defn
class AgentToolCall:
    """Invokes the openai-agents ``FunctionTool`` of ``dshtools.temporal.
    activity_as_tool`` as the agent runner would, with the model's call id
    and argument text; returns what the model would be sent."""

    @workflow.run
    async def run(self, request: dict[str, Any]) -> str:
        definition = ToolDefinition(request["name"], "a tool", request["parameters"], lambda args, run: None)
        tool = dtemporal.activity_as_tool(definition, start_to_close_timeout=timedelta(seconds=30))
        context = ToolContext(
            None, tool_name=request["name"], tool_call_id=request["call_id"], tool_arguments=request["arguments"]
        )
        text: str = await tool.on_invoke_tool(context, request["arguments"])
        return text


@workflow.defn
class PeerAppend:
    """Temporal's own tool path on the side-effecting activity: the
    integration's ``TRY_CANCEL`` and no heartbeat (its default), so a dead
    worker's attempt ends at ``request["timeout"]`` seconds and is retried
    as ``request["attempts"]`` allows."""

    @workflow.run
    async def run(self, request: dict[str, Any]) -> dict[str, Any]:
        try:
            value = await workflow.execute_activity(
                "peer.append",
                request,
                start_to_close_timeout=timedelta(seconds=request.get("timeout", 60)),
                retry_policy=RetryPolicy(maximum_attempts=request.get("attempts", 1)),
                cancellation_type=workflow.ActivityCancellationType.TRY_CANCEL,
                task_queue=request.get("task_queue"),
            )
            return {"value": value}
        except Exception as exc:  # what the workflow learns: the error and nothing else
            return {"error": type(exc).__name__, "cause": type(getattr(exc, "cause", None)).__name__}
