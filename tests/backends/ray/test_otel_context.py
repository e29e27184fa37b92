"""The W3C trace context crosses into ``RayBackend`` tasks (issue 24): a
span a body starts in the Ray worker is a child of its call's
``execute_tool`` span. Here rather than in tests/otel for the
``ray_cluster`` fixture of tests/backends; the check itself is the one
tests/otel/test_process_context.py makes of a process worker."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("opentelemetry.sdk")
pytest.importorskip("ray")

from dshtools import ToolDefinition, ToolRegistry
from tests.otel import test_process_context as process_case
from tests.otel.conftest import Traced


@pytest.fixture
def ray_registry(ray_cluster: None) -> Iterator[ToolRegistry]:
    from dshtools.ray import RayBackend

    with ToolRegistry(backend=RayBackend()) as registry:
        registry.register(ToolDefinition("traced", "", {"type": "object"}, process_case.traced_in_worker))
        yield registry


@pytest.mark.timeout(120)
def test_a_span_started_in_a_ray_task_is_a_child_of_its_call_span(ray_registry: ToolRegistry) -> None:
    traced = Traced()
    try:
        process_case.test_a_span_started_in_a_process_worker_is_a_child_of_its_call_span(ray_registry, traced)
    finally:
        traced.provider.shutdown()
        traced.meters.shutdown()
