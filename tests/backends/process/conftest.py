"""Fixtures of the process-backend tests.

* ``backend``: one ``ProcessBackend`` (2 workers, a forced stop 0.5 s after
  a cancelled body ignores its signal) per test module, closed after the
  module. Starting a worker (a fresh interpreter) is the slow part, so the
  tests of a module share warm workers where they can.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from dshtools import ProcessBackend


@pytest.fixture(scope="module")
def backend() -> Iterator[ProcessBackend]:
    b = ProcessBackend(2, kill_after=0.5)
    try:
        yield b
    finally:
        b.close()
