"""``python -m dshtools journal list|show|purge DB`` (docs/durable.md#cli)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dshtools import AbortController, ToolDefinition, ToolExecutionInput, ToolRegistry
from dshtools._cli.main import main
from dshtools.durable import SqliteJournal
from tests.durable.conftest import claim_in_dead_process


@pytest.fixture
def db(tmp_path: Path) -> str:
    """A journal with session s1 (a success and an unknown tool) and s2 (a
    dead process's claim)."""
    path = str(tmp_path / "agent.db")
    with SqliteJournal(path) as journal, ToolRegistry(journal=journal) as registry:
        registry.register(ToolDefinition("t", "d", {"type": "object"}, lambda _a, _r: 1))
        signal = AbortController().signal
        registry.execute(ToolExecutionInput("c1", "t", {}, signal, session="s1"))
        registry.execute(ToolExecutionInput("c2", "nope", {}, signal, session="s1"))
    claim_in_dead_process(path, "s2", "x", "t")
    return path


@pytest.mark.timeout(60)
def test_list_counts_each_sessions_keys_per_state(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["journal", "list", db]) == 0
    lines = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert lines == [["SESSION", "CLAIMED", "SETTLED"], ["s1", "0", "2"], ["s2", "1", "0"]]


@pytest.mark.timeout(60)
def test_show_gives_each_calls_outcome_and_names_a_dead_owners_claim_in_doubt(
    db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["journal", "show", db, "s1"]) == 0
    shown = capsys.readouterr().out
    assert "SUCCESS" in shown and "UNKNOWN_TOOL" in shown
    assert main(["journal", "show", db, "s2"]) == 0
    assert "IN DOUBT (owner died)" in capsys.readouterr().out


@pytest.mark.timeout(60)
def test_purge_deletes_old_settled_records(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["journal", "purge", db, "--older-than", "0"]) == 0
    assert capsys.readouterr().out == "purged 2 settled records\n"
    with SqliteJournal(db) as journal:
        assert journal.sessions() == [("s2", 1, 0)]


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "args, error",
    [
        (["journal", "show", "{db}"], "SESSION is needed by show"),
        (["journal", "list", "{db}", "s1"], "SESSION is needed by show"),
        (["journal", "purge", "{db}"], "--older-than is needed by purge"),
        (["journal", "list", "{missing}"], "no journal file"),
        (["journal", "show", "{db}", "nosuch"], "no calls of session 'nosuch'"),
    ],
)
def test_usage_errors_exit_2(
    db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], error: str
) -> None:
    argv = [a.format(db=db, missing=str(tmp_path / "missing.db")) for a in args]
    assert main(argv) == 2
    assert error in capsys.readouterr().err
    assert not (tmp_path / "missing.db").exists()
