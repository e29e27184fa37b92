"""The real OpenTelemetry SDK behind ``dshtools.otel`` for the tests of
this directory: an in-memory span exporter and metric reader, and a
registry instrumented with them. Skipped without ``opentelemetry-sdk``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from dshtools import ToolRegistry, otel


class Traced:
    """An SDK tracer provider and meter provider whose spans and metrics
    stay in memory; ``spans()`` the ended ``execute_tool`` spans."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.tracer = self.provider.get_tracer("tests")
        self.reader = InMemoryMetricReader()
        self.meters = MeterProvider(metric_readers=[self.reader])

    def spans(self, name_prefix: str = "execute_tool") -> list[ReadableSpan]:
        return [s for s in self.exporter.get_finished_spans() if s.name.startswith(name_prefix)]

    def span(self) -> ReadableSpan:
        (only,) = self.spans()
        return only


@pytest.fixture
def traced() -> Iterator[Traced]:
    t = Traced()
    yield t
    t.provider.shutdown()
    t.meters.shutdown()


@pytest.fixture
def instrumented(registry: ToolRegistry, traced: Traced) -> Iterator[otel.Instrumentation]:
    inst = otel.instrument(registry, tracer_provider=traced.provider, meter_provider=traced.meters)
    yield inst
    inst.uninstrument()
