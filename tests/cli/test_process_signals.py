"""Process lifecycle of the command line (docs/contract.md#a13; field case
N2): SIGTERM and SIGHUP cancel, join and report like Ctrl-C and exit
128 + signum; the status line names a body that ignores its cancellation;
adopted grandchildren are reaped as they exit; ``--version``.

Every run is a real ``python -m dshtools`` subprocess. Synchronisation with
it never sleeps: the tests wait for a named process to appear (psutil),
for a line on its stderr, or on a FIFO.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

import dshtools
from tests.helpers.processes import alive, signal_and_collect, wait_for_descendant

TOOLS = r"""
import os
import subprocess
import sys
import threading
import time

from dshtools import ToolDefinition, ToolRegistry
from dshtools._os import descendants as _cli_descendants
from dshtools import io as dio

OBJ = {"type": "object"}


def _shell(args, run):
    return dio.run_process(["sh", "-c", args["script"]], run.signal).returncode


def _stubborn(args, run):
    # Ignores its signal: returns only when the test writes to the FIFO.
    print(f"BODY STARTED {run.call_id}", file=sys.stderr, flush=True)
    with open(args["fifo"]) as f:
        return f.read()


def _leftover(args, run):
    # The shell exits at once; run_process's normal-exit policy then stops
    # the background sleep it left in its session, which the replay (a
    # child subreaper) adopted: a zombie of the replay from then on.
    out = dio.run_process(["sh", "-c", "sleep 30 >/dev/null 2>&1 & echo $!"], run.signal).stdout
    return int(out)


def _orphan_seen(args, run):
    # Same session as the replay: the shell (our child) starts a sleep and
    # waits on stdin; once the reaper has seen the sleep below the shell,
    # the shell exits (the sleep is adopted), then the sleep is killed.
    sh = subprocess.Popen(["sh", "-c", "sleep 30 >/dev/null 2>&1 & echo $!; read x"],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    pid = int(sh.stdout.readline())
    end = time.monotonic() + 10
    while not any(p == pid for p, _ in _cli_descendants._active.deeper) and time.monotonic() < end:
        time.sleep(0.01)
    sh.stdin.close()
    sh.wait()
    os.kill(pid, 9)
    return pid


def _gone(args, run):
    # Whether the process whose pid another call returned was reaped
    # (its /proc entry disappears) within 5 s.
    pid = int(open(args["pidfile"]).read())
    end = time.monotonic() + 5
    while time.monotonic() < end:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0].decode()
        except FileNotFoundError:
            return "reaped"
        time.sleep(0.01)
    return "left " + state


def _save(name):
    def body(args, run):
        pid = name(args, run)
        with open(args["pidfile"], "w") as f:
            f.write(str(pid))
        return pid
    return body


registry = ToolRegistry()
registry.register(ToolDefinition("shell", "run a shell script", OBJ, _shell))
registry.register(ToolDefinition("stubborn", "ignores cancellation", OBJ, _stubborn))
registry.register(ToolDefinition("leftover", "leaves a zombie", OBJ, _save(_leftover)))
registry.register(ToolDefinition("orphan_seen", "adopted after being seen", OBJ, _save(_orphan_seen)))
registry.register(ToolDefinition("gone", "was it reaped", OBJ, _gone))
"""


def _call(call_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def _start(tmp_path: Path, calls: list[dict[str, Any]], *extra: str) -> subprocess.Popen[str]:
    (tmp_path / "lifecycle_tools.py").write_text(TOOLS)
    transcript = tmp_path / "t.json"
    transcript.write_text(json.dumps({"role": "assistant", "tool_calls": calls}))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(tmp_path), env.get("PYTHONPATH", "")) if p)
    return subprocess.Popen(
        [sys.executable, "-m", "dshtools", "replay", str(transcript), "--tools", "lifecycle_tools:registry", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
    )


def _outcome(stdout: str, call_id: str) -> str:
    for line in stdout.splitlines():
        cells = line.split()
        if len(cells) > 3 and cells[1] == call_id:
            return cells[3]
    raise AssertionError(f"no row for {call_id} in:\n{stdout}")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_n2_signal_cancels_joins_reports_and_exits_128_plus_signum(tmp_path: Path, signum: int) -> None:
    proc = _start(tmp_path, [_call("call_1", "shell", {"script": "sleep 40 & sleep 41; wait"})])
    family, stdout, stderr, elapsed = signal_and_collect(
        proc, signum, 5, lambda: wait_for_descendant(proc.pid, ["sleep", "41"], timeout=20)
    )
    name = signal.Signals(signum).name
    assert proc.returncode == 128 + signum, stdout + stderr
    assert elapsed < 5
    assert _outcome(stdout, "call_1") == "ABORTED"
    assert f"interrupted ({name}): running calls were cancelled and joined" in stdout
    assert "FAIL" not in stdout  # every quiescence check passed
    assert alive(family) == []


@pytest.mark.timeout(60)
def test_status_line_names_the_body_that_ignores_its_cancellation(tmp_path: Path) -> None:
    fifo = tmp_path / "release"
    os.mkfifo(fifo)
    proc = _start(tmp_path, [_call("call_07", "stubborn", {"fifo": str(fifo)})])
    try:
        assert proc.stderr is not None
        assert proc.stderr.readline().strip() == "BODY STARTED call_07"
        proc.send_signal(signal.SIGTERM)
        notice = proc.stderr.readline().strip()  # blocks until the CLI says it is waiting
        with open(fifo, "w") as f:
            f.write("done")
        stdout, _ = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert notice == "dshtools: cancelling (SIGTERM) — waiting for call_07 (stubborn); SIGQUIT quits now"
    assert proc.returncode == 143
    assert _outcome(stdout, "call_07") == "ABORTED"  # the success came after the cancellation


@pytest.mark.timeout(60)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="child subreaper is Linux only")
@pytest.mark.parametrize("tool", ["leftover", "orphan_seen"])
def test_adopted_grandchildren_are_reaped_as_they_exit(tmp_path: Path, tool: str) -> None:
    pidfile = str(tmp_path / "pid")
    proc = _start(
        tmp_path, [_call("c1", tool, {"pidfile": pidfile}), _call("c2", "gone", {"pidfile": pidfile})], "--json"
    )
    stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 0, stdout + stderr
    messages = {m["tool_call_id"]: m["content"] for m in json.loads(stdout)}
    assert messages["c2"] == "reaped", messages


def test_version_prints_the_version() -> None:
    proc = subprocess.run([sys.executable, "-m", "dshtools", "--version"], capture_output=True, text=True, timeout=30)
    assert (proc.returncode, proc.stdout.strip()) == (0, f"dshtools {dshtools.__version__}")


@pytest.mark.timeout(60)
def test_sighup_after_the_terminal_closed_still_joins_and_exits_129(tmp_path: Path) -> None:
    # The table cannot be written to a hung-up terminal (EIO): the run is
    # still cancelled and joined, and exits 129 without a traceback.
    import pty

    master, slave = pty.openpty()
    (tmp_path / "lifecycle_tools.py").write_text(TOOLS)
    transcript = tmp_path / "t.json"
    transcript.write_text(
        json.dumps([{"role": "assistant", "tool_calls": [_call("c1", "shell", {"script": "sleep 41"})]}])
    )
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(tmp_path), env.get("PYTHONPATH", "")) if p)
    proc = subprocess.Popen(
        [sys.executable, "-m", "dshtools", "replay", str(transcript), "--tools", "lifecycle_tools:registry"],
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=slave,
        env=env,
        cwd=tmp_path,
    )
    os.close(slave)
    try:
        family = wait_for_descendant(proc.pid, ["sleep", "41"], timeout=20)
        os.close(master)  # the terminal goes away: writes to it now fail with EIO
        master = -1
        proc.send_signal(signal.SIGHUP)
        assert proc.wait(timeout=10) == 129
    finally:
        if master != -1:
            os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert alive(family) == []


@pytest.mark.timeout(10)
def test_sigint_deferred_holds_a_ctrl_c_back_until_asked() -> None:
    """Inside the block a SIGINT is held back (the step completes); the
    previous handler is back afterwards, and ``interrupt()`` runs it once
    for the held-back signal, returning its ``KeyboardInterrupt``. On
    another thread it changes nothing."""
    import signal as os_signal

    from dshtools._signal.lifecycle import sigint_deferred

    previous = os_signal.getsignal(os_signal.SIGINT)
    completed = False
    with sigint_deferred() as deferred:
        os_signal.raise_signal(os_signal.SIGINT)
        completed = True
    assert completed
    assert os_signal.getsignal(os_signal.SIGINT) is previous
    assert isinstance(deferred.interrupt(), KeyboardInterrupt)
    assert deferred.interrupt() is None  # once

    seen: list[object] = []

    def elsewhere() -> None:
        with sigint_deferred():
            seen.append(os_signal.getsignal(os_signal.SIGINT))

    t = threading.Thread(target=elsewhere)
    t.start()
    t.join(5)
    assert seen == [previous]
