"""Fixtures every test folder may use (a folder's own fixtures are in its
``conftest.py``; shared helpers that are not fixtures are in
``tests/helpers.py``).

* ``unraisable``: what reaches ``sys.unraisablehook`` during the test, as a
  list (pytest would otherwise turn each report into an error).
* ``registry``: a ``ToolRegistry`` closed (its bodies joined) after the
  test. A module configures it by overriding ``registry_options`` (keyword
  arguments for the constructor), and specialises it by overriding
  ``registry`` with a fixture that takes this one (pytest's documented way
  to extend a fixture: the construction and teardown stay here). Used by
  the registry and interop tests.

A shell that starts the test run as a background job without job control
starts it with SIGINT ignored, and Python then installs no handler of its
own; the Ctrl-C tests need the interpreter's default, so the session
restores it (``pytest_configure``).

Every test leaves the thread's trace function as it found it
(``_the_tracer_stays``): one that cleared it would silently switch the
coverage measurement off for every test after it.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from dshtools import ToolRegistry


def pytest_configure(config: pytest.Config) -> None:
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def _the_tracer_stays() -> Iterator[None]:
    before = sys.gettrace()
    yield
    assert sys.gettrace() is before, "the test changed sys.settrace and did not put the tracer back"


@pytest.fixture
def unraisable(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    seen: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", seen.append)
    return seen


@pytest.fixture
def registry_options() -> dict[str, Any]:
    return {}


@pytest.fixture
def registry(registry_options: dict[str, Any]) -> Iterator[ToolRegistry]:
    with ToolRegistry(**registry_options) as r:
        yield r
