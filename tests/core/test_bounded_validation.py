"""Validation of model-written values is bounded (docs/contract.md §8 A6).

A value nested 10 000 levels deep against a recursive ``$ref``/``anyOf``
schema is ``INVALID_ARGS`` quickly and in little memory; output validation
takes the same path. The deep case runs in a child process under a 3 GB
address-space cap, so a regression to quadratic cost fails the test
(MemoryError, a native abort or a kill) instead of taking the machine down.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from dshtools import (
    INVALID_ARGS,
    INVALID_TOOL_OUTPUT,
    AbortController,
    ToolDefinition,
    ToolExecutionInput,
    ToolRegistry,
)

RECURSIVE = {
    "type": "object",
    "properties": {"v": {"$ref": "#/$defs/node"}},
    "$defs": {"node": {"anyOf": [{"type": "integer"}, {"type": "array", "items": {"$ref": "#/$defs/node"}}]}},
}

_CHILD = textwrap.dedent(
    """
    import json, resource, sys, time
    resource.setrlimit(resource.RLIMIT_AS, (3 * 1024**3, 3 * 1024**3))
    from dshtools import AbortController, ToolDefinition, ToolExecutionInput, ToolRegistry
    schema = json.loads(sys.argv[1])
    where = sys.argv[2]
    deep = "x"
    for _ in range(10_000):
        deep = [deep]
    ran = []
    def body(args, run):
        ran.append(True)
        return {"v": deep} if where == "output" else 1
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with ToolRegistry() as registry:
        registry.register(ToolDefinition("t", "d", schema, body, output_schema=schema if where == "output" else None))
        args = {"v": deep} if where == "input" else {"v": 1}
        started = time.monotonic()
        result = registry.execute(ToolExecutionInput("c", "t", args, AbortController().signal))
        elapsed = time.monotonic() - started
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    print(json.dumps({"code": result.code, "text": result.content[0]["text"], "elapsed": elapsed,
                      "grown_mib": grown_kib / 1024, "ran": bool(ran)}))
    """
)


def _run_child(where: str) -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, json.dumps(RECURSIVE), where],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert isinstance(out, dict)
    return out


@pytest.mark.timeout(90)
def test_ten_thousand_deep_arguments_against_a_recursive_schema_are_invalid_args_within_bounds() -> None:
    out = _run_child("input")
    assert out["code"] == INVALID_ARGS
    assert out["ran"] is False
    assert "does not match the schema" in str(out["text"])
    # The quadratic path took 12.8 s and 2.7 GB at 3 200 levels; the bounded one
    # takes a fraction of a second. The time bound leaves room for a loaded machine.
    assert isinstance(out["grown_mib"], float) and out["grown_mib"] < 100
    assert isinstance(out["elapsed"], float) and out["elapsed"] < 5


@pytest.mark.timeout(90)
def test_ten_thousand_deep_output_against_a_recursive_output_schema_takes_the_same_bounded_path() -> None:
    out = _run_child("output")
    assert out["code"] == INVALID_TOOL_OUTPUT
    assert out["ran"] is True
    assert isinstance(out["grown_mib"], float) and out["grown_mib"] < 100
    assert isinstance(out["elapsed"], float) and out["elapsed"] < 5


@pytest.mark.timeout(30)
def test_a_shallow_invalid_value_still_says_where_the_violation_is() -> None:
    with ToolRegistry() as registry:
        registry.register(ToolDefinition("t", "d", RECURSIVE, lambda args, run: 1))
        result = registry.execute(ToolExecutionInput("c", "t", {"v": [[1, "x"]]}, AbortController().signal))
    assert result.code == INVALID_ARGS
    assert "at $.v" in result.content[0]["text"]


@pytest.mark.timeout(30)
def test_a_wide_flat_invalid_value_is_described_with_the_index() -> None:
    schema = {"type": "object", "properties": {"xs": {"type": "array", "items": {"type": "integer"}}}}
    values: list[object] = list(range(20_000))
    values[12_345] = "not a number"
    with ToolRegistry() as registry:
        registry.register(ToolDefinition("t", "d", schema, lambda args, run: 1))
        result = registry.execute(ToolExecutionInput("c", "t", {"xs": values}, AbortController().signal))
    assert result.code == INVALID_ARGS
    assert "$.xs[12345]" in result.content[0]["text"]
