"""DBOS's ``@DBOS.step`` on SQLite, for the journal's comparison
(benchmarks/journal.py): ``python -m benchmarks.journal_dbos STEPS`` runs a
workflow of 0 and of ``STEPS`` no-op steps on a fresh SQLite system
database and prints the microseconds per step (the difference divided by
``STEPS``). A child process of its own: DBOS is one global per process."""

from __future__ import annotations

import logging
import sys
import tempfile
import time

from dbos import DBOS, DBOSConfig


@DBOS.step()
def noop_step() -> None:
    return None


@DBOS.workflow()
def steps(n: int) -> None:
    for _ in range(n):
        noop_step()


def main() -> None:
    count = int(sys.argv[1])
    logging.getLogger("dbos").setLevel(logging.WARNING)
    with tempfile.TemporaryDirectory() as tmp:
        config: DBOSConfig = {"name": "dshtools-bench", "system_database_url": f"sqlite:///{tmp}/dbos.sqlite"}
        DBOS(config=config)
        DBOS.launch()
        try:
            steps(1)  # warm-up
            start = time.perf_counter()
            steps(0)
            empty = time.perf_counter() - start
            start = time.perf_counter()
            steps(count)
            full = time.perf_counter() - start
        finally:
            DBOS.destroy()
    print((full - empty) / count * 1e6)


if __name__ == "__main__":
    main()
