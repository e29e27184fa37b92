"""Target 1: dispatch overhead of ``ToolRegistry.execute``.

Baseline: a bare ``executor.submit(f).result()`` round trip on the *same*
``ThreadPoolExecutor`` the registry uses. Also reported: the direct-call
floor (calling the no-op body in the calling thread) and the per-call
overhead in microseconds (median execute minus median round trip). The
ratios are the median over rounds of each round's ratio (rounds are adjacent
in time, so each compares like with like on a host whose hand-off latency
swings between rounds).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from dshtools import AbortController, TimeoutPolicy, ToolDefinition, ToolExecutionInput, ToolRegistry

from ._timing import median, paired_samples

__all__ = ["execute_case", "make_registry", "run"]


def _noop_body(args: Any, run: Any) -> None:
    return None


def _noop() -> None:
    return None


def make_registry(executor: ThreadPoolExecutor, *, hooks: bool) -> ToolRegistry:
    """A registry with one no-op tool, ``noop``; with ``hooks``: a
    ``TimeoutPolicy`` (the tool declares a 60 s timeout, so the deadline is
    armed and cancelled on every call), one pass-through pre-execute hook,
    one pass-through post-execute hook and one result observer."""
    registry = ToolRegistry(executor=executor)
    registry.register(
        ToolDefinition("noop", "does nothing", {"type": "object"}, _noop_body, timeout=60.0 if hooks else None)
    )
    if hooks:
        registry.add_around_dispatch(TimeoutPolicy())
        registry.add_pre_execute(lambda execution, next: next())
        registry.add_post_execute(lambda execution, result, next: next())
        registry.add_result_observer(lambda execution, result: None)
    return registry


def execute_case(registry: ToolRegistry, call: ToolExecutionInput) -> Callable[[int], Callable[[], None]]:
    """A ``paired_samples`` case: given ``n``, a function that makes ``n``
    calls of ``registry.execute(call)`` in the calling thread."""

    def case(n: int) -> Callable[[], None]:
        r = range(n)
        execute = registry.execute

        def go() -> None:
            for _ in r:
                execute(call)

        return go

    return case


def run(*, quick: bool = False) -> dict[str, Any]:
    number, rounds = (200, 3) if quick else (250, 41)
    executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="bench")
    plain = make_registry(executor, hooks=False)
    hooked = make_registry(executor, hooks=True)
    controller = AbortController()
    call = ToolExecutionInput("call-1", "noop", {}, controller.signal)

    def direct(n: int) -> Any:
        r = range(n)

        def go() -> None:
            for _ in r:
                _noop()

        return go

    def bare(n: int) -> Any:
        r = range(n)
        submit = executor.submit

        def go() -> None:
            for _ in r:
                submit(_noop).result()

        return go

    try:
        result = plain.execute(call)
        assert not result.is_error, result
        result = hooked.execute(call)
        assert not result.is_error, result
        samples = paired_samples(
            [direct, bare, execute_case(plain, call), execute_case(hooked, call)],
            number=number,
            rounds=rounds,
            warmup=1,
        )
        assert controller.signal.listener_count == 0
    finally:
        plain.close()
        hooked.close()
        executor.shutdown(wait=True)
    floor_ns, bare_ns, plain_ns, hooked_ns = (median(s) for s in samples)
    # Ratios: the median over rounds of each round's execute / round trip.
    # Rounds are adjacent in time, so a round's ratio compares like with
    # like even when the host's thread hand-off latency swings several-fold
    # between rounds (seen: 40-350 us for the same round trip).
    bare_rounds = samples[1]
    return {
        "direct_call_ns": floor_ns,
        "bare_submit_ns": bare_ns,
        "execute_ns": plain_ns,
        "execute_with_hooks_ns": hooked_ns,
        "ratio": median([p / b for p, b in zip(samples[2], bare_rounds, strict=False)]),
        "with_hooks_ratio": median([h / b for h, b in zip(samples[3], bare_rounds, strict=False)]),
        "overhead_us": (plain_ns - bare_ns) / 1000,
        "with_hooks_overhead_us": (hooked_ns - bare_ns) / 1000,
        "targets": {"ratio": 1.25, "with_hooks_ratio": 1.6},
        "rounds": rounds,
        "calls_per_round": number,
    }
