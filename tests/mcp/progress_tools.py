"""The registry ``tests/mcp/test_progress.py`` serves with ``python -m
dshtools mcp --tools progress_tools:registry``:

* ``count {"n"}`` -- reports ``run.report_progress(i, n, "step <i>")`` for
  ``i`` in ``range(n)`` and returns ``"counted <n>"``.
* ``vague {"n"}`` -- reports ``i`` with no total and no message.
"""

from __future__ import annotations

from typing import Any

from dshtools import ToolDefinition, ToolRegistry, ToolRunContext


def _count(args: Any, run: ToolRunContext) -> str:
    n = int(args["n"])
    for i in range(n):
        run.report_progress(i, n, f"step {i}")
    return f"counted {n}"


def _vague(args: Any, run: ToolRunContext) -> str:
    n = int(args["n"])
    for i in range(n):
        run.report_progress(i)
    return "done"


registry = ToolRegistry()
registry.register(ToolDefinition("count", "reports progress", {"type": "object"}, _count))
registry.register(ToolDefinition("vague", "reports progress without a total", {"type": "object"}, _vague))
