"""The W3C trace context crosses into ``ProcessBackend`` workers (issue 24):
a span a body starts in the worker, with an SDK configured there, is a
child of its call's ``execute_tool`` span."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from dshtools import AbortController, ProcessBackend, ToolDefinition, ToolExecutionInput, ToolRegistry, otel
from dshtools._backends import remote


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


def _call() -> ToolExecutionInput:
    return ToolExecutionInput("c1", "traced", {}, AbortController().signal)


@pytest.mark.timeout(60)
def test_a_span_started_in_a_process_worker_is_a_child_of_its_call_span(process_registry: ToolRegistry) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    inst = otel.instrument(process_registry, tracer_provider=provider)
    try:
        with provider.get_tracer("tests").start_as_current_span("agent turn"):
            result = process_registry.execute(_call())
    finally:
        inst.uninstrument()
    assert result.is_error is False, result
    (span,) = [s for s in exporter.get_finished_spans() if s.name == "execute_tool traced"]
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
        result = process_registry.execute(_call())
    assert result.is_error is False and result.value["parent"] is None


def test_a_context_that_does_not_import_in_the_worker_is_ignored() -> None:
    with remote.incoming_context(("no.such.module", {"traceparent": "x"})):
        pass  # the body runs, without a context
    with remote.incoming_context(None):
        pass
