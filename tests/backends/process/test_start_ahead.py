"""A ``ProcessBackend``'s start-up is visible and avoidable
(docs/contract.md#a32): ``start()`` and ``prestart=True`` make the first
call cost what later calls cost, a cold start counts against the call's
timeout, and ``meta["worker_wait"]`` says how long each call waited for a
worker."""

from __future__ import annotations

import os
import sys
from typing import Any

import pytest

from dshtools import (
    TOOL_TIMEOUT,
    ProcessBackend,
    TimeoutPolicy,
    ToolDefinition,
    ToolRegistry,
    ToolRunContext,
    ToolSuccess,
)
from tests.helpers.calls import OBJECT, call, error_of

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process trees are read from /proc")

TIMEOUT_S = 0.15


def pid_of_worker(args: Any, run: ToolRunContext) -> int:
    return os.getpid()


def _registry(backend: ProcessBackend) -> ToolRegistry:
    registry = ToolRegistry(backend=backend)
    registry.add_around_dispatch(TimeoutPolicy())
    registry.register(ToolDefinition("pid", "pid", OBJECT, pid_of_worker, timeout=TIMEOUT_S))
    return registry


@pytest.mark.timeout(60)
@pytest.mark.parametrize("how", ["start", "prestart"])
def test_a_backend_started_ahead_serves_its_first_call_within_a_150ms_timeout(how: str) -> None:
    """Issue 30 item 11: cold, the first call failed "timed out after 150ms
    before it started"; started ahead, every worker is ready and the first
    call waits for none."""
    backend = ProcessBackend(2, prestart=True) if how == "prestart" else ProcessBackend(2)
    with backend, _registry(backend) as registry:
        if how == "start":
            backend.start()
        started = backend.workers_started
        assert len(started) == 2 and backend.worker_pids == started
        backend.start()  # idempotent: nothing more starts
        assert backend.workers_started == started
        result = registry.execute(call("pid"))
        assert isinstance(result, ToolSuccess), result
        assert result.value in started
        wait = result.meta["worker_wait"]
        assert isinstance(wait, float) and 0 <= wait < TIMEOUT_S, wait


@pytest.mark.timeout(60)
def test_a_cold_start_counts_against_the_timeout_and_meta_says_how_long_the_call_waited() -> None:
    """Without ``start()`` the first call waits for a fresh interpreter and
    then for its body's module to load: with a 150 ms timeout it times out
    (before its body started when the interpreter alone took that long),
    and ``meta["worker_wait"]`` shows the wait for the worker, which a
    started backend does not have."""
    with ProcessBackend(1) as backend, _registry(backend) as registry:
        cold = registry.execute(call("pid"))
        assert cold.code == TOOL_TIMEOUT, cold
        waited = cold.meta["worker_wait"]
        assert isinstance(waited, float), cold.meta
        if not cold.body_invoked:
            assert "before it started" in error_of(cold).message
            assert waited >= TIMEOUT_S * 0.9, cold.meta
        backend.start()
        warm = registry.execute(call("pid", call_id="c2"))
        assert isinstance(warm, ToolSuccess), warm
        warm_wait = warm.meta["worker_wait"]
        assert isinstance(warm_wait, float) and warm_wait < TIMEOUT_S
        # A fresh interpreter that imports dshtools: tens of milliseconds at
        # least; a ready worker: microseconds.
        assert waited > 0.03 and waited > 20 * warm_wait, (waited, warm_wait)


@pytest.mark.timeout(30)
def test_start_on_a_closed_backend_raises() -> None:
    backend = ProcessBackend(1)
    backend.close()
    with pytest.raises(RuntimeError, match="closed"):
        backend.start()


@pytest.mark.timeout(60)
def test_a_start_that_runs_out_of_time_raises_and_the_workers_go_on_starting() -> None:
    with ProcessBackend(1) as backend:
        with pytest.raises(TimeoutError, match="not ready"):
            backend.start(timeout=0.001)
        assert len(backend.workers_started) == 1
        backend.start()
        assert backend.worker_pids == backend.workers_started
