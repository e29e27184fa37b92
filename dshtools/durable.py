"""Durable calls: a journal that survives ``kill -9`` (docs/durable.md,
docs/contract.md#journal).

``ToolRegistry(journal=SqliteJournal("agent.db"))`` records every call's
key ``(session, call_id)`` before its body starts and its final result
before anyone sees it, so a resumed agent replays settled calls, runs the
ones that never started, and gets ``OUTCOME_UNKNOWN`` for the ones a dead
process was running (an ``idempotent`` tool runs again instead).
``PostgresJournal`` (the ``postgres`` extra: psycopg 3) serves many
processes and machines; it is imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._journal import DEFAULT_LEASE, CallRecord, Durability, Journal, JournalError, SqliteJournal

if TYPE_CHECKING:
    from ._journal.postgres import PostgresJournal

__all__ = ["DEFAULT_LEASE", "CallRecord", "Durability", "Journal", "JournalError", "PostgresJournal", "SqliteJournal"]

for _cls in (CallRecord, Journal, JournalError, SqliteJournal):
    _cls.__module__ = __name__


def __getattr__(name: str) -> Any:
    if name == "PostgresJournal":
        from ._journal.postgres import PostgresJournal

        PostgresJournal.__module__ = __name__
        return PostgresJournal
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
