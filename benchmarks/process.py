"""Process backend figures (docs/contract.md#backends), keys under ``process.*``.

* ``per_call_us`` / ``bare_pool_us`` / ``ratio``: a no-op tool through
  ``ToolRegistry(backend=ProcessBackend(1))`` against a bare
  ``ProcessPoolExecutor(1, mp_context=spawn).submit(f).result()`` (the
  same start method: a fresh interpreter per worker), both with a warm
  worker, rounds interleaved; the ratio is the median of per-round ratios.
  Target ≤ 1.5.
* ``signal_p50_ms`` / ``signal_p99_ms``: from ``controller.abort()`` in
  the caller to the body's ``run.signal.wait()`` returning in the worker
  (both read ``time.monotonic()``, one clock for every process on Linux).
  Target p99 ≤ 10 ms.
* ``kill_p50_s`` / ``kill_p99_s``: from the abort to ``execute``
  returning, for a body in ``time.sleep(60)`` under ``kill_after=0.2``.
  Target p99 ≤ 0.25 s.
* ``process_growth`` / ``thread_growth`` / ``fd_growth``: child
  processes, threads and open file descriptors of this process after
  1 000 calls minus before (after a warm-up). Target 0.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
import statistics
import tempfile
import threading
import time
from typing import Any

from dshtools import AbortController, ProcessBackend, ToolDefinition, ToolExecutionInput, ToolRegistry

from ._timing import percentile

__all__ = ["run"]

_OBJECT = {"type": "object"}


def _noop(args: Any, run: Any) -> None:
    return None


def _bare(_: object = None) -> None:
    return None


def _signal_body(args: Any, run: Any) -> None:
    run.signal.wait()
    seen = time.monotonic()
    with open(args["path"], "w", encoding="ascii") as f:
        f.write(repr(seen))


def _stubborn_body(args: Any, run: Any) -> None:
    with open(args["path"], "w", encoding="ascii") as f:
        f.write("started")
    time.sleep(60)


def _children() -> int:
    try:
        import psutil
    except ImportError:  # pragma: no cover - psutil is in the test extra
        return -1
    return len(psutil.Process().children(recursive=True))


def _fds() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:  # pragma: no cover - not Linux
        return -1


def overhead(number: int, rounds: int) -> dict[str, Any]:
    backend = ProcessBackend(1, kill_after=None)
    registry = ToolRegistry(backend=backend)
    registry.register(ToolDefinition("noop", "does nothing", _OBJECT, _noop))
    call = ToolExecutionInput("bench", "noop", {}, AbortController().signal)
    pool = concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
    try:
        pool.submit(_bare).result()
        for _ in range(20):
            registry.execute(call)
        ours: list[float] = []
        bare: list[float] = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            for _ in range(number):
                pool.submit(_bare).result()
            bare.append((time.perf_counter() - t0) / number)
            t0 = time.perf_counter()
            for _ in range(number):
                registry.execute(call)
            ours.append((time.perf_counter() - t0) / number)
    finally:
        registry.close()
        backend.close()
        pool.shutdown()
    ratios = [o / b for o, b in zip(ours, bare, strict=True)]
    return {
        "per_call_us": statistics.median(ours) * 1e6,
        "bare_pool_us": statistics.median(bare) * 1e6,
        "ratio": statistics.median(ratios),
    }


def _started(path: str, limit: float = 10.0) -> bool:
    end = time.monotonic() + limit
    while time.monotonic() < end:
        if os.path.exists(path) and os.path.getsize(path) > 0:
            return True
        time.sleep(0.001)
    return False


def signal_latency(samples: int) -> dict[str, Any]:
    backend = ProcessBackend(1, kill_after=None)
    registry = ToolRegistry(backend=backend)
    registry.register(ToolDefinition("wait", "waits for its signal", _OBJECT, _signal_body))
    registry.register(ToolDefinition("noop", "does nothing", _OBJECT, _noop))
    latencies: list[float] = []
    with tempfile.TemporaryDirectory(prefix="dshtools-bench-") as tmp:
        try:
            registry.execute(ToolExecutionInput("warm", "noop", {}, AbortController().signal))
            for i in range(samples):
                path = os.path.join(tmp, f"seen-{i}")
                controller = AbortController()
                call = ToolExecutionInput(f"s{i}", "wait", {"path": path}, controller.signal)
                aborted_at: list[float] = []

                def abort_later(c: AbortController = controller, out: list[float] = aborted_at) -> None:
                    time.sleep(0.005)  # let the worker start the body (a benchmark, not a test)
                    out.append(time.monotonic())
                    c.abort("benchmark")

                thread = threading.Thread(target=abort_later)
                thread.start()
                result = registry.execute(call)
                thread.join()
                if result.code != "ABORTED" or not os.path.exists(path):
                    continue  # withdrawn before it started: no sample
                with open(path, encoding="ascii") as f:
                    latencies.append(float(f.read()) - aborted_at[0])
        finally:
            registry.close()
            backend.close()
    return {
        "signal_samples": len(latencies),
        "signal_p50_ms": percentile(latencies, 50) * 1e3,
        "signal_p99_ms": percentile(latencies, 99) * 1e3,
    }


def kill_latency(samples: int) -> dict[str, Any]:
    backend = ProcessBackend(1, kill_after=0.2)
    registry = ToolRegistry(backend=backend)
    registry.register(ToolDefinition("stubborn", "ignores its signal", _OBJECT, _stubborn_body))
    latencies: list[float] = []
    killed = 0
    with tempfile.TemporaryDirectory(prefix="dshtools-bench-") as tmp:
        try:
            for i in range(samples):
                path = os.path.join(tmp, f"started-{i}")
                controller = AbortController()
                call = ToolExecutionInput(f"k{i}", "stubborn", {"path": path}, controller.signal)
                aborted_at: list[float] = []

                def abort_when_started(
                    c: AbortController = controller, p: str = path, out: list[float] = aborted_at
                ) -> None:
                    _started(p)
                    out.append(time.monotonic())
                    c.abort("benchmark")

                thread = threading.Thread(target=abort_when_started)
                thread.start()
                result = registry.execute(call)
                returned = time.monotonic()
                thread.join()
                if result.meta is not None and result.meta.get("killed"):
                    killed += 1
                    latencies.append(returned - aborted_at[0])
        finally:
            registry.close()
            backend.close()
    return {
        "kill_after_s": 0.2,
        "kill_samples": len(latencies),
        "killed": killed,
        "kill_p50_s": percentile(latencies, 50),
        "kill_p99_s": percentile(latencies, 99),
    }


def growth(calls: int) -> dict[str, Any]:
    backend = ProcessBackend(2, kill_after=1.0)
    registry = ToolRegistry(backend=backend)
    registry.register(ToolDefinition("noop", "does nothing", _OBJECT, _noop))
    call = ToolExecutionInput("leak", "noop", {}, AbortController().signal)
    try:
        for _ in range(50):
            registry.execute(call)
        procs, threads, fds = _children(), threading.active_count(), _fds()
        errors = 0
        for _ in range(calls):
            errors += registry.execute(call).is_error
        after = (_children(), threading.active_count(), _fds())
    finally:
        registry.close()
        backend.close()
    return {
        "growth_calls": calls,
        "growth_errors": errors,
        "process_growth": after[0] - procs,
        "thread_growth": after[1] - threads,
        "fd_growth": after[2] - fds,
    }


def run(*, quick: bool) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    figures.update(overhead(30 if quick else 200, 3 if quick else 9))
    figures.update(signal_latency(20 if quick else 300))
    figures.update(kill_latency(3 if quick else 20))
    figures.update(growth(100 if quick else 1000))
    return figures
