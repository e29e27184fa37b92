"""``replay`` round trip through our own MCP server (issue 23 item 3): a
registry of remote tools (``MCPClient.register_tools``) replayed with a
mid-run cancel. The server the tools module started while it was loaded is
not the run's process: the descendant check names it and does not count
it; the cancelled call stopped on the server, as the server recorded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("mcp")

from dshtools._cli.demo_remote_tools import LOG_ENV
from tests.helpers.processes import run_cli

MODULE = f"""
import os
import sys

from dshtools import ToolRegistry
from dshtools.mcp import MCPClient

SERVER = [sys.executable, "-m", "dshtools", "mcp", "--tools", "dshtools._cli.demo_remote_tools"]


def make():
    env = {{"PYTHONPATH": os.environ["PYTHONPATH"], "{LOG_ENV}": os.environ["{LOG_ENV}"]}}
    client = MCPClient.stdio(SERVER, env=env, cancel_grace=0.5)
    print(f"SERVER PID {{client.server_pid}}", file=sys.stderr, flush=True)
    registry = ToolRegistry()
    client.register_tools(registry, is_concurrency_safe=lambda args: True)
    return registry
"""


def _call(call_id: str, seconds: float) -> dict[str, object]:
    arguments = json.dumps({"seconds": seconds})
    return {"id": call_id, "type": "function", "function": {"name": "remote_sleep", "arguments": arguments}}


@pytest.mark.timeout(90)
def test_replay_of_remote_tools_cancels_on_the_server_and_passes_quiescence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "remote_mod.py").write_text(MODULE)
    transcript = [{"role": "assistant", "tool_calls": [_call("a1", 0), _call("a2", 30)]}]
    (tmp_path / "t.json").write_text(json.dumps(transcript))
    log = tmp_path / "server.log"
    monkeypatch.setenv(LOG_ENV, str(log))  # run_cli passes this process's environment on
    proc = run_cli(tmp_path, "replay", "t.json", "--tools", "remote_mod:make", "--cancel-after", "1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = {line.split()[1]: line.split()[3] for line in proc.stdout.splitlines() if line.startswith("1  ")}
    assert rows == {"a1": "SUCCESS", "a2": "ABORTED"}
    server_pid = int(proc.stderr.split("SERVER PID ", 1)[1].split()[0])
    (check,) = [line for line in proc.stdout.splitlines() if "no live descendant process" in line]
    assert check.startswith("  ok   ")
    assert f"not counted, alive since before the run: {server_pid})" in check
    events = [json.loads(line) for line in log.read_text().splitlines()]
    by_call: dict[str, list[str]] = {}
    for event in events:
        by_call.setdefault(event["call_id"], []).append(event["event"])
    assert sorted(by_call.values()) == [["started", "aborted", "returned"], ["started", "returned"]]
