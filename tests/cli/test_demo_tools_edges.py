"""The demo's own tools and server where the bundled transcript does not
go (``dshtools._cli.demo``; docs/contract.md §6): a shell command that
fails is an ``EXIT_STATUS`` failure carrying its stderr, and its process
group is still recorded for the quiescence check; a shell that never got to
record its pid leaves nothing to check; an unknown path on the local server
is a 404."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dshtools import AbortController, ToolExecutionInput
from dshtools._cli.demo import DemoServer, DemoTools


@pytest.mark.timeout(60)
def test_a_failing_shell_command_is_exit_status_with_its_stderr_and_its_group_recorded(tmp_path: Path) -> None:
    with DemoServer() as server, DemoTools(server.base_url, str(tmp_path)) as tools:
        result = tools.registry.execute(
            ToolExecutionInput("c1", "shell", {"command": "echo oops >&2; exit 3"}, AbortController().signal)
        )
        assert result.code == "EXIT_STATUS"
        assert result.content[0]["text"] == "Error: exit status 3: oops"
        assert len(tools.process_groups) == 1
        assert tools.body_invoked("c1") and tools.bodies_in_flight == 0


@pytest.mark.timeout(60)
def test_a_shell_that_never_recorded_its_pid_leaves_no_group_to_check(tmp_path: Path) -> None:
    with DemoServer() as server, DemoTools(server.base_url, str(tmp_path)) as tools:
        # the command removes the pid file before the tool reads it back
        result = tools.registry.execute(
            ToolExecutionInput("c1", "shell", {"command": "rm -f pgid-*"}, AbortController().signal)
        )
        assert result.code is None, result
        assert tools.process_groups == []


@pytest.mark.timeout(60)
def test_the_local_server_answers_an_unknown_path_with_404(tmp_path: Path) -> None:
    with DemoServer() as server, DemoTools(server.base_url, str(tmp_path)) as tools:
        result = tools.registry.execute(
            ToolExecutionInput("c1", "http_get", {"url": "/nope"}, AbortController().signal)
        )
        assert result.code is None, result
        answer = json.loads(result.content[0]["text"])
        assert answer["status"] == 404 and json.loads(answer["body"]) == {"ok": False, "error": "not found"}
