"""The demo's crash and resume (docs/cli.md#crash, docs/contract.md#journal):
a journaled agent process killed with SIGKILL mid-turn, then resumed.

Guarantees:

* ``CrashedAgent(workdir)`` starts the agent at once: a child Python
  (``python -m dshtools._cli.demo_crash``) that runs ``TURN`` (three
  side-effecting calls, one after another, through ``execute_batch``) on
  a ``ToolRegistry`` journaled in a ``SqliteJournal`` in ``workdir``,
  session ``SESSION``. Each body appends one line (its call id, its tool,
  the pid that ran it) to a side-effect file and fsyncs it before going on.
* The slow call's body, once its side effect is on disk, writes one line to
  a pipe the demo holds and then waits on its signal. ``kill()`` reads that
  line (bounded by ``AGENT_START_LIMIT`` seconds; the pipe's end of file
  means the agent died first) and only then sends SIGKILL: the first call
  is settled, the second is claimed and mid-body, the third never started.
  No sleep decides the moment.
* ``kill()`` takes the agent's process tree (the agent and every
  descendant) just before the kill, reaps the agent, and checks each of
  those processes gone (same pid, same start time).
* ``resume()`` runs after ``kill()``, in this process: it repairs the
  transcript from the journal (``dshtools.openai.repair_messages``), then
  executes ``TURN`` again on a new journaled registry with the same tools,
  journal and session, and reads the side-effect file.
* ``close()`` kills an agent still running and reaps it; idempotent.

Threads: everything runs on the caller's thread; the resumed bodies run on
the resume registry's workers, which ``resume()`` closes before returning.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any, Final, TextIO

import attrs

from .. import io as dio
from .._core.closing import Closing
from .._journal import Journal, SqliteJournal
from .._os import procfs as _procfs
from .._os.descendants import _start_time
from .._registry.batch import execute_batch
from .._registry.registry import ToolRegistry
from .._signal import AbortController
from .._types.calls import OUTCOME_UNKNOWN, ToolExecutionResult
from .._types.hooks import ToolDefinition
from .._types.tools import ToolRunContext
from ..openai import calls_from_message, repair_messages, tool_message
from .table import quiescence_line

__all__ = ["SESSION", "TURN", "CrashedAgent", "Resume", "crash_tools"]

SESSION: Final = "demo-crash"
"""The journal session of the killed turn and of its resume."""
SLOW_CALL: Final = "call_c2"
"""The call that is mid-body when the agent is killed."""
TURN: Final[dict[str, Any]] = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
        for call_id, name, args in (
            ("call_c1", "save_note", {"text": "draft saved"}),
            (SLOW_CALL, "send_email", {"to": "team@example.com", "subject": "release notes"}),
            ("call_c3", "post_status", {"text": "release done"}),
        )
    ],
}
"""The assistant message the agent answers: three calls, run in order."""
_USER: Final = {"role": "user", "content": "save a note, mail the release notes, then post the status"}

AGENT_START_LIMIT: Final = 20.0
"""Seconds ``kill()`` waits at most for the slow body to start."""
_STALL: Final = 60.0
"""Seconds the slow body waits for an acknowledgement that never comes
(an agent the demo failed to kill ends by itself after this)."""
_STARTED: Final = b"started\n"


def crash_tools(effects: str, started_fd: int | None) -> list[ToolDefinition]:
    """The turn's three tools, every one side-effecting and not idempotent:
    ``save_note`` and ``post_status`` append their line to ``effects`` and
    return; ``send_email`` appends its line, writes ``started\\n`` to
    ``started_fd`` (when given) and then waits on its signal for at most
    ``_STALL`` seconds. Results never name a path."""

    def effect(run: ToolRunContext, tool: str) -> None:
        with open(effects, "a", encoding="utf-8") as f:
            f.write(f"{run.call_id} {tool} {os.getpid()}\n")
            f.flush()
            os.fsync(f.fileno())

    def save_note(text: str, *, run: ToolRunContext) -> dict[str, str]:
        """Save a note (a side effect)."""
        effect(run, "save_note")
        return {"saved": text}

    def send_email(to: str, subject: str, *, run: ToolRunContext) -> dict[str, str]:
        """Send an email, then wait for the mail server's acknowledgement (a side effect)."""
        effect(run, "send_email")
        if started_fd is not None:
            os.write(started_fd, _STARTED)
        dio.sleep(_STALL, run.signal)
        return {"sent": subject, "to": to}

    def post_status(text: str, *, run: ToolRunContext) -> dict[str, str]:
        """Post a status update (a side effect)."""
        effect(run, "post_status")
        return {"posted": text}

    return [ToolDefinition.from_function(fn) for fn in (save_note, send_email, post_status)]


def _run_turn(journal: Journal, effects: str, started_fd: int | None) -> list[ToolExecutionResult]:
    """``TURN`` through ``execute_batch`` on a new registry journaled in
    ``journal``; the registry is closed before returning."""
    registry = ToolRegistry(journal=journal)
    try:
        for definition in crash_tools(effects, started_fd):
            registry.register(definition)
        signal_ = AbortController().signal
        calls = calls_from_message(TURN, signal=signal_, session=SESSION)
        return execute_batch(registry, calls, signal=signal_)
    finally:
        registry.close()


@attrs.frozen(kw_only=True)
class Resume:
    """What the resume found. ``repaired``: call id -> the text the model
    reads in the transcript repaired from the journal before anything ran
    again. ``results``: call id -> the resumed execution's result.
    ``effects``: call id -> the pids whose body ran it (from the side-effect
    file, in order)."""

    repaired: dict[str, str]
    results: dict[str, ToolExecutionResult]
    effects: dict[str, list[int]]


def _read_effects(path: str) -> dict[str, list[int]]:
    ran: dict[str, list[int]] = {}
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                call_id, _tool, pid = line.split()
                ran.setdefault(call_id, []).append(int(pid))
    except FileNotFoundError:
        pass
    return ran


def _tree(pid: int) -> tuple[dict[int, int | None], str]:
    """``pid`` and its live descendants, by pid, with their start times,
    and how the descendants were found: ``"psutil"`` when installed, else
    ``"/proc"``, else ``"nothing"`` (``pid`` alone)."""
    try:
        import psutil
    except ImportError:
        procs = _procfs.try_scan()
        below = [] if procs is None else [p.pid for p in _procfs.descendants(procs, pid) if p.alive]
        how = "nothing" if procs is None else "/proc"
    else:
        try:
            below = [p.pid for p in psutil.Process(pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            below = []
        how = "psutil"
    return {p: _start_time(p) for p in (pid, *below)}, how


class CrashedAgent(Closing):
    """The agent process the demo kills, and its resume (see the module
    docstring). ``workdir``: the demo's temporary directory (the journal,
    the side-effect file and the agent's stderr go there)."""

    def __init__(self, workdir: str, dshtools_path: str) -> None:
        self.db = os.path.join(workdir, "agent.db")
        self.effects = os.path.join(workdir, "effects.log")
        self._stderr_path = os.path.join(workdir, "agent.err")
        self.killed_tree: dict[int, int | None] = {}
        self.tree_seen_by = "nothing"
        self.failure: str | None = None
        read_fd, write_fd = os.pipe()
        self._read_fd: int | None = read_fd
        try:
            with open(self._stderr_path, "wb") as err:
                self.process: subprocess.Popen[bytes] = subprocess.Popen(
                    [sys.executable, "-m", __name__, self.db, self.effects, str(write_fd)],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=err,
                    pass_fds=(write_fd,),
                    env={**os.environ, "PYTHONPATH": dshtools_path},
                )
        except BaseException:
            os.close(read_fd)
            raise
        finally:
            os.close(write_fd)

    @property
    def pid(self) -> int:
        """The agent's pid."""
        return self.process.pid

    def kill(self) -> bool:
        """Wait for the slow body to start, then SIGKILL the agent and reap
        it. Whether the body started before the kill (else ``failure`` says
        why, with the agent's last stderr line)."""
        fd, self._read_fd = self._read_fd, None
        if fd is None:
            return self.failure is None
        try:
            ready, _, _ = select.select([fd], [], [], AGENT_START_LIMIT)
            line = os.read(fd, len(_STARTED)) if ready else b""
        finally:
            os.close(fd)
        if line != _STARTED:
            self.failure = "the agent did not reach its slow call" + (
                f" within {AGENT_START_LIMIT:g}s" if not ready else f": {self._last_error()}"
            )
        self.killed_tree, self.tree_seen_by = _tree(self.pid)
        self._stop()
        return self.failure is None

    def alive_after_kill(self) -> list[int]:
        """The processes of the killed agent's tree still alive (same pid,
        same start time)."""
        return [pid for pid, start in self.killed_tree.items() if start is not None and _start_time(pid) == start]

    def _last_error(self) -> str:
        try:
            with open(self._stderr_path, encoding="utf-8", errors="replace") as f:
                lines = [line.strip() for line in f if line.strip()]
        except OSError:
            lines = []
        status = self.process.poll()
        return (lines[-1] if lines else "no error output") + ("" if status is None else f" (exit status {status})")

    def _stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def resume(self) -> Resume:
        """Repair the transcript from the journal, then run ``TURN`` again in
        this process on the same journal and session (see the module
        docstring)."""
        journal = SqliteJournal(self.db)
        try:
            repaired = repair_messages([_USER, TURN], journal=journal, session=SESSION)
            texts = {str(m["tool_call_id"]): str(m["content"]) for m in repaired if m["role"] == "tool"}
            results = _run_turn(journal, self.effects, None)
        finally:
            journal.close()
        ids = [call["id"] for call in TURN["tool_calls"]]
        return Resume(repaired=texts, results=dict(zip(ids, results, strict=True)), effects=_read_effects(self.effects))

    def close(self) -> None:
        """Kill the agent if it still runs, reap it, close the pipe. Idempotent."""
        fd, self._read_fd = self._read_fd, None
        if fd is not None:
            os.close(fd)
        self._stop()


# ---------------------------------------------------------------------------
# What the demo prints


def _how(result: ToolExecutionResult) -> str:
    if result.meta is not None and result.meta.get("replayed") is True:
        return "replayed from the journal (body not run again)"
    if result.code == OUTCOME_UNKNOWN:
        return "OUTCOME_UNKNOWN (killed between claim and settle; not run again)"
    if result.body_invoked:
        return "ran now (it never started before)"
    return f"not run ({result.code})"


def _ran(pids: Sequence[int], agent: int) -> str:
    if not pids:
        return "0"
    where = ", ".join("the killed agent" if pid == agent else "this process" for pid in pids)
    return f"{len(pids)} ({where})"


def report_crash(agent: CrashedAgent, out: TextIO) -> bool:
    """Once ``agent.kill()`` ran: resume the agent's turn (``agent.resume()``)
    and print the crash and the resume on ``out``. Whether every check
    passed: the slow body started before the kill, nothing of the killed
    agent is alive, and each body ran at most once."""
    calls = len(TURN["tool_calls"])
    if agent.failure is not None:
        print(f"\ncrash and resume: a journaled agent process (pid {agent.pid}) was to run {calls} calls", file=out)
        print(quiescence_line(f"crash: {agent.failure}", False), file=out)
        return False
    print(
        f"\ncrash and resume: a journaled agent process (pid {agent.pid}) ran one turn of {calls} side-effecting "
        f"calls against a SQLite journal (session {SESSION!r}) and was killed with SIGKILL while {SLOW_CALL} "
        "(send_email) was mid-body",
        file=out,
    )
    started = time.monotonic()
    found = agent.resume()
    print(
        "the transcript repaired from the journal, before anything ran again (dshtools.openai.repair_messages):",
        file=out,
    )
    for call_id, text in found.repaired.items():
        print(f"  {call_id}  {text}", file=out)
    print(f"resumed in this process (the same journal and session) in {time.monotonic() - started:.2f}s:", file=out)
    rows = [("CALL ID", "TOOL", "RESUMED", "BODY RAN", "MODEL TEXT")]
    for call in TURN["tool_calls"]:
        call_id = call["id"]
        result = found.results[call_id]
        text = str(tool_message(call_id, result)["content"])
        rows.append(
            (call_id, call["function"]["name"], _how(result), _ran(found.effects.get(call_id, []), agent.pid), text)
        )
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False)) + "  " + row[4], file=out)
    twice = sorted(call_id for call_id, pids in found.effects.items() if len(pids) > 1)
    counts = ", ".join(f"{call_id} x{len(pids)}" for call_id, pids in sorted(found.effects.items()))
    alive = agent.alive_after_kill()
    tree = ", ".join(map(str, agent.killed_tree))
    checks = [
        (f"crash: each side-effecting body ran at most once (side-effect file: {counts})", not twice),
        (
            f"crash: nothing the killed agent started is still running (its processes at the kill: {tree}; "
            f"alive: {', '.join(map(str, alive)) or 'none'}; found via {agent.tree_seen_by}, checked by pid and start time)",
            not alive,
        ),
    ]
    for label, passed in checks:
        print(quiescence_line(label, passed), file=out)
    out.flush()
    return all(passed for _, passed in checks)


def _agent(argv: Sequence[str]) -> int:
    """The agent process: ``DB EFFECTS FD``. Runs ``TURN`` journaled in DB;
    the demo kills it during the slow call."""
    db, effects, fd = argv
    with SqliteJournal(db) as journal:
        _run_turn(journal, effects, int(fd))
    return 0


if __name__ == "__main__":
    sys.exit(_agent(sys.argv[1:]))
