"""Typing contract of the registry types (docs/contract.md#calls), checked by mypy
under setup.cfg (strict, warn_unused_ignores, plugins = dshtools.mypy_plugin)
from tests/typing/test_case_files.py. Every ``# type: ignore[...]`` marks an
error mypy must report: if the error disappeared, ``warn_unused_ignores``
fails the run. Lines without an ignore must type-check."""

from __future__ import annotations

from dshtools import (
    AbortController,
    AbortSignal,
    ToolDispatchExecution,
    ToolExecution,
    ToolExecutionInput,
    ToolRunContext,
)


def read_only_signals(execution: ToolExecution, run: ToolRunContext, other: AbortSignal) -> None:
    execution.signal = other  # type: ignore[misc]
    run.signal = other  # type: ignore[misc]


def dispatch_view_signal(view: ToolDispatchExecution, other: AbortSignal) -> AbortSignal:
    view.signal = None  # type: ignore[assignment]
    del view.signal  # type: ignore[misc]
    previous = view.signal
    view.signal = other  # accepted: another AbortSignal
    view.signal = previous
    return view.signal


def call_requires_signal() -> ToolExecutionInput:
    ToolExecutionInput("c1", "tool", {})  # type: ignore[call-arg]
    return ToolExecutionInput("c1", "tool", {}, AbortController().signal)
