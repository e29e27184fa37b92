"""``python -m dshtools replay`` against model output as it really comes
(docs/contract.md#interop-and-cli, docs/contract.md#a11, docs/contract.md#a12, docs/contract.md#more-interop): field cases B37, B40, N4, Anthropic
transcripts, aliased names, and output people can read (ARGS, ``--wide``,
the BODY and quiescence explanations, ``--traceback``, the module form of
``--tools``). Each test runs the CLI as a real subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.processes import run_cli

TOOLS = """
from dshtools import ToolDefinition, ToolRegistry

OBJ = {"type": "object"}


def _echo(args, run):
    return {"echo": args.get("text")}


def _proxy(args, run):
    # Reuses its own call id for the nested call (field case B40).
    inner = run.dispatch("echo", {"text": "nested"}, call_id=run.call_id)
    return {"proxy": "own result", "inner_ok": not inner.is_error}


def _long(args, run):
    return "start " + "word " * 60 + "THE-END"


def _surrogate(args, run):
    return "lone \\ud800 surrogate"


registry = ToolRegistry(max_workers=4)
registry.register(ToolDefinition("echo", "Echo.", OBJ, _echo))
registry.register(ToolDefinition("proxy", "Calls echo.", OBJ, _proxy))
registry.register(ToolDefinition("math.add", "Dotted name.", OBJ, _echo))
registry.register(ToolDefinition("long", "Long output.", OBJ, _long))
registry.register(ToolDefinition("surrogate", "Returns a lone surrogate.", OBJ, _surrogate))
"""

BROKEN = """
def helper():
    return {}["missing-key"]


registry = helper()
"""


@pytest.fixture
def tmp(tmp_path: Path) -> Path:
    (tmp_path / "interop_tools.py").write_text(TOOLS)
    (tmp_path / "interop_broken.py").write_text(BROKEN)
    return tmp_path


def _run(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(tmp, *args, encoding="utf-8")


def _write(tmp: Path, data: object, name: str = "t.json") -> str:
    path = tmp / name
    path.write_text(json.dumps(data), encoding="utf-8")
    return str(path)


def _call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _table(stdout: str) -> list[list[str]]:
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("BATCH"))
    rows = []
    for line in lines[start + 1 :]:
        if not line[:1].isdigit():
            break
        rows.append(line.split())
    return rows


@pytest.mark.timeout(60)
@pytest.mark.parametrize("form", ["array", "object"])
def test_b37_deep_arguments_replay_exits_0_with_one_invalid_args_row(tmp: Path, form: str) -> None:
    raw = "[" * 5000 + "]" * 5000 if form == "array" else '{"a":' * 5000 + "1" + "}" * 5000
    path = _write(tmp, {"role": "assistant", "tool_calls": [_call("deep", "echo", raw)]})
    proc = _run(tmp, "replay", path, "--tools", "interop_tools:registry")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = _table(proc.stdout)
    assert len(rows) == 1
    assert rows[0][:5] == ["1", "deep", "echo", "INVALID_ARGS", "no"]
    assert "nested too deeply" in proc.stdout
    assert proc.stderr == ""


@pytest.mark.timeout(60)
def test_b40_replay_gives_the_model_call_its_own_result_never_a_nested_one(tmp: Path) -> None:
    message = {"role": "assistant", "tool_calls": [_call("call_1", "proxy", "{}"), _call("call_2", "echo", "{}")]}
    path = _write(tmp, [message])
    proc = _run(tmp, "replay", path, "--tools", "interop_tools:registry", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    replayed = json.loads(proc.stdout)

    # What execute_batch + tool_messages give for the same message.
    script = (
        "import json, sys\n"
        f"sys.path.insert(0, {str(tmp)!r})\n"
        "from interop_tools import registry\n"
        "from dshtools import AbortController, execute_batch\n"
        "from dshtools import openai as o\n"
        f"message = json.loads({json.dumps(json.dumps(message))})\n"
        "c = AbortController()\n"
        "calls = o.calls_from_message(message, signal=c.signal, registry=registry)\n"
        "print(json.dumps(o.tool_messages(calls, execute_batch(registry, calls, signal=c.signal))))\n"
        "registry.close()\n"
    )
    direct = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    assert replayed == json.loads(direct.stdout)
    assert [m["tool_call_id"] for m in replayed] == ["call_1", "call_2"]
    assert json.loads(replayed[0]["content"]) == {"proxy": "own result", "inner_ok": True}
    rows = _table(proc.stderr)
    assert [(r[1], r[2], r[3]) for r in rows] == [("call_1", "proxy", "SUCCESS"), ("call_2", "echo", "SUCCESS")]


@pytest.mark.timeout(60)
def test_n4_lone_surrogates_in_arguments_and_results_replay_in_table_mode(tmp: Path) -> None:
    # The file holds the JSON escape, as a model's output does.
    text = json.dumps(
        {"role": "assistant", "tool_calls": [_call("s1", "echo", '{"t": "\\ud800x"}'), _call("s2", "surrogate", "{}")]}
    )
    assert "\\\\ud800" in text
    path = tmp / "n4.json"
    path.write_text(text, encoding="utf-8")
    for extra in ([], ["--json"]):
        proc = _run(tmp, "replay", str(path), "--tools", "interop_tools:registry", *extra)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        out = proc.stderr if extra else proc.stdout
        rows = _table(out)
        assert [(r[1], r[3]) for r in rows] == [("s1", "INVALID_ARGS"), ("s2", "SUCCESS")]
        assert "lone \ufffd surrogate" in out
    messages = json.loads(proc.stdout)
    json.dumps(messages, ensure_ascii=False).encode("utf-8")
    assert "lone surrogate" in messages[0]["content"]


ANTHROPIC = [
    {"role": "user", "content": "add and echo"},
    {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Sure."},
            {"type": "tool_use", "id": "toolu_1", "name": "math_add", "input": {"text": "dotted"}},
            {"type": "tool_use", "id": "toolu_2", "name": "echo", "input": {"text": "hi"}},
        ],
    },
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "x"}]},
    {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_3", "name": "nosuch", "input": {}}]},
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("fmt", [None, "anthropic"])
def test_replay_runs_an_anthropic_transcript_and_answers_with_tool_result_blocks(tmp: Path, fmt: str | None) -> None:
    path = _write(tmp, {"messages": ANTHROPIC})
    extra = [] if fmt is None else ["--format", fmt]
    proc = _run(tmp, "replay", path, "--tools", "interop_tools:registry", "--json", *extra)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    answers = json.loads(proc.stdout)
    assert answers == [
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": '{"echo": "dotted"}', "is_error": False},
                {"type": "tool_result", "tool_use_id": "toolu_2", "content": '{"echo": "hi"}', "is_error": False},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_3",
                    "content": 'Error: unknown tool "nosuch"',
                    "is_error": True,
                }
            ],
        },
    ]
    rows = _table(proc.stderr)
    # The alias the model used maps back to the registered (dotted) name.
    assert [(r[0], r[1], r[2], r[3]) for r in rows] == [
        ("1", "toolu_1", "math.add", "SUCCESS"),
        ("1", "toolu_2", "echo", "SUCCESS"),
        ("2", "toolu_3", "nosuch", "UNKNOWN_TOOL"),
    ]


@pytest.mark.timeout(60)
def test_format_openai_ignores_tool_use_blocks(tmp: Path) -> None:
    path = _write(tmp, ANTHROPIC)
    proc = _run(tmp, "replay", path, "--tools", "interop_tools:registry", "--format", "openai")
    assert proc.returncode == 2
    assert proc.stderr.strip().endswith("no assistant message with tool_calls")


@pytest.mark.timeout(60)
def test_table_shows_arguments_and_wide_keeps_detail_and_arguments_whole(tmp: Path) -> None:
    long_args = json.dumps({"text": "a" * 80})
    path = _write(tmp, {"role": "assistant", "tool_calls": [_call("c1", "long", long_args)]})
    narrow = _run(tmp, "replay", path, "--tools", "interop_tools:registry")
    wide = _run(tmp, "replay", path, "--tools", "interop_tools:registry", "--wide")
    assert narrow.returncode == wide.returncode == 0, narrow.stderr + wide.stderr
    assert "ARGS" in narrow.stdout.splitlines()[0]
    narrow_row = next(line for line in narrow.stdout.splitlines() if line.startswith("1 "))
    wide_row = next(line for line in wide.stdout.splitlines() if line.startswith("1 "))
    assert '{"text": "aaaa' in narrow_row and "THE-END" not in narrow_row and "..." in narrow_row
    assert ("a" * 80) in wide_row and wide_row.rstrip().endswith("THE-END")
    assert "word " * 60 in wide_row


@pytest.mark.timeout(60)
def test_body_and_each_quiescence_line_are_explained_in_plain_words(tmp: Path) -> None:
    path = _write(tmp, {"role": "assistant", "tool_calls": [_call("c1", "echo", "{}")]})
    proc = _run(tmp, "replay", path, "--tools", "interop_tools:registry")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert any(line.startswith("BODY: yes = the tool's function was called") for line in lines)
    assert not any(line.startswith("(killed)") for line in lines)  # only when a row was killed
    checks = [line for line in lines if line.startswith(("  ok", "  FAIL"))]
    assert len(checks) == 3
    assert all(" -- checks: " in line for line in checks), checks


@pytest.mark.timeout(60)
def test_traceback_shows_where_an_import_failed(tmp: Path) -> None:
    path = _write(tmp, {"role": "assistant", "tool_calls": [_call("c1", "echo", "{}")]})
    plain = _run(tmp, "replay", path, "--tools", "interop_broken:registry")
    assert plain.returncode == 2
    assert plain.stderr.count("\n") == 1
    assert "importing 'interop_broken' failed: KeyError" in plain.stderr and "--traceback" in plain.stderr
    traced = _run(tmp, "replay", path, "--tools", "interop_broken:registry", "--traceback")
    assert traced.returncode == 2
    assert "Traceback (most recent call last)" in traced.stderr
    assert "interop_broken.py" in traced.stderr and 'return {}["missing-key"]' in traced.stderr
    assert "line 3, in helper" in traced.stderr
    assert traced.stderr.splitlines()[-1] == plain.stderr.strip()


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("spec", "suggested"),
    [
        ("./interop_tools.py:registry", "--tools interop_tools:registry"),
        ("pkg/tools.py:make", "--tools pkg.tools:make"),
        ("/abs/dir/tools.py:registry", "--tools tools:registry (run it from /abs/dir"),
    ],
)
def test_a_file_path_in_tools_suggests_the_module_form(tmp: Path, spec: str, suggested: str) -> None:
    path = _write(tmp, {"role": "assistant", "tool_calls": [_call("c1", "echo", "{}")]})
    proc = _run(tmp, "replay", path, "--tools", spec)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1
    assert "not a file path" in proc.stderr and suggested in proc.stderr
