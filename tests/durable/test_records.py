"""What a journal stores and how it reads it back (docs/contract.md#journal):
results as checked JSON, arguments or their digest, records checked on
construction, and the errors of a journal that cannot be used."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from dshtools import AbortController, AbortError, ToolFailure, ToolSuccess
from dshtools._core.freeze import freeze
from dshtools._journal.records import arguments_text, decode_result, encode_result
from dshtools._types.calls import aborted, failure
from dshtools.durable import CallRecord, JournalError, SqliteJournal

GOOD: dict[str, Any] = {"format": 1, "body_invoked": True, "content": [], "contexts": [], "meta": {}, "value": 1}


@pytest.mark.parametrize(
    "result",
    [
        ToolSuccess(freeze({"a": [1, "two"]}), "text", {"k": 1}, (freeze({"ctx": True}),), body_invoked=True),
        failure("it broke", name="ToolError", code="TOOL_ERROR", body_invoked=True),
        ToolFailure(failure("x", name="N", code=None).error, "Error: x"),
    ],
)
def test_a_result_comes_back_equal(result: Any) -> None:
    assert decode_result(encode_result(result), "here") == result


def test_what_json_cannot_hold_is_kept_as_its_text() -> None:
    result = aborted(AbortError("user stop"), invoked=True)
    back = decode_result(encode_result(result), "here")
    assert back.code == "ABORTED" and "user stop" in str(back.meta["reason"])
    odd = ToolSuccess(object(), "x", {"when": b"bytes"})
    back = decode_result(encode_result(odd), "here")
    assert isinstance(back, ToolSuccess) and back.value.startswith("<object") and back.meta["when"] == "b'bytes'"


@pytest.mark.parametrize(
    "text",
    [
        b"{}",
        "[1]",
        "{broken",
        json.dumps({**GOOD, "format": 2}),
        json.dumps({**GOOD, "format": True}),
        json.dumps({**GOOD, "body_invoked": 1}),
        json.dumps({**GOOD, "content": {}}),
        json.dumps({**GOOD, "content": [{"text": "no type"}]}),
        json.dumps({**GOOD, "contexts": [1]}),
        json.dumps({**GOOD, "meta": []}),
        json.dumps({k: v for k, v in GOOD.items() if k != "value"}),
        json.dumps({**GOOD, "error": []}),
        json.dumps({**GOOD, "error": {"message": "m", "name": 3, "code": None}}),
        json.dumps({**GOOD, "error": {"message": None, "name": "n", "code": None}}),
        "[" * 100_000 + "]" * 100_000,
    ],
)
def test_a_stored_result_this_library_did_not_write_is_a_journal_error(text: object) -> None:
    with pytest.raises(JournalError, match="here"):
        decode_result(text, "here")


def test_arguments_are_stored_or_only_their_digest() -> None:
    assert arguments_text({"to": "a@b.c"}, store=True) == '{"to": "a@b.c"}'
    digest = arguments_text({"to": "a@b.c"}, store=False)
    assert digest.startswith("sha256:") and "a@b.c" not in digest
    assert arguments_text(object(), store=True).startswith("<object")


@pytest.mark.parametrize(
    "change",
    [{"claimed_at": "now"}, {"attempts": -1}, {"attempts": True}, {"state": "gone"}, {"result": None}, {"tool": 1}],
)
def test_a_record_is_checked_when_it_is_made(change: dict[str, object]) -> None:
    fields: dict[str, Any] = {
        "session": "s",
        "call_id": "c",
        "tool": "t",
        "state": "settled",
        "result": ToolSuccess(1, "1"),
        "owner": "o",
        "claimed_at": None,
        "settled_at": 1.0,
        "attempts": 1,
    }
    with pytest.raises(JournalError):
        CallRecord(**{**fields, **change})


def test_store_arguments_false_keeps_no_argument_in_the_file(tmp_path: Path) -> None:
    from dshtools import ToolDefinition, ToolExecutionInput, ToolRegistry

    path = tmp_path / "j.db"
    with SqliteJournal(path, store_arguments=False) as journal, ToolRegistry(journal=journal) as registry:
        registry.register(ToolDefinition("t", "d", {"type": "object"}, lambda _a, _r: None))
        registry.execute(ToolExecutionInput("c", "t", {"secret": "hunter2"}, AbortController().signal, session="s"))
    database = sqlite3.connect(path)
    [(stored,)] = database.execute("SELECT arguments FROM dshtools_calls").fetchall()
    database.close()
    assert stored.startswith("sha256:") and "hunter2" not in path.read_bytes().decode("latin-1")


@pytest.mark.parametrize(
    "options, error",
    [
        ({"durability": "sometimes"}, ValueError),
        ({"lease": 0}, ValueError),
        ({"lease": float("nan")}, ValueError),
        ({"store_arguments": 1}, TypeError),
    ],
)
def test_bad_options_are_refused(tmp_path: Path, options: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        SqliteJournal(tmp_path / "j.db", **options)


def test_a_file_that_is_not_a_journal_or_cannot_be_opened_is_a_journal_error(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("not a database " * 100)
    with pytest.raises(JournalError, match="not a dshtools journal"):
        SqliteJournal(tmp_path / "notes.txt")
    other = tmp_path / "other.db"
    database = sqlite3.connect(other)
    database.execute("CREATE TABLE dshtools_calls (x)")
    database.close()
    with pytest.raises(JournalError, match="not a dshtools journal"):
        SqliteJournal(other)
    with pytest.raises(JournalError, match="cannot open"):
        SqliteJournal(tmp_path / "missing-dir" / "j.db")


def test_a_closed_journal_refuses_every_use_and_closes_twice(tmp_path: Path) -> None:
    journal = SqliteJournal(tmp_path / "j.db")
    journal.close()
    journal.close()
    with pytest.raises(JournalError, match="closed"):
        journal.lookup("s", "c")
    assert "j.db" in repr(journal)
