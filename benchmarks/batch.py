"""Target 6: batch throughput of ``execute_batch``.

64 parallel-safe calls whose body sleeps 20 ms cooperatively
(``dshtools.io.sleep``), ``max_parallel=16``: the ideal is 4 waves of
20 ms = 80 ms. Reported: the median wall time, its ratio to the ideal
(target <= 1.2), and its ratio to a baseline measured in the same run:
``ThreadPoolExecutor(16).map`` over 64 plain ``time.sleep(0.02)`` calls.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from dshtools import AbortController, ToolDefinition, ToolExecutionInput, ToolRegistry, execute_batch
from dshtools.io import sleep

from ._timing import median

__all__ = ["run"]

CALLS = 64
PARALLEL = 16
SECONDS = 0.020
IDEAL = CALLS / PARALLEL * SECONDS


def _body(args: Any, run: Any) -> str:
    sleep(SECONDS, run.signal)
    return "ok"


def run(*, quick: bool = False) -> dict[str, Any]:
    rounds = 3 if quick else 7
    registry = ToolRegistry(max_workers=PARALLEL)
    registry.register(
        ToolDefinition("nap", "sleeps 20 ms", {"type": "object"}, _body, is_concurrency_safe=lambda args: True)
    )
    pool = ThreadPoolExecutor(max_workers=PARALLEL, thread_name_prefix="bench-batch")
    controller = AbortController()
    batch_times: list[float] = []
    pool_times: list[float] = []
    errors = 0
    try:
        calls = [ToolExecutionInput(f"c{i}", "nap", {}, controller.signal) for i in range(CALLS)]
        execute_batch(registry, calls, signal=controller.signal, max_parallel=PARALLEL)  # warm-up
        list(pool.map(time.sleep, [SECONDS] * CALLS))
        for _ in range(rounds):
            t0 = time.perf_counter()
            results = execute_batch(registry, calls, signal=controller.signal, max_parallel=PARALLEL)
            batch_times.append(time.perf_counter() - t0)
            errors += sum(r.is_error for r in results)
            t0 = time.perf_counter()
            list(pool.map(time.sleep, [SECONDS] * CALLS))
            pool_times.append(time.perf_counter() - t0)
    finally:
        pool.shutdown(wait=True)
        registry.close()
    wall = median(batch_times)
    base = median(pool_times)
    return {
        "calls": CALLS,
        "max_parallel": PARALLEL,
        "body_ms": SECONDS * 1000,
        "ideal_ms": IDEAL * 1000,
        "wall_ms": wall * 1000,
        "ratio_to_ideal": wall / IDEAL,
        "executor_map_ms": base * 1000,
        "ratio_to_executor_map": wall / base,
        "errors": errors,
        "targets": {"ratio_to_ideal": 1.2},
    }
