"""Shared test scaffolding: one fixture per concept, defined once.

* ``unraisable``: what reaches ``sys.unraisablehook`` during the test, as a
  list (pytest would otherwise turn each report into an error).
* ``fast_switching``: the interpreter switches threads every microsecond,
  so races really interleave.
* ``registry``: a ``ToolRegistry`` closed (its bodies joined) after the
  test. A module configures it by overriding ``registry_options`` (keyword
  arguments for the constructor), and specialises it by overriding
  ``registry`` with a fixture that takes this one (pytest's documented way
  to extend a fixture: the construction and teardown stay here).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest

from dshtools import ToolRegistry


@pytest.fixture
def unraisable(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    seen: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", seen.append)
    return seen


@pytest.fixture
def fast_switching() -> Iterator[None]:
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(old)


@pytest.fixture
def registry_options() -> dict[str, Any]:
    return {}


@pytest.fixture
def registry(registry_options: dict[str, Any]) -> Iterator[ToolRegistry]:
    with ToolRegistry(**registry_options) as r:
        yield r


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[None]:
    """One local Ray (2 CPUs) for every Ray test of the session
    (``tests/ray_support.py``)."""
    from tests.ray_support import local_ray

    yield from local_ray()
