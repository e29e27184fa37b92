"""Fixtures of the signal tests.

* ``fast_switching``: the interpreter switches threads every microsecond,
  so races really interleave.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest


@pytest.fixture
def fast_switching() -> Iterator[None]:
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(old)
