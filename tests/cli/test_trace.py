"""``--trace`` of ``python -m dshtools demo`` and ``replay`` (issue 24 item 2,
docs/observability.md#the-command-line): the span tree printed at the end,
or the spans written to a file as OTLP JSON; a clear usage error without
the OpenTelemetry SDK. The demo's own ``--trace`` run is checked in
``test_demo_and_replay.py``."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from dshtools import AbortController, ToolRegistry, ToolRunContext, execute_batch
from dshtools._cli.main import main
from dshtools._cli.trace import INSTALL_HINT, tracing
from tests.helpers.calls import call, tool, value_of
from tests.helpers.processes import run_cli

TOOLS = """
from dshtools import ToolDefinition, ToolError, ToolRegistry

OBJ = {"type": "object"}


def _echo(args, run):
    return {"echo": args.get("text")}


def _fail(args, run):
    raise ToolError("nope", "E_NOPE")


registry = ToolRegistry()
registry.register(ToolDefinition("echo", "echo text", OBJ, _echo, is_concurrency_safe=lambda a: True))
registry.register(ToolDefinition("fail", "always fails", OBJ, _fail, is_concurrency_safe=lambda a: True))
"""


def _call(call_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


TRANSCRIPT = [
    {"role": "assistant", "tool_calls": [_call("a1", "echo", {"text": "x"}), _call("a2", "fail", {})]},
    {"role": "tool", "tool_call_id": "a1", "content": "x"},
    {"role": "assistant", "tool_calls": [_call("b1", "nosuch", {}), _call("b2", "echo", {})]},
]


def _value(any_value: dict[str, Any]) -> object:
    (kind, value), *_ = any_value.items()
    return int(value) if kind == "intValue" else value


def _attrs(item: dict[str, Any]) -> dict[str, object]:
    return {a["key"]: _value(a["value"]) for a in item["attributes"]}


@pytest.mark.timeout(60)
def test_replay_trace_file_is_otlp_json_with_one_span_per_call_under_the_run(tmp_path: Path) -> None:
    (tmp_path / "trace_tools.py").write_text(TOOLS)
    (tmp_path / "t.json").write_text(json.dumps(TRANSCRIPT))
    out = tmp_path / "trace.json"
    proc = run_cli(tmp_path, "replay", "t.json", "--tools", "trace_tools:registry", "--trace", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"trace: 5 spans written to {out} (OTLP JSON)" in proc.stdout
    data = json.loads(out.read_text())
    (resource,) = data["resourceSpans"]
    assert _attrs(resource["resource"])["service.name"] == "dshtools"
    spans = [span for scope in resource["scopeSpans"] for span in scope["spans"]]
    assert len(spans) == 5
    (run,) = [s for s in spans if "parentSpanId" not in s]
    assert run["name"] == "dshtools replay"
    calls = {str(_attrs(s)["gen_ai.tool.call.id"]): s for s in spans if s is not run}
    assert sorted(calls) == ["a1", "a2", "b1", "b2"]
    for span in spans:
        assert len(span["traceId"]) == 32 and int(span["traceId"], 16) and span["traceId"] == run["traceId"]
        assert len(span["spanId"]) == 16 and int(span["spanId"], 16)
        assert int(span["startTimeUnixNano"]) <= int(span["endTimeUnixNano"])
        assert span["kind"] == 1  # SPAN_KIND_INTERNAL
    assert {s["parentSpanId"] for s in calls.values()} == {run["spanId"]}  # batch calls: siblings under the run
    assert calls["a1"]["name"] == "execute_tool echo" and calls["a1"]["status"] == {"code": 0}
    assert "error.type" not in _attrs(calls["a1"])
    assert _attrs(calls["a1"])["dshtools.body_invoked"] is True
    assert _attrs(calls["a2"])["error.type"] == "E_NOPE" and calls["a2"]["status"]["code"] == 2
    assert _attrs(calls["b1"])["error.type"] == "UNKNOWN_TOOL"
    assert _attrs(calls["b1"])["dshtools.body_invoked"] is False
    # The run's span covers every call's span.
    assert int(run["startTimeUnixNano"]) <= min(int(s["startTimeUnixNano"]) for s in calls.values())
    assert int(run["endTimeUnixNano"]) >= max(int(s["endTimeUnixNano"]) for s in calls.values())


@pytest.mark.timeout(30)
def test_the_tree_nests_calls_a_body_makes_and_shows_abort_events() -> None:
    registry = ToolRegistry()

    def outer(args: Any, run: ToolRunContext) -> object:
        return value_of(run.dispatch("leaf", {}, call_id="nested"))

    registry.register(tool("leaf", lambda a, r: {"leaf": True}))
    registry.register(tool("outer", outer))
    trace = tracing("")
    trace.start(registry, "a run")
    aborted = AbortController()
    aborted.abort("gone")
    with trace.span():
        batch = [call("outer", call_id="o1"), call("leaf", signal=aborted.signal, call_id="l2")]
        execute_batch(registry, batch, signal=AbortController().signal)
    out = io.StringIO()
    trace.report(out)
    registry.close()
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("trace ") and lines[0].endswith(": 4 spans; times in ms from the run's start")
    assert lines[1].startswith("a run ")
    assert lines[2].split()[:5] == ["execute_tool", "outer", "o1", "SUCCESS", lines[2].split()[4]]
    assert lines[2].startswith("  execute_tool outer") and "body_invoked=yes  killed=no" in lines[2]
    assert lines[3].startswith("    execute_tool leaf") and " nested " in lines[3]  # the body's call: a child
    assert lines[4].startswith("  execute_tool leaf") and " ABORTED_BEFORE_DISPATCH " in lines[4]
    assert "body_invoked=no" in lines[4]
    assert lines[5].strip().startswith("· dshtools.abort at +") and lines[5].endswith(
        "(reason: gone)"
    )  # the reason text, not its type
    assert len(lines) == 6
    # Each duration cell is a number of milliseconds.
    for line in lines[2:5]:
        assert float(line.split(" ms")[1].split()[-1]) >= 0


def test_trace_without_the_sdk_is_a_usage_error_naming_what_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.trace", None)  # import raises ImportError
    assert main(["demo", "--trace"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"dshtools: error: --trace needs the OpenTelemetry SDK: {INSTALL_HINT} (")
    assert INSTALL_HINT == "pip install 'dshtools[otel]' opentelemetry-sdk"
    assert len(err.splitlines()) == 1


def test_an_unwritable_trace_file_is_a_usage_error_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "no such dir" / "trace.json"
    assert main(["replay", str(tmp_path / "missing.json"), "--tools", "m:r", "--trace", str(target)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"dshtools: error: --trace: cannot write {target}:")


def test_an_instrumented_registry_cannot_be_traced_twice() -> None:
    from dshtools import otel
    from dshtools._cli.inputs import UsageError

    registry = ToolRegistry()
    instrumentation = otel.instrument(registry)
    try:
        with pytest.raises(UsageError, match="instrumented already"):
            tracing("").start(registry, "run")
    finally:
        instrumentation.uninstrument()
        registry.close()


@pytest.mark.timeout(30)
def test_the_tree_shows_progress_events_with_their_value_in_time_order() -> None:
    def steps(args: Any, run: ToolRunContext) -> object:
        run.report_progress(1, 4, "reading")
        run.report_progress(2.5)
        return "done"

    registry = ToolRegistry()
    registry.register(tool("steps", steps))
    trace = tracing("")
    trace.start(registry, "a run")
    with trace.span():
        registry.execute(call("steps"))
    out = io.StringIO()
    trace.report(out)
    registry.close()
    events = [line.strip() for line in out.getvalue().splitlines() if line.strip().startswith("·")]
    assert [e.split(" at ")[0] for e in events] == ["· dshtools.progress", "· dshtools.progress"]
    assert events[0].endswith("(progress: 1/4 reading)") and events[1].endswith("(progress: 2.5)")
    stamps = [float(e.split(" at +")[1].split(" ms")[0]) for e in events]
    assert stamps == sorted(stamps)
