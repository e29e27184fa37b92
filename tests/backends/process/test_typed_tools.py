"""Typed tools on ``ProcessBackend`` (docs/contract.md#typed-tools): the
typed body pickles by value like any body, its pydantic-model arguments are
built in the caller (step 1) and cross to the worker as typed values, its
return crosses back as JSON, and cancellation reaches its ``run.signal`` in
the worker. The models are defined in this test module (issue 22).

Bodies announce that they started through a FIFO the test reads (a blocking
read, not a sleep)."""

from __future__ import annotations

import datetime
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pydantic
import pytest

from dshtools import (
    INVALID_ARGS,
    TOOL_ABORTED,
    AbortController,
    ProcessBackend,
    ToolExecutionResult,
    ToolRegistry,
    ToolRunContext,
    ToolSuccess,
    thaw,
)
from tests.helpers.calls import call

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="FIFOs and fork")


class Place(pydantic.BaseModel):
    city: str
    zip: str


class Forecast(pydantic.BaseModel):
    place: Place
    day: datetime.date
    pid: int
    high: float


@pytest.fixture(scope="module")
def registry() -> Iterator[ToolRegistry]:
    with ToolRegistry(backend=ProcessBackend(2, kill_after=2.0)) as r:

        @r.tool
        def forecast(place: Place, day: datetime.date, high: float = 20.5) -> Forecast:
            """The forecast for one place and day."""
            assert isinstance(place, Place) and isinstance(day, datetime.date)
            return Forecast(place=place, day=day, pid=os.getpid(), high=high)

        @r.tool
        def wait_for_abort(started: str, place: Place, *, run: ToolRunContext) -> str:
            """Write this worker's pid to ``started``, then wait for the abort."""
            with open(started, "w", encoding="ascii") as f:
                f.write(f"{os.getpid()}\n")
            run.signal.wait(30)
            return f"{place.city} saw {run.signal.aborted}"

        yield r


@pytest.mark.timeout(60)
def test_typed_model_arguments_cross_to_a_worker_and_the_return_comes_back_as_json(registry: ToolRegistry) -> None:
    result = registry.execute(call("forecast", {"place": {"city": "Oslo", "zip": "0150"}, "day": "2026-12-01"}))
    assert isinstance(result, ToolSuccess), result
    value = thaw(result.value)
    assert value["place"] == {"city": "Oslo", "zip": "0150"}
    assert value["day"] == "2026-12-01" and value["high"] == 20.5
    assert value["pid"] != os.getpid()  # it ran in a worker process


@pytest.mark.timeout(60)
def test_a_coercion_error_is_invalid_args_in_the_caller_and_nothing_is_sent(registry: ToolRegistry) -> None:
    result = registry.execute(call("forecast", {"place": {"city": "Oslo", "zip": "0150"}, "day": "2026-13-01"}))
    assert result.code == INVALID_ARGS
    assert "at $.day" in result.content[0]["text"]


@pytest.mark.timeout(60)
def test_an_abort_reaches_the_typed_bodys_signal_in_the_worker(registry: ToolRegistry, tmp_path: Path) -> None:
    started = str(tmp_path / "started")
    os.mkfifo(started)
    controller = AbortController()
    results: list[ToolExecutionResult] = []
    arguments = {"started": started, "place": {"city": "Bergen", "zip": "5003"}}
    caller = threading.Thread(
        target=lambda: results.append(registry.execute(call("wait_for_abort", arguments, signal=controller.signal)))
    )
    caller.start()
    with open(started, encoding="ascii") as f:  # blocks until the body opened the FIFO
        pid = int(f.readline().strip() or 0)
    assert pid not in (0, os.getpid())
    controller.abort("stop")
    caller.join(30)
    assert not caller.is_alive()
    result = results[0]
    assert result.code == TOOL_ABORTED
    assert not (result.meta or {}).get("killed")  # the body returned on its own: it saw the abort
    assert registry.statistics().bodies_in_flight == 0
