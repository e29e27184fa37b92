"""Target 5: leak figures.

* 100 000 dispatches of a no-op tool sharing one never-aborted caller
  signal: that signal's ``listener_count`` afterwards (must be 0) and the
  process RSS growth across the run (after a warm-up and ``gc.collect()``
  on both ends; target < 5 MB).
* Threads alive while 10 000 timeouts (``AbortSignal.timeout(3600)``, each
  with a listener) are pending: all timeouts share one timer thread.
"""

from __future__ import annotations

import gc
import os
import threading
from typing import Any

from dshtools import AbortController, AbortSignal, ToolDefinition, ToolExecutionInput, ToolRegistry
from dshtools._signal import timer as _timer

__all__ = ["run"]


def _rss_bytes() -> int:
    try:
        import psutil
    except ImportError:  # pragma: no cover - psutil is in the test extra
        with open(f"/proc/{os.getpid()}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    return int(psutil.Process().memory_info().rss)


def dispatch_leak(calls: int) -> dict[str, Any]:
    registry = ToolRegistry(max_workers=4)
    registry.register(ToolDefinition("noop", "does nothing", {"type": "object"}, lambda args, run: None))
    controller = AbortController()
    signal = controller.signal
    call = ToolExecutionInput("leak", "noop", {}, signal)
    try:
        for _ in range(min(2000, calls)):
            registry.execute(call)
        gc.collect()
        before = _rss_bytes()
        errors = 0
        for _ in range(calls):
            errors += registry.execute(call).is_error
        gc.collect()
        after = _rss_bytes()
        count = signal.listener_count
    finally:
        registry.close()
    return {
        "dispatches": calls,
        "listener_count_after": count,
        "rss_growth_mb": (after - before) / 2**20,
        "errors": errors,
    }


def timeout_threads(count: int) -> dict[str, Any]:
    gc.collect()
    baseline = threading.active_count()
    signals = [AbortSignal.timeout(3600) for _ in range(count)]
    handles = [s.add_listener(lambda _s: None) for s in signals]
    alive = threading.active_count()
    timer_threads = sum(1 for t in threading.enumerate() if t.name == "dshtools-timer")
    pending = _timer.pending_count()
    for h in handles:
        h.remove()
    for s in signals:
        s.close()
    del signals, handles
    gc.collect()
    return {
        "pending_timeouts": pending,
        "threads_before": baseline,
        "threads_with_10k_timeouts": alive,
        "timer_threads": timer_threads,
        "pending_after_close": _timer.pending_count(),
    }


def run(*, quick: bool = False) -> dict[str, Any]:
    out = dispatch_leak(2000 if quick else 100_000)
    out.update(timeout_threads(10_000))
    out["targets"] = {"listener_count_after": 0, "rss_growth_mb": 5.0}
    return out
