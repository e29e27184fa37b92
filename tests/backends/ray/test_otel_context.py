"""The W3C trace context crosses into ``RayBackend`` tasks (issue 24): a
span a body starts in the Ray worker is a child of its call's
``execute_tool`` span. Here rather than in tests/otel for the
``ray_cluster`` fixture of tests/backends."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")
pytest.importorskip("ray")

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from dshtools import AbortController, ToolDefinition, ToolExecutionInput, ToolRegistry, otel
from tests.otel.test_process_context import traced_in_worker


@pytest.fixture
def ray_registry(ray_cluster: None) -> Iterator[ToolRegistry]:
    from dshtools.ray import RayBackend

    with ToolRegistry(backend=RayBackend()) as registry:
        registry.register(ToolDefinition("traced", "", {"type": "object"}, traced_in_worker))
        yield registry


@pytest.mark.timeout(120)
def test_a_span_started_in_a_ray_task_is_a_child_of_its_call_span(ray_registry: ToolRegistry) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    inst = otel.instrument(ray_registry, tracer_provider=provider)
    try:
        with provider.get_tracer("tests").start_as_current_span("agent turn"):
            result = ray_registry.execute(ToolExecutionInput("c1", "traced", {}, AbortController().signal))
    finally:
        inst.uninstrument()
    assert result.is_error is False, result
    (span,) = [s for s in exporter.get_finished_spans() if s.name == "execute_tool traced"]
    assert span.context is not None
    value: Any = result.value
    assert value == {"trace_id": f"{span.context.trace_id:032x}", "parent": f"{span.context.span_id:016x}"}
