"""The demo's own tools and server where the bundled transcript does not
go (``dshtools._cli.demo``; docs/contract.md#interop-and-cli): a shell command that
fails is an ``EXIT_STATUS`` failure carrying its stderr, and its process
group is still recorded for the quiescence check; a shell that never got to
record its pid leaves nothing to check; an unknown path on the local server
is a 404."""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from dshtools import AbortController, ToolExecutionInput, ToolExecutionResult
from dshtools._cli.demo import DemoServer, DemoTools
from tests.helpers.calls import error_of
from tests.helpers.processes import run_python


@pytest.fixture
def tools(tmp_path: Path) -> Iterator[DemoTools]:
    """The demo's tools against its local server, working in ``tmp_path``;
    both closed after the test."""
    with DemoServer() as server, DemoTools(server.base_url, str(tmp_path)) as demo:
        yield demo


def run_c1(tools: DemoTools, name: str, arguments: dict[str, object]) -> ToolExecutionResult:
    """One call ``c1`` of the demo tool ``name`` on a fresh signal."""
    return tools.registry.execute(ToolExecutionInput("c1", name, arguments, AbortController().signal))


@pytest.mark.timeout(60)
def test_a_failing_shell_command_is_exit_status_with_its_stderr_and_its_group_recorded(tools: DemoTools) -> None:
    result = run_c1(tools, "shell", {"command": "echo oops >&2; exit 3"})
    assert result.code == "EXIT_STATUS"
    assert result.content[0]["text"] == "Error: exit status 3: oops"
    assert len(tools.process_groups) == 1
    assert tools.body_invoked("c1") and tools.bodies_in_flight == 0


@pytest.mark.timeout(60)
def test_a_shell_that_never_recorded_its_pid_leaves_no_group_to_check(tools: DemoTools) -> None:
    # the command removes the pid file before the tool reads it back
    result = run_c1(tools, "shell", {"command": "rm -f pgid-*"})
    assert result.code is None, result
    assert tools.process_groups == []


@pytest.mark.timeout(60)
def test_the_local_server_answers_an_unknown_path_with_404(tools: DemoTools) -> None:
    result = run_c1(tools, "http_get", {"url": "/nope"})
    assert result.code is None, result
    answer = json.loads(result.content[0]["text"])
    assert answer["status"] == 404 and json.loads(answer["body"]) == {"ok": False, "error": "not found"}


def test_the_table_shows_the_last_progress_of_a_stopped_call_only() -> None:
    """Issue 25 item 4: a call that reported progress and was stopped shows
    its last progress first in DETAIL; a successful one does not."""
    from dshtools import ToolRegistry
    from dshtools._cli.run import _Row
    from dshtools._cli.table import print_table, progress_text
    from dshtools._types.hooks import ProgressUpdate
    from tests.helpers.calls import call, tool

    with ToolRegistry() as registry:
        registry.register(tool("dl", lambda a, r: "ok"))
        done = registry.execute(call("dl"))
        gone = AbortController()
        gone.abort("stop")
        stopped = registry.execute(call("dl", signal=gone.signal))
    assert stopped.is_error and not done.is_error
    rows = [
        _Row(1, "a", "dl", stopped, arguments={}, progress=ProgressUpdate(3, 10, "downloading")),
        _Row(1, "b", "dl", done, arguments={}, progress=ProgressUpdate(10, 10, "downloading")),
        _Row(1, "c", "dl", stopped, arguments={}, progress=ProgressUpdate(0.5)),
    ]
    out = io.StringIO()
    print_table(rows, lambda row: "yes", out, wide=True)
    lines = out.getvalue().splitlines()
    assert lines[1].endswith('[progress 3/10 "downloading"] Error: tool call aborted before dispatch')
    assert lines[2].endswith("  ok")
    assert lines[3].endswith("[progress 0.5] Error: tool call aborted before dispatch")
    assert progress_text(ProgressUpdate(1, None, 'say "hi"\n')) == '1 "say \\"hi\\""'


def test_the_remote_tool_without_a_log_to_write_runs_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dshtools import ToolRegistry, thaw
    from dshtools._cli import demo_remote_tools
    from dshtools._types.marks import tools_from_module

    monkeypatch.delenv(demo_remote_tools.LOG_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    with ToolRegistry() as registry:
        for definition in tools_from_module(demo_remote_tools):
            registry.register(definition)
        result = registry.execute(ToolExecutionInput("c0", "remote_sleep", {"seconds": 0}, AbortController().signal))
    assert result.code is None and thaw(result.value) == {"slept": 0}  # type: ignore[union-attr]
    assert list(tmp_path.iterdir()) == []


def test_the_remote_tool_records_its_abort_and_its_return_on_the_server_side(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the demo reads to prove the remote call stopped on the server:
    the body's own record of its abort and its return."""
    from dshtools import ToolRegistry
    from dshtools._cli import demo_remote_tools
    from dshtools._types.marks import tools_from_module

    log = tmp_path / "remote.log"
    monkeypatch.setenv(demo_remote_tools.LOG_ENV, str(log))
    controller = AbortController()
    with ToolRegistry() as registry:
        for definition in tools_from_module(demo_remote_tools):
            registry.register(definition)
        registry.add_result_observer(lambda e, r: None)
        started = registry.execute(ToolExecutionInput("c0", "remote_sleep", {"seconds": 0}, controller.signal))
        assert started.code is None, started
        controller.abort("stop")
        aborted = registry.execute(ToolExecutionInput("c1", "remote_sleep", {"seconds": 30}, controller.signal))
        assert aborted.code == "ABORTED_BEFORE_DISPATCH"
        later = AbortController()
        timer = threading.Timer(0.2, later.abort, args=("stop",))
        timer.start()
        result = registry.execute(ToolExecutionInput("c2", "remote_sleep", {"seconds": 30}, later.signal))
        timer.join()
    assert result.code == "ABORTED"
    events = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(e["event"], e["call_id"]) for e in events] == [
        ("started", "c0"),
        ("returned", "c0"),
        ("started", "c2"),
        ("aborted", "c2"),
        ("returned", "c2"),
    ]
    assert 0 < events[3]["after_ms"] <= events[4]["after_ms"]


def test_without_the_mcp_sdk_the_demo_has_no_remote_tool_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The MCP SDK is an extra: without it the demo runs without its remote
    tool, and the remote check fails for a body that never returned."""
    import sys

    from dshtools import ToolRegistry
    from dshtools._cli.demo import RemoteTool

    monkeypatch.setitem(sys.modules, "dshtools.mcp", None)  # import raises ImportError
    with RemoteTool(str(tmp_path)) as remote, ToolRegistry() as registry:
        assert remote.register(registry) is False
        assert [d["function"]["name"] for d in registry.schemas()] == []
    assert remote.unavailable is not None
    assert remote.unavailable.startswith("the MCP client could not be imported")
    assert remote.check() is None  # no remote call was made
    # What the check makes of a record whose body started and never returned.
    (tmp_path / "remote.log").write_text('{"event": "started", "call_id": "c1", "pid": 1}\n')
    check = remote.check()
    assert check is not None
    label, passed = check
    assert not passed
    assert (
        label == "remote: remote_sleep body did not return on the server (0 of 1 bodies returned; MCP server stopped)"
    )


@pytest.mark.timeout(60)
def test_a_missing_file_is_named_as_the_model_asked_for_it_not_by_its_temporary_path(
    tools: DemoTools, tmp_path: Path
) -> None:
    result = run_c1(tools, "read_file", {"path": "missing.txt"})
    info = error_of(result).info
    assert result.code == "TOOL_ERROR" and info is not None and info.name == "FileNotFoundError"
    assert result.content[0]["text"] == "Error: [Errno 2] No such file or directory: 'missing.txt'"
    assert str(tmp_path) not in json.dumps(result.content)


_IMPORT_WITHOUT = """
import sys, tempfile
sys.modules[{module!r}] = None  # as if it were not installed
from dshtools import ToolRegistry
from dshtools._cli.demo import RemoteTool
with tempfile.TemporaryDirectory() as workdir, RemoteTool(workdir) as remote:
    with ToolRegistry() as registry:
        assert remote.register(registry) is False  # waits for the import
    print(remote.unavailable)
"""


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("module", "said"),
    [
        ("mcp", "the MCP SDK is not installed: pip install 'dshtools[mcp]'"),
        ("anyio", "module 'anyio', which the MCP client needs, is not installed: pip install 'dshtools[mcp]'"),
    ],
)
def test_the_demo_names_the_module_that_is_missing(module: str, said: str) -> None:
    """A new user's trial: with ``anyio`` missing the demo said the MCP SDK
    was not installed. Only a missing ``mcp`` is the SDK."""
    out = run_python(_IMPORT_WITHOUT.format(module=module)).stdout.strip()
    assert out.startswith(said), out
