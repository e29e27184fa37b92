"""The command line end to end (docs/contract.md#interop-and-cli): ``python -m dshtools demo``
and ``replay`` run as real subprocesses.

Synchronisation with the child never sleeps: the SIGINT test reads the line
the tool body prints when it starts and a FIFO its shell writes once its
grandchildren exist.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from dshtools._os.procfs import is_keeper
from tests.helpers.processes import run_cli

TOOLS_MODULE = """
import subprocess
import sys
import threading

from dshtools import TimeoutPolicy, ToolDefinition, ToolError, ToolRegistry
from dshtools import io as dio

OBJ = {"type": "object"}


def _echo(args, run):
    return {"echo": args["text"]}


def _fail(args, run):
    raise ToolError("nope", "E_NOPE")


def _wait(args, run):
    print(f"BODY STARTED {run.call_id}", file=sys.stderr, flush=True)
    dio.sleep(args["seconds"], run.signal)
    return {"waited": args["seconds"]}


def _spawn(args, run):
    print(f"BODY STARTED {run.call_id}", file=sys.stderr, flush=True)
    script = 'sleep 30 & sleep 30 & echo ready > "$0"; wait'
    dio.run_process(["/bin/sh", "-c", script, args["fifo"]], run.signal, grace=1.0)
    return {}


def make():
    r = ToolRegistry()
    r.register(ToolDefinition("echo", "echo text", OBJ, _echo, is_concurrency_safe=lambda a: True))
    r.register(ToolDefinition("fail", "always fails", OBJ, _fail, is_concurrency_safe=lambda a: True))
    r.register(ToolDefinition("wait", "sleep cooperatively", OBJ, _wait))
    r.register(ToolDefinition("spawn", "shell with children", OBJ, _spawn))
    return r


registry = make()
not_a_registry = 42


def _orphan(args, run):
    # The shell exits at once; its background sleep is orphaned (no
    # dshtools.io involved, so nothing kills it).
    script = 'sleep 30 >/dev/null 2>&1 & echo $! > "$0"'
    subprocess.run(["/bin/sh", "-c", script, args["pidfile"]], check=True)
    return {}


def orphaning():
    r = ToolRegistry()
    r.register(ToolDefinition("orphan", "leaves a grandchild behind", OBJ, _orphan))
    return r


def _late_gate(execution, next):
    # Between TimeoutPolicy and the replay's meter: waits until the
    # deadline fired, so the body is never invoked.
    if execution.name == "late":
        fired = threading.Event()
        handle = execution.signal.add_listener(lambda s: fired.set())
        fired.wait(20)
        handle.remove()
    return next()


def _stalls(args, run):
    dio.sleep(20, run.signal)  # cooperative: returns when the deadline fires
    return {}


def timed():
    r = ToolRegistry()
    r.register(ToolDefinition("late", "gated until its timeout", OBJ, _echo, timeout=0.2))
    r.register(ToolDefinition("stalls", "outlives its timeout", OBJ, _stalls, timeout=0.2))
    r.register(ToolDefinition("raises", "raises", OBJ, lambda a, run: 1 / 0))
    r.register(ToolDefinition("fail", "always fails", OBJ, _fail))
    r.add_around_dispatch(TimeoutPolicy())
    r.add_around_dispatch(_late_gate)
    return r


def timed_without_policy():
    r = ToolRegistry()
    r.register(ToolDefinition("stalls", "outlives its timeout", OBJ, _stalls, timeout=0.2))
    r.register(ToolDefinition("echo", "echo text", OBJ, _echo))
    return r


def closed_factory():
    r = make()
    r.close()
    return r


closed = closed_factory()


def bad_factory():
    return "nope"


def raising_factory():
    raise RuntimeError("no tools today")
"""

TIMEOUT_S = 30


def _call(call_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def _env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(tmp_path), env.get("PYTHONPATH", "")) if p)
    return env


def _run(args: list[str], tmp_path: Path, **kw: Any) -> subprocess.CompletedProcess[str]:
    return run_cli(tmp_path, *args, timeout=TIMEOUT_S, **kw)


@pytest.fixture
def tools_dir(tmp_path: Path) -> Path:
    (tmp_path / "cli_tools_mod.py").write_text(TOOLS_MODULE)
    return tmp_path


def _rows(stdout: str) -> dict[str, list[str]]:
    """call id -> [batch, call id, tool, outcome, body, duration, ...] for
    every table row."""
    rows: dict[str, list[str]] = {}
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("BATCH"))
    for line in lines[start + 1 :]:
        parts = line.split()
        if len(parts) < 6 or not parts[0].isdigit():
            break
        if parts[4] == "(killed)":  # "ABORTED (killed)": one outcome cell
            parts[3:5] = [f"{parts[3]} (killed)"]
        rows[parts[1]] = parts
    return rows


def _outcomes(stdout: str) -> dict[str, str]:
    return {cid: parts[3] for cid, parts in _rows(stdout).items()}


def _group_members(pgid: int) -> list[psutil.Process]:
    members = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                members.append(proc)
        except (ProcessLookupError, psutil.NoSuchProcess):
            pass
    return members


# ---------------------------------------------------------------------- demo


class Demo:
    """One ``python -m dshtools demo`` run in a process group of its own
    (checked after it), read to its end by a thread that notes how long it
    took."""

    def __init__(self, cwd: Path, *options: str) -> None:
        self._options = " ".join(options)
        self._started = time.monotonic()
        self.child = subprocess.Popen(
            [sys.executable, "-m", "dshtools", "demo", *options],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=cwd,
            start_new_session=True,
        )
        self._output: tuple[str, str] = ("", "")
        self.elapsed = float("inf")
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        self._output = self.child.communicate()
        self.elapsed = time.monotonic() - self._started

    def result(self) -> subprocess.CompletedProcess[str]:
        self._reader.join(TIMEOUT_S)
        assert not self._reader.is_alive(), f"demo {self._options} did not end within {TIMEOUT_S}s"
        return subprocess.CompletedProcess(self.child.args, self.child.returncode, *self._output)


@pytest.fixture(scope="module")
def demos(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Demo]]:
    """Both demo runs, started together: each spends most of its time
    waiting for its own tools' sleeps and timeouts."""
    cwd = tmp_path_factory.mktemp("demo")
    runs = {"cancel": Demo(cwd, "--trace"), "no-cancel": Demo(cwd, "--no-cancel")}
    yield runs
    for run in runs.values():
        if run.child.poll() is None:
            run.child.kill()
        run.result()


@pytest.mark.timeout(40)
def test_demo_shows_every_outcome_kind_and_proves_quiescence(demos: dict[str, Demo]) -> None:
    demo = demos["cancel"]
    proc = demo.result()
    elapsed = demo.elapsed
    child = demo.child
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert elapsed < 20  # the MCP server's start is most of it on a loaded machine
    rows = _rows(proc.stdout)
    outcomes = {cid: parts[3] for cid, parts in rows.items()}
    assert outcomes == {
        "call_01": "SUCCESS",
        "call_02": "SUCCESS",
        "call_03": "SUCCESS",
        "call_04": "ABORTED",  # a sleep of 5 s that reported progress
        "call_05": "TOOL_TIMEOUT",
        "call_06": "TOOL_ERROR(FileNotFoundError)",
        "call_07": "ABORTED (killed)",  # ignores its signal: its worker process is killed (docs/contract.md#backends)
        "call_08": "ABORTED",
        "call_09": "ABORTED",  # remote_sleep on our own MCP server: cancelled over the wire
        "call_10": "ABORTED_BEFORE_DISPATCH",
        "call_11": "ABORTED_BEFORE_DISPATCH",
        "call_12": "ABORTED_BEFORE_DISPATCH",
    }
    bodies = {cid: parts[4] for cid, parts in rows.items()}
    assert bodies["call_07"] == "yes" and bodies["call_08"] == "yes" and bodies["call_05"] == "yes"
    assert bodies["call_09"] == "yes"
    # The stopped sleep shows the last progress it reported (every 0.25 s,
    # stopped at 1.5 s): issue 25 item 4.
    cells = " ".join(rows["call_04"])
    assert cells.endswith('{"seconds": 5} [progress ' + cells.split("[progress ", 1)[-1]), cells
    detail = "[progress " + cells.split("[progress ", 1)[1]
    assert detail.endswith('/5 "sleeping"] Error: tool call aborted'), detail
    assert 0.5 <= float(detail.split()[1].split("/")[0]) <= 1.5
    assert not any("[progress" in " ".join(r) for cid, r in rows.items() if cid != "call_04")
    assert [bodies[f"call_{i:02d}"] for i in (10, 11, 12)] == ["no", "no", "no"]
    # Stopped by force FORCED_STOP_AFTER (1 s) after the cancel at 1.5 s.
    assert 2.0 < float(rows["call_07"][5].rstrip("s")) < 4.0
    assert "cancelled mid-run at" in proc.stdout
    # What a new user tripped on: the waiting line names its cause and no key
    # (nothing was pressed); the finished line is the run's real time.
    assert "dshtools: cancelling (--cancel-after 1.5s elapsed) — waiting for call_07 (stubborn)" in proc.stderr
    assert "quits now" not in proc.stderr
    (finished,) = [line.split() for line in proc.stdout.splitlines() if line.startswith("finished in ")]
    took, calls = float(finished[2].rstrip("s")), float(finished[5].rstrip("s)"))
    assert calls < took <= elapsed and took >= 0.6 * elapsed, (finished, elapsed)
    # No absolute temporary path in what the model reads.
    assert rows["call_06"][-1] == "'missing.txt'", rows["call_06"]
    # The table says in plain words what "(killed)" means.
    assert any(line.startswith("(killed): the body ignored its abort") for line in proc.stdout.splitlines())
    report, trace = proc.stdout.split("\ntrace ", 1)
    quiescence = report.split("quiescence:", 1)[1].splitlines()[1:]
    assert len(quiescence) == 7
    # The remote call stopped on the server's side, as the server recorded it:
    # its signal aborted there about when the run was cancelled (1.5 s).
    (remote,) = [line for line in quiescence if " remote: " in line]
    assert remote.startswith("  ok   remote: remote_sleep aborted on the server after "), remote
    after_ms = float(remote.split("after ", 1)[1].split(" ms", 1)[0])
    assert 100 < after_ms < 5000  # mid-run, not at its start (the server's body starts late under load)
    assert ", body returned " in remote and "(1 of 1 bodies returned; MCP server pid " in remote
    assert remote.endswith(", stopped) -- checks: the remote tool's body stopped on the MCP server, not only here")
    assert "remote_sleep (our own MCP server over stdio, pid " in proc.stdout
    assert any("no worker process runs a tool body (bodies running: 0;" in line for line in quiescence)
    assert any("stopped by force: 1)" in line for line in quiescence)
    assert any("no process a worker started is alive (alive: none)" in line for line in quiescence)
    assert all(line.strip().startswith("ok") for line in quiescence), proc.stdout
    assert any("process groups the shell tool created" in line for line in quiescence)
    assert any("bodies in flight: 0" in line for line in quiescence)
    assert any("listener_count == 0" in line for line in quiescence)
    # Field case flavour: nothing of the demo's process group survives it,
    # nor of any process group its shell tool created.
    assert _group_members(child.pid) == []
    pgids_line = next(line for line in quiescence if "pgids:" in line)
    pgids = [int(p) for p in pgids_line.split("pgids:", 1)[1].split(";")[0].split(",")]
    assert len(pgids) >= 2  # the read-only shell of turn 1 and the cancelled soak test
    for pgid in pgids:
        assert _group_members(pgid) == []
    _check_demo_trace(trace.splitlines(), outcomes)


def _check_demo_trace(lines: list[str], outcomes: dict[str, str]) -> None:
    """--trace (issue 24 item 2): the run's span, then one execute_tool span
    per call as its children, in model order, each with its outcome code,
    duration, body_invoked and killed; the killed call with its overrun and
    the abort and forced-stop events."""
    assert lines[0].endswith(f": {len(outcomes) + 1} spans; times in ms from the run's start")
    assert lines[1].startswith("dshtools demo ")
    spans = [line.split() for line in lines[2:] if line.startswith("  execute_tool ")]
    assert [cells[2] for cells in spans] == sorted(outcomes)
    for cells in spans:
        call_id = cells[2]
        assert cells[3] == outcomes[call_id].partition("(")[0].strip()  # the code, without the exception name
        assert cells[5] == "ms" and float(cells[4].lstrip("+")) >= 0 and float(cells[6]) >= 0 and cells[7] == "ms"
        invoked = "no" if outcomes[call_id] == "ABORTED_BEFORE_DISPATCH" else "yes"
        assert cells[8] == f"body_invoked={invoked}"
        assert cells[9] == f"killed={'yes' if call_id == 'call_07' else 'no'}"
    stubborn = next(cells for cells in spans if cells[2] == "call_07")
    assert float(stubborn[10].removeprefix("overrun_s=")) > 0.5  # ran on until the forced stop (1 s)
    events = lines[lines.index(next(line for line in lines if " call_07 " in line)) + 1 :][:2]
    assert events[0].strip().startswith("· dshtools.abort at +")
    assert events[0].endswith(" (reason: --cancel-after 1.5s elapsed)")  # the reason's text, not `str`
    assert events[1].strip().startswith("· dshtools.forced_stop at +")


@pytest.mark.timeout(40)
def test_demo_no_cancel_runs_every_call_to_its_end_or_timeout(demos: dict[str, Demo]) -> None:
    proc = demos["no-cancel"].result()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    outcomes = _outcomes(proc.stdout)
    assert outcomes["call_07"] == "TOOL_TIMEOUT (killed)"  # the policy's abort, then the forced stop
    assert outcomes["call_04"] == "TOOL_TIMEOUT"  # the 5 s sleep meets the sleep tool's timeout (2 s)
    assert '/5 "sleeping"] Error: tool call timed out' in proc.stdout
    assert outcomes["call_08"] == "TOOL_TIMEOUT"  # the soak test meets the shell's timeout
    assert outcomes["call_09"] == "TOOL_TIMEOUT"  # the remote call meets its timeout, cancelled over the wire
    assert [outcomes[f"call_{i:02d}"] for i in (10, 11, 12)] == ["SUCCESS"] * 3
    assert not {"ABORTED", "ABORTED_BEFORE_DISPATCH"} & set(outcomes.values())
    assert "cancelled mid-run" not in proc.stdout
    # The quiescence block ends where the crash and resume section begins.
    quiescence = proc.stdout.split("quiescence:", 1)[1].split("\n\ncrash and resume: ", 1)[0].splitlines()[1:]
    assert all(line.strip().startswith("ok") for line in quiescence), proc.stdout


@pytest.mark.timeout(40)
@pytest.mark.parametrize("run", ["cancel", "no-cancel"])
def test_demo_kills_a_journaled_agent_mid_turn_and_prints_an_honest_resume(demos: dict[str, Demo], run: str) -> None:
    """Issue 32 item 5: after the table, the demo's journaled agent process,
    killed with SIGKILL while its second call was mid-body, is resumed: the
    settled call comes back from the journal, the killed one is
    OUTCOME_UNKNOWN, the unstarted one runs now; each side effect ran once,
    and nothing of the killed agent runs on."""
    proc = demos[run].result()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    section = proc.stdout.split("\ncrash and resume: ", 1)[1]
    assert "was killed with SIGKILL while call_c2 (send_email) was mid-body" in section.splitlines()[0]
    lines = section.splitlines()
    repaired_at = lines.index(
        next(line for line in lines if line.startswith("the transcript repaired from the journal"))
    )
    repaired = {line.split()[0]: line.split(None, 1)[1] for line in lines[repaired_at + 1 : repaired_at + 4]}
    assert repaired["call_c1"] == '{"saved": "draft saved"}'
    assert repaired["call_c2"].startswith("Error: tool call was interrupted after it started")
    assert repaired["call_c3"].startswith("Error: tool call was never run")
    table = lines.index(next(line for line in lines if line.startswith("CALL ID ")))
    rows = {line.split()[0]: line for line in lines[table + 1 : table + 4]}
    assert "  replayed from the journal (body not run again)  " in rows["call_c1"]
    assert "  OUTCOME_UNKNOWN (killed between claim and settle; not run again)  " in rows["call_c2"]
    assert "  ran now (it never started before)  " in rows["call_c3"]
    assert "1 (the killed agent)" in rows["call_c1"] and "1 (the killed agent)" in rows["call_c2"]
    assert "1 (this process)" in rows["call_c3"]
    checks = [line for line in lines if line.startswith(("  ok   crash: ", "  FAIL crash: "))]
    assert checks == [
        "  ok   crash: each side-effecting body ran at most once "
        "(side-effect file: call_c1 x1, call_c2 x1, call_c3 x1)",
        checks[1],
    ]
    assert checks[1].startswith("  ok   crash: nothing the killed agent started is still running (")
    assert "alive: none; found via psutil" in checks[1]
    agent_pid = int(section.split("(pid ", 1)[1].split(")", 1)[0])
    assert not psutil.pid_exists(agent_pid) or psutil.Process(agent_pid).status() == psutil.STATUS_ZOMBIE
    assert "dshtools-demo-" not in section and "/tmp" not in section  # no temporary path in model texts


# -------------------------------------------------------------------- replay


def _write_transcript(tmp_path: Path, data: object, name: str = "t.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def _assistant(*calls: dict[str, Any]) -> dict[str, Any]:
    """One assistant message asking for ``calls``."""
    return {"role": "assistant", "tool_calls": list(calls)}


def _replay(tools_dir: Path, transcript: object, factory: str, *options: str) -> subprocess.CompletedProcess[str]:
    """``python -m dshtools replay`` of ``transcript`` (written to a file)
    with the tools ``cli_tools_mod.<factory>`` gives, and ``options``."""
    path = _write_transcript(tools_dir, transcript)
    return _run(["replay", str(path), "--tools", f"cli_tools_mod:{factory}", *options], tools_dir)


TWO_TURNS = [
    {"role": "user", "content": "go"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            _call("a1", "echo", {"text": "one"}),
            _call("a2", "fail", {}),
            _call("a3", "echo", {"text": "three"}),
        ],
    },
    {"role": "tool", "tool_call_id": "a1", "content": "ignored"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            _call("b1", "nosuch", {}),
            _call("b2", "echo", {"text": "x"}),
            {"id": "b3", "type": "function", "function": {"name": "echo", "arguments": '{"text": '}},
        ],
    },
]


@pytest.mark.timeout(40)
def test_replay_runs_each_assistant_message_as_one_batch(tools_dir: Path) -> None:
    proc = _replay(tools_dir, TWO_TURNS, "registry")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = _rows(proc.stdout)
    assert list(rows) == ["a1", "a2", "a3", "b1", "b2", "b3"]
    assert [rows[c][0] for c in rows] == ["1", "1", "1", "2", "2", "2"]
    assert {c: r[3] for c, r in rows.items()} == {
        "a1": "SUCCESS",
        "a2": "E_NOPE",  # a sibling's failure cancels nothing (B32)
        "a3": "SUCCESS",
        "b1": "UNKNOWN_TOOL",
        "b2": "SUCCESS",
        "b3": "INVALID_ARGS",  # broken model JSON is a result, not a usage error
    }
    assert "listener_count == 0" in proc.stdout


@pytest.mark.timeout(40)
@pytest.mark.parametrize(
    "shape",
    ["message-list", "messages-object", "one-assistant-message"],
)
def test_replay_json_prints_parsable_tool_messages_for_every_transcript_shape(tools_dir: Path, shape: str) -> None:
    message = {"content": None, **_assistant(_call("c1", "echo", {"text": "hi"}), _call("c2", "fail", {}))}
    data: object = {
        "message-list": [{"role": "user", "content": "hi"}, message],
        "messages-object": {"messages": [message]},
        "one-assistant-message": message,
    }[shape]
    proc = _replay(tools_dir, data, "make", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    messages = json.loads(proc.stdout)
    assert [m["role"] for m in messages] == ["tool", "tool"]
    assert [m["tool_call_id"] for m in messages] == ["c1", "c2"]
    assert "hi" in json.dumps(messages[0]["content"])
    assert "Error: nope" in json.dumps(messages[1]["content"])
    assert "SUCCESS" in proc.stderr  # the table went to stderr


@pytest.mark.timeout(40)
def test_replay_cancel_after_aborts_the_running_call_and_skips_the_rest(tools_dir: Path) -> None:
    data = _assistant(
        _call("d1", "echo", {"text": "fast"}),
        _call("d2", "wait", {"seconds": 20}),
        _call("d3", "echo", {"text": "never"}),
    )
    t0 = time.monotonic()
    proc = _replay(tools_dir, data, "registry", "--cancel-after", "0.3")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert time.monotonic() - t0 < 10
    assert _outcomes(proc.stdout) == {"d1": "SUCCESS", "d2": "ABORTED", "d3": "ABORTED_BEFORE_DISPATCH"}
    assert "cancelled mid-run at" in proc.stdout


@pytest.mark.timeout(40)
def test_sigint_during_replay_cancels_joins_and_exits_130(tools_dir: Path) -> None:
    fifo = tools_dir / "ready.fifo"
    os.mkfifo(fifo)
    data = _assistant(
        _call("e1", "echo", {"text": "before"}),
        _call("e2", "spawn", {"fifo": str(fifo)}),
        _call("e3", "echo", {"text": "after"}),
    )
    path = _write_transcript(tools_dir, data)
    # The child must see SIGINT as Ctrl-C even if this runner ignores it
    # (an ignored signal stays ignored across exec; a handled one does not).
    # Not preexec_fn: forking with the timer thread alive makes it unsafe.
    previous = signal.getsignal(signal.SIGINT)
    if previous is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "dshtools", "replay", str(path), "--tools", "cli_tools_mod:registry"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(tools_dir),
            cwd=tools_dir,
        )
    finally:
        if previous is signal.SIG_IGN:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        assert line.strip() == "BODY STARTED e2", line
        with open(fifo, encoding="ascii") as f:  # the shell's children exist now
            assert f.read().strip() == "ready"
        # The shell and its two background jobs (which may not have exec'd
        # "sleep" yet, so they are counted, not matched by name).
        # (The replay's keeper is no call's process: left out.)
        descendants = [p for p in psutil.Process(proc.pid).children(recursive=True) if not is_keeper(p.pid)]
        assert len(descendants) == 3, descendants
        os.kill(proc.pid, signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, stdout + stderr
    assert _outcomes(stdout) == {"e1": "SUCCESS", "e2": "ABORTED", "e3": "ABORTED_BEFORE_DISPATCH"}
    assert "interrupted (Ctrl-C)" in stdout
    for p in descendants:
        assert not p.is_running() or p.status() == psutil.STATUS_ZOMBIE, p


# ---------------------------------------------------------------- bad input


def _bad_cases(tmp: Path) -> dict[str, list[str]]:
    (tmp / "bad.json").write_text("{not json")
    (tmp / "none.json").write_text(
        json.dumps([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}])
    )
    (tmp / "scalar.json").write_text("42")
    # Field case B37: a transcript *file* nested 5000 deep.
    (tmp / "deep.json").write_text("[" * 5000 + "]" * 5000)
    mixed = [
        {"role": "assistant", "tool_calls": [_call("c1", "echo", {})]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "echo", "input": {}}]},
    ]
    (tmp / "mixed.json").write_text(json.dumps(mixed))
    (tmp / "cli_broken_mod.py").write_text('raise RuntimeError("line one\\nline two")\n')
    good = _write_transcript(tmp, TWO_TURNS, "good.json")
    return {
        "missing-file": ["replay", str(tmp / "nope.json"), "--tools", "cli_tools_mod:registry"],
        "malformed-json": ["replay", str(tmp / "bad.json"), "--tools", "cli_tools_mod:registry"],
        "no-tool-calls": ["replay", str(tmp / "none.json"), "--tools", "cli_tools_mod:registry"],
        "not-a-transcript": ["replay", str(tmp / "scalar.json"), "--tools", "cli_tools_mod:registry"],
        "transcript-nested-too-deeply": ["replay", str(tmp / "deep.json"), "--tools", "cli_tools_mod:registry"],
        "transcript-mixes-formats": ["replay", str(tmp / "mixed.json"), "--tools", "cli_tools_mod:registry"],
        "tools-given-as-a-file-path": ["replay", str(good), "--tools", "./cli_tools_mod.py:registry"],
        "usage-bad-format": ["replay", str(good), "--tools", "cli_tools_mod:registry", "--format", "gemini"],
        "unimportable-module": ["replay", str(good), "--tools", "no_such_module_xyz:registry"],
        "module-raises-multiline-on-import": ["replay", str(good), "--tools", "cli_broken_mod:registry"],
        "factory-raises": ["replay", str(good), "--tools", "cli_tools_mod:raising_factory"],
        "missing-attribute": ["replay", str(good), "--tools", "cli_tools_mod:nothing_here"],
        "attribute-not-a-registry": ["replay", str(good), "--tools", "cli_tools_mod:not_a_registry"],
        "factory-returns-non-registry": ["replay", str(good), "--tools", "cli_tools_mod:bad_factory"],
        "closed-registry": ["replay", str(good), "--tools", "cli_tools_mod:closed"],
        "factory-returns-closed-registry": ["replay", str(good), "--tools", "cli_tools_mod:closed_factory"],
        "tools-without-colon": ["replay", str(good), "--tools", "cli_tools_mod"],
        "usage-missing-tools": ["replay", str(good)],
        "usage-unknown-option": ["demo", "--frobnicate"],
        "usage-bad-cancel-after": ["demo", "--cancel-after", "-1"],
        "usage-no-cancel-with-cancel-after": ["--no-cancel", "--cancel-after", "1"],
    }


BAD_CASES = [
    "missing-file",
    "malformed-json",
    "no-tool-calls",
    "not-a-transcript",
    "transcript-nested-too-deeply",
    "transcript-mixes-formats",
    "tools-given-as-a-file-path",
    "usage-bad-format",
    "unimportable-module",
    "module-raises-multiline-on-import",
    "factory-raises",
    "missing-attribute",
    "attribute-not-a-registry",
    "factory-returns-non-registry",
    "closed-registry",
    "factory-returns-closed-registry",
    "tools-without-colon",
    "usage-missing-tools",
    "usage-unknown-option",
    "usage-bad-cancel-after",
    "usage-no-cancel-with-cancel-after",
]


@pytest.mark.timeout(40)
@pytest.mark.parametrize("case", BAD_CASES)
def test_bad_input_exits_2_with_one_line_on_stderr(tools_dir: Path, case: str) -> None:
    args = _bad_cases(tools_dir)[case]
    proc = _run(args, tools_dir)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    if case.startswith("usage-"):
        assert lines[0].startswith("dshtools") and "error:" in lines[0] and "(see --help)" in lines[0]
    else:
        assert lines[0].startswith("dshtools: error: ")


@pytest.mark.timeout(10)
def test_no_tool_calls_error_names_the_problem(tools_dir: Path) -> None:
    args = _bad_cases(tools_dir)["no-tool-calls"]
    proc = _run(args, tools_dir)
    assert "no assistant message with tool_calls" in proc.stderr


def test_transcript_shapes_parse_in_process() -> None:
    from dshtools._cli.inputs import UsageError, transcript_batches

    msg = {"role": "assistant", "tool_calls": [_call("x", "echo", {})]}
    assert transcript_batches([msg, {"role": "tool", "content": "r"}, msg]) == [msg["tool_calls"]] * 2
    assert transcript_batches({"messages": [msg]}) == [msg["tool_calls"]]
    assert transcript_batches(msg) == [msg["tool_calls"]]
    for bad in ([], {"messages": "x"}, "str", [1], [{"role": "assistant", "tool_calls": "x"}]):
        with pytest.raises(UsageError):
            transcript_batches(bad)


class _FakeTty:
    def __init__(self, tty: bool, wanted: str) -> None:
        self.tty = tty
        self.wanted = wanted
        self.text = ""
        self.seen = threading.Event()

    def isatty(self) -> bool:
        return self.tty

    def write(self, text: str) -> int:
        self.text += text
        if self.wanted in self.text:
            self.seen.set()
        return len(text)

    def flush(self) -> None:
        pass


@contextlib.contextmanager
def _a_call_in_flight() -> Iterator[tuple[Any, Any]]:
    """A dispatch meter with one call (``call_77`` of ``slowtool``) held in
    it by a worker thread until the block ends: ``(meter, the call's view)``."""
    from dshtools._cli.run import _Meter

    meter = _Meter()
    release = threading.Event()
    entered = threading.Event()

    def next_() -> Any:
        entered.set()
        release.wait()
        return None

    view = types.SimpleNamespace(call_id="call_77", name="slowtool", token=object())
    worker = threading.Thread(target=meter, args=(view, next_))
    worker.start()
    entered.wait()
    try:
        yield meter, view
    finally:
        release.set()
        worker.join()


@pytest.mark.timeout(10)
@pytest.mark.parametrize("tty", [True, False])
def test_progress_shows_calls_in_flight_only_on_a_terminal(tty: bool) -> None:
    from dshtools._cli.run import _Ticker

    stream = _FakeTty(tty, "call_77 slowtool")
    with _a_call_in_flight() as (meter, view):
        ticker = _Ticker(meter, stream)  # type: ignore[arg-type]
        try:
            if tty:
                assert stream.seen.wait(5)
        finally:
            ticker.stop()
    assert ticker._thread is None  # stopped and joined
    if tty:
        assert stream.text.endswith("\r\x1b[K")  # the progress line is cleared
    else:
        assert stream.text == ""
    assert meter.in_flight() == [] and view.token in meter.spans


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    ("cause", "said"),
    [
        ("--cancel-after 1.5s elapsed", "cancelling (--cancel-after 1.5s elapsed) — waiting for call_77 (slowtool)\n"),
        ("Ctrl-C", "cancelling (Ctrl-C) — waiting for call_77 (slowtool); Ctrl-\\ quits now\n"),
        ("SIGHUP", "cancelling (SIGHUP) — waiting for call_77 (slowtool); SIGQUIT quits now\n"),
    ],
)
def test_the_cancelling_line_says_what_cancelled_the_run(cause: str, said: str) -> None:
    """A new user's trial: "Ctrl-\\ quits now" was printed when the user
    pressed nothing (``--cancel-after``). The line names the cause; only a
    signal adds how to quit at once."""
    from dshtools._cli.run import _Ticker

    stream = _FakeTty(False, "\n")
    since = time.monotonic() - 10  # cancelled long ago: the call is ignoring it
    with _a_call_in_flight() as (meter, _view):
        ticker = _Ticker(meter, stream, lambda: (since, cause))  # type: ignore[arg-type]
        try:
            assert stream.seen.wait(5)
        finally:
            ticker.stop()
    assert stream.text == "dshtools: " + said


def test_help_exits_0_and_names_both_commands(capsys: pytest.CaptureFixture[str]) -> None:
    from dshtools.__main__ import main

    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "demo" in out and "replay" in out and "130" in out


@pytest.mark.timeout(10)
def test_group_alive_sees_a_live_process_group_and_not_a_reaped_one() -> None:
    from dshtools._cli.demo import group_alive

    child = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        assert group_alive(child.pid)
    finally:
        child.kill()
        child.wait()
    assert not group_alive(child.pid)


@pytest.mark.timeout(10)
@pytest.mark.parametrize("with_psutil", [True, False])
def test_live_descendants_lists_children_and_grandchildren_with_or_without_psutil(
    monkeypatch: pytest.MonkeyPatch, with_psutil: bool
) -> None:
    from dshtools._os.descendants import live_descendants

    if not with_psutil:
        monkeypatch.setitem(sys.modules, "psutil", None)  # import psutil -> ImportError
    # The shell prints its background job's pid once the job exists.
    child = subprocess.Popen(["/bin/sh", "-c", "sleep 30 & echo $!; wait"], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        grandchild = int(child.stdout.readline())
        alive, how = live_descendants()
        assert how == ("psutil" if with_psutil else "/proc")
        assert child.pid in alive and grandchild in alive
    finally:
        os.kill(grandchild, signal.SIGKILL)
        child.kill()
        child.wait()
    alive, _ = live_descendants()
    assert child.pid not in alive and grandchild not in alive


@pytest.mark.timeout(40)
@pytest.mark.parametrize("with_psutil", [True, False])
def test_replay_quiescence_fails_for_a_grandchild_orphaned_by_a_tool(tools_dir: Path, with_psutil: bool) -> None:
    # The tool's shell exits at once, so its background job is re-parented:
    # to the replay (child subreaper on Linux), which must report it.
    if not with_psutil:
        hide = tools_dir / "hide"
        hide.mkdir()
        (hide / "psutil.py").write_text('raise ImportError("psutil hidden by the test")\n')
    pidfile = tools_dir / "orphan.pid"
    data = _assistant(_call("o1", "orphan", {"pidfile": str(pidfile)}))
    path = _write_transcript(tools_dir, data)
    env = _env(tools_dir)
    if not with_psutil:
        env["PYTHONPATH"] = os.pathsep.join([str(tools_dir / "hide"), env["PYTHONPATH"]])
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "dshtools", "replay", str(path), "--tools", "cli_tools_mod:orphaning"],
            capture_output=True,
            text=True,
            env=env,
            cwd=tools_dir,
            timeout=TIMEOUT_S,
        )
        orphan = int(pidfile.read_text())
        assert proc.returncode == 1, proc.stdout + proc.stderr
        line = next(line for line in proc.stdout.splitlines() if "descendant" in line)
        assert line.strip().startswith("FAIL"), line
        assert f"alive: {orphan}" in line
        assert ("via psutil" if with_psutil else "via /proc") in line
        if sys.platform.startswith("linux"):
            assert "child subreaper" in line
    finally:
        if pidfile.exists():
            try:
                os.kill(int(pidfile.read_text()), signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.mark.timeout(40)
def test_replay_body_column_is_observed_for_timeouts_and_exceptions(tools_dir: Path) -> None:
    data = _assistant(
        _call("t1", "late", {"text": "never"}),
        _call("t2", "stalls", {}),
        _call("t3", "raises", {}),
        _call("t4", "fail", {}),
        _call("t5", "nosuch", {}),
    )
    proc = _replay(tools_dir, data, "timed")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = _rows(proc.stdout)
    assert {cid: (r[3], r[4]) for cid, r in rows.items()} == {
        "t1": ("TOOL_TIMEOUT", "no"),  # the deadline fired before the body could start
        "t2": ("TOOL_TIMEOUT", "yes"),
        "t3": ("TOOL_ERROR(ZeroDivisionError)", "yes"),
        "t4": ("E_NOPE", "yes"),
        "t5": ("UNKNOWN_TOOL", "no"),
    }
    assert "warning" not in proc.stderr  # TimeoutPolicy is installed


@pytest.mark.timeout(40)
def test_replay_warns_once_when_a_timeout_is_declared_without_timeout_policy(tools_dir: Path) -> None:
    data = _assistant(_call("w1", "echo", {"text": "hi"}))
    proc = _replay(tools_dir, data, "timed_without_policy")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    warnings = [line for line in proc.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1, proc.stderr
    assert "stalls" in warnings[0] and "TimeoutPolicy" in warnings[0] and "echo" not in warnings[0]
    assert "warning" not in proc.stdout
    quiet = _replay(tools_dir, data, "registry")  # no timeout declared
    assert quiet.returncode == 0 and "warning" not in quiet.stderr


@pytest.mark.timeout(40)
def test_replay_dash_reads_the_transcript_from_stdin(tools_dir: Path) -> None:
    proc = _run(["replay", "-", "--tools", "cli_tools_mod:registry"], tools_dir, input=json.dumps(TWO_TURNS))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert list(_rows(proc.stdout)) == ["a1", "a2", "a3", "b1", "b2", "b3"]
    bad = _run(["replay", "-", "--tools", "cli_tools_mod:registry"], tools_dir, input="{oops")
    assert bad.returncode == 2 and bad.stderr.startswith("dshtools: error: transcript <stdin> is not valid JSON")


def test_replay_help_documents_reading_stdin(capsys: pytest.CaptureFixture[str]) -> None:
    from dshtools.__main__ import main

    assert main(["replay", "--help"]) == 0
    assert "'-' reads it from standard input" in " ".join(capsys.readouterr().out.split())


@pytest.mark.timeout(40)
def test_transcript_errors_number_messages_from_1(tools_dir: Path) -> None:
    from dshtools._cli.inputs import UsageError, transcript_batches

    user = {"role": "user", "content": "hi"}
    with pytest.raises(UsageError, match=r"message #2 is not a JSON object"):
        transcript_batches([user, 7])
    with pytest.raises(UsageError, match=r'message #3: "tool_calls" must be a list'):
        transcript_batches([user, user, {"role": "assistant", "tool_calls": "x"}])
    # A call without an id is model output, not a usage error: it is
    # answered with INVALID_CALL (docs/contract.md#a11).
    proc = _replay(tools_dir, [user, _assistant({"function": {"name": "echo"}})], "registry")
    assert proc.returncode == 0, proc.stderr
    assert "INVALID_CALL" in proc.stdout and "the call id is missing" in proc.stdout


def test_a_failed_quiescence_check_exits_1_and_says_fail(capsys: pytest.CaptureFixture[str]) -> None:
    from dshtools._cli.report import _report
    from dshtools._cli.run import _Replay

    run = _Replay(rows=[], interrupted=False, cancelled_at=None, elapsed=0.0, listener_count=1, tool_messages=[])
    assert _report(run, lambda row: "yes", [("no tool body running", True)], False) == 1
    out = capsys.readouterr().out
    assert "FAIL caller signal listener_count == 0" in out
    assert "ok   no tool body running" in out


@pytest.mark.timeout(40)
def test_replay_keeps_results_apart_when_turns_reuse_a_call_id(tools_dir: Path) -> None:
    data = [
        _assistant(_call("same", "echo", {"text": "first"})),
        {"role": "tool", "tool_call_id": "same", "content": "first"},
        _assistant(_call("same", "fail", {})),
    ]
    proc = _replay(tools_dir, data, "registry", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    messages = json.loads(proc.stdout)
    assert [m["tool_call_id"] for m in messages] == ["same", "same"]
    assert "first" in messages[0]["content"] and "Error: nope" in messages[1]["content"]
    table = [line.split() for line in proc.stderr.splitlines() if line.split()[:2] in (["1", "same"], ["2", "same"])]
    assert [(row[0], row[3]) for row in table] == [("1", "SUCCESS"), ("2", "E_NOPE")]
    assert all(row[5].endswith("s") and row[5] != "-" for row in table)  # each row has its own duration


@pytest.mark.timeout(40)
def test_replay_into_a_closed_pipe_exits_141_not_as_a_failed_check(tools_dir: Path) -> None:
    # `replay ... | head -1` with `set -o pipefail`: a reader that stopped
    # early must not read as a quiescence failure (exit 1).
    path = _write_transcript(tools_dir, TWO_TURNS)
    read, write = os.pipe()
    os.close(read)  # nobody will ever read: the first write fails with EPIPE
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "dshtools", "replay", str(path), "--tools", "cli_tools_mod:registry"],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(tools_dir),
            cwd=tools_dir,
            timeout=TIMEOUT_S,
            check=False,
        )
    finally:
        os.close(write)
    assert proc.returncode == 141, proc.stderr
    assert proc.stderr == ""  # no traceback, no "Exception ignored" from the final flush
