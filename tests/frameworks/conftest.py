"""Fixtures of the framework adapter tests.

* ``registry``: the shared registry fixture (tests/conftest.py) holding the
  three tools every adapter is driven with: ``add`` (a typed tool defined
  with ``strict=True``), ``fs.boom`` (a dotted name, so the framework sees
  its alias ``fs_boom``; its body raises ``ToolError``) and ``slow`` (runs
  ``sleep 30`` through ``dshtools.io.run_process`` until its signal aborts),
  with ``recorder`` installed.
* ``recorder``: a ``CallEventRecorder`` of those calls (bodies, hooks and
  the results published); ``slow`` adds ``("aborted", call_id)`` when its
  body saw its signal aborted, and ``("aborted by <reason's class>",
  call_id)``.
"""

from __future__ import annotations

from typing import Any

import pytest

from dshtools import ToolDefinition, ToolError, ToolRegistry
from dshtools.io import run_process
from tests.helpers.recorders import CallEventRecorder, recorded_tool

SLEEP = ["sleep", "30"]
"""What ``slow`` runs: the child process a cancelled run must not leave behind."""

BOOM_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {"path": {"type": "string"}}}


@pytest.fixture
def recorder() -> CallEventRecorder:
    return CallEventRecorder()


@pytest.fixture
def registry(registry: ToolRegistry, recorder: CallEventRecorder) -> ToolRegistry:
    @registry.tool(strict=True)
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    def boom(args: Any, run: Any) -> object:
        raise ToolError(f"no such file: {args['path']}", "NOT_FOUND")

    def slow(args: Any, run: Any) -> object:
        try:
            run_process(SLEEP, run.signal)
        finally:
            if run.signal.aborted:
                recorder.log("aborted", run.call_id)
                recorder.log(f"aborted by {type(run.signal.reason).__name__}", run.call_id)
        return "slept"

    registry.register(ToolDefinition("fs.boom", "Read a file.", BOOM_PARAMETERS, boom))
    registry.register(recorded_tool("slow", recorder, slow))
    recorder.install(registry)
    return registry
