"""The crash suite's agent process (tests/durable/test_crash.py).

Run as ``python -c "from tests.durable.crash_agent import zygote; zygote()"``
(so the tool bodies belong to this module, for the process backend's
workers): a zygote that imports everything once,
then, for each JSON request on stdin, forks one agent child that runs a
journaled turn and writes its results, and answers with the child's exit
status (``-9``: SIGKILLed). The zygote starts no thread, so forking it is
safe.

The kill points are this script's own hook: the child wraps its journal's
``claim_call``/``settle_call`` and its tool bodies and SIGKILLs itself at
the requested phase of the requested key (``before-claim``,
``after-claim``, ``mid-body`` (after the side effect), ``before-settle``,
``after-settle``), or after a random delay (``random``). The runtime has
no test seam for this.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import traceback
from typing import Any

from dshtools import (
    AbortController,
    ProcessBackend,
    ToolDefinition,
    ToolExecutionInput,
    ToolRegistry,
    execute_batch,
)
from dshtools.durable import Journal, PostgresJournal, SqliteJournal

SEQUENTIAL = ("k0", "k1", "k2")
BATCHED = ("k3", "k4", "k5")
IN_PROCESS = "k6"  # run on a ProcessBackend worker when the request asks for it
IDEMPOTENT = frozenset({"k1", "k4"})
KEYS = SEQUENTIAL + BATCHED


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def append_effect(path: str, key: str) -> None:
    """The side effect: ``key`` appended to ``path`` and fsynced."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (key + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def process_body(args: Any, _run: Any) -> str:
    """The body of the process tool, in a worker process: its side effect,
    then, when asked, SIGKILL of the agent (the worker's parent) mid-body."""
    key: str = args["key"]
    append_effect(args["effects"], key)
    if args["die"]:
        os.kill(os.getppid(), signal.SIGKILL)
    return key


def _open(spec: str) -> Journal:
    return PostgresJournal(spec) if spec.startswith("postgresql://") else SqliteJournal(spec)


def run_turn(request: dict[str, Any]) -> None:
    kill: list[Any] | None = request.get("kill")
    phase, target = (kill[0], kill[1]) if kill else (None, None)
    if phase == "random":
        threading.Timer(float(kill[1]) if kill else 0.0, _die).start()
    journal = _open(request["journal"])
    claim_call, settle_call = journal.claim_call, journal.settle_call

    def claim(session: str, call_id: str, *args: Any, **kwargs: Any) -> bool:
        if phase == "before-claim" and call_id == target:
            _die()
        claimed = claim_call(session, call_id, *args, **kwargs)
        if claimed and phase == "after-claim" and call_id == target:
            _die()
        return claimed

    def settle(session: str, call_id: str, *args: Any, **kwargs: Any) -> bool:
        if phase == "before-settle" and call_id == target:
            _die()
        recorded = settle_call(session, call_id, *args, **kwargs)
        if phase == "after-settle" and call_id == target:
            _die()
        return recorded

    journal.claim_call = claim  # type: ignore[method-assign]
    journal.settle_call = settle  # type: ignore[method-assign]

    def body(args: Any, _run: Any) -> str:
        key: str = args["key"]
        append_effect(request["effects"], key)
        if phase == "mid-body" and key == target:
            _die()
        return key

    schema = {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}
    registry = ToolRegistry(journal=journal)
    registry.register(ToolDefinition("effect", "a side effect", schema, body))
    registry.register(ToolDefinition("redo", "an idempotent side effect", schema, body, idempotent=True))
    if request.get("process"):
        registry.register(
            ToolDefinition(
                "in_process", "a side effect in a worker", {"type": "object"}, process_body, backend=ProcessBackend(1)
            )
        )
    session = request["session"]
    signal_ = AbortController().signal

    def call(key: str) -> ToolExecutionInput:
        tool = "redo" if key in IDEMPOTENT else "effect"
        return ToolExecutionInput(key, tool, {"key": key}, signal_, session=session)

    results = {key: registry.execute(call(key)) for key in SEQUENTIAL}
    if request.get("process"):
        arguments = {
            "key": IN_PROCESS,
            "effects": request["effects"],
            "die": phase == "mid-body" and target == IN_PROCESS,
        }
        results[IN_PROCESS] = registry.execute(
            ToolExecutionInput(IN_PROCESS, "in_process", arguments, signal_, session=session)
        )
    results.update(zip(BATCHED, execute_batch(registry, [call(key) for key in BATCHED], signal=signal_), strict=True))
    registry.close()
    journal.close()
    out = {
        key: {
            "code": result.code,
            "value": None if result.is_error else result.value,
            "replayed": bool(result.meta.get("replayed")),
            "body_invoked": result.body_invoked,
        }
        for key, result in results.items()
    }
    tmp = f"{request['out']}.{os.getpid()}.tmp"  # four agents may finish at once
    with open(tmp, "w") as f:
        json.dump(out, f)
    os.replace(tmp, request["out"])


def zygote() -> None:
    for line in sys.stdin:
        requests = json.loads(line)
        pids = []
        for request in requests:
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    run_turn(request)
                    code = 0
                except BaseException:
                    traceback.print_exc()
                finally:
                    sys.stderr.flush()
                    os._exit(code)
            pids.append(pid)
        codes = []
        for pid in pids:
            _, status = os.waitpid(pid, 0)
            codes.append(os.waitstatus_to_exitcode(status))
        sys.stdout.write(json.dumps(codes) + "\n")
        sys.stdout.flush()
