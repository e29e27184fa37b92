"""Stress: 2 000 calls with aborts at random moments from another thread.

Pins the registry's global guarantees under real interleavings: exactly one
result per call (to the caller and to observers), ``ABORTED_BEFORE_DISPATCH``
only when the body never ran, ``ABORTED`` only when it did, no body still
running when ``execute`` returned, and no listener left on any caller signal
(docs/contract.md#registry, "Never: ...")."""

from __future__ import annotations

from typing import Any

import pytest

from dshtools import TOOL_ABORTED, TOOL_ABORTED_BEFORE_DISPATCH, ToolError, ToolRegistry
from tests.helpers.calls import tool
from tests.registry.random_aborts import Tracker, check_every_call, drive, plan_calls


@pytest.mark.timeout(120)
def test_two_thousand_calls_with_random_aborts() -> None:
    seen = Tracker()

    def outcome(args: Any, run: Any, attempt: int) -> object:
        mode = args["mode"]
        if mode == "raise-tool-error":
            raise ToolError("tool failed", "E_TOOL")
        if mode == "throw-if-aborted":
            run.signal.throw_if_aborted()
        return {"mode": mode}

    def pre(e: Any, nxt: Any) -> Any:
        if e.arguments["slow_admission"]:
            e.signal.wait(0.001)
        return nxt()

    plans = plan_calls(
        1234,
        2000,
        mode=["return", "raise-tool-error", "throw-if-aborted"],
        wait=[0.0, 0.0005, 0.002],
        slow_admission=lambda rng: rng.random() < 0.3,
        abort=["none", "before", "random", "random"],
        delay=lambda rng: rng.uniform(0, 0.004),
    )

    with ToolRegistry(max_workers=4) as registry:
        registry.add_pre_execute(pre)
        registry.add_result_observer(seen.observer)
        registry.register(tool("work", seen.waiting_body(outcome)))
        arguments = ("mode", "wait", "slow_admission")
        results, controllers = drive(registry, plans, arguments, seen)

    codes = check_every_call(plans, results, controllers, seen)
    for plan in plans:
        if plan["abort"] == "none":
            assert results[plan["id"]].code in (None, "E_TOOL")
    # The interleavings really were exercised.
    assert codes[TOOL_ABORTED] > 20 and codes[TOOL_ABORTED_BEFORE_DISPATCH] > 20 and codes[None] > 20
