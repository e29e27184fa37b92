"""``PostgresJournal``: the journal on a PostgreSQL server, for many
processes and machines (docs/contract.md#journal, docs/durable.md).

Guarantees:

* Every statement is its own committed transaction on the server; a
  committed record survives the crash of the process (and, with the
  server's default ``fsync``/``synchronous_commit``, of the server's
  machine).
* An owner's death is seen at once wherever it runs: a claim holds a
  session-level advisory lock of its key on this journal's connection
  until it is settled; the server releases it when the connection dies,
  so a key whose lock can be taken is a dead owner's.
* The DSN's password never reaches a log, an exception text or ``repr``:
  errors carry the server's message with the password (if it appears)
  replaced, and ``repr`` shows the host and database only.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any, Final

import psycopg
from psycopg.conninfo import conninfo_to_dict

from .base import DEFAULT_LEASE, Journal
from .records import JournalError

__all__ = ["PostgresJournal"]

_SCHEMA: Final = (
    "CREATE TABLE IF NOT EXISTS dshtools_calls ("
    " session TEXT NOT NULL, call_id TEXT NOT NULL, tool TEXT NOT NULL, state TEXT NOT NULL,"
    " owner TEXT NOT NULL, claimed_at DOUBLE PRECISION, settled_at DOUBLE PRECISION, attempts INTEGER NOT NULL,"
    " result TEXT, lease_until DOUBLE PRECISION, arguments TEXT, PRIMARY KEY (session, call_id))",
    "CREATE TABLE IF NOT EXISTS dshtools_tickets (key TEXT PRIMARY KEY, expires_at DOUBLE PRECISION NOT NULL)",
)
_CHECK: Final = (
    "SELECT session, call_id, tool, state, owner, claimed_at, settled_at, attempts, result, lease_until,"
    " arguments FROM dshtools_calls LIMIT 0"
)
_SCHEMA_LOCK: Final = 0x6473687400000000  # the advisory lock held while the tables are created


def _lock_id(session: str, call_id: str) -> int:
    """The key's advisory lock: 64 bits of a digest of the key."""
    digest = hashlib.sha256(f"dshtools:{len(session)}:{session}:{call_id}".encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class PostgresJournal(Journal):
    """A journal in the PostgreSQL database named by ``dsn`` (a libpq
    connection string or URL), its tables created if missing.

    ``PostgresJournal(dsn, *, store_arguments=True, lease=60.0)``:
    ``store_arguments=False`` stores a SHA-256 digest of each call's
    arguments instead; ``lease`` is kept for the ``Journal`` interface
    (owners are judged by their connection's advisory lock here). Raises
    ``JournalError`` (without the password) when the server cannot be
    reached or the tables are not a journal's. Thread-safe: one connection,
    one statement at a time. Source: docs/contract.md#journal."""

    _placeholder = "%s"

    def __init__(self, dsn: str, *, store_arguments: bool = True, lease: float = DEFAULT_LEASE) -> None:
        if not isinstance(dsn, str):
            raise TypeError(f"dsn must be a str, not {type(dsn).__name__}")
        super().__init__(store_arguments=store_arguments, lease=lease)
        try:
            parts = conninfo_to_dict(dsn)
        except Exception:
            raise JournalError("PostgresJournal: the DSN is not a valid connection string") from None
        password = parts.get("password")
        self._secret = str(password) if password else None
        self._where = f"{parts.get('host', 'localhost')}:{parts.get('port', 5432)}/{parts.get('dbname', '')}"
        try:
            self._conn = psycopg.connect(dsn, autocommit=True)
        except Exception as exc:
            raise self._error(exc) from None
        try:
            # Concurrent CREATE ... IF NOT EXISTS can collide in PostgreSQL's
            # catalogs: the first journal creates the tables under a lock.
            with self._conn.transaction():
                self._conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
                for statement in _SCHEMA:
                    self._conn.execute(statement)
            self._conn.execute(_CHECK)
        except Exception as exc:
            self._conn.close()
            raise JournalError(f"{self._where} is not a dshtools journal: {self._clean(exc)}") from None

    def __repr__(self) -> str:
        return f"PostgresJournal({self._where!r})"

    def _clean(self, exc: BaseException) -> str:
        text = str(exc) if not isinstance(exc, JournalError) else exc.args[0]
        if self._secret:
            text = text.replace(self._secret, "***")
        return text

    def _error(self, exc: BaseException) -> JournalError:
        return JournalError(f"PostgresJournal({self._where}): {type(exc).__name__}: {self._clean(exc)}")

    def _execute(self, sql: str, params: Sequence[object]) -> int:
        return self._conn.execute(sql, params).rowcount

    def _query(self, sql: str, params: Sequence[object]) -> list[tuple[Any, ...]]:
        return self._conn.execute(sql, params).fetchall()

    def _lock_key(self, session: str, call_id: str) -> bool:
        row = self._conn.execute("SELECT pg_try_advisory_lock(%s)", (_lock_id(session, call_id),)).fetchone()
        return bool(row and row[0])

    def _unlock_key(self, session: str, call_id: str) -> None:
        self._conn.execute("SELECT pg_advisory_unlock(%s)", (_lock_id(session, call_id),))

    def _holder_alive(self, session: str, call_id: str) -> bool | None:
        if not self._lock_key(session, call_id):
            return True
        self._unlock_key(session, call_id)
        return False

    def _close_store(self) -> None:
        self._conn.close()
