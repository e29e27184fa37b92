"""Timing helpers shared by the benchmark modules.

A *case* is a factory ``make(number) -> run`` where ``make`` does the
untimed setup for ``number`` operations (fresh controllers, pre-registered
listeners, ...) and ``run()`` performs exactly ``number`` operations. Only
``run()`` is timed. A round's figure is its time divided by ``number``;
the reported figure is the median over rounds.

Clocks and the collector: ``WALL`` (``time.perf_counter_ns``) for anything that hands work to
another thread or blocks (dispatch, latency, batch), where waiting *is* the
cost; ``CPU`` (``time.thread_time_ns``, the calling thread's CPU time) for
single-threaded operations that never block (signal and peer operations),
so that other processes competing for the cores do not show up as cost;
those rounds also run with the cyclic garbage collector paused, as
``timeit`` does.

Case builders: the signal-shaped operations of dshtools, its baselines, its
peers and its floors are the same three loops over different objects, so
each loop is written once here (``calls``, ``reads``, ``aborts``) and every
side of a comparison times the same loop around its own operation.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

Case = Callable[[int], Callable[[], Any]]
T = TypeVar("T")

__all__ = [
    "CPU",
    "WALL",
    "Case",
    "aborts",
    "calls",
    "median",
    "median_of_all",
    "paired",
    "paired_ratio",
    "paired_samples",
    "percentile",
    "reads",
    "time_case",
]


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def median_of_all(values: Sequence[float | None]) -> float | None:
    """The median of ``values``, or ``None`` when any of them is ``None``
    (a run that did not happen within its bound: no median stands for it)."""
    real = [v for v in values if v is not None]
    return statistics.median(real) if len(real) == len(values) else None


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile, ``q`` in [0, 100]."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("no values")
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return float(ordered[rank - 1])


WALL: Callable[[], int] = time.perf_counter_ns
CPU: Callable[[], int] = time.thread_time_ns


def _one_round(case: Case, number: int, clock: Callable[[], int]) -> float:
    run = case(number)
    if clock is CPU:
        # Single-threaded micro-operations: like timeit, keep the cyclic
        # collector out of the timed region (garbage of earlier rounds would
        # otherwise be collected inside it).
        gc.disable()
        try:
            t0 = clock()
            run()
            t1 = clock()
        finally:
            gc.enable()
    else:
        # Dispatch and friends: the collector's work is part of the cost.
        t0 = clock()
        run()
        t1 = clock()
    del run
    return (t1 - t0) / number


def time_case(case: Case, *, number: int, rounds: int, warmup: int = 1, clock: Callable[[], int] = WALL) -> list[float]:
    """ns per operation, one figure per round."""
    for _ in range(warmup):
        _one_round(case, max(1, number // 4), clock)
    return [_one_round(case, number, clock) for _ in range(rounds)]


def paired_samples(
    cases: Sequence[Case], *, number: int, rounds: int, warmup: int = 1, clock: Callable[[], int] = WALL
) -> list[list[float]]:
    """ns per operation of each case, one figure per round, rounds
    interleaved (A B A B ...) so that drift in machine load affects every
    case alike."""
    for case in cases:
        for _ in range(warmup):
            _one_round(case, max(1, number // 4), clock)
    samples: list[list[float]] = [[] for _ in cases]
    for _ in range(rounds):
        for i, case in enumerate(cases):
            samples[i].append(_one_round(case, number, clock))
    return samples


def paired(
    cases: Sequence[Case], *, number: int, rounds: int, warmup: int = 1, clock: Callable[[], int] = WALL
) -> list[float]:
    """Median ns per operation of each case (see ``paired_samples``)."""
    return [median(s) for s in paired_samples(cases, number=number, rounds=rounds, warmup=warmup, clock=clock)]


def paired_ratio(
    ours: Case, other: Case, *, number: int, rounds: int, warmup: int = 1, clock: Callable[[], int] = WALL
) -> tuple[float, float, float]:
    """``(ours_ns, other_ns, ratio)``: the median ns per operation of each
    case, and the median over rounds of ``ours / other`` within a round.
    Each round times both cases back to back, so a ratio within a round
    sees one machine state; its median is steadier than the ratio of the
    two medians when the load drifts between rounds."""
    a, b = paired_samples([ours, other], number=number, rounds=rounds, warmup=warmup, clock=clock)
    return median(a), median(b), median([x / y for x, y in zip(a, b, strict=True)])


def calls(op: Callable[[], object]) -> Case:
    """``number`` calls of ``op()``: a class (creation) or a bound method
    (a check such as ``event.is_set``), called as the loop's only work."""

    def case(n: int) -> Callable[[], None]:
        r = range(n)

        def go() -> None:
            for _ in r:
                op()

        return go

    return case


_READS = """
def reads(obj):
    def case(n):
        r = range(n)

        def go():
            for _ in r:
                obj.{name}

        return go

    return case
"""


def reads(obj: object, name: str) -> Case:
    """``number`` reads of the attribute ``name`` of ``obj`` (a check such
    as ``signal.aborted``). The read stands inline in the loop, compiled
    from source as ``timeit`` compiles its statement: a call around each
    read (``operator.attrgetter``, a lambda) costs about as much as the read
    itself and would hide the difference between two checks."""
    if not name.isidentifier():
        raise ValueError(f"not an attribute name: {name!r}")
    namespace: dict[str, Any] = {}
    exec(compile(_READS.format(name=name), f"<reads .{name}>", "exec"), namespace)
    case: Case = namespace["reads"](obj)
    return case


def aborts(
    make: Callable[[], T],
    abort: Callable[[T], object],
    *,
    listen: Callable[[T], object] | None = None,
    listeners: int = 0,
) -> Case:
    """``number`` objects made by ``make()``, each given ``listeners`` calls
    of ``listen(obj)`` (one listener each), untimed; then ``abort(obj)`` on
    each of them, timed: an abort fires once per object, so each round
    needs fresh ones."""

    def case(n: int) -> Callable[[], None]:
        items = [make() for _ in range(n)]
        if listen is not None:
            for item in items:
                for _ in range(listeners):
                    listen(item)

        def go() -> None:
            for item in items:
                abort(item)

        return go

    return case
