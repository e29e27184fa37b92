"""Adversarial review of where the registry core and the out-of-process
backends meet (docs/contract.md §3, §8, §9): each test forces one
interleaving with events or by blocking a backend's own step, never a sleep.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import threading
from typing import Any

import pytest

from dshtools import (
    TOOL_ABORTED_BEFORE_DISPATCH,
    ProcessBackend,
    ToolDefinition,
    ToolExecutionInput,
    ToolRegistry,
)
from dshtools._process_pool import _Worker

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pidfd and /proc are Linux")

OBJECT: dict[str, Any] = {"type": "object"}


def _ok(args: object, run: object) -> str:
    return "ok"


def _wait_exited(pid: int) -> None:
    """Block until ``pid`` has exited (without reaping it)."""
    fd = os.pidfd_open(pid)
    try:
        select.select([fd], [], [])
    finally:
        os.close(fd)


@pytest.mark.timeout(30)
def test_a_call_sent_to_an_idle_worker_that_just_died_never_started_so_it_is_aborted_before_dispatch() -> None:
    # An idle worker dies (OOM killer, a stray kill) and the next call is
    # claimed for it before the manager thread noticed: sending the call
    # fails, so the body never started anywhere. docs/contract.md §9:
    # ABORTED_BEFORE_DISPATCH exactly when the body never started (not
    # WORKER_LOST, which says a body was running when its worker died).
    backend = ProcessBackend(1, kill_after=1.0)
    registry = ToolRegistry(backend=backend)
    try:
        registry.register(ToolDefinition("t", "t", OBJECT, _ok))
        warm = registry.execute(ToolExecutionInput("c0", "t", {}, _never()))
        assert warm.code is None
        (pid,) = backend.worker_pids

        noticed = threading.Event()
        release = threading.Event()
        lose = backend._lose

        def held_lose(worker: _Worker) -> None:
            noticed.set()
            release.wait(20)
            lose(worker)

        backend._lose = held_lose  # type: ignore[method-assign]
        os.kill(pid, signal.SIGKILL)
        _wait_exited(pid)
        assert noticed.wait(20)  # the manager saw it but has not retired it yet

        done: list[Any] = []
        caller = threading.Thread(
            target=lambda: done.append(registry.execute(ToolExecutionInput("c1", "t", {}, _never())))
        )
        caller.start()
        # The call is claimed and sent (to the dead worker) on the caller's
        # thread inside submit(); only then may the manager go on.
        while backend.bodies_running == 0 and caller.is_alive():
            caller.join(0.01)
        release.set()
        caller.join(20)
        assert not caller.is_alive()
        (result,) = done
        assert result.code == TOOL_ABORTED_BEFORE_DISPATCH, result
        after = registry.execute(ToolExecutionInput("c2", "t", {}, _never()))
        assert after.code is None  # a fresh worker takes the next call
    finally:
        registry.close()


def _never() -> Any:
    from dshtools import AbortController

    return AbortController().signal
