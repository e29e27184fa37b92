"""The journal's own cost (issue 32, docs/durable.md#cost): a journaled
no-op call minus an unjournaled one, against the floor of the same two
commits (claim, then settle) made with raw ``sqlite3`` on the same kind of
file, in the same run; at both durability settings.

``python -m benchmarks.journal [--calls N]`` prints microseconds per call
and the ratio; each figure is the best of seven rounds.
``python -m benchmarks.journal --soak 2000 [--postgres DSN]`` runs the
crash suite's killed-and-resumed turns (tests/durable/crash.py) until at
least that many SIGKILLs, checking its invariants after every turn, and
prints the kills per phase and how the keys were answered.
"""

from __future__ import annotations

import argparse
import importlib.util
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from dshtools import AbortController, ToolDefinition, ToolExecutionInput, ToolRegistry
from dshtools.durable import Durability, Journal, SqliteJournal

ROUNDS = 7


def _noop(_args: object, _run: object) -> None:
    return None


def _registry(journal: Journal | None) -> ToolRegistry:
    registry = ToolRegistry(journal=journal)
    registry.register(ToolDefinition("noop", "does nothing", {"type": "object"}, _noop))
    return registry


def per_call_us(registry: ToolRegistry, calls: int, session: str | None) -> float:
    signal = AbortController().signal
    inputs = [ToolExecutionInput(f"c{i}", "noop", {}, signal, session=session) for i in range(calls)]
    start = time.perf_counter()
    for call in inputs:
        registry.execute(call)
    return (time.perf_counter() - start) / calls * 1e6


def raw_commits_us(path: Path, calls: int, synchronous: str) -> float:
    """Two autocommitted statements per call (an insert, then an update), as the journal makes."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    conn.execute(
        "CREATE TABLE IF NOT EXISTS t (s TEXT, k TEXT, state TEXT, result TEXT, PRIMARY KEY (s, k)) WITHOUT ROWID"
    )
    start = time.perf_counter()
    for i in range(calls):
        conn.execute("INSERT INTO t VALUES (?, ?, 'claimed', NULL) ON CONFLICT DO NOTHING", ("s", str(i)))
        conn.execute("UPDATE t SET state = 'settled', result = ? WHERE s = ? AND k = ?", ("{}", "s", str(i)))
    elapsed = time.perf_counter() - start
    conn.close()
    return elapsed / calls * 1e6


def measure(durability: Durability, calls: int) -> dict[str, float]:
    """The three figures, each the best of ``ROUNDS`` rounds that take
    them one after another (so a busy moment of the machine hits all three)."""
    synchronous = "NORMAL" if durability == "process" else "FULL"
    plain, journaled, raw = [], [], []
    with tempfile.TemporaryDirectory() as tmp, _registry(None) as bare:
        per_call_us(bare, min(calls, 200), None)  # warm-up: the pool's worker, the caches
        for n in range(ROUNDS):
            plain.append(per_call_us(bare, calls, None))
            with (
                SqliteJournal(Path(tmp) / f"j{n}.db", durability=durability) as journal,
                _registry(journal) as registry,
            ):
                journaled.append(per_call_us(registry, calls, f"s{n}"))
            raw.append(raw_commits_us(Path(tmp) / f"raw{n}.db", calls, synchronous))
    own = min(journaled) - min(plain)
    return {
        "unjournaled_us": min(plain),
        "journaled_us": min(journaled),
        "journal_own_us": own,
        "raw_two_commits_us": min(raw),
        "ratio_to_raw": own / min(raw),
    }


def dbos_step_us(steps: int) -> float | None:
    """Microseconds per ``@DBOS.step`` on SQLite (benchmarks/journal_dbos.py,
    in a child process), or ``None`` when ``dbos`` (bench extra) is not installed."""
    if importlib.util.find_spec("dbos") is None:
        return None
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.journal_dbos", str(steps)],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    return float(out.stdout.strip().splitlines()[-1])


def run(*, quick: bool) -> dict[str, Any]:
    """The ``journal`` section of ``python -m benchmarks``: the figures of
    ``measure`` at each durability, keyed ``<durability>.<figure>``, and
    ``dbos_step_us`` (``None`` without the bench extra)."""
    figures: dict[str, Any] = {}
    for durability in ("process", "power"):
        calls = (50 if quick else 2000) if durability == "process" else (10 if quick else 200)
        figures[durability] = measure(durability, calls)
    figures["dbos_step_us"] = dbos_step_us(5 if quick else 200)
    return figures


def soak(kills: int, postgres: str | None = None) -> tuple[dict[str, int], dict[str, int]]:
    """The crash suite until ``kills`` SIGKILLs, on a fresh SQLite file or,
    given a ``postgresql://`` DSN, on that database: the kills per phase and
    how the completed turns answered their keys."""
    from tests.durable.crash import Zygote, crash_turns

    zygote = Zygote()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            spec = postgres or str(Path(tmp) / "soak.db")
            counts = crash_turns(zygote, spec, Path(tmp), kills=kills, seed=1000)
    finally:
        zygote.close()
    return dict(counts.kills), dict(counts.answers)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--soak", type=int, default=0, help="run the crash suite until this many kills")
    parser.add_argument("--postgres", metavar="DSN", help="soak on this PostgreSQL database instead of SQLite")
    args = parser.parse_args()
    if args.soak:
        start = time.monotonic()
        kills, answers = soak(args.soak, args.postgres)
        print("soak kills per phase:", kills, "total", sum(kills.values()), f"in {time.monotonic() - start:.0f} s")
        print("answers:", answers)
        return
    for durability in ("process", "power"):
        figures = measure(durability, args.calls if durability == "process" else max(50, args.calls // 10))
        print(durability, {k: round(v, 2) for k, v in figures.items()})
    print("dbos_step_us", dbos_step_us(200))


if __name__ == "__main__":
    main()
