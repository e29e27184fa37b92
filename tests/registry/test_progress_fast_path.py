"""The body's ``run.report_progress`` is the store itself: one Python frame
between the body and the call's latest update, the common case (exact
``int``/``float``/``str``, no call observer) inline, everything else on the
full path with the same guarantees (docs/policies.md#progress)."""

from __future__ import annotations

import inspect
import sys
import threading
from types import FrameType
from typing import Any

import pytest

from dshtools import (
    AbortController,
    ExecutionToken,
    ProgressUpdate,
    ToolExecution,
    ToolRegistry,
    ToolRunContext,
)
from dshtools._registry.observer import set_call_observer
from tests.helpers.calls import call, tool, value_of
from tests.helpers.recorders import CallWatchRecorder, ProgressRecorder

pytestmark = pytest.mark.timeout(20)


def test_the_bodys_method_keeps_its_documented_signature_and_docstring() -> None:
    method = ToolRunContext.report_progress
    assert method.__module__ == "dshtools._types.tools"  # defined with the class, not installed from outside
    assert list(inspect.signature(method).parameters) == ["self", "progress", "total", "message"]
    assert inspect.signature(method).parameters["total"].default is None
    assert method.__qualname__ == "ToolRunContext.report_progress"
    assert (method.__doc__ or "").startswith("Tell the registry's progress observers how far the body got")


def test_a_report_while_the_call_is_queued_is_one_python_frame(registry: ToolRegistry) -> None:
    """With the delivery thread held by an observer, the call stays queued:
    a report then runs exactly one Python function (the method itself),
    where the method forwarding to the run's store ran two."""
    release = threading.Event()
    held = ProgressRecorder(hold=release)
    registry.add_progress_observer(held)
    called: list[str] = []

    def profile(frame: FrameType, event: str, _arg: object) -> None:
        if event == "call":
            called.append(frame.f_code.co_name)

    def body(_a: Any, run: ToolRunContext) -> str:
        run.report_progress(0)
        assert held.entered.wait(10)  # the delivery thread holds update 0
        run.report_progress(1)  # queues the call again
        before = sys.getprofile()
        sys.setprofile(profile)
        try:
            run.report_progress(2, 3, "step")
        finally:
            sys.setprofile(before)
        return "done"

    registry.register(tool("t", body))
    try:
        assert value_of(registry.execute(call("t"))) == "done"
    finally:
        release.set()
    assert called == ["report_progress"]


@pytest.mark.parametrize("with_observer", [True, False])
def test_a_call_observers_watch_sees_every_update(registry: ToolRegistry, with_observer: bool) -> None:
    watching = CallWatchRecorder()
    set_call_observer(registry, watching)
    last = threading.Event()
    if with_observer:
        registry.add_progress_observer(lambda _e, u: last.set() if u.progress == 99 else None)

    def body(_a: Any, run: ToolRunContext) -> str:
        for i in range(100):
            run.report_progress(i, 100, "rows")
        return "done"

    registry.register(tool("t", body))
    assert value_of(registry.execute(call("t"))) == "done"
    assert watching.updates == [ProgressUpdate(float(i), 100.0, "rows") for i in range(100)]
    assert not with_observer or last.wait(10)


class Count(int):
    pass


class Fraction(float):
    pass


def test_values_that_are_not_exact_take_the_full_check(registry: ToolRegistry) -> None:
    """A call observer's watch sees every accepted update, in the body's
    thread; the progress observer sees the last one."""
    watching = CallWatchRecorder()
    set_call_observer(registry, watching)
    last = threading.Event()
    registry.add_progress_observer(lambda _e, u: last.set() if u.message == "end" else None)

    def body(_a: Any, run: ToolRunContext) -> str:
        run.report_progress(Count(1), Fraction(2.0))  # subclasses: accepted
        run.report_progress(True)  # a bool is not a number: dropped
        run.report_progress(Fraction("nan"))  # NaN: dropped
        run.report_progress(1, Fraction("nan"))
        run.report_progress(1, 2, b"bytes")  # type: ignore[arg-type]  # not a str: dropped
        run.report_progress(10**400)  # no float for it: dropped
        run.report_progress(3, 4, "end")
        return "done"

    registry.register(tool("t", body))
    assert value_of(registry.execute(call("t"))) == "done"
    assert watching.updates == [ProgressUpdate(1.0, 2.0, None), ProgressUpdate(3.0, 4.0, "end")]
    assert last.wait(10)


def test_without_a_progress_observer_nothing_is_stored(registry: ToolRegistry) -> None:
    stored: list[object] = []

    def body(_a: Any, run: ToolRunContext) -> None:
        run.report_progress(1, 2)
        stored.append(run._run.progress_latest)  # type: ignore[attr-defined]

    registry.register(tool("t", body))
    registry.execute(call("t"))
    assert stored == [None]


def test_every_call_gets_its_last_update_across_many_short_calls(registry: ToolRegistry) -> None:
    """The lock-free store against the delivery thread: whatever the
    interleaving, each call's last update reaches the observer, once."""
    last: dict[str, list[float]] = {}
    lock = threading.Lock()
    done = threading.Event()
    calls = 200

    def observer(execution: ToolExecution, update: ProgressUpdate) -> None:
        with lock:
            last.setdefault(execution.call_id, []).append(update.progress)
            if sum(1 for p in last.values() if p[-1] == 2.0) == calls:
                done.set()

    registry.add_progress_observer(observer)

    def body(_a: Any, run: ToolRunContext) -> None:
        run.report_progress(0, 2)
        run.report_progress(1, 2)
        run.report_progress(2, 2)

    registry.register(tool("t", body))
    for i in range(calls):
        registry.execute(call("t", call_id=f"c{i}"))
    assert done.wait(10)
    for updates in last.values():
        assert updates == sorted(set(updates)) and updates[-1] == 2.0  # in order, never twice


class ForeignRun:
    """A run of another kind (a worker's): the method hands it the update."""

    def __init__(self) -> None:
        self.reported: list[tuple[object, object, object]] = []

    def defer_context(self, context: object) -> None:
        pass

    def report_progress(self, progress: object, total: object, message: object) -> None:
        self.reported.append((progress, total, message))

    def dispatch(self, *args: object) -> Any:
        raise NotImplementedError


def test_the_context_of_another_kind_of_run_hands_the_update_to_that_run() -> None:
    foreign = ForeignRun()
    ctx = ToolRunContext(
        token=ExecutionToken(),
        call_id="c1",
        root_call_id="c1",
        name="t",
        arguments={},
        agent=None,
        parent=None,
        definition=None,
        signal=AbortController().signal,
        run=foreign,
    )
    ctx.report_progress(1, 2, "half")
    ctx.report_progress(3)
    assert foreign.reported == [(1, 2, "half"), (3, None, None)]


def test_a_workers_run_gets_the_update_through_its_own_method_without_an_exception() -> None:
    """A worker's ``RemoteRun`` says it is not a registry's run by its
    ``watch``: the body's report reaches its sink with no exception raised
    and caught on the way (which would cost a worker's body far more)."""
    from dshtools._backends.remote import RemoteRun

    received: list[tuple[float, float | None, str | None]] = []
    remote = RemoteRun("a test worker", thaw_contexts=True, progress=lambda *u: received.append(u))
    ctx = remote.context("c1", "c1", "t", None, {}, AbortController().signal)
    events: list[str] = []

    def trace(_frame: FrameType, event: str, _arg: object) -> Any:
        events.append(event)
        return trace

    before = sys.gettrace()  # coverage's tracer, when measuring: put back
    sys.settrace(trace)
    try:
        ctx.report_progress(1, 2, "half")
    finally:
        sys.settrace(before)
    assert received == [(1, 2, "half")]
    assert "exception" not in events and events.count("call") == 3  # the method, RemoteRun's, the sink
