"""Stress: 2 000 calls with aborts at random moments from another thread.

Pins the registry's global guarantees under real interleavings: exactly one
result per call (to the caller and to observers), ``ABORTED_BEFORE_DISPATCH``
only when the body never ran, ``ABORTED`` only when it did, no body still
running when ``execute`` returned, and no listener left on any caller signal
(docs/contract.md §3, "Never: ...")."""

from __future__ import annotations

import random
from typing import Any

import pytest

from dshtools import (
    TOOL_ABORTED,
    TOOL_ABORTED_BEFORE_DISPATCH,
    ToolError,
    ToolRegistry,
)
from tests.helpers import tool
from tests.registry.random_aborts import Tracker, check_every_call, drive

CALLS = 2000
CALLER_THREADS = 8


@pytest.mark.timeout(120)
def test_two_thousand_calls_with_random_aborts() -> None:
    rng = random.Random(1234)
    seen = Tracker()

    def body(args: Any, run: Any) -> Any:
        with seen.body(run.call_id):
            mode = args["mode"]
            run.signal.wait(args["wait"])
            if mode == "raise-tool-error":
                raise ToolError("tool failed", "E_TOOL")
            if mode == "throw-if-aborted":
                run.signal.throw_if_aborted()
            return {"mode": mode}

    def pre(e: Any, nxt: Any) -> Any:
        if e.arguments["slow_admission"]:
            e.signal.wait(0.001)
        return nxt()

    plans: list[dict[str, Any]] = []
    for i in range(CALLS):
        plans.append(
            {
                "id": f"call-{i}",
                "mode": rng.choice(["return", "raise-tool-error", "throw-if-aborted"]),
                "wait": rng.choice([0.0, 0.0005, 0.002]),
                "slow_admission": rng.random() < 0.3,
                "abort": rng.choice(["none", "before", "random", "random"]),
                "delay": rng.uniform(0, 0.004),
            }
        )

    with ToolRegistry(max_workers=4) as registry:
        registry.add_pre_execute(pre)
        registry.add_result_observer(seen.observer)
        registry.register(tool("work", body))

        results, controllers = drive(
            registry,
            plans,
            lambda plan: {"mode": plan["mode"], "wait": plan["wait"], "slow_admission": plan["slow_admission"]},
            seen,
            threads=CALLER_THREADS,
        )

    codes = check_every_call(plans, results, controllers, seen)
    assert len(results) == CALLS
    for plan in plans:
        if plan["abort"] == "none":
            assert results[plan["id"]].code in (None, "E_TOOL")
    # The interleavings really were exercised.
    assert codes[TOOL_ABORTED] > 20 and codes[TOOL_ABORTED_BEFORE_DISPATCH] > 20 and codes[None] > 20
