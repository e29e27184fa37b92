"""Typed tools on ``RayBackend`` (docs/contract.md#typed-tools): the typed
body travels like any body, its pydantic-model arguments (models defined in
this test module) are built in the caller and reach the Ray task as typed
values, its return comes back as JSON, and an abort reaches its
``run.signal`` in the task. The body reports that it started through the
session's Ray (an ``Events`` actor of tests/helpers/ray_events.py), so
nothing sleeps to wait (issue 22). Skipped only when ``ray`` is not importable."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from typing import Any

import pydantic
import pytest

ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'dshtools[ray]')")

from dshtools import (  # noqa: E402
    INVALID_ARGS,
    TOOL_ABORTED,
    AbortController,
    ToolExecutionResult,
    ToolRegistry,
    ToolRunContext,
    ToolSuccess,
    thaw,
)
from dshtools.ray import RayBackend  # noqa: E402
from tests.helpers.calls import call  # noqa: E402
from tests.helpers.ray_events import announce, start_events  # noqa: E402

EVENTS = "dshtools-test-typed-events"


class Place(pydantic.BaseModel):
    city: str
    zip: str


class Visit(pydantic.BaseModel):
    place: Place
    guests: list[str]
    pid: int


def visit(place: Place, guests: list[str]) -> Visit:
    """Plan a visit."""
    assert isinstance(place, Place)
    return Visit(place=place, guests=guests, pid=os.getpid())


def wait_for_abort(tag: str, place: Place, *, run: ToolRunContext) -> str:
    """Wait until the call is aborted."""
    announce(EVENTS, tag, os.getpid())
    run.signal.wait(30)
    return f"{place.city} saw {run.signal.aborted}"


@pytest.fixture(scope="module")
def events(ray_cluster: None) -> Iterator[Any]:
    handle = start_events(EVENTS)
    yield handle
    ray.kill(handle)


@pytest.fixture(scope="module")
def registry(events: Any) -> Iterator[ToolRegistry]:
    with ToolRegistry(backend=RayBackend(kill_after=2.0)) as r:
        r.tool(visit)
        r.tool(wait_for_abort)
        yield r


@pytest.mark.timeout(120)
def test_typed_model_arguments_reach_a_ray_task_and_the_return_comes_back_as_json(registry: ToolRegistry) -> None:
    result = registry.execute(call("visit", {"place": {"city": "Oslo", "zip": "0150"}, "guests": ["a", "b"]}))
    assert isinstance(result, ToolSuccess), result
    value = thaw(result.value)
    assert value["place"] == {"city": "Oslo", "zip": "0150"} and value["guests"] == ["a", "b"]
    assert value["pid"] != os.getpid()
    bad = registry.execute(call("visit", {"place": {"city": "Oslo"}, "guests": []}))
    assert bad.code == INVALID_ARGS


@pytest.mark.timeout(120)
def test_an_abort_reaches_the_typed_bodys_signal_in_the_ray_task(registry: ToolRegistry, events: Any) -> None:
    controller = AbortController()
    results: list[ToolExecutionResult] = []
    caller = threading.Thread(
        target=lambda: results.append(
            registry.execute(
                call(
                    "wait_for_abort",
                    {"tag": "typed-started", "place": {"city": "Bergen", "zip": "5003"}},
                    signal=controller.signal,
                )
            )
        )
    )
    caller.start()
    pid = ray.get(events.wait.remote("typed-started", 60))
    assert pid is not None and pid != os.getpid()
    controller.abort("stop")
    caller.join(60)
    assert not caller.is_alive()
    assert results[0].code == TOOL_ABORTED
    assert not (results[0].meta or {}).get("killed")
    assert registry.statistics().bodies_in_flight == 0
