"""``python -m benchmarks.profile [--hooks] [--calls N] [--top K]``

cProfile of ``registry.execute`` on a no-op tool, the dispatch hot path.
Prints the functions with the most own time. cProfile only sees the calling
thread; the worker side of a dispatch is a trampoline and the body. Use
``py-spy record -o out.svg -- python -m benchmarks.profile`` for a sampled
view of every thread.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time
from concurrent.futures import ThreadPoolExecutor

from dshtools import AbortController, ToolExecutionInput

from .dispatch import make_registry


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profile", description=__doc__)
    parser.add_argument("--hooks", action="store_true", help="TimeoutPolicy + pre + post + observer")
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args(argv)
    executor = ThreadPoolExecutor(max_workers=4)
    registry = make_registry(executor, hooks=args.hooks)
    call = ToolExecutionInput("profile", "noop", {}, AbortController().signal)
    try:
        for _ in range(1000):
            registry.execute(call)
        t0 = time.perf_counter()
        for _ in range(args.calls):
            registry.execute(call)
        plain = (time.perf_counter() - t0) / args.calls
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(args.calls):
            registry.execute(call)
        profiler.disable()
    finally:
        registry.close()
        executor.shutdown(wait=True)
    print(f"unprofiled: {plain * 1e6:.1f} µs per execute ({args.calls} calls)")
    pstats.Stats(profiler).sort_stats("tottime").print_stats(args.top)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
