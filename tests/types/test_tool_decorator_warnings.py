"""``@registry.tool`` warns when the model would not be told what a tool
does or what a parameter takes (docs/contract.md#a33): a new user's
tools without docstrings or annotations were accepted silently."""

from __future__ import annotations

import warnings
from typing import Any

import pytest

from dshtools import ToolRegistry, ToolRunContext


def test_a_function_without_a_docstring_warns_at_the_decorated_line() -> None:
    with ToolRegistry() as registry, pytest.warns(UserWarning, match="tool 'bare' has no description") as seen:

        @registry.tool
        def bare(city: str) -> str:
            return city

    (warning,) = seen.list
    assert warning.filename == __file__  # the user's line, not the library's
    assert registry.get("bare") is not None  # registered all the same


def test_the_called_form_warns_at_the_decorated_line_too() -> None:
    with ToolRegistry() as registry, pytest.warns(UserWarning, match="tool 'renamed' has no description") as seen:

        @registry.tool(name="renamed", timeout=1.0)
        def bare(city: str) -> str:
            return city

    assert [w.filename for w in seen.list] == [__file__]


def test_each_unannotated_parameter_is_named() -> None:
    with ToolRegistry() as registry, pytest.warns(UserWarning) as seen:

        @registry.tool
        def loose(city, days, units: str = "metric", *, run: ToolRunContext) -> str:  # type: ignore[no-untyped-def]
            """Forecast for a city."""
            return str(city)

    assert [str(w.message) for w in seen.list] == [
        "tool 'loose': parameters 'city', 'days' have no annotation, so the model may send any value "
        "(annotate it, e.g. 'path: str')"
    ]


def test_a_description_given_instead_of_a_docstring_is_enough() -> None:
    with ToolRegistry() as registry, warnings.catch_warnings():
        warnings.simplefilter("error")

        @registry.tool(description="Say hello.")
        def hello(name: str) -> str:
            return f"hello {name}"


def test_a_described_and_annotated_tool_does_not_warn() -> None:
    with ToolRegistry() as registry, warnings.catch_warnings():
        warnings.simplefilter("error")

        @registry.tool
        def forecast(city: str, days: int = 1, *, run: ToolRunContext) -> dict[str, Any]:
            """Forecast for a city.

            Args:
                city: Where.
                days: How many days.
            """
            return {"city": city, "days": days}
