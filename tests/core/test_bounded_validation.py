"""Validation of model-written values is bounded (docs/contract.md#a6).

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
from collections.abc import Mapping

import pytest

from dshtools import (
    INVALID_ARGS,
    INVALID_TOOL_OUTPUT,
    AbortController,
    ToolDefinition,
    ToolExecutionInput,
    ToolRegistry,
)
from tests.helpers.calls import validates_deep_values

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


def _child_report(script: str, *argv: str) -> dict[str, object]:
    """Run ``script`` in a fresh interpreter with ``argv``; its last line of
    output, a JSON object."""
    proc = subprocess.run([sys.executable, "-c", script, *argv], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert isinstance(out, dict)
    return out


def _run_child(where: str) -> dict[str, object]:
    return _child_report(_CHILD, json.dumps(RECURSIVE), where)


@pytest.mark.skipif(
    not validates_deep_values(), reason="this jsonschema-rs release refuses values nested over 255 levels"
)
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


# ------------------------------------------- large values are located (A20)

_CHILD_WIDE = textwrap.dedent(
    """
    import json, resource, sys, time
    resource.setrlimit(resource.RLIMIT_AS, (3 * 1024**3, 3 * 1024**3))
    from dshtools import AbortController, ToolDefinition, ToolExecutionInput, ToolRegistry
    schema = json.loads(sys.argv[1])
    items, rows = int(sys.argv[2]), int(sys.argv[3])
    # rows == 0: a flat list of integers; else a list of `rows` lists of `items` integers.
    value = list(range(items)) if rows == 0 else [list(range(items)) for _ in range(rows)]
    value.append("x")
    ran = []
    def body(args, run):
        ran.append(True)
        return 1
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with ToolRegistry() as registry:
        registry.register(ToolDefinition("t", "d", schema, body))
        started = time.monotonic()
        result = registry.execute(ToolExecutionInput("c", "t", {"l": value}, AbortController().signal))
        elapsed = time.monotonic() - started
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    print(json.dumps({"code": result.code, "text": result.content[0]["text"], "elapsed": elapsed,
                      "grown_mib": grown_kib / 1024, "ran": bool(ran)}))
    """
)


def _run_wide(schema: Mapping[str, object], items: int, rows: int = 0) -> dict[str, object]:
    out = _child_report(_CHILD_WIDE, json.dumps(schema), str(items), str(rows))
    # A6's bounds (under a second, under 100 MB), the time with room for a
    # loaded machine as in the deep tests above. The time and memory include
    # freezing the value, which every call pays, valid or not.
    assert isinstance(out["grown_mib"], float) and out["grown_mib"] < 100
    assert isinstance(out["elapsed"], float) and out["elapsed"] < 5
    assert out["ran"] is False
    return out


def _list_of(items: object) -> dict[str, object]:
    return {"type": "object", "properties": {"l": {"type": "array", "items": items}}}


@pytest.mark.timeout(90)
def test_a20_the_last_of_100_001_items_is_named_with_its_reason_within_a6_bounds() -> None:
    """A20: the value the contract names, which gave "too large or too
    deeply nested, 2 levels, to locate why" before."""
    out = _run_wide(_list_of({"type": "integer"}), 100_000)
    assert out["code"] == INVALID_ARGS
    assert out["text"] == 'Error: invalid arguments: "x" is not of type "integer" at $.l[100000]'


@pytest.mark.timeout(90)
def test_a20_a_wide_value_under_anyof_items_is_located_within_a6_bounds() -> None:
    out = _run_wide(_list_of({"anyOf": [{"type": "integer"}, {"type": "null"}]}), 100_000)
    assert out["code"] == INVALID_ARGS
    assert "at $.l[100000]" in str(out["text"])


@pytest.mark.timeout(90)
def test_a20_a_million_items_under_a_failing_anyof_stay_within_a6_bounds() -> None:
    """Where describing would copy the value once per branch (an ``anyOf``
    over a million-item subtree: 140 MB when asked), the value is still
    refused within the bounds, with the general text."""
    schema = {
        "type": "object",
        "properties": {"l": {"anyOf": [{"type": "integer"}, {"type": "array", "items": {"type": "array"}}]}},
    }
    out = _run_wide(schema, 1000, rows=1000)
    assert out["code"] == INVALID_ARGS
    assert "does not match the schema" in str(out["text"])


@pytest.mark.skipif(
    not validates_deep_values(), reason="this jsonschema-rs release refuses values nested over 255 levels"
)
@pytest.mark.timeout(30)
def test_a20_a_deep_value_beyond_the_describe_depth_still_says_how_deep() -> None:
    schema = {"type": "object", "properties": {"v": {"type": "array", "items": {"$ref": "#/properties/v"}}}}
    deep: object = "x"
    for _ in range(300):
        deep = [deep]
    with ToolRegistry() as registry:
        registry.register(ToolDefinition("t", "d", schema, lambda args, run: 1))
        result = registry.execute(ToolExecutionInput("c", "t", {"v": deep}, AbortController().signal))
    assert result.code == INVALID_ARGS
    assert "301 levels" in result.content[0]["text"]
