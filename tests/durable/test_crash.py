"""The crash suite (issue 32, docs/durable.md#crash-suite): an agent
process running journaled turns is SIGKILLed at seeded points and at
random times, then resumed until its turn completes. Invariants (checked
by ``crash.Turn.check``): a non-idempotent body ran at most once per key;
every key has exactly one final result, stable on later executions;
``OUTCOME_UNKNOWN`` exactly for the keys killed between claim and settle;
every settled result equals what the body returned."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.journals import journal_spec

from .crash import SEEDED, Turn, Zygote, crash_turns
from .crash_agent import KEYS


@pytest.fixture(scope="module")
def zygote() -> Iterator[Zygote]:
    z = Zygote()
    yield z
    z.close()


@pytest.mark.timeout(600)
def test_sqlite_crash_suite_kills_at_every_phase_and_each_key_has_one_honest_result(
    zygote: Zygote, tmp_path: Path
) -> None:
    kills, answers = crash_turns(zygote, journal_spec("sqlite", tmp_path), tmp_path, kills=200, seed=32)
    print("kills per phase (sqlite):", dict(kills), "total", sum(kills.values()), "answers:", dict(answers))
    assert all(kills[phase] > 0 for phase in (*SEEDED, "random"))
    # Kills between claim and settle left keys whose answer is OUTCOME_UNKNOWN.
    assert answers["outcome unknown"] > 0


@pytest.mark.timeout(600)
def test_crash_suite_with_a_process_backend_tool_killed_from_its_worker(zygote: Zygote, tmp_path: Path) -> None:
    kills, answers = crash_turns(zygote, journal_spec("sqlite", tmp_path), tmp_path, kills=10, seed=6, process=True)
    print("kills per phase (sqlite, process backend):", dict(kills), "answers:", dict(answers))
    assert kills["mid-body"] > 0


@pytest.mark.timeout(300)
def test_postgres_crash_suite_and_four_processes_resuming_one_session(zygote: Zygote, tmp_path: Path) -> None:
    spec = journal_spec("postgres", tmp_path)
    kills, answers = crash_turns(zygote, spec, tmp_path, kills=20, seed=7)
    print("kills per phase (postgres):", dict(kills), "answers:", dict(answers))
    rng = random.Random(4)
    for n in range(5):
        turn = Turn(spec, tmp_path, f"four-{n}")
        phase, key = rng.choice(SEEDED), rng.choice(KEYS)
        [code] = zygote.run([turn.request([phase, key])])
        if code == -9:
            turn.after_kill(phase, key, [])
        codes = zygote.run([turn.request(None) for _ in range(4)])  # four resume at once
        assert codes == [0, 0, 0, 0]
        turn.check(json.loads(turn.out.read_text()))
