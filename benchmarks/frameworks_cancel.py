"""What cancelling an agent framework's run does to a sync tool that runs
``sleep 30`` in a child process: each framework's own sync tool against the
same tool from a ``ToolRegistry`` through ``dshtools.agents``,
``dshtools.pydantic_ai`` and ``dshtools.langchain`` (docs/frameworks.md
cites the numbers).

    python -m benchmarks.frameworks_cancel [--runs N] [--wait S] [--markdown]

Per framework, side and run, on a fresh agent (no model, no network: each
framework's own test model drives it):

* openai-agents: ``Runner.run`` in a task, the ``ScriptedModel`` calling the
  tool; the task is cancelled (``task.cancel()``). Then the same with a
  streamed run stopped by the run-level ``RunResultStreaming.cancel()``.
* pydantic-ai: ``Agent.run`` in a task, a ``FunctionModel`` calling the
  tool; the task is cancelled. Then a run left to time out: pydantic-ai's
  own tool ``timeout=1.0`` for its tool, the registry's ``TimeoutPolicy``
  with ``timeout=1.0`` for ours; there "returned" counts from the start of
  the ``sleep`` and "gone" from the run's end.
* LangChain: a ``GenericFakeChatModel`` answers with the tool call, and
  ``tool.ainvoke(tool_call)`` runs in a task; the task is cancelled.

Measured, from the cancel: seconds until the cancelled run returned to its
caller, and seconds until the ``sleep`` process was gone (``None``: still
running after ``--wait`` seconds). Everything this script starts is killed
before it exits (the frameworks' own threads then return). Not part of
``python -m benchmarks``: it takes about ``runs * 4 * wait`` seconds for the
frameworks' own tools, which never stop on their own.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import psutil

from dshtools import TimeoutPolicy, ToolDefinition, ToolRegistry
from dshtools.io import run_process

from ._timing import median_of_all

SLEEP = ["sleep", "30"]
TOOL_TIMEOUT_S = 1.0
"""The tool timeout of the timeout scenario (seconds)."""
PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False, "required": []}


def _theirs_body() -> str:
    subprocess.run(SLEEP, check=False)
    return "slept"


def _ours_registry() -> ToolRegistry:
    registry = ToolRegistry()

    def slow(args: Any, run: Any) -> str:
        run_process(SLEEP, run.signal)
        return "slept"

    registry.register(ToolDefinition("slow", "Run sleep 30 in a child process.", PARAMETERS, slow))
    registry.register(
        ToolDefinition("slow_timed", "Run sleep 30 in a child process.", PARAMETERS, slow, timeout=TOOL_TIMEOUT_S)
    )
    registry.add_around_dispatch(TimeoutPolicy())
    return registry


def _sleeps() -> list[psutil.Process]:
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.cmdline() == SLEEP:
                found.append(child)
        except psutil.Error:
            pass
    return found


def _alive(proc: psutil.Process) -> bool:
    try:
        return bool(proc.status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


def _kill_sleeps() -> None:
    """Kill every ``sleep`` left and wait until each is gone, so that the
    next run cannot take one of them for its own."""
    left = _sleeps()
    for proc in left:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    deadline = time.monotonic() + 10
    while any(_alive(proc) for proc in left):
        if time.monotonic() > deadline:
            raise RuntimeError("a killed sleep is still running")
        time.sleep(0.002)


# ------------------------------------------------------------------ one run

Start = Callable[[], Awaitable[Callable[[], Awaitable[None]]]]
"""Starts a run; returns the coroutine function that cancels it the
framework's way (or, for a timeout, lets it time out) and waits until the
run returned to its caller."""


async def _measure(start: Start, wait: float, *, timeout: bool = False) -> dict[str, Any]:
    stop = await start()
    deadline = time.monotonic() + 30
    while not (found := _sleeps()):
        if time.monotonic() > deadline:
            raise RuntimeError("the tool's sleep never started")
        await asyncio.sleep(0.005)
    (child,) = found
    t0 = time.monotonic()
    await stop()
    returned = time.monotonic() - t0
    if timeout:  # nothing was cancelled: count from the run's end
        t0 = time.monotonic()
    gone: float | None = None
    while time.monotonic() - t0 < wait:
        if not _alive(child):
            gone = time.monotonic() - t0
            break
        await asyncio.sleep(0.002)
    _kill_sleeps()
    return {"returned_s": returned, "sleep_gone_s": gone}


def _task_stopper(task: asyncio.Task[Any]) -> Callable[[], Awaitable[None]]:
    async def stop() -> None:
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass

    return stop


# ------------------------------------------------------------------ openai-agents


def _agents_tool(side: str, registry: ToolRegistry) -> Any:
    from agents import function_tool

    if side == "ours":
        from dshtools.agents import function_tools

        return function_tools(registry, "slow")[0]

    @function_tool
    def slow() -> str:
        """Run sleep 30 in a child process."""
        return _theirs_body()

    return slow


def _agents_run(side: str, registry: ToolRegistry, *, streamed: bool) -> Start:
    from agents import Agent, RunConfig, Runner
    from agents.testing import ScriptedModel, assistant_message, function_call

    async def start() -> Callable[[], Awaitable[None]]:
        model = ScriptedModel([[function_call("slow", {}, call_id="c1")], [assistant_message("done")]])
        agent = Agent(name="bench", model=model, tools=[_agents_tool(side, registry)])
        config = RunConfig(tracing_disabled=True)
        if not streamed:
            return _task_stopper(asyncio.create_task(Runner.run(agent, "go", run_config=config)))
        result = Runner.run_streamed(agent, "go", run_config=config)

        async def drain() -> None:
            async for _event in result.stream_events():
                pass

        drained = asyncio.create_task(drain())

        async def stop() -> None:
            result.cancel()
            await drained

        return stop

    return start


# ------------------------------------------------------------------ pydantic-ai


def _pydantic_ai_run(side: str, registry: ToolRegistry, *, timeout: bool = False) -> Start:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    # ours times out by the registry's TimeoutPolicy, theirs by pydantic-ai's own tool timeout
    name = "slow_timed" if timeout and side == "ours" else "slow"

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart(name, {}, tool_call_id="c1")])
        return ModelResponse(parts=[TextPart("done")])

    async def start() -> Callable[[], Awaitable[None]]:
        if side == "ours":
            from dshtools.pydantic_ai import toolset

            agent: Agent[None, str] = Agent(FunctionModel(model), toolsets=[toolset(registry, name)])
        else:
            agent = Agent(FunctionModel(model))

            @agent.tool_plain(timeout=TOOL_TIMEOUT_S if timeout else None)
            def slow() -> str:
                """Run sleep 30 in a child process."""
                return _theirs_body()

        run = asyncio.create_task(agent.run("go"))
        if not timeout:
            return _task_stopper(run)

        async def finished() -> None:
            await run

        return finished

    return start


# ------------------------------------------------------------------ LangChain


def _langchain_run(side: str, registry: ToolRegistry) -> Start:
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.tools import BaseTool, StructuredTool

    async def start() -> Callable[[], Awaitable[None]]:
        tool: BaseTool
        if side == "ours":
            from dshtools.langchain import tools

            tool = tools(registry, "slow")[0]
        else:
            tool = StructuredTool.from_function(func=_theirs_body, name="slow", description="Run sleep 30.")
        chat = GenericFakeChatModel(
            messages=iter([AIMessage("", tool_calls=[{"name": "slow", "args": {}, "id": "c1", "type": "tool_call"}])])
        )

        async def run() -> None:
            message = await chat.ainvoke("go")
            assert isinstance(message, AIMessage)
            await tool.ainvoke(message.tool_calls[0])

        return _task_stopper(asyncio.create_task(run()))

    return start


# ------------------------------------------------------------------ the table

SCENARIOS: dict[str, Callable[[str, ToolRegistry], Start]] = {
    "openai-agents, task.cancel()": lambda side, r: _agents_run(side, r, streamed=False),
    "openai-agents, streamed run's cancel()": lambda side, r: _agents_run(side, r, streamed=True),
    "pydantic-ai, task.cancel()": _pydantic_ai_run,
    "pydantic-ai, a 1 s tool timeout (counted from the run's end)": lambda side, r: _pydantic_ai_run(
        side, r, timeout=True
    ),
    "LangChain, task.cancel() of ainvoke": _langchain_run,
}


async def measure(runs: int, wait: float) -> dict[str, Any]:
    out: dict[str, Any] = {}
    registry = _ours_registry()
    try:
        for label, scenario in SCENARIOS.items():
            row: dict[str, Any] = {}
            for side in ("theirs", "ours"):
                timeout = "timeout" in label
                results = [await _measure(scenario(side, registry), wait, timeout=timeout) for _ in range(runs)]
                row[side] = {
                    "runs": results,
                    "sleep_gone_median_s": median_of_all([r["sleep_gone_s"] for r in results]),
                    "returned_median_s": statistics.median(r["returned_s"] for r in results),
                    "still_running": sum(r["sleep_gone_s"] is None for r in results),
                }
            out[label] = row
        # Every body of ours was joined: nothing of the registry is left.
        deadline = time.monotonic() + wait
        while registry.statistics().bodies_in_flight and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        out["ours_bodies_in_flight_after"] = registry.statistics().bodies_in_flight
    finally:
        _kill_sleeps()
        registry.close()
    return out


def _seconds(side: dict[str, Any], key: str, wait: float) -> str:
    values = [r[key] for r in side["runs"]]
    if any(v is None for v in values):
        return f"> {wait:g} s, still running ({sum(v is None for v in values)} of {len(values)})"
    low, high = min(values), max(values)
    return f"{statistics.median(values):.3f} s ({low:.3f}–{high:.3f})"


def markdown(results: dict[str, Any], wait: float) -> str:
    """The table of docs/frameworks.md: per scenario and side, the median
    seconds (range) from the cancel until the run returned and until the
    ``sleep`` was gone."""
    lines = [
        "| framework, how the run is cancelled | own sync tool: run returned | own sync tool: `sleep` gone | "
        "dshtools adapter: run returned | dshtools adapter: `sleep` gone |",
        "| --- | --- | --- | --- | --- |",
    ]
    for label in SCENARIOS:
        theirs, ours = results[label]["theirs"], results[label]["ours"]
        lines.append(
            f"| {label} | {_seconds(theirs, 'returned_s', wait)} | {_seconds(theirs, 'sleep_gone_s', wait)} | "
            f"{_seconds(ours, 'returned_s', wait)} | {_seconds(ours, 'sleep_gone_s', wait)} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.frameworks_cancel", description=(__doc__ or "").splitlines()[0]
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--wait", type=float, default=10.0, help="seconds to wait for a stop (default 10)")
    parser.add_argument("--markdown", action="store_true", help="print the docs table instead of JSON")
    ns = parser.parse_args(argv)
    results = asyncio.run(measure(ns.runs, ns.wait))
    if ns.markdown:
        sys.stdout.write(markdown(results, ns.wait) + "\n")
    else:
        json.dump(results, sys.stdout, indent=2)
        sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
