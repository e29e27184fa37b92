"""Typing contract of typed tools (docs/contract.md#typed-tools), checked by
mypy strict from tests/typing/test_case_files.py: ``@registry.tool`` and
``@dshtools.tool``, bare or with options, return the function with its own
type, so it stays callable (and checked) in the user's own code. Every
``# type: ignore[...]`` marks an error mypy must report."""

from __future__ import annotations

from typing_extensions import assert_type

import dshtools
from dshtools import ToolDefinition, ToolRegistry, ToolRunContext

registry = ToolRegistry()


@registry.tool
def add(a: int, b: int = 2) -> int:
    """Add two numbers."""
    return a + b


@registry.tool(name="page", timeout=5.0, concurrency_safe=True, strict=True, output_schema=True)
def read_page(url: str, *, run: ToolRunContext) -> str:
    """Fetch one page."""
    return url if not run.signal.aborted else ""


@dshtools.tool
def marked(text: str) -> list[str]:
    """Split words."""
    return text.split()


@dshtools.tool(concurrency_safe=True)
def marked_with_options(n: float) -> float:
    return n


def the_functions_keep_their_types(run: ToolRunContext) -> None:
    assert_type(add(1), int)
    assert_type(add(1, b=3), int)
    assert_type(read_page("u", run=run), str)
    assert_type(marked("a b"), list[str])
    assert_type(marked_with_options(1.5), float)
    add("one")  # type: ignore[arg-type]
    read_page("u")  # type: ignore[call-arg]
    registry.tool(timeout="5")  # type: ignore[call-overload]


def from_function_is_a_definition() -> ToolDefinition:
    definition = ToolDefinition.from_function(add, name="plus", strict=True)
    assert_type(definition, ToolDefinition)
    assert_type(dshtools.tools_from_module("tests.typing.typed_tools"), list[ToolDefinition])
    return definition
