"""Nothing a call started outlives the process that owns the call
(docs/contract.md#crash-stops-what-the-call-started; field case N21).

A child agent process runs a ``ProcessBackend`` body and a thread-backend
body whose ``run_process`` child each start a grandchild and announce their
pids on a FIFO (a blocking read here, not a sleep); the test then kills the
agent and waits for every announced process to be gone within 1 s of the
agent's death. The worker and the keeper were started from a thread that
exited before: neither follows that thread."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import psutil
import pytest

from dshtools import AbortController, ProcessBackend, ToolRegistry
from dshtools._os.keeper import keeper_pid
from dshtools.io import run_process
from tests.helpers.calls import call, tool, value_of
from tests.helpers.processes import alive, run_python

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pidfds and /proc")

AGENT = textwrap.dedent(
    """\
    import os, subprocess, sys, threading, time

    from dshtools import AbortController, ProcessBackend, ToolDefinition, ToolExecutionInput, ToolRegistry
    from dshtools.io import run_process

    fifo = sys.argv[1]
    ending = sys.argv[2]


    def announce(line):
        with open(fifo, "w") as f:
            f.write(line + "\\n")


    def worker_pid(args, run):
        return os.getpid()


    def worker_body(args, run):
        grandchild = subprocess.Popen(["sleep", "30"])
        announce(f"worker {os.getpid()} {grandchild.pid}")
        time.sleep(30)


    def thread_body(args, run):
        script = 'sleep 30 & echo "shell $$ $!" > "$1"; wait'
        run_process(["/bin/sh", "-c", script, "sh", fifo], run.signal)


    registry = ToolRegistry()
    backend = ProcessBackend(1)
    registry.register(ToolDefinition("worker_pid", "pid", {"type": "object"}, worker_pid, backend=backend))
    registry.register(ToolDefinition("worker_body", "sleeps", {"type": "object"}, worker_body, backend=backend))
    registry.register(ToolDefinition("thread_body", "sleeps", {"type": "object"}, thread_body))


    def call(name):
        return registry.execute(ToolExecutionInput(name, name, {}, AbortController().signal))


    def short_lived():
        # The worker and the keeper start on this thread, which then exits.
        run_process(["true"], AbortController().signal)
        announce(f"first {call('worker_pid').value}")


    first = threading.Thread(target=short_lived)
    first.start()
    first.join()
    for name in ("worker_body", "thread_body"):
        threading.Thread(target=call, args=(name,), daemon=True).start()
    sys.stdin.readline()  # the test kills this process here, or says to exit
    os._exit(3)
    """
)


def _run_agent(tmp_path: Path, ending: str) -> tuple[list[int], float]:
    """Start the agent, read its announcements, end it (``ending``:
    ``"SIGKILL"``, ``"SIGTERM"`` or ``"exit"``); return every pid it
    started and the seconds from its death to the last of them gone."""
    fifo = tmp_path / "announce"
    os.mkfifo(fifo)
    log = tmp_path / "agent.stderr"
    with open(log, "w", encoding="utf-8") as stderr:  # the keeper inherits it: a file, never a pipe to drain
        agent = subprocess.Popen(
            [sys.executable, "-c", AGENT, str(fifo), ending], stdin=subprocess.PIPE, stderr=stderr, text=True
        )
    pids: list[int] = []
    try:
        lines: dict[str, list[int]] = {}
        with open(fifo, encoding="ascii") as announcements:
            while len(lines) < 3:
                line = announcements.readline()
                if not line:  # every writer closed: read again (a writer opens per line)
                    announcements.close()
                    announcements = open(fifo, encoding="ascii")  # noqa: SIM115 - reopened in the loop
                    continue
                kind, *numbers = line.split()
                lines[kind] = [int(n) for n in numbers]
        # The worker started on the short-lived thread still runs the body.
        assert lines["first"] == lines["worker"][:1], (lines, log.read_text(encoding="utf-8"))
        pids = lines["worker"] + lines["shell"]
        assert all(psutil.pid_exists(p) for p in pids)
        if ending == "exit":
            assert agent.stdin is not None
            agent.stdin.write("\n")
            agent.stdin.flush()
        else:
            agent.send_signal(getattr(signal, ending))
        agent.wait(timeout=10)
        died = time.monotonic()
        # No event tells this process when a stranger's child dies: poll
        # (10 ms) with the 1 s bound as the deadline.
        left = alive(pids)
        while left and time.monotonic() < died + 1.0:
            time.sleep(0.01)
            left = alive(pids)
        took = time.monotonic() - died
        assert left == [], (left, took, log.read_text(encoding="utf-8"))
        return pids, took
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.mark.timeout(60)
@pytest.mark.parametrize("ending", ["SIGKILL", "SIGTERM", "exit"])
def test_what_an_agent_started_is_gone_within_a_second_of_its_death(tmp_path: Path, ending: str) -> None:
    """N21: a ``ProcessBackend`` worker with its grandchild, and a
    ``run_process`` shell with its background ``sleep``, all die within
    1 s of the agent's death by SIGKILL, by SIGTERM or by ``os._exit``."""
    pids, took = _run_agent(tmp_path, ending)
    assert len(pids) == 4
    assert took < 1.0, (took, (tmp_path / "agent.stderr").read_text(encoding="utf-8"))


def worker_pid(args: object, run: object) -> int:
    return os.getpid()


@pytest.mark.timeout(60)
def test_a_worker_and_keeper_started_on_a_thread_that_exits_live_on_while_their_owner_lives() -> None:
    """A parent-death signal would follow the spawning thread: neither the
    worker nor the keeper may die when that thread exits."""
    with ProcessBackend(1) as backend, ToolRegistry(backend=backend) as registry:
        registry.register(tool("pid", worker_pid))
        first: list[object] = []

        def short_lived() -> None:
            run_process(["true"], AbortController().signal)
            first.append(value_of(registry.execute(call("pid"))))

        thread = threading.Thread(target=short_lived)
        thread.start()
        thread.join()
        keeper = keeper_pid()
        assert keeper is not None
        assert psutil.Process(keeper).status() != psutil.STATUS_ZOMBIE
        assert value_of(registry.execute(call("pid", call_id="c2"))) == first[0]
        assert backend.worker_pids == first


@pytest.mark.timeout(60)
def test_without_a_keeper_the_spawn_goes_on_and_a_warning_says_so_once() -> None:
    """A keeper that cannot start (here: no interpreter at
    ``sys.executable``) never stops a ``run_process`` call."""
    proc = run_python(
        textwrap.dedent(
            """\
            import logging, sys
            logging.basicConfig(format="%(levelname)s %(message)s")
            sys.executable = "/nonexistent/python"
            from dshtools import AbortController
            from dshtools.io import run_process
            for word in ("one", "two"):
                print(run_process(["echo", word], AbortController().signal).stdout.decode().strip())
            """
        )
    )
    assert proc.stdout.split() == ["one", "two"]
    assert proc.stderr.count("WARNING no keeper process") == 1, proc.stderr


_SPY = """\
import json, subprocess
from dshtools import AbortController, ProcessBackend
from dshtools._os.keeper import keeper_pid
from dshtools.io import run_process

seen = []  # for each spawn of a child the call owns: the keeper's pid then

class Spy(subprocess.Popen):
    def __init__(self, args, *rest, **options):
        if args[0] == "true" or "worker import main" in args[-1]:
            seen.append(keeper_pid())
        super().__init__(args, *rest, **options)

subprocess.Popen = Spy
"""


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "first",
    [
        "run_process(['true'], AbortController().signal)",
        "backend = ProcessBackend(1)\nbackend.start()\nbackend.close()",
    ],
    ids=["run_process", "ProcessBackend"],
)
def test_the_keeper_runs_before_the_first_child_it_keeps_is_spawned(first: str) -> None:
    """In a fresh process, the keeper already runs (its ``Popen`` returned,
    so it has exec'd) when the first session it will keep is spawned: no
    one who looks at the child's family then finds a keeper still showing
    its owner's command line, and an owner that dies while its first child
    starts leaves that child kept."""
    proc = run_python(_SPY + first + "\nprint(json.dumps(seen))\n")
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(seen) == 1 and isinstance(seen[0], int), seen
