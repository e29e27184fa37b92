"""Target 4: cancellation latency, p50/p99 over repeated tries.

* ``wait``: a thread blocked in ``signal.wait()`` resumes after
  ``abort()`` in another thread (time from just before ``abort()`` to the
  first instruction after ``wait()`` returns).
* ``execute``: a body blocked in ``run.signal.wait()``; the caller's
  ``abort()`` until ``registry.execute`` has returned ``ABORTED`` in the
  calling thread (the body has returned, the registry joined it and built
  the result).

Before each abort the benchmark waits until the waiter has entered
``wait()`` (it is in the signal's list of waiters) and then yields for 0.5 ms so the
waiter is parked in the kernel: that measures a real wake-up, not the
already-aborted fast path. The yield is part of the measurement set-up,
never of a figure.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from dshtools import TOOL_ABORTED, AbortController, AbortSignal, ToolDefinition, ToolExecutionInput, ToolRegistry

from ._timing import median, percentile

__all__ = ["run"]

_PARK = 0.0005


def _wait_until_parked(signal: AbortSignal) -> None:
    # ``wait()`` joins the signal's list of waiters before blocking.
    while not getattr(signal, "_waiters", None):
        time.sleep(0)
    time.sleep(_PARK)


def wait_latency(tries: int) -> list[float]:
    """Seconds from ``abort()`` to the waiter resuming, one per try."""
    samples: list[float] = []
    jobs: list[AbortSignal | None] = []
    ready = threading.Semaphore(0)
    resumed_at: list[float] = [0.0]
    done = threading.Semaphore(0)

    def waiter() -> None:
        while True:
            ready.acquire()
            signal = jobs[-1]
            if signal is None:
                return
            signal.wait()
            resumed_at[0] = time.perf_counter()
            done.release()

    thread = threading.Thread(target=waiter, name="bench-waiter", daemon=True)
    thread.start()
    try:
        for _ in range(tries):
            controller = AbortController()
            jobs.append(controller.signal)
            ready.release()
            _wait_until_parked(controller.signal)
            t0 = time.perf_counter()
            controller.abort()
            done.acquire()
            samples.append(resumed_at[0] - t0)
    finally:
        jobs.append(None)
        ready.release()
        thread.join()
    return samples


def execute_latency(tries: int) -> tuple[list[float], int]:
    """Seconds from ``abort()`` to ``execute`` returning, and how many of
    the results were ``ABORTED``."""
    started = threading.Semaphore(0)
    current: list[AbortSignal] = []

    def body(args: Any, run: Any) -> str:
        current.append(run.signal)
        started.release()
        run.signal.wait()
        return "stopped"

    registry = ToolRegistry(max_workers=2)
    registry.register(ToolDefinition("block", "waits for its signal", {"type": "object"}, body))
    caller = ThreadPoolExecutor(max_workers=1, thread_name_prefix="bench-caller")
    samples: list[float] = []
    aborted = 0

    def call(signal: AbortSignal) -> tuple[float, str | None]:
        result = registry.execute(ToolExecutionInput("lat", "block", {}, signal))
        return time.perf_counter(), result.code

    try:
        for _ in range(tries):
            controller = AbortController()
            future = caller.submit(call, controller.signal)
            started.acquire()
            _wait_until_parked(current.pop())
            t0 = time.perf_counter()
            controller.abort()
            returned_at, code = future.result()
            samples.append(returned_at - t0)
            aborted += code == TOOL_ABORTED
    finally:
        caller.shutdown(wait=True)
        registry.close()
    return samples, aborted


def run(*, quick: bool = False) -> dict[str, Any]:
    tries = 50 if quick else 500
    wait = wait_latency(tries)
    execute, aborted = execute_latency(tries)
    ms = 1000.0
    return {
        "tries": tries,
        "wait_p50_ms": median(wait) * ms,
        "wait_p99_ms": percentile(wait, 99) * ms,
        "execute_p50_ms": median(execute) * ms,
        "execute_p99_ms": percentile(execute, 99) * ms,
        "execute_aborted_results": aborted,
        "targets": {"wait_p99_ms": 1.0, "execute_p99_ms": 2.0},
    }
