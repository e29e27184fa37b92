"""Throughput of ``ToolRegistry.execute`` from 1, 2 and 4 caller threads.

Each caller thread makes ``number`` calls of a no-op tool, each thread with
its own controller and call (as agents in one server each have their own);
the figure is calls per second over all threads, from the barrier that
starts them together to the last one's end. Baseline: the same number of
threads each making ``number`` bare ``executor.submit(f).result()`` round
trips on the same executor, in the same round. The ratio of a round is
bare throughput / execute throughput (above 1: ``execute`` is slower); the
reported ratio is the median over rounds of each round's ratio (rounds are
adjacent in time, so each compares like with like on a loaded host).

On a GIL build the callers take turns on one interpreter lock; on a
free-threaded build (3.13t) they run in parallel, and this is where
anything on the call path that all calls share shows up: the target there
is a ratio of at most 1.5 from 2 and 4 threads (docs/benchmarks.md).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from dshtools import AbortController, ToolExecutionInput

from ._timing import median
from .dispatch import make_registry

__all__ = ["CALLERS", "run", "together"]

CALLERS = (1, 2, 4)


def _noop() -> None:
    return None


def together(threads: int, make_loop: Callable[[int], Callable[[], None]]) -> float:
    """Seconds that ``threads`` threads take, each running one loop that
    ``make_loop(i)`` made (untimed) for thread ``i``, started together at a
    barrier: from the barrier to the last thread's end."""
    loops = [make_loop(i) for i in range(threads)]
    barrier = threading.Barrier(threads + 1)
    finished = [False] * threads

    def worker(i: int) -> None:
        barrier.wait()
        loops[i]()
        finished[i] = True

    workers = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(threads)]
    for t in workers:
        t.start()
    barrier.wait()
    start = time.perf_counter()
    for t in workers:
        t.join()
    elapsed = time.perf_counter() - start
    assert all(finished), "a caller thread failed"
    return elapsed


def run(*, quick: bool = False) -> dict[str, Any]:
    number, rounds = (300, 3) if quick else (2000, 7)
    executor = ThreadPoolExecutor(max_workers=max(CALLERS), thread_name_prefix="bench")
    registry = make_registry(executor, hooks=False)

    def bare(_i: int) -> Callable[[], None]:
        submit = executor.submit
        r = range(number)

        def go() -> None:
            for _ in r:
                submit(_noop).result()

        return go

    def execute(i: int) -> Callable[[], None]:
        call = ToolExecutionInput(f"call-{i}", "noop", {}, AbortController().signal)
        run_call: Callable[[ToolExecutionInput], Any] = registry.execute
        r = range(number)

        def go() -> None:
            for _ in r:
                run_call(call)

        return go

    figures: dict[str, Any] = {}
    try:
        assert not registry.execute(ToolExecutionInput("warm", "noop", {}, AbortController().signal)).is_error
        for threads in CALLERS:
            together(threads, bare)  # warm-up: the pool's threads exist
            together(threads, execute)
            bare_s: list[float] = []
            execute_s: list[float] = []
            for _ in range(rounds):
                bare_s.append(together(threads, bare))
                execute_s.append(together(threads, execute))
            total = threads * number
            figures[f"{threads}"] = {
                "bare_calls_per_s": total / median(bare_s),
                "execute_calls_per_s": total / median(execute_s),
                "ratio": median([e / b for e, b in zip(execute_s, bare_s, strict=True)]),
            }
    finally:
        registry.close()
        executor.shutdown(wait=True)
    gil = getattr(sys, "_is_gil_enabled", lambda: True)()
    return {
        "callers": figures,
        "gil": gil,
        "targets": {"ratio_2_and_4_free_threaded": 1.5},
        "rounds": rounds,
        "calls_per_thread": number,
    }
