"""``ConcurrencyLimit`` and ``RateLimit`` under ``execute_batch``
(docs/policies.md#concurrencylimit-and-ratelimit, docs/contract.md#policies): with
parallel-safe calls the batch overlaps dispatches, and the limits still
hold: never more than ``n`` bodies of a key at once, a call aborted while
it waits for a slot is ``ABORTED_BEFORE_DISPATCH`` and its body never
runs, and the results come back in model order whatever order the slots
were granted in.

Interleavings are forced with barriers and events: bodies that must run
together meet at a barrier (a limit that let too few through breaks it, one
that let too many through shows in the count), and aborts happen once the
limit's queue holds the waiters.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable
from typing import Any

import pytest

from dshtools import (
    TOOL_ABORTED_BEFORE_DISPATCH,
    AbortController,
    ConcurrencyLimit,
    RateLimit,
    ToolDispatchExecution,
    ToolExecutionInput,
    ToolRegistry,
    ToolRunContext,
    execute_batch,
)
from dshtools._registry.limits import _Queue
from tests.helpers.calls import call, tool, value_of
from tests.helpers.waiting import run_in_thread, wait_until

pytestmark = pytest.mark.timeout(30)


def parallel_safe(_args: Any) -> bool:
    return True


def waiting(limit: _Queue, key: Hashable = None) -> int:
    gate = limit._gates.get(key)
    return 0 if gate is None else len(gate.waiters)


class Counted:
    """A body that counts the bodies inside it at once (under a lock) and
    records each call it runs; ``meet`` makes the bodies wait for each
    other at a barrier before they leave."""

    def __init__(self, meet: threading.Barrier | None = None) -> None:
        self.lock = threading.Lock()
        self.active = 0
        self.most = 0
        self.ran: list[int] = []
        self.meet = meet

    def __call__(self, args: Any, _run: ToolRunContext) -> int:
        with self.lock:
            self.active += 1
            self.most = max(self.most, self.active)
            self.ran.append(args["i"])
        try:
            if self.meet is not None:
                self.meet.wait()
        finally:
            with self.lock:
                self.active -= 1
        return int(args["i"])


def batch_of(name: str, n: int, signals: dict[int, AbortController] | None = None) -> list[ToolExecutionInput]:
    signals = signals or {}
    return [
        call(name, {"i": i}, signal=signals[i].signal if i in signals else None, call_id=f"{name}-{i}")
        for i in range(n)
    ]


def test_a_concurrency_limit_of_two_runs_at_most_two_bodies_of_a_batch_and_keeps_model_order(
    registry: ToolRegistry,
) -> None:
    # Pairs must meet to leave: a limit of one would break the barrier, a
    # limit of three would show in `most`.
    body = Counted(threading.Barrier(2, timeout=10))
    registry.register(tool("t", body, is_concurrency_safe=parallel_safe))
    registry.add_around_dispatch(ConcurrencyLimit(2))
    results = execute_batch(registry, batch_of("t", 12), signal=AbortController().signal, max_parallel=10)
    assert [value_of(r) for r in results] == list(range(12))
    assert body.most == 2
    assert sorted(body.ran) == list(range(12))


def test_a_keyed_limit_lets_different_tools_of_a_batch_run_together_but_not_two_of_one(
    registry: ToolRegistry,
) -> None:
    # One body of each tool at a time, and the two must meet: a shared
    # limit of one would never let them.
    meet = threading.Barrier(2, timeout=10)
    a, b = Counted(meet), Counted(meet)
    registry.register(tool("a", a, is_concurrency_safe=parallel_safe))
    registry.register(tool("b", b, is_concurrency_safe=parallel_safe))

    def by_tool(execution: ToolDispatchExecution) -> Hashable:
        return execution.name

    registry.add_around_dispatch(ConcurrencyLimit(1, key=by_tool))
    calls = [c for pair in zip(batch_of("a", 4), batch_of("b", 4), strict=True) for c in pair]
    results = execute_batch(registry, calls, signal=AbortController().signal, max_parallel=8)
    assert [value_of(r) for r in results] == [i for i in range(4) for _ in "ab"]
    assert (a.most, b.most) == (1, 1)


def test_a_call_of_a_batch_aborted_while_waiting_for_a_slot_is_aborted_before_dispatch_and_never_runs(
    registry: ToolRegistry,
) -> None:
    release = threading.Event()
    held = threading.Event()
    ran: list[int] = []

    def body(args: Any, _run: ToolRunContext) -> int:
        ran.append(args["i"])
        if args["i"] == 0:
            held.set()
            assert release.wait(10)
        return int(args["i"])

    registry.register(tool("t", body, is_concurrency_safe=parallel_safe))
    limit = ConcurrencyLimit(1)
    registry.add_around_dispatch(limit)
    doomed = {1: AbortController(), 3: AbortController()}
    thread, box = run_in_thread(
        lambda: execute_batch(registry, batch_of("t", 5, doomed), signal=AbortController().signal, max_parallel=5)
    )
    assert held.wait(10)
    wait_until(lambda: waiting(limit) == 4)  # calls 1-4 queue behind call 0
    doomed[1].abort("gave up on 1")
    doomed[3].abort("gave up on 3")
    wait_until(lambda: waiting(limit) == 2)  # their places are given up at once
    release.set()
    thread.join(10)
    results = box[0]
    assert len(results) == 5
    for i in (1, 3):
        assert results[i].code == TOOL_ABORTED_BEFORE_DISPATCH
        assert results[i].body_invoked is False
        assert results[i].meta["reason"] == f"gave up on {i}"
    assert [value_of(results[i]) for i in (0, 2, 4)] == [0, 2, 4]
    # The aborted two never ran (the others' order of arrival at the limit
    # is the workers', not the model's).
    assert sorted(ran) == [0, 2, 4] and ran[0] == 0


def test_aborting_the_batch_while_calls_wait_for_a_rate_slot_dispatches_none_of_them(registry: ToolRegistry) -> None:
    body = Counted()
    registry.register(tool("t", body, is_concurrency_safe=parallel_safe))
    limit = RateLimit("2/hour")
    registry.add_around_dispatch(limit)
    batch = AbortController()
    thread, box = run_in_thread(lambda: execute_batch(registry, batch_of("t", 5), signal=batch.signal, max_parallel=5))
    # Two fit the window and ran; three wait for it to move. (Admitted is not
    # yet dispatched: an abort between the two refuses the call, which a
    # free-threaded build shows.)
    wait_until(lambda: waiting(limit) == 3 and len(body.ran) == 2)
    batch.abort("the turn is over")
    thread.join(10)
    results = box[0]
    assert len(results) == 5
    admitted = [i for i, r in enumerate(results) if not r.is_error]
    refused = [i for i, r in enumerate(results) if r.is_error]
    assert len(admitted) == 2 and sorted(body.ran) == admitted
    assert [value_of(results[i]) for i in admitted] == admitted  # each result in its call's place
    for i in refused:
        assert results[i].code == TOOL_ABORTED_BEFORE_DISPATCH
        assert results[i].body_invoked is False
    assert waiting(limit) == 0
