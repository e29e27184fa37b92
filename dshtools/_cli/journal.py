"""``python -m dshtools journal list|show|purge DB`` (docs/durable.md#cli):
what a journal holds, read without running anything. ``DB`` is a SQLite
file or a ``postgresql://`` DSN; a SQLite file that does not exist is a
usage error (it is never created here). Output is plain text on stdout."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import TextIO

from .._journal import Journal, JournalError, SqliteJournal
from .inputs import UsageError
from .table import outcome_of

__all__ = ["cmd_journal", "open_journal"]


def open_journal(db: str, *, create: bool = False) -> Journal:
    """The journal ``DB`` names: a ``postgresql://`` DSN, else a SQLite
    file (created only with ``create``). ``UsageError`` when it cannot be opened."""
    try:
        if db.startswith(("postgresql://", "postgres://")):
            from .._journal.postgres import PostgresJournal

            return PostgresJournal(db)
        if not create and not os.path.isfile(db):
            raise UsageError(f"no journal file {db!r}")
        return SqliteJournal(db)
    except JournalError as exc:
        raise UsageError(str(exc)) from exc


def _rows(out: TextIO, header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> None:
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=False)]
    for row in (header, *rows):
        out.write("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() + "\n")


def cmd_journal(ns: argparse.Namespace) -> int:
    """``list``: each session with its keys per state; ``show SESSION``: its
    calls (state, outcome, attempts, owner); ``purge --older-than S``:
    delete settled records older than S seconds. Exit 0; 2 for a journal
    that cannot be opened or read, or a session it holds no call of."""
    journal = open_journal(ns.db)
    out = sys.stdout
    try:
        if ns.action == "list":
            sessions = journal.sessions()
            _rows(out, ("SESSION", "CLAIMED", "SETTLED"), [(s, str(c), str(d)) for s, c, d in sessions])
        elif ns.action == "show":
            records = journal.calls(ns.session)
            if not records:
                known = ", ".join(repr(s) for s, _c, _d in journal.sessions()[:10]) or "none"
                raise UsageError(f"no calls of session {ns.session!r} in {ns.db} (sessions: {known})")
            rows = []
            for record in records:
                if record.result is not None:
                    outcome = outcome_of(record.result)
                else:
                    outcome = "running" if journal.owner_alive(record) else "IN DOUBT (owner died)"
                rows.append((record.call_id, record.tool, record.state, outcome, str(record.attempts), record.owner))
            _rows(out, ("CALL ID", "TOOL", "STATE", "OUTCOME", "ATTEMPTS", "OWNER"), rows)
        else:
            out.write(f"purged {journal.purge(ns.older_than)} settled records\n")
    except JournalError as exc:
        raise UsageError(str(exc)) from exc
    finally:
        journal.close()
    return 0
