"""Helper script for tests/registry/test_hook_faults.py's fork test (run with
``python -m tests.registry.fork_child`` from the checkout; never imported by
pytest, which must not fork a threaded process itself).

The parent makes a registry busy (worker threads alive, one body blocked
mid-call) and a second registry on a supplied executor, then forks. The
child uses both within an alarm; it prints one JSON line and exits 0. A
hang in the child is killed by the alarm (exit by SIGALRM)."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor

from dshtools import ToolDefinition, ToolRegistry
from tests.helpers.calls import OBJECT, call


def main() -> int:
    warnings.simplefilter("ignore", DeprecationWarning)  # fork() of a threaded process, on purpose
    started, release = threading.Event(), threading.Event()

    def blocked(args: object, run: object) -> str:
        started.set()
        release.wait(30)
        return "released"

    registry = ToolRegistry(max_workers=2)
    registry.register(ToolDefinition("echo", "", OBJECT, lambda a, r: os.getpid()))
    registry.register(ToolDefinition("blocked", "", OBJECT, blocked))
    assert registry.execute(call("echo", call_id="warm")).value == os.getpid()  # type: ignore[union-attr]
    busy = threading.Thread(target=lambda: registry.execute(call("blocked", call_id="busy")))
    busy.start()
    assert started.wait(10)
    supplied = ThreadPoolExecutor(max_workers=1)
    other = ToolRegistry(executor=supplied)
    other.register(ToolDefinition("echo", "", OBJECT, lambda a, r: os.getpid()))
    assert other.execute(call("echo", call_id="warm")).value == os.getpid()  # type: ignore[union-attr]

    pid = os.fork()
    if pid == 0:  # the child: only this thread exists here
        signal.alarm(10)
        report: dict[str, object] = {}
        result = registry.execute(call("echo", call_id="child"))
        report["own_pool"] = [result.code, result.value == os.getpid()]  # type: ignore[union-attr]
        refused = other.execute(call("echo", call_id="child-supplied"))
        reason = refused.meta["reason"] if refused.meta else None
        report["supplied"] = [refused.code, "fork" in str(reason)]
        registry.close()
        other.close()
        report["closed"] = True
        sys.stdout.write(json.dumps(report) + "\n")
        sys.stdout.flush()
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    release.set()
    busy.join(10)
    registry.close()
    other.close()
    supplied.shutdown()
    return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    sys.exit(main())
