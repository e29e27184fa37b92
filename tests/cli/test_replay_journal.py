"""``replay --journal DB --session ID`` resumes a transcript after kill -9
(docs/durable.md, docs/contract.md#journal): settled calls come back from
the journal, calls never started run, a dead run's claims are reported
``OUTCOME_UNKNOWN``; the user's registry is unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.durable.conftest import claim_in_dead_process
from tests.helpers.processes import run_cli

TOOLS = """
import os
from dshtools import ToolDefinition, ToolRegistry


def _effect(args, run):
    with open(os.environ["EFFECTS"], "a") as f:
        f.write(args["key"] + "\\n")
    return args["key"]


registry = ToolRegistry()
registry.register(ToolDefinition("effect", "A side effect.", {"type": "object"}, _effect))
"""

TRANSCRIPT = [
    {
        "role": "assistant",
        "tool_calls": [
            {"id": k, "type": "function", "function": {"name": "effect", "arguments": json.dumps({"key": k})}}
            for k in ("a", "b")
        ],
    }
]


@pytest.mark.timeout(120)
def test_replay_with_a_journal_replays_settled_calls_and_reports_a_dead_runs_claim(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "journal_tools.py").write_text(TOOLS)
    (tmp_path / "t.json").write_text(json.dumps(TRANSCRIPT))
    effects = tmp_path / "effects"
    db = str(tmp_path / "agent.db")
    args = ("replay", "t.json", "--tools", "journal_tools:registry", "--journal", db, "--json")
    monkeypatch.setenv("EFFECTS", str(effects))

    first = run_cli(tmp_path, *args, "--session", "s1")
    again = run_cli(tmp_path, *args, "--session", "s1")
    assert first.returncode == 0 and again.returncode == 0, first.stderr + again.stderr
    assert [m["content"] for m in json.loads(again.stdout)] == ["a", "b"]
    assert "SUCCESS (replayed)" in again.stderr
    assert effects.read_text() == "a\nb\n"  # the second run ran nothing

    claim_in_dead_process(db, "s2", "b", "effect")  # a run killed while b was running
    resumed = run_cli(tmp_path, *args, "--session", "s2")
    assert resumed.returncode == 0, resumed.stderr
    answers = [m["content"] for m in json.loads(resumed.stdout)]
    assert answers[0] == "a" and "effects are unknown" in answers[1]
    unknown_row = next(line for line in resumed.stderr.splitlines() if "OUTCOME_UNKNOWN" in line)
    assert unknown_row.split("OUTCOME_UNKNOWN", 1)[1].split()[0] == "yes", unknown_row  # its body did run
    replayed_row = next(line for line in again.stderr.splitlines() if "(replayed)" in line)
    assert replayed_row.split("(replayed)", 1)[1].split()[0] == "yes", replayed_row
    assert effects.read_text() == "a\nb\na\n"


def test_journal_and_session_go_together(tmp_path: Path) -> None:
    (tmp_path / "t.json").write_text(json.dumps(TRANSCRIPT))
    proc = run_cli(tmp_path, "replay", "t.json", "--tools", "x:y", "--session", "s1")
    assert proc.returncode == 2 and "--journal and --session go together" in proc.stderr
