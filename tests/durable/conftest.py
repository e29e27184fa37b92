"""The journal fixtures: one contract suite over every store
(docs/contract.md#journal). PostgreSQL runs where
``DSHTOOLS_TEST_POSTGRES_DSN`` names a server (``source .ci/postgres``
starts one); with ``CI=true`` and no DSN its tests fail instead of
skipping."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from dshtools.durable import Journal
from tests.helpers.journals import STORES, journal_spec, open_journal


def raw_sql(spec: str, sql: str, params: tuple[object, ...]) -> None:
    """Run ``sql`` (``?`` placeholders) on the store behind ``spec`` with the
    driver itself, as someone other than the journal would write to it."""
    if spec.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(spec, autocommit=True) as server:
            server.execute(sql.replace("?", "%s"), params)
        return
    import sqlite3

    database = sqlite3.connect(spec, isolation_level=None)
    try:
        database.execute(sql, params)
    finally:
        database.close()


def claim_in_dead_process(spec: str, session: str, call_id: str, tool: str = "double") -> None:
    """A process claims the key and dies (os._exit) before settling it."""
    code = (
        "import os, sys\n"
        "sys.path.insert(0, sys.argv[4])\n"
        "from tests.helpers.journals import open_journal\n"
        "j = open_journal(sys.argv[1])\n"
        "assert j.claim_call(sys.argv[2], sys.argv[3], sys.argv[5], {'n': 2})\n"
        "os._exit(0)\n"
    )
    root = str(Path(__file__).resolve().parents[2])
    subprocess.run([sys.executable, "-c", code, spec, session, call_id, root, tool], check=True, timeout=60)


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def spec(store: str, tmp_path: Path) -> str:
    return journal_spec(store, tmp_path)


@pytest.fixture
def journal(spec: str) -> Iterator[Journal]:
    journal = open_journal(spec)
    yield journal
    journal.close()


@pytest.fixture
def session() -> str:
    """A session id no other test uses (the PostgreSQL database is shared)."""
    return "test-" + uuid.uuid4().hex
