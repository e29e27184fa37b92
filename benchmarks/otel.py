"""What OpenTelemetry instrumentation costs a call: machine instructions per
no-op ``registry.execute``, counted with callgrind as in
``benchmarks/instructions.py`` (``LONG - SHORT`` calls after the same
warm-up, every thread counted).

Cases:

* ``uninstrumented``: the registry as it is;
* ``noop``: ``dshtools.otel.instrument(registry)`` with the global
  providers and no SDK configured (the API's no-op);
* ``sdk``: instrumented with an SDK ``TracerProvider`` whose spans go to an
  ``InMemorySpanExporter`` behind a ``BatchSpanProcessor`` (the exporter's
  list is cleared as it grows, so memory stays flat).

Keys, each named after its case: ``otel.uninstrumented_instructions``,
``otel.noop_instructions``, ``otel.sdk_instructions``, ``otel.noop_ratio``
(over the uninstrumented count; target ≤ 1.03, docs/contract.md#otel) and
``otel.sdk_ratio``; skipped with a note when ``valgrind`` or
``opentelemetry-sdk`` is missing.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from .instructions import LONG, SHORT, per_call, valgrind_or_skip

__all__ = ["CASES", "count", "run"]

CASES = ("uninstrumented", "noop", "sdk")

_CHILD = r"""
import sys
from concurrent.futures import ThreadPoolExecutor

case, n = sys.argv[1], int(sys.argv[2])
executor = ThreadPoolExecutor(max_workers=4)

from dshtools import AbortController, ToolExecutionInput
from benchmarks.dispatch import make_registry

registry = make_registry(executor, hooks=False)
exporter = None
if case == "noop":
    import dshtools.otel
    dshtools.otel.instrument(registry)
elif case == "sdk":
    import dshtools.otel
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    dshtools.otel.instrument(registry, tracer_provider=provider)
call = ToolExecutionInput("call-1", "noop", {}, AbortController().signal)
execute = registry.execute
for _ in range(200):
    assert not execute(call).is_error
if exporter is not None:
    provider.force_flush()
    exporter.clear()
for _ in range(n):
    execute(call)
if exporter is not None:
    provider.force_flush()
    assert len(exporter.get_finished_spans()) == n
    provider.shutdown()
registry.close()
executor.shutdown(wait=True)
"""


def count(case: str, valgrind: str) -> float:
    """Instructions per call of ``case`` (one of ``CASES``)."""
    return per_call(_CHILD, case, valgrind, timeout=900)


def run(*, quick: bool = False) -> dict[str, Any]:
    valgrind = valgrind_or_skip()
    if isinstance(valgrind, dict):
        return valgrind
    if importlib.util.find_spec("opentelemetry.sdk") is None:
        return {"skipped": "opentelemetry-sdk is not installed (the otel and test extras)"}
    counted = {case: count(case, valgrind) for case in CASES}
    base = counted["uninstrumented"]
    return {
        **{f"{case}_instructions": n for case, n in counted.items()},
        **{f"{case}_ratio": counted[case] / base for case in ("noop", "sdk")},
        "instruction_targets": {"noop_ratio": 1.03},
        "calls_counted": LONG - SHORT,
    }


if __name__ == "__main__":
    import json

    print(json.dumps(run(), indent=2))
