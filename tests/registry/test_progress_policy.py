"""Progress from a synchronous body: ``run.report_progress`` and
``registry.add_progress_observer`` (docs/policies.md#progress; docs/contract.md#policies)."""

from __future__ import annotations

import sys
import threading
from typing import Any

import pytest

from dshtools import (
    AbortController,
    ProcessBackend,
    ProgressUpdate,
    ToolExecution,
    ToolExecutionInput,
    ToolRegistry,
    ToolRunContext,
)
from tests.helpers.calls import call, tool, value_of
from tests.helpers.recorders import ProgressRecorder


@pytest.mark.timeout(10)
def test_the_observer_sees_the_last_of_ten_thousand_updates_in_order(registry: ToolRegistry) -> None:
    seen = ProgressRecorder(final=9999)
    registry.add_progress_observer(seen)
    body_thread: list[str] = []

    def body(_a: Any, run: ToolRunContext) -> str:
        body_thread.append(threading.current_thread().name)
        for i in range(10_000):
            run.report_progress(i, 10_000, "step")
        return "done"

    registry.register(tool("t", body))
    assert value_of(registry.execute(call("t"))) == "done"
    assert seen.last.wait(5)
    assert seen.updates[-1] == ProgressUpdate(9999.0, 10000.0, "step")
    progress = [u.progress for u in seen.updates]
    assert progress == sorted(progress) and len(set(progress)) == len(progress)
    assert seen.threads == {"dshtools-progress"} and body_thread[0] not in seen.threads
    assert seen.call_ids == {"c1"}


@pytest.mark.timeout(10)
def test_a_slow_observer_never_holds_the_body_and_sees_coalesced_updates(registry: ToolRegistry) -> None:
    release = threading.Event()
    slow = ProgressRecorder(hold=release)
    registry.add_progress_observer(slow)

    def body(_a: Any, run: ToolRunContext) -> str:
        run.report_progress(0)
        assert slow.entered.wait(5)  # the observer now blocks on its first update
        for i in range(1, 1001):
            run.report_progress(i, None)
        return "done"

    registry.register(tool("t", body))
    assert value_of(registry.execute(call("t"))) == "done"  # returned while the observer was blocked
    release.set()
    # The delivery thread delivers what it holds: the first update, then the
    # latest of the 1000 that came while it was blocked.
    done = threading.Event()
    registry.add_progress_observer(lambda _e, u: done.set() if u.progress == 2000 else None)

    def again(_a: Any, run: ToolRunContext) -> None:
        run.report_progress(2000)

    registry.register(tool("again", again))
    registry.execute(call("again", call_id="c2"))
    assert done.wait(5)
    assert [u.progress for u in slow.updates[:2]] == [0.0, 1000.0]


@pytest.mark.timeout(10)
def test_progress_never_raises_into_the_body(registry: ToolRegistry, monkeypatch: pytest.MonkeyPatch) -> None:
    reported: list[object] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: reported.append(u.exc_value))
    seen = ProgressRecorder(final=1)

    def broken(_e: ToolExecution, _u: ProgressUpdate) -> None:
        raise RuntimeError("observer bug")

    registry.add_progress_observer(broken)
    registry.add_progress_observer(seen)

    def body(_a: Any, run: ToolRunContext) -> str:
        run.report_progress("half")  # type: ignore[arg-type]
        run.report_progress(float("nan"))
        run.report_progress(True)
        run.report_progress(1, "of many")  # type: ignore[arg-type]
        run.report_progress(1, 2, message=3)  # type: ignore[arg-type]
        run.report_progress(1, 2, "half way")
        return "done"

    registry.register(tool("t", body))
    assert value_of(registry.execute(call("t"))) == "done"
    assert seen.last.wait(5)
    assert seen.updates == [ProgressUpdate(1.0, 2.0, "half way")]  # the bad ones were dropped
    assert any(isinstance(e, RuntimeError) for e in reported)


@pytest.mark.timeout(10)
def test_an_unregistered_observer_sees_nothing_more(registry: ToolRegistry) -> None:
    first = ProgressRecorder(final=1)
    second = ProgressRecorder(final=2)
    unregister = registry.add_progress_observer(first)
    registry.add_progress_observer(second)

    def body(args: Any, run: ToolRunContext) -> None:
        run.report_progress(args["n"])

    registry.register(tool("t", body))
    registry.execute(call("t", {"n": 1}))
    assert first.last.wait(5)
    unregister()
    registry.execute(call("t", {"n": 2}, call_id="c2"))
    assert second.last.wait(5)
    assert [u.progress for u in first.updates] == [1.0]


def _reports(_a: Any, run: ToolRunContext) -> str:
    run.report_progress(1, 2)
    return "done"


@pytest.mark.timeout(60)
def test_in_a_process_worker_progress_reaches_the_parents_observer() -> None:
    """More in tests/backends/process/test_progress.py."""
    seen = ProgressRecorder(final=1)
    with ProcessBackend(1) as backend, ToolRegistry(backend=backend) as registry:
        registry.add_progress_observer(seen)
        registry.register(tool("t", _reports))
        result = registry.execute(ToolExecutionInput("c1", "t", {}, AbortController().signal))
        assert seen.last.wait(10)
    assert value_of(result) == "done"
    assert seen.updates == [ProgressUpdate(1.0, 2.0, None)]
