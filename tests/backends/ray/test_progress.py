"""Progress from a ``RayBackend`` task (docs/policies.md#progress): an
update a body reports while it runs reaches the caller's progress
observers through the signal actor (the body still running), and the last
one, reported after the call's abort, comes back with the result and is
delivered before the call settles. Skipped only when ``ray`` is not
importable."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("ray", reason="ray is not installed (pip install 'dshtools[ray]')")

from dshtools import (
    TOOL_ABORTED,
    AbortController,
    ProgressUpdate,
    ToolDefinition,
    ToolExecution,
    ToolRegistry,
    ToolRunContext,
)
from tests.helpers.calls import OBJECT, call


def reports_then_waits(_args: Any, run: ToolRunContext) -> str:
    run.report_progress("not a number")  # type: ignore[arg-type]  # dropped in the worker
    run.report_progress(1, 3, "first")
    run.signal.wait(60)  # the test aborts once the first update reached it
    run.report_progress(2, 3, "last")
    return "done"


@pytest.fixture
def ray_registry(ray_cluster: None) -> Iterator[ToolRegistry]:
    from dshtools.ray import RayBackend

    with ToolRegistry(backend=RayBackend(kill_after=30.0)) as registry:
        registry.register(ToolDefinition("reports", "reports progress", OBJECT, reports_then_waits))
        yield registry


@pytest.mark.timeout(120)
def test_progress_of_a_running_ray_task_reaches_the_observer_and_the_last_comes_with_the_result(
    ray_registry: ToolRegistry,
) -> None:
    controller = AbortController()
    seen: list[ProgressUpdate] = []
    last = threading.Event()

    def observer(execution: ToolExecution, update: ProgressUpdate) -> None:
        seen.append(update)
        if update.progress == 1:
            # The body is blocked on its signal until this abort: the update
            # crossed while it ran (through the actor, not the result).
            controller.abort("the first update arrived")
        if update.progress == 2:
            last.set()

    ray_registry.add_progress_observer(observer)
    result = ray_registry.execute(call("reports", signal=controller.signal, call_id="ray-1"))
    assert result.code == TOOL_ABORTED, result
    assert last.wait(10), f"the last update never arrived: {seen}"
    assert seen == [ProgressUpdate(1, 3, "first"), ProgressUpdate(2, 3, "last")]
