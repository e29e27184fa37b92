"""Progress from a ``ProcessBackend`` worker (docs/policies.md#progress):
``run.report_progress`` in the worker reaches the parent registry's
progress observers, coalesced (the body never waits for a frame, nor for a
slow observer), in order, and the last update a body reported is never
lost: the worker sends it before the outcome.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from dshtools import ProcessBackend, ProgressUpdate, ToolDefinition, ToolExecution, ToolRegistry
from tests.helpers.calls import OBJECT, call, registry_serving, value_of

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the process backend's tests run on Linux"),
    pytest.mark.timeout(60),
]


def tight_loop(args: Any, run: Any) -> object:
    n = args["n"]
    for i in range(n):
        run.report_progress(i, n, f"step {i}")
    return n


def mixed(args: Any, run: Any) -> object:
    run.report_progress("half", 2)  # not a number: dropped in the worker
    run.report_progress(True)  # a bool is no number either
    run.report_progress(1, None, 3)  # a message that is not a str
    run.report_progress(float("nan"))  # crosses, refused by the parent's check
    run.report_progress(2.5, 4.0)
    return "ok"


def silent(args: Any, run: Any) -> object:
    return "quiet"


DEFINITIONS = [
    ToolDefinition("tight_loop", "reports progress in a loop", OBJECT, tight_loop),
    ToolDefinition("mixed", "reports bad and good progress", OBJECT, mixed),
    ToolDefinition("silent", "reports nothing", OBJECT, silent),
]


@pytest.fixture(scope="module")
def registry(backend: ProcessBackend) -> Iterator[ToolRegistry]:
    yield from registry_serving(ToolRegistry(backend=backend), DEFINITIONS)


class Seen:
    """A progress observer recording ``(call_id, update)``; ``last`` is set
    when an update with ``progress == until`` arrives."""

    def __init__(self, until: float) -> None:
        self.until = until
        self.updates: list[tuple[str, ProgressUpdate]] = []
        self.last = threading.Event()

    def __call__(self, execution: ToolExecution, update: ProgressUpdate) -> None:
        self.updates.append((execution.call_id, update))
        if update.progress == self.until:
            self.last.set()


def test_a_tight_loop_in_a_worker_reaches_the_observer_coalesced_in_order_with_the_last_update(
    registry: ToolRegistry,
) -> None:
    n = 10_000
    seen = Seen(until=n - 1)
    remove = registry.add_progress_observer(seen)
    try:
        result = registry.execute(call("tight_loop", {"n": n}, call_id="loop-1"))
        assert value_of(result) == n
        assert seen.last.wait(10), f"the last update never arrived: {seen.updates[-3:]}"
    finally:
        remove()
    progress = [u.progress for _, u in seen.updates]
    assert progress == sorted(progress) and len(set(progress)) == len(progress), "updates out of order"
    assert len(progress) < n, "every update crossed: nothing was coalesced"
    assert {cid for cid, _ in seen.updates} == {"loop-1"}
    assert seen.updates[-1][1] == ProgressUpdate(n - 1, n, f"step {n - 1}")


def test_a_blocked_observer_holds_back_neither_the_worker_nor_the_result(registry: ToolRegistry) -> None:
    release = threading.Event()
    entered = threading.Event()
    seen: list[ProgressUpdate] = []
    done = threading.Event()

    def slow(execution: ToolExecution, update: ProgressUpdate) -> None:
        entered.set()
        release.wait(30)
        seen.append(update)
        if update.progress == 199:
            done.set()

    remove = registry.add_progress_observer(slow)
    try:
        first = registry.execute(call("tight_loop", {"n": 200}, call_id="slow-1"))
        assert value_of(first) == 200
        assert entered.wait(10)
        # The observer is stuck in its first update: further calls and their
        # updates go on regardless.
        again = registry.execute(call("tight_loop", {"n": 200}, call_id="slow-2"))
        assert value_of(again) == 200
        assert not done.is_set()
        release.set()
        assert done.wait(10), f"the latest update never reached the slow observer: {seen[-3:]}"
    finally:
        release.set()
        remove()
    assert seen[-1] == ProgressUpdate(199, 200, "step 199")


def test_only_numbers_cross_and_the_parent_checks_them_again(registry: ToolRegistry) -> None:
    seen = Seen(until=2.5)
    remove = registry.add_progress_observer(seen)
    try:
        assert value_of(registry.execute(call("mixed", {}, call_id="mixed-1"))) == "ok"
        assert seen.last.wait(10)
    finally:
        remove()
    assert [u for _, u in seen.updates] == [ProgressUpdate(2.5, 4.0, None)]


def test_a_call_that_reports_nothing_gives_the_observer_nothing(registry: ToolRegistry) -> None:
    seen = Seen(until=-1)
    loud = Seen(until=9)
    remove = registry.add_progress_observer(seen)
    try:
        assert value_of(registry.execute(call("silent", {}, call_id="silent-1"))) == "quiet"
        # A later call's updates arrive after anything the silent one could
        # have sent (one delivery thread, in order): none of the silent call.
        remove_loud = registry.add_progress_observer(loud)
        try:
            assert value_of(registry.execute(call("tight_loop", {"n": 10}, call_id="after-1"))) == 10
            assert loud.last.wait(10)
        finally:
            remove_loud()
    finally:
        remove()
    assert {cid for cid, _ in seen.updates} <= {"after-1"}
