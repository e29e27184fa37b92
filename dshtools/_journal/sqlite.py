"""``SqliteJournal``: the embedded journal, on the standard library's
``sqlite3`` in WAL mode (docs/contract.md#journal, docs/durable.md).

Guarantees:

* A committed claim or result survives the process's crash (kill -9):
  WAL with ``synchronous=NORMAL`` (``durability="process"``, the
  default). ``durability="power"`` (``synchronous=FULL``) makes every
  commit reach the disk before it returns, so it survives power loss too.
* The database file is created readable and writable by its owner only
  (``0600``); SQLite gives its ``-wal`` and ``-shm`` files the same mode.
* Any number of processes and threads may use one file: each statement
  is one transaction, and SQLite serializes writers (``busy_timeout``:
  30 s).
* The records ``purge`` deletes are overwritten (``secure_delete`` while
  it deletes) and the WAL is checkpointed and truncated after it.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final, Literal

from .base import DEFAULT_LEASE, Journal
from .records import JournalError

__all__ = ["SCHEMA", "Durability", "SqliteJournal"]

Durability = Literal["process", "power"]

_SYNCHRONOUS: Final = {"process": "NORMAL", "power": "FULL"}
_BUSY_MS: Final = 30_000

SCHEMA: Final = (
    "CREATE TABLE IF NOT EXISTS dshtools_calls ("
    " session TEXT NOT NULL, call_id TEXT NOT NULL, tool TEXT NOT NULL, state TEXT NOT NULL,"
    " owner TEXT NOT NULL, claimed_at REAL, settled_at REAL, attempts INTEGER NOT NULL,"
    " result TEXT, lease_until REAL, arguments TEXT, PRIMARY KEY (session, call_id)) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS dshtools_tickets (key TEXT PRIMARY KEY, expires_at REAL NOT NULL)",
)
_CHECK: Final = (
    "SELECT session, call_id, tool, state, owner, claimed_at, settled_at, attempts, result, lease_until,"
    " arguments FROM dshtools_calls LIMIT 0"
)


class SqliteJournal(Journal):
    """A journal in the SQLite file ``path`` (created if missing, ``0600``).

    ``SqliteJournal(path, *, durability="process", store_arguments=True,
    lease=60.0)``: ``durability`` is ``"process"`` (a committed record
    survives the process's crash; the default) or ``"power"`` (it survives
    power loss too, at the cost measured in docs/durable.md);
    ``store_arguments=False`` stores a SHA-256 digest of each call's
    arguments instead of the arguments; ``lease`` (seconds) is how long a
    claim of an owner on another machine holds without renewal. Raises
    ``JournalError`` for a file that is not a journal (or not a database),
    ``ValueError``/``TypeError`` for bad options. Thread-safe; every method
    blocks the calling thread for one statement. Source:
    docs/contract.md#journal."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        durability: Durability = "process",
        store_arguments: bool = True,
        lease: float = DEFAULT_LEASE,
    ) -> None:
        if durability not in _SYNCHRONOUS:
            raise ValueError(f"durability must be 'process' or 'power', not {durability!r}")
        super().__init__(store_arguments=store_arguments, lease=lease)
        self._path = Path(path)
        self._durability = durability
        try:
            fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise JournalError(f"cannot open journal file {str(self._path)!r}: {exc.strerror}") from None
        os.close(fd)
        try:
            conn = sqlite3.connect(self._path, timeout=_BUSY_MS / 1000, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise self._error(exc) from None
        self._conn = conn
        try:
            conn.execute(f"PRAGMA busy_timeout = {_BUSY_MS}")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute(f"PRAGMA synchronous = {_SYNCHRONOUS[durability]}")
            for statement in SCHEMA:
                conn.execute(statement)
            conn.execute(_CHECK)
        except sqlite3.Error as exc:
            conn.close()
            raise JournalError(f"{str(self._path)!r} is not a dshtools journal: {exc}") from None

    def __repr__(self) -> str:
        return f"SqliteJournal({str(self._path)!r}, durability={self._durability!r})"

    @property
    def path(self) -> Path:
        """The database file."""
        return self._path

    def _execute(self, sql: str, params: Sequence[object]) -> int:
        return self._conn.execute(sql, params).rowcount

    def _query(self, sql: str, params: Sequence[object]) -> list[tuple[Any, ...]]:
        return self._conn.execute(sql, params).fetchall()

    def _before_purge(self) -> None:
        self._conn.execute("PRAGMA secure_delete = ON")

    def _after_purge(self) -> None:
        self._conn.execute("PRAGMA secure_delete = OFF")
        self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def _close_store(self) -> None:
        self._conn.close()
