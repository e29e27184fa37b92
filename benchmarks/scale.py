"""Calls in flight at scale (docs/contract.md#scale, docs/scale.md): many
calls whose bodies wait on their signals, against bare threads waiting on
one ``threading.Event``, measured in the same run.

* ``bare``: ``n`` threads blocked in one ``Event.wait()``; ``set()`` until
  every thread has been joined (``drain``), each thread's resume time
  after ``set()`` (p50/p99) and the RSS each waiting thread adds.
* ``callers``: ``n`` caller threads, each in ``registry.execute`` with one
  shared controller's signal, each body blocked in ``run.signal.wait()``:
  the time until every body waits (``reach``), the process CPU used while
  they all wait (``idle_cpu``: CPU seconds per wall second, over
  ``_IDLE`` seconds), the RSS per call, then one ``abort()`` until every
  caller thread returned ``ABORTED`` and was joined (``drain``) and each
  caller's return time after ``abort()`` (p50/p99).
* ``batch``: one ``execute_batch`` of ``n`` such calls (``max_parallel=n``),
  the same figures, ``drain`` until ``execute_batch`` returned.

Ratios are against ``bare`` with the same ``n``, measured in the same run
right before each side (the load of a shared machine drifts within a run).
The full run uses 10 000 calls for ``drain`` and 1 000 caller threads for
the shared-abort p99 (docs/contract.md#scale names both), each figure the
median of 3 rounds by ratio; ``--quick`` uses 1 000 and 200, one round.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable
from typing import Any

import psutil

from dshtools import TOOL_ABORTED, AbortController, ToolDefinition, ToolExecutionInput, ToolRegistry, execute_batch

from ._timing import median, percentile

__all__ = ["bare_threads", "batch_calls", "caller_calls", "run"]

_IDLE = 1.0  # seconds of CPU sampling while everything waits
_SETTLE = 0.3  # seconds for the last starters to park before a measurement
_POLL = 0.01


def _rss() -> int:
    return int(psutil.Process().memory_info().rss)


def _idle_cpu() -> float:
    """CPU seconds per wall second the process uses over ``_IDLE`` seconds."""
    proc = psutil.Process()
    c0, t0 = proc.cpu_times(), time.monotonic()
    time.sleep(_IDLE)
    c1 = proc.cpu_times()
    return float(c1.user + c1.system - c0.user - c0.system) / (time.monotonic() - t0)


def _until(cond: Callable[[], bool], limit: float) -> bool:
    deadline = time.monotonic() + limit
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(_POLL)
    return True


def _stats(t0: float, stamps: list[float]) -> dict[str, float]:
    lat = [s - t0 for s in stamps]
    return {"p50_ms": median(lat) * 1e3, "p99_ms": percentile(lat, 99) * 1e3}


def bare_threads(n: int) -> dict[str, float]:
    """``n`` threads on one ``threading.Event``: drain, wake p50/p99, RSS per thread."""
    gc.collect()
    rss0 = _rss()
    event = threading.Event()
    stamps = [0.0] * n

    def waiter(i: int) -> None:
        event.wait()
        stamps[i] = time.perf_counter()

    threads = [threading.Thread(target=waiter, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    _until(lambda: len(event._cond._waiters) == n, 120)  # type: ignore[attr-defined]  # every thread parked
    rss = (_rss() - rss0) / n
    t0 = time.perf_counter()
    event.set()
    for t in threads:
        t.join()
    drain = time.perf_counter() - t0
    return {"n": n, "drain_s": drain, "rss_kb": rss / 1024, **_stats(t0, stamps)}


def _registry(n: int) -> tuple[ToolRegistry, list[int]]:
    started = [0]
    lock = threading.Lock()

    def body(args: Any, run: Any) -> str:
        with lock:
            started[0] += 1
        run.signal.wait()
        return "stopped"

    registry = ToolRegistry(max_workers=n)
    registry.register(
        ToolDefinition(
            "block", "waits for its signal", {"type": "object"}, body, is_concurrency_safe=lambda _args: True
        )
    )
    return registry, started


def _waiting(n: int, started: list[int], t_start: float, rss0: int, extra: dict[str, Any]) -> None:
    if not _until(lambda: started[0] == n, 600):
        raise RuntimeError(f"only {started[0]} of {n} bodies started")
    extra["reach_s"] = time.perf_counter() - t_start
    time.sleep(_SETTLE)
    extra["rss_kb"] = (_rss() - rss0) / n / 1024
    extra["idle_cpu"] = _idle_cpu()


def caller_calls(n: int) -> dict[str, Any]:
    """``n`` caller threads in ``execute`` on one controller's signal."""
    gc.collect()
    rss0 = _rss()
    registry, started = _registry(n)
    controller = AbortController()
    stamps = [0.0] * n
    codes: list[str | None] = [None] * n

    def caller(i: int) -> None:
        result = registry.execute(ToolExecutionInput(f"c{i}", "block", {}, controller.signal))
        stamps[i] = time.perf_counter()
        codes[i] = result.code

    figures: dict[str, Any] = {"n": n}
    threads = [threading.Thread(target=caller, args=(i,), daemon=True) for i in range(n)]
    t_start = time.perf_counter()
    try:
        for t in threads:
            t.start()
        _waiting(n, started, t_start, rss0, figures)
        t0 = time.perf_counter()
        controller.abort()
        figures["abort_returned_s"] = time.perf_counter() - t0
        for t in threads:
            t.join()
        figures["drain_s"] = time.perf_counter() - t0
        figures.update(_stats(t0, stamps))
        figures["aborted"] = codes.count(TOOL_ABORTED)
    finally:
        controller.abort()
        registry.close()
    return figures


def batch_calls(n: int) -> dict[str, Any]:
    """One ``execute_batch`` of ``n`` calls (``max_parallel=n``)."""
    gc.collect()
    rss0 = _rss()
    registry, started = _registry(n)
    controller = AbortController()
    calls = [ToolExecutionInput(f"b{i}", "block", {}, AbortController().signal) for i in range(n)]
    out: list[Any] = []
    figures: dict[str, Any] = {"n": n}
    thread = threading.Thread(
        target=lambda: out.append(execute_batch(registry, calls, signal=controller.signal, max_parallel=n)),
        daemon=True,
    )
    t_start = time.perf_counter()
    try:
        thread.start()
        _waiting(n, started, t_start, rss0, figures)
        t0 = time.perf_counter()
        controller.abort()
        thread.join()
        figures["drain_s"] = time.perf_counter() - t0
        figures["aborted"] = sum(r.code == TOOL_ABORTED for r in out[0]) if out else 0
    finally:
        controller.abort()
        registry.close()
    return figures


def _median_round(
    rounds: int, n: int, side: Callable[[int], dict[str, Any]], figure: str
) -> tuple[dict[str, float], dict[str, Any], list[float]]:
    """``rounds`` rounds of (``bare_threads(n)``, then ``side(n)``): the
    round whose ratio of ``figure`` is the median, as (bare, side), and
    every round's ratio in order. Each side runs right after its own
    baseline: the load of a shared machine drifts within a run by more
    than the margins measured, and one round's ratio by several times."""
    rounds_seen = []
    for _ in range(rounds):
        bare, measured = bare_threads(n), side(n)
        rounds_seen.append((measured[figure] / bare[figure], bare, measured))
    ratios = [ratio for ratio, _, _ in rounds_seen]
    _, bare, measured = sorted(rounds_seen, key=lambda item: item[0])[len(rounds_seen) // 2]
    return bare, measured, ratios


def run(*, quick: bool = False) -> dict[str, Any]:
    many, shared, rounds = (1_000, 200, 1) if quick else (10_000, 1_000, 3)
    bare_many, batch, batch_ratios = _median_round(rounds, many, batch_calls, "drain_s")
    bare_callers, callers, callers_ratios = _median_round(rounds, many, caller_calls, "drain_s")
    bare_shared, shared_callers, shared_ratios = _median_round(rounds, shared, caller_calls, "p99_ms")
    return {
        "bare": bare_many,
        "batch": batch,
        "bare_callers": bare_callers,
        "callers": callers,
        "bare_shared": bare_shared,
        "shared": shared_callers,
        "rounds": rounds,
        "shared_rounds": rounds,
        "batch_drain_ratios": batch_ratios,
        "callers_drain_ratios": callers_ratios,
        "shared_p99_ratios": shared_ratios,
        "batch_drain_ratio": batch["drain_s"] / bare_many["drain_s"],
        "callers_drain_ratio": callers["drain_s"] / bare_callers["drain_s"],
        "shared_p99_ratio": shared_callers["p99_ms"] / bare_shared["p99_ms"],
        "shared_p50_ratio": shared_callers["p50_ms"] / bare_shared["p50_ms"],
    }


if __name__ == "__main__":
    import json
    import sys

    sizes = [int(a) for a in sys.argv[1:]] or [1_000]
    for size in sizes:
        print(json.dumps({"bare": bare_threads(size), "callers": caller_calls(size)}, indent=1), flush=True)
