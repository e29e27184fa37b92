"""The caller's span is the parent on the awaited paths too
(docs/contract.md#a22): the ``execute_tool`` spans of ``aexecute`` and
of ``execute_batch_async`` (exclusive and parallel-safe calls, asyncio and
trio) are children of the span current in the awaiting task, and a span a
body starts is a child of its own call's span (field case B63: the
OpenTelemetry parent is a context variable like any other)."""

from __future__ import annotations

from typing import Any

import pytest

from dshtools import AbortController, ToolRegistry, ToolRunContext, execute_batch_async, otel
from tests.helpers.calls import call, tool
from tests.otel.conftest import Traced

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60), pytest.mark.usefixtures("instrumented")]


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def register_inside(registry: ToolRegistry, traced: Traced) -> None:
    def inside(_args: Any, _run: ToolRunContext) -> str:
        with traced.tracer.start_as_current_span("inside"):
            return "ok"

    registry.register(tool("exclusive", inside))
    registry.register(tool("parallel", inside, is_concurrency_safe=lambda args: True))


def check_parents(traced: Traced, parent_span_id: int, calls: int) -> None:
    spans = traced.spans()
    assert len(spans) == calls
    for span in spans:
        assert span.parent is not None and span.parent.span_id == parent_span_id
    ids = {s.context.span_id for s in spans if s.context is not None}
    inner = traced.spans("inside")
    assert len(inner) == calls and {s.parent.span_id for s in inner if s.parent is not None} == ids


async def test_the_batchs_spans_are_children_of_the_awaiting_tasks_span(registry: ToolRegistry, traced: Traced) -> None:
    register_inside(registry, traced)
    signal = AbortController().signal
    calls = [call("parallel", call_id="p0"), call("exclusive", call_id="x1"), call("parallel", call_id="p2")]
    with traced.tracer.start_as_current_span("agent turn") as parent:
        results = await execute_batch_async(registry, calls, signal=signal)
    assert [r.is_error for r in results] == [False] * 3
    check_parents(traced, parent.get_span_context().span_id, 3)
    assert {(s.attributes or {})[otel.GEN_AI_TOOL_CALL_ID] for s in traced.spans()} == {"p0", "x1", "p2"}


async def test_an_awaited_calls_span_is_a_child_of_the_awaiting_tasks_span(
    registry: ToolRegistry, traced: Traced
) -> None:
    register_inside(registry, traced)
    with traced.tracer.start_as_current_span("agent turn") as parent:
        result = await registry.aexecute(call("exclusive"))
    assert not result.is_error
    check_parents(traced, parent.get_span_context().span_id, 1)
