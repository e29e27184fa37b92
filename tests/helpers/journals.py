"""Journals of the tests: a store named by a spec (a SQLite file's path or a
PostgreSQL DSN), and the test server's DSN. PostgreSQL runs where
``DSHTOOLS_TEST_POSTGRES_DSN`` names a server (``source .ci/postgres``
starts one); with ``CI=true`` and no DSN its tests fail instead of
skipping."""

from __future__ import annotations

import os
from pathlib import Path

from dshtools.durable import Journal, SqliteJournal

__all__ = ["STORES", "journal_spec", "open_journal", "postgres_dsn"]

STORES = ("sqlite", "postgres")


def postgres_dsn() -> str:
    """The test server's DSN; skips (fails under ``CI=true``) without one."""
    dsn = os.environ.get("DSHTOOLS_TEST_POSTGRES_DSN")
    if not dsn:
        import pytest

        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but DSHTOOLS_TEST_POSTGRES_DSN is not set: run `source .ci/postgres` first")
        pytest.skip("no PostgreSQL server: set DSHTOOLS_TEST_POSTGRES_DSN (source .ci/postgres)")
    return dsn


def journal_spec(store: str, tmp_path: Path) -> str:
    """What ``open_journal`` opens: a SQLite file under ``tmp_path``, or the PostgreSQL DSN."""
    return str(tmp_path / "journal.db") if store == "sqlite" else postgres_dsn()


def open_journal(spec: str) -> Journal:
    """The journal ``spec`` names (``journal_spec``)."""
    if spec.startswith("postgresql://"):
        from dshtools.durable import PostgresJournal

        return PostgresJournal(spec)
    return SqliteJournal(spec)
