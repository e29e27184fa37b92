"""Fixtures every test folder may use (a folder's own fixtures are in its
``conftest.py``; shared helpers that are not fixtures are in the package
``tests/helpers/``, one module per subject, each imported from its module).

* ``unraisable``: what reaches ``sys.unraisablehook`` during the test, as a
  list (pytest would otherwise turn each report into an error);
  ``unraisable.wait_for(n)`` waits until ``n`` reports arrived (a report
  made on another thread lands when that thread gets to it).
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
import threading
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


class Reports(list[Any]):
    """The reports ``sys.unraisablehook`` received, in order; appended from
    any thread."""

    def __init__(self) -> None:
        super().__init__()
        self._arrived = threading.Condition()

    def append(self, report: Any) -> None:
        with self._arrived:
            super().append(report)
            self._arrived.notify_all()

    def wait_for(self, count: int, timeout: float = 5.0) -> bool:
        """Block until at least ``count`` reports arrived (``True``), or
        ``timeout`` seconds passed (``False``)."""
        with self._arrived:
            return self._arrived.wait_for(lambda: len(self) >= count, timeout)


@pytest.fixture
def unraisable(monkeypatch: pytest.MonkeyPatch) -> Reports:
    seen = Reports()
    monkeypatch.setattr(sys, "unraisablehook", seen.append)
    return seen


@pytest.fixture
def registry_options() -> dict[str, Any]:
    return {}


@pytest.fixture
def registry(registry_options: dict[str, Any]) -> Iterator[ToolRegistry]:
    with ToolRegistry(**registry_options) as r:
        yield r
