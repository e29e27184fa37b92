"""The demo's crash and resume (issue 32 item 5; docs/contract.md#journal),
in process: a real agent process is killed with SIGKILL once its slow body
said so on a pipe (never after a sleep), then its session is resumed here.
The printed resume of a whole demo run is pinned in test_demo_and_replay.py."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from dshtools import OUTCOME_UNKNOWN
from dshtools._cli.demo import dshtools_path
from dshtools._cli.demo_crash import SLOW_CALL, CrashedAgent, report_crash


def _effects(path: Path) -> list[tuple[str, str, int]]:
    """The side-effect file: (call id, tool, pid that ran the body) per body run."""
    return [(c, t, int(p)) for c, t, p in (line.split() for line in path.read_text().splitlines())]


@pytest.mark.timeout(60)
def test_the_resume_replays_the_settled_call_reports_the_killed_one_and_runs_the_unstarted_one(
    tmp_path: Path,
) -> None:
    with CrashedAgent(str(tmp_path), dshtools_path()) as agent:
        assert agent.kill(), agent.failure
        assert agent.process.returncode == -9  # SIGKILL, not an exit of its own
        assert agent.pid in agent.killed_tree and agent.alive_after_kill() == []
        # At the kill: the first body ran and the slow one started; the third never did.
        assert _effects(tmp_path / "effects.log") == [
            ("call_c1", "save_note", agent.pid),
            (SLOW_CALL, "send_email", agent.pid),
        ]
        resumed = agent.resume()
        again = agent.resume()

    assert resumed.repaired["call_c1"] == '{"saved": "draft saved"}'
    assert "effects are unknown" in resumed.repaired[SLOW_CALL]
    assert "never run" in resumed.repaired["call_c3"]
    first, killed, unstarted = (resumed.results[c] for c in ("call_c1", SLOW_CALL, "call_c3"))
    assert first.meta is not None and first.meta.get("replayed") is True and not first.is_error
    assert killed.code == OUTCOME_UNKNOWN and killed.body_invoked
    assert unstarted.body_invoked and not unstarted.is_error
    assert not (unstarted.meta or {}).get("replayed")
    # Each non-idempotent body ran once: two in the killed agent, one here;
    # a second resume replays all three and runs nothing.
    effects = _effects(tmp_path / "effects.log")
    assert effects == [
        ("call_c1", "save_note", agent.pid),
        (SLOW_CALL, "send_email", agent.pid),
        ("call_c3", "post_status", os.getpid()),
    ]
    assert all(r.meta is not None and r.meta.get("replayed") is True for r in again.results.values())
    assert again.results[SLOW_CALL].code == OUTCOME_UNKNOWN
    assert again.effects == resumed.effects


@pytest.mark.timeout(60)
def test_the_report_prints_each_calls_fate_and_passes_its_checks(tmp_path: Path) -> None:
    out = io.StringIO()
    with CrashedAgent(str(tmp_path), dshtools_path()) as agent:
        assert agent.kill(), agent.failure
        assert report_crash(agent, out)
    text = out.getvalue()
    rows = {line.split()[0]: line for line in text.splitlines() if line.startswith("call_c")}
    assert "replayed from the journal (body not run again)" in rows["call_c1"]
    assert "1 (the killed agent)" in rows["call_c1"]
    assert "OUTCOME_UNKNOWN (killed between claim and settle; not run again)" in rows[SLOW_CALL]
    assert "ran now (it never started before)" in rows["call_c3"] and "1 (this process)" in rows["call_c3"]
    assert str(tmp_path) not in text  # no temporary path anywhere, model texts included
    checks = [line for line in text.splitlines() if line.startswith("  ok   crash: ")]
    assert len(checks) == 2 and "call_c1 x1, call_c2 x1, call_c3 x1" in checks[0]


@pytest.mark.timeout(60)
def test_an_agent_that_dies_before_its_slow_call_is_a_failed_check_not_a_hang(tmp_path: Path) -> None:
    """The pipe's end of file, not a timeout, tells the demo the agent died
    first: here every body fails (its side-effect file is a directory), so
    the slow body never says it started and the agent exits."""
    (tmp_path / "effects.log").mkdir()
    out = io.StringIO()
    with CrashedAgent(str(tmp_path), dshtools_path()) as agent:
        assert not agent.kill()
        assert agent.failure is not None and agent.failure.startswith("the agent did not reach its slow call: ")
        assert not report_crash(agent, out)
    assert "  FAIL crash: the agent did not reach its slow call" in out.getvalue()
