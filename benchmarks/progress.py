"""What ``run.report_progress`` costs a body that reports from a tight
loop: machine instructions, counted with callgrind as in
``benchmarks/instructions.py`` (a run of ``LONG`` and one of ``SHORT``
iterations after the same warm-up; the difference divided by ``LONG -
SHORT``, so exactly ``LONG - SHORT`` = 10 000 reports are counted). Every
thread but the main one is counted: the body's worker, and the
``dshtools-progress`` delivery thread with the observer; the main thread
only waits for the call, and what it counts depends on the wall time.

One tool on a thread-backend registry with one progress observer (it keeps
the latest update). The body loops ``n`` times over one unit of work, a
``hashlib.sha256`` of 1 KiB (a body's smallest plausible step: reading
a record, hashing a chunk). Cases:

* ``work``: the loop alone;
* ``report``: the same loop calling ``run.report_progress(i, n, None)``
  every iteration.

Each child checks that the observer saw the last update (``n - 1`` of
``n``) once the call returned, and fails otherwise.

Keys (``progress.*`` in results.json): ``work_instructions_per_iteration``,
``report_instructions_per_call`` (the report's own cost: ``report`` less
``work``), ``overhead_ratio`` (``report / work - 1``, the target is below
0.05, ``overhead_met``), ``target_met_from_step_instructions`` (the
smallest step, in instructions, whose loop the reports cost less than 5 %:
``report_instructions_per_call / 0.05``), ``reports_counted`` and
``observer_saw_last``, and ``with_main_thread_overhead_ratio`` (every
thread counted, for reference: it varies with the machine's load);
skipped with a note when ``valgrind`` is not installed.
"""

from __future__ import annotations

from typing import Any

from .instructions import per_thread, valgrind_or_skip

__all__ = ["CASES", "run"]

CASES = ("work", "report")
SHORT, LONG = 2_000, 12_000
TARGET = 0.05

_CHILD = r"""
import hashlib
import sys
import threading

from dshtools import AbortController, ToolDefinition, ToolExecutionInput, ToolRegistry

case, n = sys.argv[1], int(sys.argv[2])
report = case == "report"
block = bytes(1024)
last = []
seen_last = threading.Event()


def observer(execution, update):
    last[:] = [update]
    if update.progress == update.total - 1:
        seen_last.set()


def body(args, run):
    total = args["n"]
    sha256 = hashlib.sha256
    if report:
        progress = run.report_progress
        for i in range(total):
            sha256(block).digest()
            progress(i, total, None)
    else:
        for i in range(total):
            sha256(block).digest()
    return total


registry = ToolRegistry()
registry.register(ToolDefinition("loop", "a tight loop", {"type": "object"}, body))
registry.add_progress_observer(observer)
signal = AbortController().signal
assert not registry.execute(ToolExecutionInput("warm", "loop", {"n": 500}, signal)).is_error
seen_last.clear()
assert not registry.execute(ToolExecutionInput("c1", "loop", {"n": n}, signal)).is_error
if report:
    assert seen_last.wait(60), f"the observer never saw the last update: {last}"
    assert last[0].progress == n - 1 and last[0].total == n, last
registry.close()
"""


def _threads(case: str, n: int, valgrind: str) -> tuple[int, int]:
    """``(all threads, all but the main thread)``: instructions of one run
    of the child with ``n`` iterations (``--separate-threads=yes``; thread
    1 is the main thread, which only waits in ``execute``, woken every
    0.25 s: its count grows with the run's wall time on a loaded machine,
    so the figures that matter leave it out)."""
    totals = per_thread(_CHILD, [case, str(n)], valgrind, timeout=900)
    every = sum(totals.values())
    return every, every - totals[1]


def _count(case: str, valgrind: str) -> tuple[float, float]:
    """Per iteration: ``(all threads, all but the main thread)``."""
    long_all, long_off_main = _threads(case, LONG, valgrind)
    short_all, short_off_main = _threads(case, SHORT, valgrind)
    return (long_all - short_all) / (LONG - SHORT), (long_off_main - short_off_main) / (LONG - SHORT)


def run(*, quick: bool = False) -> dict[str, Any]:
    valgrind = valgrind_or_skip(quick=quick)
    if isinstance(valgrind, dict):
        return valgrind
    work_all, work = _count("work", valgrind)
    report_all, report = _count("report", valgrind)
    overhead = report / work - 1
    return {
        "work_instructions_per_iteration": work,
        "report_instructions_per_call": report - work,
        "overhead_ratio": overhead,
        "overhead_target": TARGET,
        "overhead_met": overhead < TARGET,
        "target_met_from_step_instructions": (report - work) / TARGET,
        "with_main_thread_overhead_ratio": report_all / work_all - 1,
        "reports_counted": LONG - SHORT,
        "observer_saw_last": True,  # each child asserts it, or the count fails
    }


if __name__ == "__main__":
    import json

    print(json.dumps(run(), indent=2))
