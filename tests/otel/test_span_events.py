"""What an ``execute_tool`` span says about a call's abort, forced stop and
progress (docs/observability.md#events), in batches where a call's result
waits for its model-order turn after its body stopped, and the scope the
spans are recorded under."""

from __future__ import annotations

import importlib.metadata
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan

import dshtools
from dshtools import (
    APPROVAL_PENDING,
    INVALID_CALL,
    TOOL_ABORTED,
    TOOL_TIMEOUT,
    WORKER_LOST,
    AbortController,
    Ask,
    RetryPolicy,
    TimeoutPolicy,
    ToolDefinition,
    ToolExecutionResult,
    ToolRegistry,
    ToolRunContext,
    execute_batch,
    otel,
)
from dshtools._backends.base import BodyReport, Error, WorkerLost
from dshtools._types.calls import InvalidCall
from tests.helpers.calls import call, tool
from tests.helpers.recorders import ProgressRecorder
from tests.otel.conftest import Traced


def _by_call_id(traced: Traced) -> dict[str, ReadableSpan]:
    return {str((s.attributes or {})[otel.GEN_AI_TOOL_CALL_ID]): s for s in traced.spans()}


def _events(span: ReadableSpan, name: str) -> list[Any]:
    return [e for e in span.events if e.name == name]


def _parallel(name: str, body: Callable[[Any, ToolRunContext], object], **kw: Any) -> ToolDefinition:
    return tool(name, body, is_concurrency_safe=lambda a: True, **kw)


@pytest.fixture
def dispatch_settled(monkeypatch: pytest.MonkeyPatch, instrumented: otel.Instrumentation) -> dict[str, threading.Event]:
    """On the instrumented registry (the events come from its spans'
    watch), an event per call id, set once that call's dispatch settled
    (its body joined): the moment from which its result only waits for its
    model-order turn in a batch."""
    settled: dict[str, threading.Event] = {}
    original = otel._Watch.exit

    def exit(self: Any, token: object) -> None:
        original(self, token)
        settled.setdefault(self.call.call_id, threading.Event()).set()

    monkeypatch.setattr(otel._Watch, "exit", exit)
    for call_id in ("a", "b"):
        settled[call_id] = threading.Event()
    return settled


def _first_waits_for_the_callers_abort(_a: Any, run: ToolRunContext) -> str:
    run.signal.wait()
    return "stopped"


def _batch_aborted_by(
    registry: ToolRegistry, second: str, abort: Callable[[AbortController], None]
) -> list[ToolExecutionResult]:
    """``execute_batch`` of ``first`` (call id ``a``) and ``second`` (``b``)
    on a controller's signal while another thread runs ``abort(controller)``
    (it waits for its moment, then aborts); the thread is joined."""
    controller = AbortController()
    aborter = threading.Thread(target=abort, args=(controller,))
    aborter.start()
    results = execute_batch(registry, [call("first", call_id="a"), call(second, call_id="b")], signal=controller.signal)
    aborter.join(10)
    return results


@pytest.mark.timeout(20)
@pytest.mark.parametrize("overrun", [False, True], ids=["returned", "ran-on-until-the-callers-abort"])
def test_a_batch_call_keeps_the_timeout_its_body_saw_not_the_callers_later_abort(
    registry: ToolRegistry,
    traced: Traced,
    dispatch_settled: dict[str, threading.Event],
    overrun: bool,
) -> None:
    """Issue 24 defect: "b" timed out on its own; the caller's abort that
    lands later (while "b" waits to be published behind "a", or while its
    body still runs on) used to replace its TimeoutReason event."""
    saw_timeout = threading.Event()
    caller_aborted = threading.Event()

    def timed(_a: Any, run: ToolRunContext) -> str:
        run.signal.wait()
        saw_timeout.set()
        if overrun:
            caller_aborted.wait(10)  # still running when the caller aborts
        return "late"

    registry.add_around_dispatch(TimeoutPolicy())
    registry.register(_parallel("first", _first_waits_for_the_callers_abort))
    registry.register(_parallel("timed", timed, timeout=0.05))
    aborted_at: list[int] = []

    def abort_later(controller: AbortController) -> None:
        (saw_timeout if overrun else dispatch_settled["b"]).wait(10)
        aborted_at.append(time.time_ns())
        controller.abort()
        caller_aborted.set()

    results = _batch_aborted_by(registry, "timed", abort_later)
    assert [r.code for r in results] == [TOOL_ABORTED, TOOL_TIMEOUT]
    spans = _by_call_id(traced)
    (timeout,) = _events(spans["b"], otel.ABORT_EVENT)
    assert (timeout.attributes or {})[otel.ABORT_REASON] == "TimeoutReason"
    assert timeout.timestamp < aborted_at[0]  # the timer's own time
    (callers,) = _events(spans["a"], otel.ABORT_EVENT)
    assert (callers.attributes or {})[otel.ABORT_REASON] == "AbortError"
    assert callers.timestamp >= aborted_at[0]


@pytest.mark.timeout(20)
def test_a_success_that_waited_for_its_turn_when_the_caller_aborted_has_no_abort_event(
    registry: ToolRegistry, traced: Traced, dispatch_settled: dict[str, threading.Event]
) -> None:
    """A call whose body returned before the abort keeps its success
    (docs/contract.md#a1); its span says no abort reached it."""
    registry.register(_parallel("first", _first_waits_for_the_callers_abort))
    registry.register(_parallel("quick", lambda a, r: "done"))

    def abort_later(controller: AbortController) -> None:
        dispatch_settled["b"].wait(10)
        controller.abort()

    results = _batch_aborted_by(registry, "quick", abort_later)
    assert [r.code for r in results] == [TOOL_ABORTED, None]
    spans = _by_call_id(traced)
    assert _events(spans["b"], otel.ABORT_EVENT) == []
    assert spans["b"].status.is_ok and otel.ERROR_TYPE not in (spans["b"].attributes or {})
    assert len(_events(spans["a"], otel.ABORT_EVENT)) == 1


class _Dispatch:
    def __init__(self, run: ToolRunContext, stopped: list[int]) -> None:
        self._run = run
        self._stopped = stopped

    def wait(self, timeout: float) -> bool:
        if not self._run.signal.wait(timeout):
            return False
        if not self._stopped:
            self._stopped.append(time.time_ns())
        return True

    def report(self) -> BodyReport:
        # What a process backend reports once it killed a worker that
        # ignored its abort.
        return BodyReport(outcome=Error(RuntimeError("killed")), killed=True, overrun_s=0.25)


class KillingBackend:
    """Never runs the body: "kills" it as soon as its dispatch signal aborts."""

    def __init__(self) -> None:
        self.stopped: list[int] = []

    def validate(self, name: str, body: Any) -> None:
        pass

    def submit(self, body: Any, args: object, run: ToolRunContext) -> _Dispatch:
        return _Dispatch(run, self.stopped)

    def close(self) -> None:
        pass


@pytest.mark.timeout(20)
def test_a_forced_stop_in_a_batch_is_timed_when_the_body_stopped_not_when_it_was_published(
    registry: ToolRegistry, traced: Traced, dispatch_settled: dict[str, threading.Event]
) -> None:
    release = threading.Event()
    backend = KillingBackend()

    def first(_a: Any, _r: ToolRunContext) -> str:
        release.wait(10)
        return "first"

    registry.add_around_dispatch(TimeoutPolicy())
    registry.register(_parallel("first", first))
    registry.register(_parallel("stubborn", lambda a, r: "never", timeout=0.05, backend=backend))
    released_at: list[int] = []

    def release_later() -> None:
        dispatch_settled["b"].wait(10)
        released_at.append(time.time_ns())
        release.set()

    releaser = threading.Thread(target=release_later)
    releaser.start()
    results = execute_batch(
        registry, [call("first", call_id="a"), call("stubborn", call_id="b")], signal=AbortController().signal
    )
    releaser.join(10)
    assert [r.code for r in results] == [None, TOOL_TIMEOUT]
    span = _by_call_id(traced)["b"]
    attributes = dict(span.attributes or {})
    assert attributes[otel.KILLED] is True and attributes[otel.OVERRUN_S] == 0.25
    (abort,) = _events(span, otel.ABORT_EVENT)
    (stop,) = _events(span, otel.FORCED_STOP_EVENT)
    assert (abort.attributes or {})[otel.ABORT_REASON] == "TimeoutReason"
    assert (stop.attributes or {})[otel.OVERRUN_S] == 0.25
    # The kill is confirmed when the dispatch settles; the abort is heard by
    # a listener that may run after the waiter woke, but before it settled.
    assert abort.timestamp <= stop.timestamp and backend.stopped[0] <= stop.timestamp < released_at[0]
    assert span.end_time is not None and span.end_time >= released_at[0]  # published after "a"


def test_spans_and_measurements_carry_the_package_version(
    registry: ToolRegistry, traced: Traced, instrumented: otel.Instrumentation
) -> None:
    try:
        expected = importlib.metadata.version("dshtools")
    except importlib.metadata.PackageNotFoundError:
        expected = dshtools.__version__
    assert expected
    registry.register(tool("ok", lambda a, r: "fine"))
    registry.execute(call("ok"))
    scope = traced.span().instrumentation_scope
    assert scope is not None and (scope.name, scope.version) == ("dshtools", expected)
    data = traced.reader.get_metrics_data()
    assert data is not None
    scopes = {(sm.scope.name, sm.scope.version) for rm in data.resource_metrics for sm in rm.scope_metrics}
    assert scopes == {("dshtools", expected)}


@pytest.mark.timeout(30)
def test_a_tight_loop_of_progress_leaves_the_last_updates_and_a_count_on_the_span(
    registry: ToolRegistry, traced: Traced, instrumented: otel.Instrumentation
) -> None:
    n = 10_000

    def busy(_a: Any, run: ToolRunContext) -> str:
        for i in range(n):
            run.report_progress(i, n, f"step {i}")
        return "done"

    registry.register(tool("busy", busy))
    assert registry.execute(call("busy")).is_error is False
    span = traced.span()
    assert (span.attributes or {})[otel.PROGRESS_COUNT] == n
    events = _events(span, otel.PROGRESS_EVENT)
    assert len(events) == otel.MAX_PROGRESS_EVENTS
    kept = range(n - otel.MAX_PROGRESS_EVENTS, n)
    assert [(e.attributes or {})[otel.PROGRESS_VALUE] for e in events] == [float(i) for i in kept]
    assert [(e.attributes or {})[otel.PROGRESS_MESSAGE] for e in events] == [f"step {i}" for i in kept]
    assert {(e.attributes or {})[otel.PROGRESS_TOTAL] for e in events} == {float(n)}
    stamps = [e.timestamp for e in events]
    assert stamps == sorted(stamps) and span.start_time is not None and stamps[0] >= span.start_time


def test_progress_events_keep_what_the_body_reported_and_the_progress_observers_still_get_it(
    registry: ToolRegistry, traced: Traced, instrumented: otel.Instrumentation
) -> None:
    observer = ProgressRecorder(final=2.0)

    def steps(_a: Any, run: ToolRunContext) -> str:
        run.report_progress(1)
        run.report_progress("not a number")  # type: ignore[arg-type]  # dropped, as for observers
        run.report_progress(2, message="half")
        return "done"

    registry.register(tool("steps", steps))
    registry.register(tool("quiet", lambda a, r: "done"))
    registry.add_progress_observer(observer)
    registry.execute(call("steps"))
    registry.execute(call("quiet", call_id="c2"))
    spans = _by_call_id(traced)
    events = [dict(e.attributes or {}) for e in _events(spans["c1"], otel.PROGRESS_EVENT)]
    assert events == [{otel.PROGRESS_VALUE: 1.0}, {otel.PROGRESS_VALUE: 2.0, otel.PROGRESS_MESSAGE: "half"}]
    assert (spans["c1"].attributes or {})[otel.PROGRESS_COUNT] == 2
    # A call that reported nothing has neither events nor a count.
    assert _events(spans["c2"], otel.PROGRESS_EVENT) == []
    assert otel.PROGRESS_COUNT not in (spans["c2"].attributes or {})
    assert observer.last.wait(10) and observer.updates[-1].message == "half"


class _LosingBackend(KillingBackend):
    def submit(self, body: Any, args: object, run: ToolRunContext) -> Any:
        class Lost:
            def wait(self, timeout: float) -> bool:
                return True

            def report(self) -> BodyReport:
                return BodyReport(outcome=Error(WorkerLost("worker exited with code 9")))

        return Lost()


def test_a_lost_worker_and_a_deferred_approval_and_its_resume_each_get_their_span(traced: Traced) -> None:
    with ToolRegistry(approver=lambda request: "deferred") as registry:
        registry.register(tool("lost", lambda a, r: "never", backend=_LosingBackend()))
        registry.register(tool("rm", lambda a, r: "removed"))
        registry.add_pre_execute(lambda ex, nxt: Ask("delete?") if ex.name == "rm" else nxt())
        inst = otel.instrument(registry, tracer_provider=traced.provider)
        try:
            lost = registry.execute(call("lost", call_id="l1"))
            pending = registry.execute(call("rm", call_id="r1"))
            resumed = registry.resume(pending.meta["ticket"], "allowed-once", signal=AbortController().signal)
        finally:
            inst.uninstrument()
    assert (lost.code, pending.code, resumed.code) == (WORKER_LOST, APPROVAL_PENDING, None)
    spans = traced.spans()
    assert [(s.attributes or {}).get(otel.ERROR_TYPE) for s in spans] == [WORKER_LOST, APPROVAL_PENDING, None]
    assert [(s.attributes or {})[otel.GEN_AI_TOOL_CALL_ID] for s in spans] == ["l1", "r1", "r1"]
    assert [(s.attributes or {})[otel.BODY_INVOKED] for s in spans] == [True, False, True]
    assert [s.status.status_code.name for s in spans] == ["ERROR", "ERROR", "UNSET"]


@pytest.mark.timeout(20)
def test_a_retried_call_keeps_the_timeout_its_first_attempt_saw(
    registry: ToolRegistry, traced: Traced, instrumented: otel.Instrumentation
) -> None:
    """A deadline per attempt (the retry outside the timeout): the span of
    the call that succeeded on its second attempt says the first one's
    body saw a timeout, and how many attempts there were."""
    attempts: list[int] = []

    def flaky(_a: Any, run: ToolRunContext) -> str:
        attempts.append(1)
        if len(attempts) == 1:
            run.signal.wait()
            return "too late"
        return "done"

    registry.add_around_dispatch(RetryPolicy(attempts=2, backoff=0, retry_on=[TOOL_TIMEOUT], jitter=0))
    registry.add_around_dispatch(TimeoutPolicy())
    registry.register(tool("flaky", flaky, timeout=0.05, idempotent=True))
    result = registry.execute(call("flaky"))
    assert result.is_error is False and result.meta["attempts"] == 2
    span = traced.span()
    assert (span.attributes or {})[otel.ATTEMPTS] == 2 and otel.ERROR_TYPE not in (span.attributes or {})
    (abort,) = _events(span, otel.ABORT_EVENT)
    assert (abort.attributes or {})[otel.ABORT_REASON] == "TimeoutReason"


def test_an_invalid_model_call_with_no_tool_name_is_named_execute_tool(
    registry: ToolRegistry, traced: Traced, instrumented: otel.Instrumentation
) -> None:
    result = registry.execute(call("", InvalidCall("the model named no tool")))
    assert result.code == INVALID_CALL
    span = traced.span()
    assert span.name == "execute_tool"  # no trailing blank
    assert (span.attributes or {})[otel.ERROR_TYPE] == INVALID_CALL


@pytest.mark.parametrize(
    ("reason", "message"),
    [
        pytest.param("--cancel-after 1.5s elapsed", "--cancel-after 1.5s elapsed", id="str"),
        pytest.param(
            KeyboardInterrupt("interrupted (Ctrl-C)"), "KeyboardInterrupt: interrupted (Ctrl-C)", id="exception"
        ),
        pytest.param(RuntimeError(), "RuntimeError", id="exception-without-text"),
        pytest.param(42, "42", id="other"),
    ],
)
def test_the_abort_event_carries_the_reasons_text(
    registry: ToolRegistry, traced: Traced, instrumented: otel.Instrumentation, reason: object, message: str
) -> None:
    """The CLI's trace printed ``reason: str`` for a string reason: the event
    carries the reason's text beside its class."""
    registry.register(tool("t", lambda a, r: "never"))
    controller = AbortController()
    controller.abort(reason)
    registry.execute(call("t", signal=controller.signal))
    (abort,) = [e for e in traced.span().events if e.name == otel.ABORT_EVENT]
    attributes = dict(abort.attributes or {})
    assert attributes[otel.ABORT_MESSAGE] == message
    assert attributes[otel.ABORT_REASON] == type(reason).__name__
