"""The hot path's reference-cycle guarantee on the paths that run a body
inline (a nested ``run.dispatch``, a batch's dispatch on its own pool):
every object of a finished call is freed by reference counting, none waits
for the cyclic garbage collector."""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

import pytest

from dshtools import (
    AbortController,
    AbortSignal,
    ToolDefinition,
    ToolExecutionInput,
    ToolRegistry,
    ToolRunContext,
    execute_batch,
)

OBJECT: dict[str, Any] = {"type": "object"}


def _child(_args: Any, _run: ToolRunContext) -> object:
    return {"n": 1}


def _parent(_args: Any, run: ToolRunContext) -> object:
    result = run.dispatch("child", {})
    assert not result.is_error
    return None


def _nested(registry: ToolRegistry, signal: AbortSignal, i: int) -> None:
    assert not registry.execute(ToolExecutionInput(f"p{i}", "parent", {}, signal)).is_error


def _batch(registry: ToolRegistry, signal: AbortSignal, i: int) -> None:
    calls = [ToolExecutionInput(f"b{i}-{j}", "child", {}, signal) for j in range(3)]
    assert not any(r.is_error for r in execute_batch(registry, calls, signal=signal))


def _garbage_of(run: Callable[[int], None]) -> tuple[int, list[str]]:
    """What the cyclic collector finds after ``run(i)`` for ten ``i`` (with
    ``gc.DEBUG_SAVEALL``, which keeps whatever it finds unreachable)."""
    run(-1)  # warm-up: pools and caches made once
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        for i in range(10):
            run(i)
        found = gc.collect()
        return found, sorted({type(o).__name__ for o in gc.garbage})
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if was_enabled:
            gc.enable()


@pytest.mark.timeout(30)
@pytest.mark.parametrize("path", [_nested, _batch], ids=["nested-dispatch", "batch-on-own-pool"])
def test_a_call_whose_body_ran_inline_leaves_no_reference_cycle(
    path: Callable[[ToolRegistry, AbortSignal, int], None],
) -> None:
    signal = AbortController().signal
    with ToolRegistry(max_workers=2) as registry:
        registry.register(ToolDefinition("child", "child", OBJECT, _child, is_concurrency_safe=lambda _a: True))
        registry.register(ToolDefinition("parent", "parent", OBJECT, _parent))
        found, kinds = _garbage_of(lambda i: path(registry, signal, i))
    assert found == 0, kinds
