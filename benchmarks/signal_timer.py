"""The cost of a fired timeout: machine instructions (callgrind, every thread
of the process counted) and wall-clock time per ``AbortSignal.timeout(0)``
whose one listener runs and is waited for.

One operation: create ``AbortSignal.timeout(0)``, add a listener that sets
a ``threading.Event``, and wait on that event. It covers everything a fired
timeout costs the process: scheduling the entry, waking the timer thread,
the abort, handing its listeners to the thread that runs them, the
listener, and waking the waiter.

Instructions: the whole process is counted twice under callgrind, with
``SMALL`` and ``LARGE`` operations, and the difference is divided by
``LARGE - SMALL``, so start-up, imports and the first thread starts cancel
out. Thread scheduling under valgrind is serialised, so the figure moves a
little from run to run (about 1 %).

``python -m benchmarks.signal_timer [--wall]`` prints instructions per
fired timeout (and, with ``--wall``, microseconds per fired timeout, the
median of 5 rounds of ``LARGE`` operations on this machine). Not part of
``python -m benchmarks``.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import threading
import time

from .instructions import SUMMARY, callgrind

__all__ = ["LARGE", "SMALL", "fire", "instructions", "main", "wall"]

SMALL = 200
LARGE = 2200

_CHILD = r"""
import sys
from benchmarks.signal_timer import fire
fire(int(sys.argv[1]))
"""


def fire(n: int) -> None:
    """Fire ``n`` timeouts, one after another, each waited for by its
    listener's event."""
    from dshtools import AbortSignal

    timeout = AbortSignal.timeout
    for _ in range(n):
        done = threading.Event()
        signal = timeout(0)
        signal.add_listener(lambda _s, done=done: done.set())  # type: ignore[misc]
        done.wait()


def _total(n: int, valgrind: str) -> int:
    _, [dump] = callgrind(_CHILD, [str(n)], valgrind, timeout=1800)
    match = SUMMARY.search(dump)
    if match is None:
        raise RuntimeError("no summary in the callgrind dump")
    return int(match.group(1))


def instructions(valgrind: str) -> float:
    """Instructions per fired timeout, all threads counted."""
    return (_total(LARGE, valgrind) - _total(SMALL, valgrind)) / (LARGE - SMALL)


def wall(rounds: int = 5) -> float:
    """Median microseconds per fired timeout over ``rounds`` rounds."""
    fire(SMALL)  # warm-up: threads started, code specialised
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        fire(LARGE)
        samples.append((time.perf_counter() - start) / LARGE * 1e6)
    samples.sort()
    return samples[len(samples) // 2]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.signal_timer", description=__doc__)
    parser.add_argument("--wall", action="store_true", help="also time it (microseconds per fired timeout)")
    args = parser.parse_args(argv)
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        print("valgrind is not installed", file=sys.stderr)
        return 1
    print(f"instructions per fired timeout: {instructions(valgrind):,.0f}", flush=True)
    if args.wall:
        print(f"microseconds per fired timeout: {wall():.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
