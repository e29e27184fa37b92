"""Every call an OpenTelemetry GenAI ``execute_tool`` span (issue 24,
docs/contract.md#otel), checked with the real SDK and its
in-memory exporter."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import threading
import time
import warnings
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics.export import HistogramDataPoint
from opentelemetry.trace import SpanKind, StatusCode

import dshtools
from dshtools import (
    AbortController,
    Deny,
    TimeoutPolicy,
    ToolExecutionInput,
    ToolRegistry,
    ToolRunContext,
    execute_batch,
    otel,
)
from dshtools._registry.observer import CallObserver, set_call_observer
from dshtools._types.calls import InvalidCall
from tests.helpers.calls import call, tool
from tests.helpers.waiting import stops_when_aborted
from tests.otel.conftest import Traced


def test_the_pinned_names_are_the_conventions_names() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        attrs = pytest.importorskip("opentelemetry.semconv._incubating.attributes.gen_ai_attributes")
        errors = pytest.importorskip("opentelemetry.semconv.attributes.error_attributes")
    assert otel.GEN_AI_OPERATION_NAME == attrs.GEN_AI_OPERATION_NAME
    assert otel.GEN_AI_TOOL_NAME == attrs.GEN_AI_TOOL_NAME
    assert otel.GEN_AI_TOOL_CALL_ID == attrs.GEN_AI_TOOL_CALL_ID
    assert otel.GEN_AI_TOOL_DESCRIPTION == attrs.GEN_AI_TOOL_DESCRIPTION
    assert otel.GEN_AI_TOOL_TYPE == attrs.GEN_AI_TOOL_TYPE
    assert otel.GEN_AI_TOOL_CALL_ARGUMENTS == attrs.GEN_AI_TOOL_CALL_ARGUMENTS
    assert otel.GEN_AI_TOOL_CALL_RESULT == attrs.GEN_AI_TOOL_CALL_RESULT
    assert attrs.GenAiOperationNameValues.EXECUTE_TOOL.value == otel.EXECUTE_TOOL
    assert otel.ERROR_TYPE == errors.ERROR_TYPE


def test_import_dshtools_imports_no_opentelemetry() -> None:
    code = "import sys, dshtools; print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=dict(os.environ))
    assert out.stdout.strip() == "[]"


def _abort_when(started: threading.Event, controller: AbortController) -> None:
    started.wait(10)
    controller.abort()


def _raise(_a: Any, _r: Any) -> None:
    raise ValueError("boom")


def _wait_for_abort(_a: Any, run: ToolRunContext) -> str:
    run.signal.wait()
    return "late"


# (tool, arguments, how, expected code, body invoked or None)
OUTCOMES = [
    pytest.param("ok", {}, None, None, True, id="success"),
    pytest.param("fails", {}, None, dshtools.TOOL_ERROR, True, id="TOOL_ERROR"),
    pytest.param("typed", {"n": "x"}, None, dshtools.INVALID_ARGS, False, id="INVALID_ARGS"),
    pytest.param("missing", {}, None, dshtools.UNKNOWN_TOOL, False, id="UNKNOWN_TOOL"),
    pytest.param("ok", {}, "deny", dshtools.DENIED, False, id="DENIED"),
    pytest.param("ok", {}, "pre-aborted", dshtools.TOOL_ABORTED_BEFORE_DISPATCH, False, id="ABORTED_BEFORE_DISPATCH"),
    pytest.param("waits", {}, "abort-running", dshtools.TOOL_ABORTED, True, id="ABORTED"),
    # The timer may fire before the worker claimed the body: as the result says.
    pytest.param("slow", {}, "timeout", dshtools.TOOL_TIMEOUT, None, id="TOOL_TIMEOUT"),
    pytest.param("bad_output", {}, None, dshtools.INVALID_TOOL_OUTPUT, True, id="INVALID_TOOL_OUTPUT"),
    pytest.param("ok", InvalidCall("no tool name"), None, dshtools.INVALID_CALL, False, id="INVALID_CALL"),
]


@pytest.mark.timeout(20)
@pytest.mark.parametrize(("name", "arguments", "how", "code", "invoked"), OUTCOMES)
def test_one_span_per_call_for_every_outcome_under_the_callers_span(
    registry: ToolRegistry,
    traced: Traced,
    instrumented: otel.Instrumentation,
    name: str,
    arguments: object,
    how: str | None,
    code: str | None,
    invoked: bool | None,
) -> None:
    started = threading.Event()
    registry.register(tool("ok", lambda a, r: "fine"))
    registry.register(tool("fails", _raise))
    registry.register(
        tool("typed", lambda a, r: a, parameters={"type": "object", "properties": {"n": {"type": "integer"}}})
    )
    registry.register(tool("waits", stops_when_aborted(started, "late")))
    registry.register(tool("slow", _wait_for_abort, timeout=0.01))
    registry.register(
        tool(
            "bad_output",
            lambda a, r: {"n": "x"},
            output_schema={"type": "object", "properties": {"n": {"type": "integer"}}},
        )
    )
    if how == "deny":
        registry.add_pre_execute(lambda ex, nxt: Deny("not today"))
    if how == "timeout":
        registry.add_around_dispatch(TimeoutPolicy())
    controller = AbortController()
    if how == "pre-aborted":
        controller.abort()
    if how == "abort-running":
        threading.Thread(target=_abort_when, args=(started, controller)).start()
    with traced.tracer.start_as_current_span("agent turn") as parent:
        result = registry.execute(call(name, arguments, signal=controller.signal))
        assert len(traced.spans()) == 1  # ended by the time execute() returned, the caller's span still open
    assert result.code == code
    span = traced.span()
    assert span.name == f"execute_tool {name}"
    assert span.kind is SpanKind.INTERNAL
    assert span.parent is not None and span.parent.span_id == parent.get_span_context().span_id
    assert span.context is not None and span.context.trace_id == parent.get_span_context().trace_id
    attributes = dict(span.attributes or {})
    assert attributes[otel.GEN_AI_OPERATION_NAME] == "execute_tool"
    assert attributes[otel.GEN_AI_TOOL_NAME] == name
    assert attributes[otel.GEN_AI_TOOL_CALL_ID] == "c1"
    assert attributes[otel.GEN_AI_TOOL_TYPE] == "function"
    assert attributes[otel.BODY_INVOKED] is (result.body_invoked if invoked is None else invoked)
    assert attributes[otel.KILLED] is False
    if name == "missing":
        assert otel.GEN_AI_TOOL_DESCRIPTION not in attributes and otel.BACKEND not in attributes
    else:
        assert attributes[otel.GEN_AI_TOOL_DESCRIPTION] == f"{name} tool"
        assert attributes[otel.BACKEND] == "ThreadBackend"
    if code is None:
        assert span.status.status_code is StatusCode.UNSET
        assert otel.ERROR_TYPE not in attributes
    else:
        assert span.status.status_code is StatusCode.ERROR
        assert attributes[otel.ERROR_TYPE] == code
    aborts = [e for e in span.events if e.name == otel.ABORT_EVENT]
    if code in (dshtools.TOOL_ABORTED, dshtools.TOOL_ABORTED_BEFORE_DISPATCH, dshtools.TOOL_TIMEOUT):
        assert len(aborts) == 1
        expected = "TimeoutReason" if code == dshtools.TOOL_TIMEOUT else "AbortError"
        assert (aborts[0].attributes or {})[otel.ABORT_REASON] == expected
    else:
        assert aborts == []


@pytest.mark.timeout(20)
def test_the_span_ends_after_a_body_that_ignored_its_abort_returned(
    registry: ToolRegistry, traced: Traced, instrumented: otel.Instrumentation
) -> None:
    """The span's end is when the work stopped, not when the caller stopped
    waiting: a body that runs on after its abort is joined first."""
    started, saw_abort, release = threading.Event(), threading.Event(), threading.Event()
    returned_at: list[int] = []

    def stubborn(_a: Any, run: ToolRunContext) -> str:
        started.set()
        run.signal.wait()
        saw_abort.set()
        release.wait(10)  # ignores its abort until the test lets it go
        returned_at.append(time.time_ns())
        return "done anyway"

    registry.register(tool("stubborn", stubborn))
    controller = AbortController()
    results: list[Any] = []
    caller = threading.Thread(
        target=lambda: results.append(registry.execute(call("stubborn", signal=controller.signal)))
    )
    caller.start()
    assert started.wait(10)
    controller.abort()
    assert saw_abort.wait(10)
    assert traced.spans() == []  # aborted, still running: the span is open
    release.set()
    caller.join(10)
    assert results[0].code == dshtools.TOOL_ABORTED
    span = traced.span()
    assert span.end_time is not None and span.end_time >= returned_at[0]
    (abort,) = [e for e in span.events if e.name == otel.ABORT_EVENT]
    assert abort.timestamp < returned_at[0]  # the abort's own time, not the span's end


def test_content_is_absent_unless_opted_in(registry: ToolRegistry, traced: Traced) -> None:
    registry.register(tool("echo", lambda a, r: a["text"]))
    inst = otel.instrument(registry, tracer_provider=traced.provider, meter_provider=traced.meters)
    assert inst.capture_content is False
    registry.execute(call("echo", {"text": "secret"}))
    inst.uninstrument()
    attributes = dict(traced.span().attributes or {})
    assert otel.GEN_AI_TOOL_CALL_ARGUMENTS not in attributes and otel.GEN_AI_TOOL_CALL_RESULT not in attributes
    assert "secret" not in repr(attributes)

    traced.exporter.clear()
    inst = otel.instrument(registry, tracer_provider=traced.provider, capture_content=True)
    registry.execute(call("echo", {"text": "hello"}))
    inst.uninstrument()
    attributes = dict(traced.span().attributes or {})
    assert attributes[otel.GEN_AI_TOOL_CALL_ARGUMENTS] == '{"text": "hello"}'
    assert attributes[otel.GEN_AI_TOOL_CALL_RESULT] == '[{"type": "text", "text": "hello"}]'


def test_the_conventions_environment_variable_opts_in(
    registry: ToolRegistry, traced: Traced, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(otel.CAPTURE_CONTENT_ENV, "True")
    inst = otel.instrument(registry, tracer_provider=traced.provider)
    assert inst.capture_content is True
    inst.uninstrument()
    monkeypatch.setenv(otel.CAPTURE_CONTENT_ENV, "false")
    inst = otel.instrument(registry, tracer_provider=traced.provider)
    assert inst.capture_content is False
    inst.uninstrument()
    # An explicit argument wins over the variable.
    assert otel.instrument(registry, tracer_provider=traced.provider, capture_content=True).capture_content is True


def test_captured_content_is_bounded_with_a_marker(registry: ToolRegistry, traced: Traced) -> None:
    registry.register(tool("echo", lambda a, r: a["text"]))
    inst = otel.instrument(registry, tracer_provider=traced.provider, capture_content=True)
    registry.execute(call("echo", {"text": "x" * 20_000}))
    inst.uninstrument()
    attributes = dict(traced.span().attributes or {})
    for key in (otel.GEN_AI_TOOL_CALL_ARGUMENTS, otel.GEN_AI_TOOL_CALL_RESULT):
        value = attributes[key]
        assert isinstance(value, str)
        head, marker = value[: otel.MAX_CONTENT_CHARS], value[otel.MAX_CONTENT_CHARS :]
        assert head.startswith(("{", "[")) and marker.startswith("…[truncated ") and marker.endswith(" characters]")


@pytest.mark.timeout(20)
def test_batch_calls_are_siblings_in_model_order_under_the_callers_span(
    registry: ToolRegistry, traced: Traced, instrumented: otel.Instrumentation
) -> None:
    barrier = threading.Barrier(3, timeout=10)

    def together(_a: Any, _r: ToolRunContext) -> str:
        barrier.wait()  # the three bodies overlap: they run on helper threads
        with traced.tracer.start_as_current_span("inside"):
            pass
        return "ok"

    registry.register(tool("together", together, is_concurrency_safe=lambda a: True))
    calls = [call("together", call_id=f"c{i}") for i in range(3)]
    with traced.tracer.start_as_current_span("agent turn") as parent:
        results = execute_batch(registry, calls, signal=AbortController().signal)
    assert [r.is_error for r in results] == [False] * 3
    spans = sorted(traced.spans(), key=lambda s: s.start_time or 0)
    assert [(s.attributes or {})[otel.GEN_AI_TOOL_CALL_ID] for s in spans] == ["c0", "c1", "c2"]
    for span in spans:
        assert span.parent is not None and span.parent.span_id == parent.get_span_context().span_id
    # A span a body starts is a child of its own call's span.
    ids = {s.context.span_id for s in spans if s.context is not None}
    inner = traced.spans("inside")
    assert len(inner) == 3 and {s.parent.span_id for s in inner if s.parent is not None} == ids


@pytest.mark.timeout(20)
def test_a_cancelled_batch_still_has_one_span_percall(
    registry: ToolRegistry, traced: Traced, instrumented: otel.Instrumentation
) -> None:
    started = threading.Event()
    registry.register(tool("first", stops_when_aborted(started)))
    registry.register(tool("later", lambda a, r: "never"))
    batch = AbortController()
    threading.Thread(target=_abort_when, args=(started, batch)).start()
    results = execute_batch(registry, [call("first", call_id="a"), call("later", call_id="b")], signal=batch.signal)
    assert [r.code for r in results] == [dshtools.TOOL_ABORTED, dshtools.TOOL_ABORTED_BEFORE_DISPATCH]
    spans = sorted(traced.spans(), key=lambda s: s.start_time or 0)
    assert [(s.attributes or {})[otel.ERROR_TYPE] for s in spans] == [
        dshtools.TOOL_ABORTED,
        dshtools.TOOL_ABORTED_BEFORE_DISPATCH,
    ]
    assert [(s.attributes or {})[otel.BODY_INVOKED] for s in spans] == [True, False]


@pytest.mark.timeout(20)
def test_a_thread_body_and_its_nested_calls_are_children_of_its_span(
    registry: ToolRegistry, traced: Traced, instrumented: otel.Instrumentation
) -> None:
    def outer(_a: Any, run: ToolRunContext) -> object:
        with traced.tracer.start_as_current_span("work in the body"):
            pass
        return run.dispatch("leaf", {}).is_error

    registry.register(tool("outer", outer))
    registry.register(tool("leaf", lambda a, r: "leaf"))
    assert registry.execute(call("outer")).is_error is False
    by_name = {s.name: s for s in traced.exporter.get_finished_spans()}
    outer_span = by_name["execute_tool outer"]
    assert outer_span.context is not None and outer_span.parent is None
    for child in ("work in the body", "execute_tool leaf"):
        parent = by_name[child].parent
        assert parent is not None and parent.span_id == outer_span.context.span_id


def test_the_duration_histogram_has_the_tool_and_error_type(
    registry: ToolRegistry, traced: Traced, instrumented: otel.Instrumentation
) -> None:
    registry.register(tool("ok", lambda a, r: "fine"))
    registry.execute(call("ok"))
    registry.execute(call("missing"))
    data = traced.reader.get_metrics_data()
    assert data is not None
    (metric,) = [
        m
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
        if m.name == "gen_ai.execute_tool.duration"
    ]
    assert metric.unit == "s"
    points = {
        tuple(sorted((p.attributes or {}).items())): p
        for p in metric.data.data_points
        if isinstance(p, HistogramDataPoint)
    }
    ok = (("gen_ai.operation.name", "execute_tool"), ("gen_ai.tool.name", "ok"))
    missing = (
        ("error.type", dshtools.UNKNOWN_TOOL),
        ("gen_ai.operation.name", "execute_tool"),
        ("gen_ai.tool.name", "missing"),
    )
    assert set(points) == {ok, missing}
    assert points[ok].count == 1 and points[ok].sum >= 0


def test_uninstrument_leaves_no_hook_behind(registry: ToolRegistry, traced: Traced) -> None:
    registry.register(tool("ok", lambda a, r: "fine"))
    before = registry.statistics()
    inst = otel.instrument(registry, tracer_provider=traced.provider)
    with pytest.raises(RuntimeError, match="instrumented already"):
        otel.instrument(registry, tracer_provider=traced.provider)
    registry.execute(call("ok"))
    inst.uninstrument()
    inst.uninstrument()  # idempotent
    assert registry._observer is None
    assert registry.statistics() == before  # no hook of any kind was added
    registry.execute(call("ok"))
    assert len(traced.spans()) == 1  # the call after uninstrument() made none
    again = otel.instrument(registry, tracer_provider=traced.provider)
    registry.execute(call("ok"))
    again.uninstrument()
    assert len(traced.spans()) == 2


def test_instrument_refuses_what_is_not_a_registry() -> None:
    with pytest.raises(TypeError, match="ToolRegistry"):
        otel.instrument(object())  # type: ignore[arg-type]


def test_with_no_sdk_no_span_is_made_and_a_provider_set_later_is_used(registry: ToolRegistry) -> None:
    noop = otel.instrument(
        registry, tracer_provider=trace.NoOpTracerProvider(), meter_provider=metrics.NoOpMeterProvider()
    )
    assert noop.started(call("ok"), None) is None  # nothing to record: the call is not watched
    noop.uninstrument()
    # The API's global proxies: no-op until a real provider is set.
    proxy = otel.instrument(registry)
    assert proxy.started(call("ok"), None) is None
    proxy.uninstrument()


_LATE_PROVIDER = """
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from dshtools import AbortController, ToolDefinition, ToolExecutionInput, ToolRegistry, otel

with ToolRegistry() as registry:
    registry.register(ToolDefinition("ok", "", {"type": "object"}, lambda a, r: "fine"))
    inst = otel.instrument(registry)  # the global providers: no SDK yet
    call = ToolExecutionInput("c1", "ok", {}, AbortController().signal)
    assert inst.started(call, None) is None
    registry.execute(call)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    registry.execute(call)
    print([s.name for s in exporter.get_finished_spans()])
"""


@pytest.mark.timeout(60)
def test_a_global_provider_set_after_instrument_is_used_by_the_nextcall() -> None:
    # In a child: the global provider can be set once per process.
    out = subprocess.run(
        [sys.executable, "-c", _LATE_PROVIDER], capture_output=True, text=True, check=True, env=dict(os.environ)
    )
    assert out.stdout.strip() == "['execute_tool ok']"


class _BrokenWatch:
    def enter(self) -> object:
        raise RuntimeError("enter bug")

    def exit(self, token: object) -> None:
        raise RuntimeError("exit bug")

    def finished(self, result: object) -> None:
        raise RuntimeError("finished bug")


class _BrokenObserver:
    def started(self, call: ToolExecutionInput, definition: object) -> Any:
        raise RuntimeError("observer bug")


class _ObserverOfBrokenWatches:
    def started(self, call: ToolExecutionInput, definition: object) -> Any:
        return _BrokenWatch()


@pytest.mark.parametrize(
    ("observer", "reported"),
    [
        pytest.param(_BrokenObserver(), ["observer bug"], id="observer"),
        pytest.param(_ObserverOfBrokenWatches(), ["enter bug", "exit bug", "finished bug"], id="watch"),
    ],
)
def test_a_faulty_observer_or_watch_is_reported_and_changes_no_result(
    registry: ToolRegistry, unraisable: list[Any], observer: CallObserver, reported: list[str]
) -> None:
    registry.register(tool("ok", lambda a, r: "fine"))
    set_call_observer(registry, observer)
    try:
        result = registry.execute(call("ok"))
    finally:
        set_call_observer(registry, None)
    assert result.is_error is False and result.content[0]["text"] == "fine"
    assert [str(u.exc_value) for u in unraisable] == reported


def test_metrics_alone_are_recorded_without_a_tracer(registry: ToolRegistry, traced: Traced) -> None:
    registry.register(tool("ok", lambda a, r: "fine"))
    inst = otel.instrument(registry, tracer_provider=trace.NoOpTracerProvider(), meter_provider=traced.meters)
    registry.execute(call("ok"))
    inst.uninstrument()
    assert traced.exporter.get_finished_spans() == ()
    data = traced.reader.get_metrics_data()
    assert data is not None
    names = [m.name for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics]
    assert names == [otel.EXECUTE_TOOL_DURATION]


@pytest.mark.timeout(120)
def test_ten_thousand_calls_leave_no_span_token_or_listener_behind(
    registry: ToolRegistry, traced: Traced, instrumented: otel.Instrumentation
) -> None:
    registry.register(tool("ok", lambda a, r: None))
    registry.add_pre_execute(lambda ex, nxt: Deny("no") if ex.call_id == "deny" else nxt())
    signal = AbortController().signal
    current = otel_context.get_current()
    for i in range(10_000):
        call_id = "deny" if i % 3 == 0 else f"c{i}"
        registry.execute(ToolExecutionInput(call_id, "ok" if i % 5 else "missing", {}, signal))
    assert len(traced.spans()) == 10_000  # every span ended (the exporter sees ended spans only)
    assert otel_context.get_current() == current  # every attached context detached
    assert not signal._listeners  # every abort listener taken off the caller's signal
    gc.collect()
    assert not [o for o in gc.get_objects() if type(o).__name__ == "_Watch"]
