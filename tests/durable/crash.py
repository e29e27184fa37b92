"""The crash suite's driver, shared by tests/durable/test_crash.py and the
soak benchmark (``python -m benchmarks.journal --soak``): the agent
zygote, one killed-and-resumed turn, and the invariants checked after it
(docs/durable.md#crash-suite)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any, NamedTuple

from dshtools import OUTCOME_UNKNOWN
from tests.helpers.journals import open_journal

from .crash_agent import IDEMPOTENT, IN_PROCESS, KEYS

ROOT = Path(__file__).resolve().parent.parent.parent
SEEDED = ("before-claim", "after-claim", "mid-body", "before-settle", "after-settle")
BETWEEN = frozenset({"after-claim", "mid-body", "before-settle"})

__all__ = ["BETWEEN", "SEEDED", "CrashCounts", "Turn", "Zygote", "crash_turns"]


class Zygote:
    """The agent zygote (crash_agent.py): ``run(requests)`` forks one agent
    per request at once and returns their exit codes (-9: SIGKILLed)."""

    def __init__(self) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path])}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "from tests.durable.crash_agent import zygote; zygote()"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=ROOT,
        )

    def run(self, requests: list[dict[str, Any]]) -> list[int]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(requests) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, "the agent zygote died"
        codes: list[int] = json.loads(line)
        return codes

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


class Turn:
    """One session's turn, killed and resumed; records what the invariants need."""

    def __init__(self, spec: str, tmp: Path, name: str, *, process: bool = False) -> None:
        self.spec = spec
        self.session = name + "-" + os.urandom(6).hex()
        self.effects = tmp / f"{name}.effects"
        self.out = tmp / f"{name}.json"
        self.process = process
        self.keys = (*KEYS, IN_PROCESS) if process else KEYS
        self.expected_unknown: set[str] = set()
        self.kills: Counter[str] = Counter()

    def request(self, kill: list[object] | None) -> dict[str, Any]:
        return {
            "journal": self.spec,
            "session": self.session,
            "effects": str(self.effects),
            "out": str(self.out),
            "kill": kill,
            "process": self.process,
        }

    def open_keys(self) -> tuple[list[str], list[str]]:
        """(keys without a settled record, keys claimed and not settled)."""
        journal = open_journal(self.spec)
        try:
            records = {r.call_id: r for r in journal.calls(self.session)}
        finally:
            journal.close()
        unsettled = [k for k in self.keys if k not in records or records[k].state != "settled"]
        claimed = [k for k, r in records.items() if r.state == "claimed"]
        return unsettled, claimed

    def after_kill(self, phase: str, key: str | None, before: list[str]) -> None:
        """Record a kill; ``before``: the keys claimed (not settled) before the run."""
        self.kills[phase] += 1
        _, claimed = self.open_keys()
        # Between claim and settle when the process died: the key's answer
        # is OUTCOME_UNKNOWN unless its tool is idempotent (it runs again).
        self.expected_unknown.update(k for k in claimed if k not in IDEMPOTENT)
        if key is not None and key not in before:
            assert (key in claimed) == (phase in BETWEEN), (phase, key, claimed)

    def check(self, results: dict[str, Any]) -> Counter[str]:
        """The invariants, on the results of the run that completed the turn;
        returns how the keys were answered (``ran once``, ``outcome unknown``,
        ``idempotent, ran again``, ``idempotent, ran once``)."""
        answers: Counter[str] = Counter()
        runs = Counter(self.effects.read_text().split()) if self.effects.exists() else Counter()
        journal = open_journal(self.spec)
        try:
            records = {r.call_id: r for r in journal.calls(self.session)}
        finally:
            journal.close()
        assert set(records) == set(self.keys)
        for key in self.keys:
            record, result = records[key], results[key]
            assert record.state == "settled", key
            assert record.result is not None
            assert record.result.code == result["code"], key
            if key in IDEMPOTENT:
                assert result["code"] is None and result["value"] == key, (key, result)
                assert record.attempts >= runs[key] >= 1
                answers["idempotent, ran again" if runs[key] > 1 else "idempotent, ran once"] += 1
            else:
                assert runs[key] <= 1, f"{key} ran {runs[key]} times"
                if key in self.expected_unknown:
                    assert result["code"] == OUTCOME_UNKNOWN, (key, result)
                    assert result["body_invoked"] is True
                    answers["outcome unknown"] += 1
                else:
                    assert result["code"] is None and result["value"] == key, (key, result)
                    assert runs[key] == 1
                    answers["ran once"] += 1
        return answers


class CrashCounts(NamedTuple):
    """What ``crash_turns`` saw: SIGKILLs per phase, and the answers the
    completed turns gave their keys (``Turn.check``)."""

    kills: Counter[str]
    answers: Counter[str]


def crash_turns(zygote: Zygote, spec: str, tmp: Path, *, kills: int, seed: int, process: bool = False) -> CrashCounts:
    """Run killed-and-resumed turns until at least ``kills`` SIGKILLs (a
    random kill may come too late to land), checking the invariants after
    each turn; returns the kills per phase and the keys' answers."""
    rng = random.Random(seed)
    total: Counter[str] = Counter()
    answers: Counter[str] = Counter()
    n = 0
    while sum(total.values()) < kills:
        n += 1
        turn = Turn(spec, tmp, f"t{seed}-{n}", process=process)
        for _ in range(rng.randint(3, 6)):
            unsettled, before = turn.open_keys()
            if not unsettled:
                break
            phase: str
            key: str | None
            if rng.random() < 0.25:
                phase, key, kill = "random", None, ["random", rng.uniform(0.0, 0.04)]
            else:
                phase, key = rng.choice(SEEDED), rng.choice(unsettled)
                kill = [phase, key]
            [code] = zygote.run([turn.request(kill)])
            if code == -9:
                turn.after_kill(phase, key, before)
            else:
                assert code == 0, code
        while True:  # resume until the turn completes
            [code] = zygote.run([turn.request(None)])
            if code == 0:
                break
        first = json.loads(turn.out.read_text())
        answers += turn.check(first)
        [code] = zygote.run([turn.request(None)])  # stable on a later execution
        assert code == 0
        again = json.loads(turn.out.read_text())
        assert {k: (v["code"], v["value"]) for k, v in again.items()} == {
            k: (v["code"], v["value"]) for k, v in first.items()
        }
        assert all(v["replayed"] for v in again.values())
        total += turn.kills
    return CrashCounts(total, answers)
