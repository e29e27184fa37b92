"""``--cancel-after`` is a budget a body can read (issue 21, item 10): the
run's signal reports the cancel timer's deadline, so a body's
``run.signal.time_left()`` and ``deadline`` are set, as they would be under
a caller's ``AbortSignal.timeout``; without it they stay ``None``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.processes import run_cli

TOOLS = """
from dshtools import ToolDefinition, ToolRegistry

def _budget(args, run):
    return {"left": run.signal.time_left(), "has_deadline": run.signal.deadline is not None}

registry = ToolRegistry()
registry.register(ToolDefinition("budget", "reports its budget", {"type": "object"}, _budget))
"""


def _replay(tmp_path: Path, *extra: str) -> dict[str, object]:
    (tmp_path / "budget_tools_mod.py").write_text(TOOLS, encoding="utf-8")
    call = {"id": "b1", "type": "function", "function": {"name": "budget", "arguments": "{}"}}
    transcript = tmp_path / "t.json"
    transcript.write_text(json.dumps({"role": "assistant", "tool_calls": [call]}), encoding="utf-8")
    proc = run_cli(
        tmp_path, "replay", str(transcript), "--tools", "budget_tools_mod:registry", "--json", *extra, timeout=30
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (message,) = json.loads(proc.stdout)
    content = message["content"]
    text = content if isinstance(content, str) else "".join(part["text"] for part in content)
    result: dict[str, object] = json.loads(text)
    return result


@pytest.mark.timeout(60)
def test_a_body_run_from_the_cli_sees_the_cancel_after_budget(tmp_path: Path) -> None:
    seen = _replay(tmp_path, "--cancel-after", "20")
    assert seen["has_deadline"] is True
    left = seen["left"]
    assert isinstance(left, float) and 0 < left <= 20
    assert _replay(tmp_path) == {"left": None, "has_deadline": False}
