"""The result table of ``python -m dshtools`` (docs/contract.md §6): one row per
call with batch, call id, tool, outcome (``SUCCESS``, the code, or
``ERROR(<exception name>)`` for a failure without a code), whether the body
was invoked, the dispatch duration, and the start of the model text.
Formatting only: it reads rows, never the registry.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import IO

from ._cli_run import _Row
from ._types import ToolExecutionResult


def outcome_of(result: ToolExecutionResult | None) -> str:
    """``SUCCESS``, the failure's code, ``TOOL_ERROR(<info name>)`` for an
    uncaught exception, ``ERROR(<info name>)`` for a failure without a code,
    or ``NO RESULT``."""
    if result is None:
        return "NO RESULT"
    if not result.is_error:
        return "SUCCESS"
    code = result.code
    info = result.error.info  # type: ignore[union-attr]
    if code == "TOOL_ERROR" and info is not None:
        return f"TOOL_ERROR({info.name})"
    if code is not None:
        return code
    return f"ERROR({info.name if info is not None else '?'})"


def _detail(result: ToolExecutionResult | None) -> str:
    if result is None:
        return ""
    texts = [str(block.get("text", "")) for block in result.content if block.get("type") == "text"]
    text = " ".join(" ".join(texts).split())
    return text if len(text) <= 60 else text[:57] + "..."


def print_table(rows: Sequence[_Row], invoked: Callable[[_Row], str], out: IO[str]) -> None:
    header = ("BATCH", "CALL ID", "TOOL", "OUTCOME", "BODY", "DURATION", "DETAIL")
    lines: list[tuple[str, ...]] = [header]
    for row in rows:
        if row.started is not None and row.ended is not None:
            duration = f"{row.ended - row.started:.3f}s"
        else:
            duration = "-"
        lines.append(
            (str(row.batch), row.call_id, row.name, outcome_of(row.result), invoked(row), duration, _detail(row.result))
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header) - 1)]
    for line in lines:
        cells = [cell.ljust(widths[i]) if i != 5 else cell.rjust(widths[i]) for i, cell in enumerate(line[:-1])]
        print("  ".join(cells + [line[-1]]).rstrip(), file=out)
