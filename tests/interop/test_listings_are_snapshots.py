"""Listings are snapshots (docs/contract.md#a24): ``tools_param``,
``responses_tools_param``, the Anthropic ``tools_param`` and
``schemas()`` each read the registry once, so a thread that registers
and unregisters tools meanwhile never makes them raise or put one tool's
``strict`` flag on another (field case B67)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import pytest

from dshtools import ToolDefinition, ToolRegistry
from dshtools import anthropic as dan
from dshtools import openai as doa
from tests.helpers.interleavings import race_in_lockstep

STRICT_PARAMS = {"type": "object", "properties": {}, "required": [], "additionalProperties": False}
ROUNDS = 1000
"""Rounds of the race: in each, one thread registers and unregisters while
two list."""


def body(args: Any, run: Any) -> object:
    return None


def definition(name: str, *, strict: bool) -> ToolDefinition:
    return ToolDefinition(name, f"{name} tool", STRICT_PARAMS, body, strict=strict)


@pytest.fixture
def fast_switching() -> Iterator[None]:
    """Threads switch as often as the interpreter allows: the readers are
    interrupted inside a listing many times per run."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(before)


def churn(registry: ToolRegistry, i: int) -> None:
    """One round of the mutating thread: a strict and a loose tool
    registered, then unregistered in alternating orders."""
    strict = registry.register(definition("strict_one", strict=True))
    loose = registry.register(definition("loose_one", strict=False))
    (strict if i % 2 else loose)()
    (loose if i % 2 else strict)()


def strict_of_chat(registry: ToolRegistry) -> dict[str, bool]:
    return {t["function"]["name"]: t["function"].get("strict") is True for t in doa.tools_param(registry)}


def strict_of_responses(registry: ToolRegistry) -> dict[str, bool]:
    return {t["name"]: t["strict"] is True for t in doa.responses_tools_param(registry)}


def names_of_anthropic(registry: ToolRegistry) -> dict[str, bool]:
    return {t["name"]: t["name"].startswith("strict") for t in dan.tools_param(registry)}


def names_of_schemas(registry: ToolRegistry) -> dict[str, bool]:
    return {s["name"]: s["name"].startswith("strict") for s in registry.schemas()}


@pytest.mark.timeout(120)
@pytest.mark.usefixtures("fast_switching")
@pytest.mark.parametrize(
    "listing", [strict_of_chat, strict_of_responses, names_of_anthropic, names_of_schemas], ids=lambda f: f.__name__
)
def test_listings_never_tear_while_tools_come_and_go(
    registry: ToolRegistry, listing: Callable[[ToolRegistry], dict[str, bool]]
) -> None:
    """B67: two threads list while a third registers and unregisters; every
    listed tool's ``strict`` is its own definition's, and nothing raises."""
    for i in range(50):  # a listing long enough to be interrupted inside
        registry.register(definition(f"strict_{i}", strict=True))
        registry.register(definition(f"loose_{i}", strict=False))

    def read(_round: int) -> None:
        flags = listing(registry)
        wrong = {name: flag for name, flag in flags.items() if flag != name.startswith("strict")}
        assert not wrong, f"strict flags of other tools: {wrong}"

    race_in_lockstep(ROUNDS, partial(churn, registry), read, read, join=100)
