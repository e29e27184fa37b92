"""Stress: the policies of docs/contract.md#policies together under aborts at
random moments.

The registry's global guarantees hold with ``RetryPolicy``,
``ConcurrencyLimit``, ``RateLimit``, ``TimeoutPolicy`` and ``ResultLimit``
installed (docs/contract.md#registry, "Never: ...", and docs/contract.md#policies): exactly one result
per call, ``ABORTED_BEFORE_DISPATCH`` only when no attempt's body ran,
``ABORTED`` only when one did, no body running when ``execute`` returned,
never more bodies at once than the concurrency limit, no listener left on
a caller's signal and no limit state left behind. Some calls are aborted
by their own body's start, so that an abort while a body runs is exercised
however long a loaded machine keeps the others queued behind the limit (one
queued there past its timeout times out before its body starts)."""

from __future__ import annotations

from typing import Any

import pytest

from dshtools import (
    TOOL_ABORTED,
    TOOL_ABORTED_BEFORE_DISPATCH,
    TOOL_ERROR,
    TOOL_TIMEOUT,
    ConcurrencyLimit,
    RateLimit,
    ResultLimit,
    RetryPolicy,
    TimeoutPolicy,
    ToolError,
    ToolRegistry,
    ToolSuccess,
)
from tests.helpers.calls import tool
from tests.registry.random_aborts import Tracker, check_every_call, drive, plan_calls

LIMIT = 2


@pytest.mark.timeout(120)
def test_six_hundred_calls_through_every_policy_with_random_aborts() -> None:
    seen = Tracker()

    def outcome(args: Any, run: Any, attempt: int) -> object:
        if args["mode"] == "fail" and attempt == 1:
            raise ToolError("transient", "E_TRANSIENT")
        if args["mode"] == "throw-if-aborted":
            run.signal.throw_if_aborted()
        return "x" * 40

    plans = plan_calls(
        2516,
        600,
        mode=["return", "fail", "throw-if-aborted"],
        wait=[0.0, 0.0005, 0.002, 0.02],
        abort=["none", "before", "random", "random", "running"],
        delay=lambda rng: rng.uniform(0, 0.006),
    )
    concurrency = ConcurrencyLimit(LIMIT)
    rate = RateLimit("100000/second")

    with ToolRegistry(max_workers=4) as registry:
        registry.register(tool("work", seen.waiting_body(outcome), idempotent=True, timeout=0.01))
        registry.add_post_execute(ResultLimit(max_chars=10))
        registry.add_around_dispatch(RetryPolicy(attempts=2, backoff=0.0005, retry_on={TOOL_ERROR, "E_TRANSIENT"}))
        registry.add_around_dispatch(concurrency)
        registry.add_around_dispatch(rate)
        registry.add_around_dispatch(TimeoutPolicy())
        registry.add_result_observer(seen.observer)

        results, controllers = drive(registry, plans, ("mode", "wait"), seen)

    codes = check_every_call(plans, results, controllers, seen)
    assert seen.most <= LIMIT
    aborted_while_running = 0
    for plan in plans:
        cid = plan["id"]
        result = results[cid]
        assert result.body_invoked is (seen.invoked[cid] > 0), cid
        if plan["abort"] == "running" and seen.invoked[cid] == 0:
            # Queued behind the limit past its timeout (a loaded machine):
            # it timed out before its body could start and abort it.
            assert result.code == TOOL_TIMEOUT, (cid, result)
        elif plan["abort"] == "running":
            # Aborted by its body's start: the body's own ToolError stands,
            # anything else is ABORTED, and no attempt follows the abort.
            assert result.code == ("E_TRANSIENT" if plan["mode"] == "fail" else TOOL_ABORTED), (cid, result)
            assert seen.invoked[cid] == 1, cid
            aborted_while_running += 1
        if plan["abort"] == "none":
            assert result.code in (None, TOOL_TIMEOUT, "E_TRANSIENT"), (cid, result)
        if isinstance(result, ToolSuccess):
            assert result.value == "x" * 40 and "truncated" in result.meta
    assert codes[TOOL_ABORTED] > 10 and codes[TOOL_ABORTED_BEFORE_DISPATCH] > 10 and codes[None] > 10, codes
    assert aborted_while_running > 0, "no call was aborted while its body ran"
    assert concurrency._gates == {}
    assert not rate._gates or all(not g.waiters for g in rate._gates.values())
