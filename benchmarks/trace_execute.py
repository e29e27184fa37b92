"""``python -m benchmarks.trace_execute [--pool] [--hooks] [--instructions N]``

Follows one no-op ``registry.execute`` through the library: every
``dshtools`` function entered, on the calling thread and on the worker
(``sys.setprofile`` + ``threading.setprofile``), in order, with the
module it lives in. Prints the trace, the number of distinct functions and
modules, the switches between modules, and how many times the hand-off
module (``_backends.thread``) was entered from elsewhere. This is the
"follow one call" view of the pipeline (docs/contract.md#pipeline).

With ``--instructions N`` it instead counts machine instructions per
execute with ``valgrind --tool=callgrind`` (all threads): the difference
between a run of ``N`` executes and a run of none, divided by ``N``.
"""

from __future__ import annotations

import argparse
import itertools
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from types import FrameType
from typing import Any

import dshtools
from dshtools import AbortController, ToolExecutionInput

from .dispatch import make_registry

PACKAGE_DIR = os.path.dirname(dshtools.__file__)
HANDOFF_MODULE = "_backends.thread"


class InlineExecutor(Executor):
    """Runs the work in ``submit`` (the calling thread)."""

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        future.set_result(fn(*args, **kwargs))
        return future


def trace_one(*, pool: bool, hooks: bool) -> list[tuple[str, str]]:
    """``[(module, qualified function name), ...]`` entered during one
    execute (after a warm-up call), across threads, in order."""
    seen: list[tuple[str, str]] = []
    lock = threading.Lock()
    active = False

    def profiler(frame: FrameType, event: str, arg: object) -> None:
        if event != "call" or not active:
            return
        filename = frame.f_code.co_filename
        if not filename.startswith(PACKAGE_DIR):
            return
        module = os.path.splitext(os.path.relpath(filename, PACKAGE_DIR))[0].replace(os.sep, ".")
        with lock:
            seen.append((module, getattr(frame.f_code, "co_qualname", frame.f_code.co_name)))

    # Installed before the pool starts its threads, so the worker is traced
    # too; active only for the traced call (the first one warms up).
    threading.setprofile(profiler)
    sys.setprofile(profiler)
    executor: Executor = ThreadPoolExecutor(max_workers=2) if pool else InlineExecutor()
    registry = make_registry(executor, hooks=hooks)  # type: ignore[arg-type]
    call = ToolExecutionInput("trace", "noop", {}, AbortController().signal)
    try:
        registry.execute(call)
        active = True
        registry.execute(call)
        active = False
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type,unused-ignore]
    registry.close()
    if pool:
        executor.shutdown(wait=True)
    return seen


def report(seen: list[tuple[str, str]]) -> str:
    lines = [f"  {module}.{name}" for module, name in seen]
    modules = [module for module, _ in seen]
    switches = sum(1 for a, b in itertools.pairwise(modules) if a != b)
    entries = sum(
        1 for i, m in enumerate(modules) if m == HANDOFF_MODULE and (i == 0 or modules[i - 1] != HANDOFF_MODULE)
    )
    lines.append(
        f"functions: {len(set(seen))} distinct ({len(seen)} calls), modules: {len(set(modules))} "
        f"({', '.join(sorted(set(modules)))}), switches: {switches}, hand-off module entered: {entries}"
    )
    return "\n".join(lines)


_PROGRAM = """
import sys
from concurrent.futures import ThreadPoolExecutor
from benchmarks.dispatch import make_registry
from dshtools import AbortController, ToolExecutionInput
n, hooks = int(sys.argv[1]), sys.argv[2] == "1"
executor = ThreadPoolExecutor(max_workers=4)
registry = make_registry(executor, hooks=hooks)
call = ToolExecutionInput("c", "noop", {}, AbortController().signal)
registry.execute(call)
for _ in range(n):
    registry.execute(call)
registry.close()
executor.shutdown(wait=True)
"""


def instructions(n: int, *, hooks: bool) -> float:
    """Instructions per execute on a 4-worker pool (callgrind, all threads)."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise SystemExit("valgrind is not installed")
    totals = []
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for count in (0, n):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "cg.out")
            done = subprocess.run(
                [valgrind, "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, "-c", _PROGRAM]
                + [str(count), "1" if hooks else "0"],
                capture_output=True,
                text=True,
                cwd=root,
                check=True,
            )
            match = re.search(r"Collected : (\d+)", done.stderr)
            assert match is not None, done.stderr
            totals.append(int(match.group(1)))
    return (totals[1] - totals[0]) / n


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.trace_execute", description=__doc__)
    parser.add_argument("--pool", action="store_true", help="a thread pool (default: an inline executor)")
    parser.add_argument("--hooks", action="store_true", help="TimeoutPolicy + pre + post + observer")
    parser.add_argument("--instructions", type=int, default=0, metavar="N")
    args = parser.parse_args(argv)
    if args.instructions:
        per_call = instructions(args.instructions, hooks=args.hooks)
        print(f"instructions per execute ({'with hooks' if args.hooks else 'plain'}, pool): {per_call:,.0f}")
        return 0
    print(report(trace_one(pool=args.pool, hooks=args.hooks)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
