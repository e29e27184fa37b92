"""The backend seam (docs/contract.md §9, docs/backends.md): the registry
plumbs calls through any ``Backend``, classifies its reports, and closes the
backends it was given when their last registry closes."""

from __future__ import annotations

from typing import Any

import pytest

from dshtools import (
    TOOL_ABORTED,
    TOOL_TIMEOUT,
    WORKER_LOST,
    AbortController,
    Backend,
    ThreadBackend,
    TimeoutPolicy,
    ToolDefinition,
    ToolRegistry,
    ToolRunContext,
)
from dshtools._backends.base import BodyReport, Error, Value, WorkerLost
from tests.helpers import HookRecorder, call, tool


class _Settled:
    def __init__(self, report: BodyReport) -> None:
        self._report = report

    def wait(self, timeout: float) -> bool:
        return True

    def report(self) -> BodyReport:
        return self._report


class ScriptedBackend:
    """Runs a body inline and reports what the test scripted on top of it."""

    def __init__(self, *, killed: bool = False, overrun_s: float | None = None, lose: bool = False) -> None:
        self.killed = killed
        self.overrun_s = overrun_s
        self.lose = lose
        self.validated: list[str] = []
        self.submitted: list[str] = []
        self.closes = 0
        self.before_report: Any = lambda run: None

    def validate(self, name: str, body: Any) -> None:
        if name == "refused":
            raise ValueError(f"tool {name!r}: cannot run here")
        self.validated.append(name)

    def submit(self, body: Any, args: object, run: ToolRunContext) -> _Settled:
        self.submitted.append(run.name)
        self.before_report(run)
        if self.lose:
            return _Settled(BodyReport(outcome=Error(WorkerLost("worker exited with code 9"))))
        if self.killed:
            # What a process backend reports after a forced stop.
            return _Settled(BodyReport(outcome=Error(RuntimeError("killed")), killed=True, overrun_s=self.overrun_s))
        try:
            outcome: Value | Error = Value(body(args, run))
        except BaseException as exc:
            outcome = Error(exc)
        return _Settled(BodyReport(outcome=outcome, overrun_s=self.overrun_s, contexts=({"from": "worker"},)))

    def close(self) -> None:
        self.closes += 1


def test_the_thread_backend_and_a_users_backend_implement_the_protocol() -> None:
    assert isinstance(ThreadBackend(), Backend)
    assert isinstance(ScriptedBackend(), Backend)
    with pytest.raises(TypeError):
        ToolRegistry(backend=object())  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        ToolRegistry(backend=ScriptedBackend(), max_workers=2)
    with pytest.raises(TypeError):
        ToolDefinition("t", "", {"type": "object"}, lambda a, r: None, backend="threads")  # type: ignore[arg-type]


def test_registry_backend_runs_every_tool_and_per_tool_backend_overrides_it() -> None:
    default, special = ScriptedBackend(), ScriptedBackend()
    registry = ToolRegistry(backend=default)
    registry.register(tool("a", lambda a, r: "A"))
    registry.register(ToolDefinition("b", "", {"type": "object"}, lambda a, r: "B", backend=special))
    assert registry.execute(call("a")).value == "A"  # type: ignore[union-attr]
    result = registry.execute(call("b", call_id="c2"))
    assert result.value == "B"  # type: ignore[union-attr]
    assert [dict(c) for c in result.additional_contexts] == [{"from": "worker"}]
    assert default.validated == ["a"] and special.validated == ["b"]
    assert default.submitted == ["a"] and special.submitted == ["b"]
    with pytest.raises(ValueError, match="refused"):
        registry.register(tool("refused", lambda a, r: None))
    assert registry.get("refused") is None
    registry.close()
    registry.close()
    assert default.closes == 1 and special.closes == 1


def test_a_backend_shared_by_two_registries_stays_open_until_the_last_closes() -> None:
    shared = ScriptedBackend()
    first = ToolRegistry(backend=shared)
    second = ToolRegistry()
    second.register(ToolDefinition("t", "", {"type": "object"}, lambda a, r: "ok", backend=shared))
    first.close()
    assert shared.closes == 0
    assert second.execute(call("t")).value == "ok"  # type: ignore[union-attr]
    second.close()
    assert shared.closes == 1


@pytest.mark.timeout(10)
def test_killed_and_overrun_reach_meta_even_through_a_timeout_policys_own_failure() -> None:
    controller = AbortController()
    backend = ScriptedBackend(killed=True, overrun_s=5.5)
    # The kill follows an abort: the caller's for "plain", the policy's own
    # timer for "timed" (the backend waits for it as a forced stop would).
    backend.before_report = lambda run: controller.abort("stop") if run.name == "plain" else run.signal.wait(5)
    registry = ToolRegistry(backend=backend)
    registry.add_around_dispatch(TimeoutPolicy())
    registry.register(tool("plain", lambda a, r: "never"))
    registry.register(ToolDefinition("timed", "", {"type": "object"}, lambda a, r: "never", timeout=0.01))
    rec = HookRecorder()
    registry.add_result_observer(rec.observer)
    aborted = registry.execute(call("plain", signal=controller.signal))
    assert aborted.code == TOOL_ABORTED
    assert aborted.meta is not None and aborted.meta["killed"] is True and aborted.meta["overrun_s"] == 5.5
    timed = registry.execute(call("timed", call_id="c2"))
    assert timed.code == TOOL_TIMEOUT
    assert timed.meta is not None and timed.meta["killed"] is True and timed.meta["overrun_s"] == 5.5
    assert [r.code for _, r in rec.results] == [TOOL_ABORTED, TOOL_TIMEOUT]
    registry.close()


def test_a_lost_worker_is_a_worker_lost_failure() -> None:
    registry = ToolRegistry(backend=ScriptedBackend(lose=True))
    registry.register(tool("t", lambda a, r: "never"))
    result = registry.execute(call("t"))
    assert result.code == WORKER_LOST and result.error.info.name == "WorkerLost"  # type: ignore[union-attr]
    registry.close()


def test_register_after_close_raises() -> None:
    registry = ToolRegistry()
    registry.close()
    with pytest.raises(RuntimeError, match="closed"):
        registry.register(tool("t", lambda a, r: None))


def test_statistics_report_tools_hooks_and_bodies_in_flight() -> None:
    with ToolRegistry() as registry:
        registry.register(tool("t", lambda a, r: registry.statistics().bodies_in_flight))
        registry.add_around_dispatch(TimeoutPolicy())
        stats = registry.statistics()
        assert stats.tools == 1 and stats.around_dispatch_hooks == 1 and stats.bodies_in_flight == 0
        assert registry.execute(call("t")).value == 1  # type: ignore[union-attr]
        assert registry.statistics().bodies_in_flight == 0 and not registry.statistics().closed
    assert registry.statistics().closed
