"""The caller's ``contextvars`` context reaches the body on every way of
calling (docs/contract.md#a22): ``execute``, ``execute_batch``,
``aexecute``, ``execute_batch_async`` (asyncio and trio), ``resume`` and
``aresume``, and a nested ``run.dispatch``. Each body and each
pre-execute hook sees the value the caller set; what a body sets is seen
neither by the caller nor by a sibling call (field cases B44, B63)."""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from typing import Any, Literal

import pytest

from dshtools import (
    APPROVAL_PENDING,
    AbortController,
    ApprovalRequest,
    ApprovalTickets,
    Ask,
    PreExecuteDecision,
    ToolExecution,
    ToolExecutionResult,
    ToolRegistry,
    ToolRunContext,
    execute_batch,
    execute_batch_async,
)
from tests.helpers.calls import call, tool, value_of

pytestmark = pytest.mark.timeout(60)

VAR: contextvars.ContextVar[str] = contextvars.ContextVar("VAR", default="default")


class Seen:
    """A body (and a pre-execute hook) that records the value of ``VAR`` it
    sees, then sets its own; ``parallel`` makes the tool parallel-safe."""

    def __init__(self) -> None:
        self.bodies: list[str] = []
        self.hooks: list[str] = []
        self.lock = threading.Lock()

    def body(self, args: Any, run: ToolRunContext) -> object:
        with self.lock:
            self.bodies.append(VAR.get())
        VAR.set(f"set by {run.call_id}")
        return VAR.get()

    def hook(self, execution: ToolExecution, next: Callable[[], PreExecuteDecision]) -> PreExecuteDecision:
        with self.lock:
            self.hooks.append(VAR.get())
        return next()

    def register(self, registry: ToolRegistry) -> None:
        registry.register(tool("exclusive", self.body))
        registry.register(tool("parallel", self.body, is_concurrency_safe=lambda args: True))
        registry.add_pre_execute(self.hook)


def three_calls() -> list[Any]:
    """B63's batch: an exclusive call between two parallel-safe ones."""
    signal = AbortController().signal
    return [
        call("parallel", call_id="p0", signal=signal),
        call("exclusive", call_id="x1", signal=signal),
        call("parallel", call_id="p2", signal=signal),
    ]


def check_batch(seen: Seen, results: list[ToolExecutionResult]) -> None:
    assert [value_of(r) for r in results] == ["set by p0", "set by x1", "set by p2"]
    assert seen.bodies == ["the caller's"] * 3
    assert seen.hooks == ["the caller's"] * 3
    assert VAR.get() == "the caller's"  # nothing a body set leaked back


def test_execute(registry: ToolRegistry) -> None:
    seen = Seen()
    seen.register(registry)
    VAR.set("the caller's")
    assert value_of(registry.execute(call("exclusive"))) == "set by c1"
    assert value_of(registry.execute(call("parallel", call_id="c2"))) == "set by c2"
    assert seen.bodies == seen.hooks == ["the caller's"] * 2
    assert VAR.get() == "the caller's"


def test_execute_batch(registry: ToolRegistry) -> None:
    seen = Seen()
    seen.register(registry)
    VAR.set("the caller's")
    check_batch(seen, execute_batch(registry, three_calls(), signal=AbortController().signal))


@pytest.mark.anyio
async def test_execute_batch_async_b63(registry: ToolRegistry) -> None:
    """B63: the bodies of an awaited batch, exclusive and parallel-safe,
    see the awaiting task's value (they saw the default)."""
    seen = Seen()
    seen.register(registry)
    VAR.set("the caller's")
    check_batch(seen, await execute_batch_async(registry, three_calls(), signal=AbortController().signal))


@pytest.mark.anyio
async def test_aexecute(registry: ToolRegistry) -> None:
    seen = Seen()
    seen.register(registry)
    VAR.set("the caller's")
    assert value_of(await registry.aexecute(call("exclusive"))) == "set by c1"
    assert value_of(await registry.aexecute(call("parallel", call_id="c2"))) == "set by c2"
    assert seen.bodies == seen.hooks == ["the caller's"] * 2
    assert VAR.get() == "the caller's"


def test_a_nested_dispatch_sees_its_parents_context(registry: ToolRegistry) -> None:
    seen = Seen()
    seen.register(registry)

    def parent(args: Any, run: ToolRunContext) -> object:
        VAR.set("the parent's")
        return value_of(run.dispatch("exclusive", {}))

    registry.register(tool("parent", parent))
    VAR.set("the caller's")
    assert value_of(registry.execute(call("parent"))) == "set by c1:1"
    assert seen.bodies == ["the parent's"]
    assert VAR.get() == "the caller's"


def deferring(seen: Seen) -> ToolRegistry:
    def defer(_request: ApprovalRequest) -> Literal["deferred"]:
        return "deferred"

    registry = ToolRegistry(approver=defer, tickets=ApprovalTickets(ttl=60.0))
    registry.register(tool("act", seen.body))
    registry.add_pre_execute(lambda execution, next: Ask("go ahead?"))
    return registry


def ticket_of(registry: ToolRegistry) -> object:
    VAR.set("the asker's")
    result = registry.execute(call("act"))
    assert result.code == APPROVAL_PENDING
    return result.meta["ticket"]


def test_resume() -> None:
    seen = Seen()
    with deferring(seen) as registry:
        ticket = ticket_of(registry)
        VAR.set("the resumer's")
        result = registry.resume(ticket, "allowed-once", signal=AbortController().signal)
    assert value_of(result) == "set by c1"
    assert seen.bodies == ["the resumer's"]
    assert VAR.get() == "the resumer's"


@pytest.mark.anyio
async def test_aresume() -> None:
    seen = Seen()
    with deferring(seen) as registry:
        ticket = ticket_of(registry)
        VAR.set("the resumer's")
        result = await registry.aresume(ticket, "allowed-once", signal=AbortController().signal)
    assert value_of(result) == "set by c1"
    assert seen.bodies == ["the resumer's"]
    assert VAR.get() == "the resumer's"
