"""Fixtures of the dshtools.io tests.

* ``fifo``: a FIFO in the test's temporary folder that nothing has opened
  yet: a child process or a body writes to it and the test blocks reading
  it (a handshake instead of a sleep), or a test hands it to a reader that
  must refuse it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return path
