"""``_registry.progress.flush``: a caller that must not answer before a
call's last update was handed over (the MCP server) waits for the delivery
of every update posted before it (docs/policies.md#progress), and no
longer than its timeout when an observer holds the delivery thread."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from dshtools import ProgressUpdate, ToolExecution, ToolRegistry, ToolRunContext
from dshtools._registry import progress
from dshtools._registry.progress import flush
from tests.helpers.calls import call, tool, value_of
from tests.helpers.recorders import ProgressRecorder
from tests.helpers.waiting import run_in_thread, wait_until

pytestmark = pytest.mark.timeout(20)


def reports(args: Any, run: ToolRunContext) -> str:
    for i in range(args["n"]):
        run.report_progress(i, args["n"])
    return "done"


def test_with_nothing_posted_a_flush_returns_at_once() -> None:
    assert flush(0.0) is True


def test_a_flush_waits_for_the_last_update_of_a_call_that_returned(registry: ToolRegistry) -> None:
    gate = threading.Event()
    held = ProgressRecorder(hold=gate)
    registry.add_progress_observer(held)
    registry.register(tool("t", reports))
    assert value_of(registry.execute(call("t", {"n": 1}, call_id="first"))) == "done"
    assert held.entered.wait(10)  # the observer holds the delivery thread on update 0 of "first"
    assert value_of(registry.execute(call("t", {"n": 50}, call_id="second"))) == "done"
    # "second"'s last update is queued behind the held one: not delivered.
    assert flush(0.05) is False
    flushed, box = run_in_thread(lambda: flush(10))
    gate.set()
    flushed.join(10)
    assert box == [True]
    # Everything posted before the flush was handed over when it returned.
    assert held.updates[-1] == ProgressUpdate(49.0, 50.0, None)


def test_a_flush_does_not_wait_for_updates_posted_after_it_began(registry: ToolRegistry) -> None:
    first_gate = threading.Event()
    later_gate = threading.Event()
    entered = threading.Event()

    def held(execution: ToolExecution, _u: ProgressUpdate) -> None:
        entered.set()
        assert (later_gate if execution.call_id == "later" else first_gate).wait(10)

    registry.add_progress_observer(held)
    registry.register(tool("t", reports))
    try:
        assert value_of(registry.execute(call("t", {"n": 1}, call_id="first"))) == "done"
        assert entered.wait(10)
        # The one update owed is being delivered (held): the flush waits for
        # it alone. "later" reports after the flush began and its delivery
        # blocks until the end: a flush waiting for it would time out.
        flushed, box = run_in_thread(lambda: flush(5))
        wait_until(lambda: progress._flushing == 1)  # it took its list of what it owes
        assert value_of(registry.execute(call("t", {"n": 3}, call_id="later"))) == "done"
        first_gate.set()
        flushed.join(10)
        assert box == [True]
    finally:
        first_gate.set()
        later_gate.set()


def test_a_number_too_large_for_a_float_is_dropped_and_delivery_goes_on(registry: ToolRegistry) -> None:
    observer = ProgressRecorder(final=2)

    class Huge(int):
        pass

    def body(_a: Any, run: ToolRunContext) -> str:
        run.report_progress(10**400)  # an exact int: dropped by the delivery thread
        run.report_progress(Huge(10**400))  # a subclass: dropped by the full check
        return "done"

    registry.add_progress_observer(observer)
    registry.register(tool("huge", body))
    registry.register(tool("t", reports))
    assert value_of(registry.execute(call("huge"))) == "done"
    assert flush(10)
    assert value_of(registry.execute(call("t", {"n": 3}, call_id="after"))) == "done"
    assert observer.last.wait(10), "the delivery thread stopped"
    assert observer.updates[-1].progress == 2.0 and all(u.progress <= 2 for u in observer.updates)  # no huge one
