"""``await registry.aresume(ticket, decision, *, arguments=None, signal)``
under asyncio and trio (docs/policies.md#deferred-approval,
docs/contract.md#async, docs/async.md).

What must hold: the awaited resume returns what ``resume`` returns (the
body run on a worker, never on the loop; a rejection's ``DENIED``); a
refused ticket raises ``TicketError`` in the awaiting task; misuse raises
before anything runs, the ticket untouched; a task cancelled while the
resumed body runs aborts it (``TaskCancelled``), joins it and re-raises,
the ticket used up and the ``ABORTED`` result published once; a resume
cancelled while queued never runs its body.
"""

from __future__ import annotations

import threading
from typing import Any

import anyio
import pytest

from dshtools import (
    APPROVAL_PENDING,
    DENIED,
    TOOL_ABORTED,
    TOOL_ABORTED_BEFORE_DISPATCH,
    AbortController,
    ApprovalRequest,
    ApprovalTickets,
    Ask,
    TaskCancelled,
    TicketError,
    ToolExecution,
    ToolExecutionResult,
    ToolRegistry,
    ToolRunContext,
)
from tests.helpers.calls import call, tool, value_of

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


def defer(_request: ApprovalRequest) -> str:
    return "deferred"


def ask(execution: ToolExecution, next: Any) -> Any:
    return Ask("go ahead?") if execution.name != "hold" else next()


class Body:
    """The deferred tool's body: records its thread, and blocks until its
    signal aborts when ``block`` is set."""

    def __init__(self, *, block: bool = False) -> None:
        self.block = block
        self.threads: list[threading.Thread] = []
        self.started = threading.Event()
        self.returned = threading.Event()
        self.reason: object = None

    def __call__(self, args: Any, run: ToolRunContext) -> object:
        self.threads.append(threading.current_thread())
        self.started.set()
        try:
            if self.block and run.signal.wait(30):
                self.reason = run.signal.reason
            return f"did {args.get('what', '')}"
        finally:
            self.returned.set()


def deferring(body: Body, **options: Any) -> ToolRegistry:
    registry = ToolRegistry(approver=defer, tickets=ApprovalTickets(ttl=60.0), **options)  # type: ignore[arg-type]
    registry.register(tool("act", body))
    registry.add_pre_execute(ask)
    return registry


def ticket_of(registry: ToolRegistry, call_id: str = "c1") -> object:
    result = registry.execute(call("act", {"what": "it"}, call_id=call_id))
    assert result.code == APPROVAL_PENDING
    return result.meta["ticket"]


def published_by(registry: ToolRegistry) -> list[ToolExecutionResult]:
    seen: list[ToolExecutionResult] = []
    registry.add_result_observer(lambda _e, r: seen.append(r))
    return seen


async def test_allowed_once_runs_the_call_on_a_worker() -> None:
    body = Body()
    with deferring(body) as registry:
        ticket = ticket_of(registry)
        result = await registry.aresume(
            ticket, "allowed-once", arguments={"what": "that"}, signal=AbortController().signal
        )
    assert value_of(result) == "did that"
    assert result.body_invoked is True
    assert len(body.threads) == 1 and body.threads[0] is not threading.current_thread()


async def test_rejected_is_denied_and_the_body_never_runs() -> None:
    body = Body()
    with deferring(body) as registry:
        result = await registry.aresume(ticket_of(registry), "rejected", signal=AbortController().signal)
    assert result.code == DENIED
    assert body.threads == []


async def test_a_refused_ticket_raises_in_the_awaiting_task() -> None:
    with deferring(Body()) as registry:
        ticket = ticket_of(registry)
        assert value_of(await registry.aresume(ticket, "allowed-once", signal=AbortController().signal)) == "did it"
        with pytest.raises(TicketError):
            await registry.aresume(ticket, "allowed-once", signal=AbortController().signal)
        with pytest.raises(TicketError):
            await registry.aresume({"not": "a ticket"}, "allowed-once", signal=AbortController().signal)


async def test_misuse_raises_before_anything_runs() -> None:
    body = Body()
    with deferring(body) as registry:
        ticket = ticket_of(registry)
        signal = AbortController().signal
        with pytest.raises(ValueError, match="decision"):
            await registry.aresume(ticket, "cancelled", signal=signal)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="arguments"):
            await registry.aresume(ticket, "rejected", arguments={}, signal=signal)
        with pytest.raises(TypeError, match="AbortSignal"):
            await registry.aresume(ticket, "allowed-once", signal="nope")  # type: ignore[arg-type]
        # The ticket was not used up by any of them.
        assert value_of(await registry.aresume(ticket, "allowed-once", signal=signal)) == "did it"
        registry.close()
        with pytest.raises(RuntimeError, match="closed"):
            await registry.aresume(ticket, "allowed-once", signal=signal)


async def test_cancelled_while_the_resumed_body_runs_joins_and_reraises() -> None:
    body = Body(block=True)
    with deferring(body) as registry:
        ticket = ticket_of(registry)
        published = published_by(registry)
        controller = AbortController()
        outcome: list[bool] = []
        cancelled = anyio.get_cancelled_exc_class()

        async def caller() -> None:
            try:
                await registry.aresume(ticket, "allowed-once", signal=controller.signal)
            except cancelled:
                outcome.append(body.returned.is_set())
                raise

        async with anyio.create_task_group() as tg:
            tg.start_soon(caller)
            assert await anyio.to_thread.run_sync(body.started.wait, 5)
            tg.cancel_scope.cancel()
        assert outcome == [True]
        assert isinstance(body.reason, TaskCancelled)
        assert [r.code for r in published] == [TOOL_ABORTED]
        assert not controller.signal.aborted and controller.signal.listener_count == 0
        with pytest.raises(TicketError):  # used up by the cancelled resume
            await registry.aresume(ticket, "allowed-once", signal=AbortController().signal)


async def test_cancelled_while_queued_never_runs_the_body() -> None:
    """``max_workers=1`` held by another call: the resume waits in the
    queue, and its cancellation settles it without the body."""
    body = Body()
    holder = Body(block=True)
    with deferring(body, max_workers=1) as registry:
        registry.register(tool("hold", holder))
        ticket = ticket_of(registry)
        published = published_by(registry)
        release = AbortController()
        async with anyio.create_task_group() as tg:
            tg.start_soon(registry.aexecute, call("hold", signal=release.signal, call_id="h"))
            assert await anyio.to_thread.run_sync(holder.started.wait, 5)
            with anyio.CancelScope() as scope:
                scope.cancel()
                await registry.aresume(ticket, "allowed-once", signal=AbortController().signal)
            assert scope.cancelled_caught
            assert not holder.returned.is_set()  # settled while the worker is still held
            release.abort("done holding")
        assert body.threads == []
        codes = {r.code for r in published}
        assert codes == {TOOL_ABORTED_BEFORE_DISPATCH, TOOL_ABORTED}
