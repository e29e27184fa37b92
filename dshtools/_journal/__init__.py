"""The durable-call journal (docs/contract.md#journal): records, owners,
the shared rules over SQL, and the SQLite store. The PostgreSQL store
(``postgres``) imports psycopg and is imported on first use."""

from __future__ import annotations

from .base import DEFAULT_LEASE, Journal
from .records import CallRecord, JournalError
from .sqlite import Durability, SqliteJournal

__all__ = ["DEFAULT_LEASE", "CallRecord", "Durability", "Journal", "JournalError", "SqliteJournal"]
