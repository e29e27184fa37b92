"""``otel.instrument(registry)`` with no providers records on the global
tracer and meter providers (docs/contract.md#a30): the span and the
``gen_ai.execute_tool.duration`` measurement of a call, ``error.type`` on
a failure. In a child process: a global provider can be set once."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("opentelemetry.sdk")

_GLOBAL_PROVIDERS = """
import json
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from dshtools import AbortController, ToolDefinition, ToolExecutionInput, ToolRegistry, otel

exporter = InMemorySpanExporter()
tracer_provider = TracerProvider()
tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
reader = InMemoryMetricReader()
trace.set_tracer_provider(tracer_provider)
metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))

with ToolRegistry() as registry:
    registry.register(ToolDefinition("ok", "", {"type": "object"}, lambda a, r: "fine"))
    otel.instrument(registry)
    signal = AbortController().signal
    registry.execute(ToolExecutionInput("c1", "ok", {}, signal))
    registry.execute(ToolExecutionInput("c2", "missing", {}, signal))
points = [
    {"name": m.name, "unit": m.unit, "count": p.count, "attributes": dict(p.attributes)}
    for rm in reader.get_metrics_data().resource_metrics
    for sm in rm.scope_metrics
    for m in sm.metrics
    for p in m.data.data_points
]
print(json.dumps({"spans": sorted(s.name for s in exporter.get_finished_spans()), "points": points}))
"""


@pytest.mark.timeout(60)
def test_instrument_without_providers_records_spans_and_the_duration_on_the_global_ones() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _GLOBAL_PROVIDERS], capture_output=True, text=True, check=True, env=dict(os.environ)
    )
    seen = json.loads(out.stdout)
    assert seen["spans"] == ["execute_tool missing", "execute_tool ok"]
    by_tool = {p["attributes"]["gen_ai.tool.name"]: p for p in seen["points"]}
    assert {p["name"] for p in seen["points"]} == {"gen_ai.execute_tool.duration"}
    assert {p["unit"] for p in seen["points"]} == {"s"}
    assert by_tool["ok"]["attributes"] == {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "ok"}
    assert by_tool["missing"]["attributes"] == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "missing",
        "error.type": "UNKNOWN_TOOL",
    }
    assert by_tool["ok"]["count"] == by_tool["missing"]["count"] == 1
