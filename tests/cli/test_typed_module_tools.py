"""``--tools MODULE``: the ``@dshtools.tool`` functions of a module as the
command line's tools, without a registry object (docs/decisions/0052;
issue 22). ``replay`` and ``mcp`` share ``load_registry``; replay runs as a
real subprocess once."""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from dshtools._cli.inputs import UsageError, load_registry
from dshtools._registry.registry import around_dispatch_hooks
from tests.helpers.processes import run_cli

MODULE = textwrap.dedent(
    '''
    import datetime
    import threading

    import dshtools
    from dshtools import ToolRunContext

    @dshtools.tool(concurrency_safe=True)
    def weekday(day: datetime.date) -> str:
        """The weekday of a date."""
        return day.strftime("%A")

    @dshtools.tool(timeout=0.3)
    def stalls(*, run: ToolRunContext) -> str:
        """Waits for its signal."""
        run.signal.wait(20)
        return "late"

    def not_a_tool(a: int) -> int:
        return a
    '''
)


@pytest.fixture
def tools_dir(tmp_path: Path) -> Iterator[Path]:
    (tmp_path / "typed_cli_mod.py").write_text(MODULE)
    (tmp_path / "typed_cli_empty.py").write_text("def helper() -> None:\n    pass\n")
    (tmp_path / "typed_cli_bad.py").write_text(
        "import dshtools\n\n@dshtools.tool\ndef bad(*items: int) -> None:\n    pass\n"
    )
    sys.path.insert(0, str(tmp_path))
    yield tmp_path
    sys.path.remove(str(tmp_path))
    for name in ("typed_cli_mod", "typed_cli_empty", "typed_cli_bad"):
        sys.modules.pop(name, None)


def test_a_module_name_alone_is_a_new_registry_of_its_marked_functions(tools_dir: Path) -> None:
    registry = load_registry("typed_cli_mod")
    try:
        assert [s["name"] for s in registry.schemas()] == ["weekday", "stalls"]
        assert len(around_dispatch_hooks(registry)) == 1  # a TimeoutPolicy, so timeout= holds
    finally:
        registry.close()


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("typed_cli_empty", "has no @dshtools.tool functions (name a registry instead: --tools MODULE:ATTRIBUTE)"),
        ("typed_cli_bad", "tool function bad: *items takes any number of positional arguments"),
        ("typed_cli_mod:", "--tools must look like MODULE:ATTRIBUTE or MODULE"),
    ],
)
def test_a_module_without_tools_or_with_a_refused_one_is_a_usage_error(
    tools_dir: Path, spec: str, message: str
) -> None:
    with pytest.raises(UsageError) as caught:
        load_registry(spec)
    assert message in str(caught.value)


@pytest.mark.timeout(60)
def test_replay_runs_a_modules_typed_tools_with_their_timeouts(tools_dir: Path) -> None:
    def tool_call(call_id: str, name: str, args: dict[str, object]) -> dict[str, object]:
        return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}

    transcript = tools_dir / "t.json"
    transcript.write_text(
        json.dumps(
            [
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        tool_call("a1", "weekday", {"day": "2026-12-01"}),
                        tool_call("a2", "weekday", {"day": "someday"}),
                        tool_call("a3", "stalls", {}),
                    ],
                }
            ]
        )
    )
    proc = run_cli(tools_dir, "replay", str(transcript), "--tools", "typed_cli_mod", "--json", timeout=50)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    messages = {m["tool_call_id"]: m["content"] for m in json.loads(proc.stdout)}
    assert messages["a1"] == "Tuesday"
    assert messages["a2"].startswith("Error: invalid arguments: ") and "at $.day" in messages["a2"]
    assert messages["a3"].startswith("Error: ") and "timed out" in messages["a3"]
