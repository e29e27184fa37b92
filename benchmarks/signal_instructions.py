"""Load-independent cost of the signal operations: machine instructions per
operation, counted with callgrind (``valgrind --tool=callgrind``), for
dshtools, its own baselines (``benchmarks.signals``) and the peers
(``benchmarks.peers``) that are installed.

Each operation is the same case as in the wall-clock rounds: untimed setup
for ``number`` operations (fresh controllers, pre-registered listeners,
...) after a warm-up, then one run of ``number`` operations. Only that run
is counted (start-up, imports, warm-up and setup are not); the count
divided by ``number`` is the cost of one operation, loop included. The
cyclic collector is paused, as in the wall-clock rounds.

``python -m benchmarks.signal_instructions [OP ...] [--side ours|baseline|floor|PEER ...]``
prints a table (instructions per operation, and each ratio to dshtools).
Not part of ``python -m benchmarks`` (a full table takes minutes); the
closing notes of the signal work quote it.
"""

from __future__ import annotations

import argparse
import shutil
import sys

from . import floors
from .instructions import SUMMARY, callgrind

__all__ = ["NUMBER", "counts", "main"]

# Operations per measured run: enough that the per-operation figure is
# stable to well under one percent.
NUMBER = {
    "create": 4000,
    "check": 20000,
    "abort_0": 4000,
    "abort_1": 4000,
    "abort_100": 200,
    "abort_1000": 20,
    "any_of_2_abort": 2000,
    "any_of_100_abort": 100,
    "add_remove_listener": 4000,
}

# One child per side runs every operation. Collection is on only inside
# `sys.call_tracing` (a C function nothing else here calls; with no trace
# function set it just calls its argument), and callgrind writes one dump
# after each such call: one file per operation, holding that run alone.
_CHILD = r"""
import gc
import sys

side, ops = sys.argv[1], sys.argv[2:]
from benchmarks import floors, peers, signals

def case_of(op):
    if side == "ours":
        return signals.OURS[op] if op in signals.OURS else signals.ours_abort(int(op.split("_")[1]))
    if side == "floor":
        return floors.FLOOR[op]
    if side == "baseline":
        return signals.BASELINE[op][0] if op in signals.BASELINE else signals.ewc_abort(int(op.split("_")[1]))
    return peers.PEERS[side][1]()[op]

gc.disable()
for arg in ops:
    op, n = arg.split("=")
    case = case_of(op)
    case(max(1, int(n) // 4))()
    go = case(int(n))
    sys.call_tracing(go, ())
    del go
"""


def counts(side: str, ops: list[str], valgrind: str) -> dict[str, float]:
    """Instructions per operation for each of ``ops`` (keys of ``NUMBER``)
    on ``side`` (``"ours"``, ``"baseline"``, ``"floor"`` (``benchmarks.floors``,
    its operations only) or a key of
    ``benchmarks.peers.PEERS``)."""
    options = ["--collect-atstart=no", "--toggle-collect=sys_call_tracing", "--dump-after=sys_call_tracing"]
    args = [side, *(f"{op}={NUMBER[op]}" for op in ops)]
    _, dumps = callgrind(_CHILD, args, valgrind, options=options, timeout=1800)
    totals = []
    for i, dump in enumerate(dumps[: len(ops)], 1):  # the last dump is the exit's, counted off
        match = SUMMARY.search(dump)
        if match is None:
            raise RuntimeError(f"no summary in callgrind dump {i} of {side}")
        totals.append(int(match.group(1)))
    return {op: total / NUMBER[op] for op, total in zip(ops, totals, strict=True)}


def _peer_ops(side: str) -> list[str]:
    from . import peers

    return list(peers.PEERS[side][1]())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.signal_instructions", description=__doc__)
    parser.add_argument("ops", nargs="*", help=f"operations (default: all of {', '.join(NUMBER)})")
    parser.add_argument(
        "--side", nargs="+", default=["ours", "baseline"], help="ours, baseline, floor and/or peer names"
    )
    args = parser.parse_args(argv)
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        print("valgrind is not installed", file=sys.stderr)
        return 1
    ops = args.ops or list(NUMBER)
    unknown = [op for op in ops if op not in NUMBER]
    if unknown:
        parser.error(f"unknown operation(s): {', '.join(unknown)}")
    sides = args.side
    table: dict[str, dict[str, float]] = {}
    for side in sides:
        if side in ("ours", "baseline"):
            mine = ops
        elif side == "floor":
            mine = [op for op in ops if op in floors.FLOOR]
        else:
            mine = [op for op in ops if op in _peer_ops(side)]
        table[side] = counts(side, mine, valgrind) if mine else {}
    print("| operation | " + " | ".join(sides) + " | " + " | ".join(f"ours/{s}" for s in sides[1:]) + " |")
    print("|---" * (2 * len(sides)) + "|")
    for op in ops:
        row = [table[side].get(op) for side in sides]
        ours = row[0]
        cells = [f"{x:,.0f}" if x is not None else "-" for x in row]
        ratios = [f"{ours / x:.2f}" if x and ours is not None else "-" for x in row[1:]]
        print(f"| {op} | " + " | ".join(cells + ratios) + " |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
