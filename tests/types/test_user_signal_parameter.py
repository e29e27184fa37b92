"""A typed tool that asks for its signal as a parameter is told how to get it.

Found in a new user's trial: ``def fetch(url: str, signal: AbortSignal)``
is what a user who has read "every call carries a signal" writes first.
It was refused with pydantic's own message (``Unable to generate
pydantic-core schema for <class 'dshtools.AbortSignal'>. Set
`arbitrary_types_allowed=True`...``), advice that cannot work: the
signal is not something the model sends. The refusal names
``ToolRunContext`` and ``run.signal`` instead (docs/quickstart.md).
"""

from __future__ import annotations

from typing import Annotated, Any

import pytest

from dshtools import AbortController, AbortSignal, ToolDefinition, ToolRegistry, ToolRunContext


def wants_signal(url: str, signal: AbortSignal) -> str:
    return url


def wants_controller(url: str, controller: AbortController) -> str:
    return url


def wants_annotated_signal(url: str, signal: Annotated[AbortSignal, "the call's"]) -> str:
    return url


def wants_optional_signal(url: str, signal: AbortSignal | None = None) -> str:
    return url


@pytest.mark.parametrize(
    ("fn", "parameter", "kind"),
    [
        (wants_signal, "signal", "AbortSignal"),
        (wants_controller, "controller", "AbortController"),
        (wants_annotated_signal, "signal", "AbortSignal"),
        (wants_optional_signal, "signal", "AbortSignal"),
    ],
)
def test_a_signal_parameter_is_refused_naming_the_run_context(fn: Any, parameter: str, kind: str) -> None:
    with pytest.raises(TypeError, match=rf"{parameter} is annotated {kind}; .*ToolRunContext.*run\.signal") as caught:
        ToolDefinition.from_function(fn)
    assert "arbitrary_types_allowed" not in str(caught.value)
    with ToolRegistry() as registry, pytest.raises(TypeError, match="ToolRunContext"):
        registry.tool(fn)
        assert registry.schemas() == []


def test_the_run_context_way_still_registers() -> None:
    def fetch(url: str, *, run: ToolRunContext) -> str:
        """Fetch."""
        return url if not run.signal.aborted else ""

    with ToolRegistry() as registry:
        registry.tool(fetch)
        definition = registry.get("fetch")
        assert definition is not None
        assert list(definition.parameters["properties"]) == ["url"]
