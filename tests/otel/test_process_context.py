"""The W3C trace context crosses into ``ProcessBackend`` workers (issue 24):
a span a body starts in the worker, with an SDK configured there, is a
child of its call's ``execute_tool`` span."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import TracerProvider

from dshtools import AbortController, ProcessBackend, ToolDefinition, ToolExecutionInput, ToolRegistry, otel
from dshtools._backends import remote
from tests.helpers.calls import call
from tests.otel.conftest import Traced


def traced_in_worker(_args: Any, _run: Any) -> dict[str, Any]:
    """Runs in the worker process: a span of the worker's own SDK."""
    from opentelemetry.sdk.trace import TracerProvider as WorkerProvider

    tracer = WorkerProvider().get_tracer("worker")
    with tracer.start_as_current_span("in the worker") as span:
        parent = span.parent  # type: ignore[attr-defined]
        trace_id = span.get_span_context().trace_id
    return {"trace_id": f"{trace_id:032x}", "parent": None if parent is None else f"{parent.span_id:016x}"}


@pytest.fixture
def process_registry() -> Iterator[ToolRegistry]:
    with ToolRegistry(backend=ProcessBackend(max_workers=1)) as registry:
        registry.register(ToolDefinition("traced", "", {"type": "object"}, traced_in_worker))
        yield registry


@pytest.mark.timeout(60)
def test_a_span_started_in_a_process_worker_is_a_child_of_its_call_span(
    process_registry: ToolRegistry, traced: Traced
) -> None:
    inst = otel.instrument(process_registry, tracer_provider=traced.provider)
    try:
        with traced.tracer.start_as_current_span("agent turn"):
            result = process_registry.execute(call("traced"))
    finally:
        inst.uninstrument()
    assert result.is_error is False, result
    (span,) = traced.spans("execute_tool traced")
    assert span.context is not None
    assert result.value == {"trace_id": f"{span.context.trace_id:032x}", "parent": f"{span.context.span_id:016x}"}


@pytest.mark.timeout(60)
def test_nothing_crosses_when_no_instrumentation_is_installed(process_registry: ToolRegistry) -> None:
    provider = TracerProvider()
    inst = otel.instrument(process_registry, tracer_provider=provider)
    assert remote._carrier is not None
    inst.uninstrument()
    assert remote._carrier is None  # the last uninstrument() takes the carrier off
    with provider.get_tracer("tests").start_as_current_span("agent turn"):
        result = process_registry.execute(call("traced"))
    assert result.is_error is False and result.value["parent"] is None


def test_a_context_that_does_not_import_in_the_worker_is_ignored() -> None:
    with remote.incoming_context(("no.such.module", {"traceparent": "x"})):
        pass  # the body runs, without a context
    with remote.incoming_context(None):
        pass


def test_carried_context_makes_the_senders_span_current_and_restores_after() -> None:
    from opentelemetry import trace

    trace_id, span_id = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
    before = trace.get_current_span()
    with otel.carried_context({"traceparent": f"00-{trace_id}-{span_id}-01"}):
        current = trace.get_current_span().get_span_context()
        assert (f"{current.trace_id:032x}", f"{current.span_id:016x}") == (trace_id, span_id)
        assert current.is_remote
    assert trace.get_current_span() is before


def stubborn_in_worker(args: Any, _run: Any) -> None:
    """Runs in the worker: says it started through the FIFO, then ignores
    its signal until the backend kills it."""
    import threading

    with open(args["fifo"], "w") as fifo:
        fifo.write("x")
    threading.Event().wait()


@pytest.mark.timeout(60)
def test_a_forced_stop_is_on_the_span_as_an_event_and_an_attribute(tmp_path: Any, traced: Traced) -> None:
    import os
    import threading

    fifo = str(tmp_path / "started")
    os.mkfifo(fifo)
    controller = AbortController()

    def abort_once_started() -> None:
        with open(fifo) as f:  # returns when the body, in the worker, wrote to it
            f.read(1)
        controller.abort()

    with ToolRegistry(backend=ProcessBackend(max_workers=1, kill_after=0.05)) as registry:
        registry.register(ToolDefinition("stubborn", "", {"type": "object"}, stubborn_in_worker))
        inst = otel.instrument(registry, tracer_provider=traced.provider)
        threading.Thread(target=abort_once_started).start()
        result = registry.execute(ToolExecutionInput("c1", "stubborn", {"fifo": fifo}, controller.signal))
        inst.uninstrument()
    assert result.code == "ABORTED" and result.meta["killed"] is True
    (span,) = traced.exporter.get_finished_spans()
    attributes = dict(span.attributes or {})
    assert attributes[otel.KILLED] is True and attributes[otel.BACKEND] == "ProcessBackend"
    assert [e.name for e in span.events] == [otel.ABORT_EVENT, otel.FORCED_STOP_EVENT]
    abort, stop = span.events
    assert abort.timestamp <= stop.timestamp
    if "overrun_s" in result.meta:
        assert attributes[otel.OVERRUN_S] == result.meta["overrun_s"]
        assert (stop.attributes or {})[otel.OVERRUN_S] == result.meta["overrun_s"]
