"""Load-independent dispatch cost: machine instructions per call, counted
with callgrind (``valgrind --tool=callgrind``), which counts the same on a
quiet machine and a busy one.

Each case runs in a child interpreter under callgrind twice, with ``SHORT``
and ``LONG`` calls after the same warm-up; the difference divided by
``LONG - SHORT`` is the cost of one call with start-up, imports and warm-up
cancelled out. Every thread is counted (the worker's side of a hand-off
too). Cases:

* ``bare``: ``executor.submit(f).result()`` on a ``ThreadPoolExecutor``
  (the baseline);
* ``execute``: ``registry.execute`` of a no-op tool on the same kind of
  pool;
* ``execute_hooks``: the same with ``TimeoutPolicy`` (armed: the tool
  declares a timeout), a pass-through pre-execute and post-execute hook and
  a result observer.

Keys: ``dispatch.instructions_ratio`` (execute / bare) and
``dispatch.with_hooks_instructions_ratio``; skipped with a note when
``valgrind`` is not installed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "CASES",
    "EXECUTE_CALLS",
    "callgrind",
    "collected",
    "count",
    "per_call",
    "per_thread",
    "run",
    "valgrind_or_skip",
]

CASES = ("bare", "execute", "execute_hooks")
SHORT, LONG = 200, 1200
_COLLECTED = re.compile(r"Collected\s*:\s*(\d+)")
SUMMARY = re.compile(r"^summary:\s*(\d+)", re.MULTILINE)
"""The total line of a callgrind dump."""

_CHILD = r"""
import sys
from concurrent.futures import ThreadPoolExecutor

case, n = sys.argv[1], int(sys.argv[2])
executor = ThreadPoolExecutor(max_workers=4)

def noop():
    return None

if case == "bare":
    submit = executor.submit
    for _ in range(200):
        submit(noop).result()
    for _ in range(n):
        submit(noop).result()
    executor.shutdown(wait=True)
    raise SystemExit

from dshtools import AbortController, ToolExecutionInput
from benchmarks.dispatch import make_registry

registry = make_registry(executor, hooks=case == "execute_hooks")
call = ToolExecutionInput("call-1", "noop", {}, AbortController().signal)
"""

EXECUTE_CALLS = """
execute = registry.execute
for _ in range(200):
    assert not execute(call).is_error
for _ in range(n):
    execute(call)
registry.close()
executor.shutdown(wait=True)
"""
"""The measured end of every registry case's child script: a warm-up, then
``n`` calls of ``call`` on ``registry`` (names the script defines before,
with ``executor``), then the shutdown. At module level, like the bare
case's loop, so both pay the same name lookups."""

_CHILD += EXECUTE_CALLS


def callgrind(
    child: str, args: Sequence[str], valgrind: str, *, options: Sequence[str] = (), timeout: float = 600
) -> tuple[str, list[str]]:
    """Run ``python -c child *args`` under callgrind (``options`` added to
    valgrind's) from the checkout's root, with its modules importable (the
    caller's ``PYTHONPATH`` kept after it) and ``PYTHONHASHSEED=0``.

    Returns the child's stderr (callgrind's report at its end) and the text
    of every dump it wrote, in order (with ``--dump-after``, ``out.1`` ...
    ``out.N``, then the exit's ``out``). Raises ``RuntimeError`` with the end of stderr
    when the child fails; ``timeout`` is in seconds."""
    root = Path(__file__).resolve().parent.parent
    path = os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH", "")) if p)
    env = dict(os.environ, PYTHONHASHSEED="0", PYTHONPATH=path)
    with tempfile.TemporaryDirectory() as tmp:
        out = f"--callgrind-out-file={tmp}/out"
        command = [valgrind, "--tool=callgrind", *options, out, sys.executable, "-c", child, *args]
        proc = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=timeout, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"callgrind run of {list(args)!r} failed ({proc.returncode}): {proc.stderr[-2000:]}")
        # out.1 ... out.N in their order, then the exit's dump, out
        files = sorted(Path(tmp).glob("out*"), key=lambda f: int(f.suffix[1:]) if f.suffix else sys.maxsize)
        return proc.stderr, [f.read_text(encoding="utf-8") for f in files]


def valgrind_or_skip(*, quick: bool = False) -> str | dict[str, str]:
    """The path of ``valgrind``, or the ``{"skipped": reason}`` a
    benchmark's ``run`` returns when it is not installed or when ``quick``
    (instruction counts are not taken in ``--quick`` runs)."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        return {"skipped": "valgrind is not installed: no instruction counts"}
    if quick:
        return {"skipped": "instruction counts are not taken in --quick runs"}
    return valgrind


def per_thread(child: str, args: Sequence[str], valgrind: str, *, timeout: float = 600) -> dict[int, int]:
    """Instructions of each thread over the whole run of ``python -c child
    *args`` (``--separate-threads=yes``; see ``callgrind``): callgrind's
    thread number (1 is the main thread) to its total. Raises
    ``RuntimeError`` when the run wrote no per-thread totals."""
    _, dumps = callgrind(child, args, valgrind, options=["--separate-threads=yes"], timeout=timeout)
    totals: dict[int, int] = {}
    for text in dumps:
        thread = re.search(r"^thread: (\d+)$", text, re.M)
        total = re.search(r"^totals: (\d+)$", text, re.M)
        if thread and total:
            totals[int(thread.group(1))] = int(total.group(1))
    if 1 not in totals:
        raise RuntimeError(f"callgrind run of {list(args)!r} wrote no per-thread totals")
    return totals


def collected(child: str, case: str, calls: int, valgrind: str, *, timeout: float = 600) -> int:
    """Instructions callgrind collected over the whole run of ``python -c
    child case calls`` (every thread; see ``callgrind``)."""
    stderr, _ = callgrind(child, [case, str(calls)], valgrind, timeout=timeout)
    match = _COLLECTED.search(stderr)
    if match is None:
        raise RuntimeError(f"no instruction count in the callgrind run of {case!r}: {stderr[-2000:]}")
    return int(match.group(1))


def per_call(
    child: str, case: str, valgrind: str, *, short: int = SHORT, long: int = LONG, timeout: float = 600
) -> float:
    """Instructions of one call of ``case``: the runs of ``long`` and of
    ``short`` calls after the same warm-up, their difference divided by
    ``long - short`` (start-up, imports and warm-up cancel out)."""
    return (
        collected(child, case, long, valgrind, timeout=timeout)
        - collected(child, case, short, valgrind, timeout=timeout)
    ) / (long - short)


def count(case: str, valgrind: str) -> float:
    """Instructions per call of ``case`` (one of ``CASES``)."""
    return per_call(_CHILD, case, valgrind)


def run(*, quick: bool = False) -> dict[str, Any]:
    valgrind = valgrind_or_skip()
    if isinstance(valgrind, dict):
        return valgrind
    per_call = {case: count(case, valgrind) for case in CASES}
    bare = per_call["bare"]
    return {
        "bare_submit_instructions": per_call["bare"],
        "execute_instructions": per_call["execute"],
        "execute_with_hooks_instructions": per_call["execute_hooks"],
        "instructions_ratio": per_call["execute"] / bare,
        "with_hooks_instructions_ratio": per_call["execute_hooks"] / bare,
        "instruction_targets": {"instructions_ratio": 1.8, "with_hooks_instructions_ratio": 3.5},
        "calls_counted": LONG - SHORT,
    }


if __name__ == "__main__":
    import json

    print(json.dumps(run(), indent=2))
