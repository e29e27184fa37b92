"""``python -m benchmarks --ray``: the Ray backend (docs/ray.md).

Runs against a local ``ray.init(num_cpus=2)`` started here (or the Ray this
process is connected to). Three figures, keys under ``ray.*``:

* **Per-call overhead**: ``registry.execute`` of a no-op tool on
  ``RayBackend`` vs a bare ``ray.get(f.remote())`` of a no-op task, rounds
  interleaved; the ratio is the median of the per-round ratios (target
  ≤ 1.5).
* **Abort → remote signal**: from the caller's ``abort()`` to the moment
  the body's ``run.signal.wait()`` returns in its worker, both read on
  ``time.monotonic()`` (one clock for every process of a Linux machine);
  p50/p99 (target p99 ≤ 100 ms).
* **Abort → execute returns** for a body that ignores its signal
  (``time.sleep(60)``) with ``kill_after=0.5``: the grace, the forced stop
  and its confirmation.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from dshtools import AbortController, ToolDefinition, ToolExecutionInput, ToolExecutionResult, ToolRegistry

from ._timing import WALL, median, paired_samples, percentile

__all__ = ["render", "run"]

_EVENTS = "dshtools-bench-events"


def _noop_body(args: Any, run: Any) -> None:
    return None


def _announce() -> None:
    import ray

    ray.get_actor(_EVENTS).set.remote(os.getpid()).future().result()


def _wait_body(args: Any, run: Any) -> None:
    _announce()
    run.signal.wait(30)
    # The instant travels back as a deferred context (the result is ABORTED).
    run.defer_context({"signal_at": time.monotonic()})


def _stubborn_body(args: Any, run: Any) -> None:
    _announce()
    time.sleep(60)


class _Started:
    """A named actor the bodies announce their start to."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._count = 0

    def set(self, pid: int) -> None:
        with self._cond:
            self._count += 1
            self._cond.notify_all()

    def wait(self, count: int, timeout: float) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self._count >= count, timeout)


def _abort_once_started(
    registry: ToolRegistry, events: Any, announced: int, call_id: str, name: str
) -> tuple[ToolExecutionResult, float, float]:
    """Execute tool ``name`` in another thread, abort it once its body has
    announced the ``announced``-th start to ``events``, and wait for the
    return: the result, and the monotonic times of the abort and the return
    (seconds)."""
    import ray

    controller = AbortController()
    call = ToolExecutionInput(call_id, name, {}, controller.signal)
    out: list[tuple[ToolExecutionResult, float]] = []
    thread = threading.Thread(target=lambda: out.append((registry.execute(call), time.monotonic())))
    thread.start()
    assert ray.get(events.wait.remote(announced, 60))
    aborted_at = time.monotonic()
    controller.abort("benchmark")
    thread.join()
    result, returned_at = out[0]
    return result, aborted_at, returned_at


def run(*, quick: bool = False) -> dict[str, Any]:
    import ray

    from dshtools.ray import RayBackend

    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        events = ray.remote(num_cpus=0, max_concurrency=8)(_Started).options(name=_EVENTS).remote()  # type: ignore[call-overload]
        remote_noop = ray.remote(max_retries=0)(lambda: None)
        backend = RayBackend(kill_after=0.5)
        with ToolRegistry(backend=backend) as registry:
            for name, body in (("noop", _noop_body), ("wait", _wait_body), ("stubborn", _stubborn_body)):
                registry.register(ToolDefinition(name, name, {"type": "object"}, body))
            signal = AbortController().signal
            noop_call = ToolExecutionInput("n", "noop", {}, signal)

            def bare(number: int) -> Any:
                return lambda: [ray.get(remote_noop.remote()) for _ in range(number)]

            def ours(number: int) -> Any:
                return lambda: [registry.execute(noop_call) for _ in range(number)]

            number, rounds = (10, 3) if quick else (20, 21)
            bare_ns, ours_ns = paired_samples([bare, ours], number=number, rounds=rounds, warmup=1, clock=WALL)
            ratio = median([o / b for o, b in zip(ours_ns, bare_ns, strict=True)])

            announced = 0
            latencies: list[float] = []
            for i in range(5 if quick else 40):
                announced += 1
                result, aborted_at, _ = _abort_once_started(registry, events, announced, f"w{i}", "wait")
                (context,) = result.additional_contexts
                latencies.append(context["signal_at"] - aborted_at)

            stops: list[float] = []
            for i in range(2 if quick else 5):
                announced += 1
                result, aborted_at, returned_at = _abort_once_started(registry, events, announced, f"s{i}", "stubborn")
                assert result.meta["killed"] is True
                stops.append(returned_at - aborted_at)
        ray.kill(events)
    finally:
        if started:
            ray.shutdown()
    return {
        "bare_ray_get_ns": median(bare_ns),
        "execute_ns": median(ours_ns),
        "overhead_ratio": ratio,
        "overhead_us": (median(ours_ns) - median(bare_ns)) / 1e3,
        "abort_to_remote_signal_p50_ms": percentile(latencies, 50) * 1e3,
        "abort_to_remote_signal_p99_ms": percentile(latencies, 99) * 1e3,
        "abort_samples": len(latencies),
        "kill_after_s": 0.5,
        "abort_to_execute_return_median_s": median(stops),
        "abort_to_execute_return_max_s": max(stops),
        "kill_samples": len(stops),
    }


def render(r: dict[str, Any]) -> str:
    def ok(value: float, limit: float) -> str:
        return "yes" if value <= limit else "**no**"

    return "\n".join(
        [
            "**Ray backend** (local `ray.init(num_cpus=2)`; `python -m benchmarks --ray`)",
            "",
            "| measure | median | target | met |",
            "| --- | ---: | ---: | :---: |",
            f"| bare `ray.get(f.remote())` (baseline) | {r['bare_ray_get_ns'] / 1e6:.2f} ms | | |",
            f"| `registry.execute` on `RayBackend`, no-op | {r['execute_ns'] / 1e6:.2f} ms "
            f"(ratio {r['overhead_ratio']:.2f}) | ≤ 1.5× | {ok(r['overhead_ratio'], 1.5)} |",
            f"| abort → remote `run.signal` p50 | {r['abort_to_remote_signal_p50_ms']:.1f} ms | | |",
            f"| abort → remote `run.signal` p99 | {r['abort_to_remote_signal_p99_ms']:.1f} ms | ≤ 100 ms | "
            f"{ok(r['abort_to_remote_signal_p99_ms'], 100)} |",
            f"| abort → `execute` returns, non-cooperative body, `kill_after={r['kill_after_s']:g}` | "
            f"{r['abort_to_execute_return_median_s']:.2f} s (max {r['abort_to_execute_return_max_s']:.2f} s) | | |",
        ]
    )
