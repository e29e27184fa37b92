"""The backend seam (docs/contract.md#backends, docs/backends.md): the registry
plumbs calls through any ``Backend``, classifies its reports, and closes the
backends it was given when their last registry closes."""

from __future__ import annotations

import threading
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
from dshtools._backends.thread import _Settled  # a dispatch settled before submit() returned
from tests.helpers.calls import call, tool
from tests.helpers.recorders import HookRecorder
from tests.helpers.waiting import run_in_thread, wait_until


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


def test_a_close_while_register_validates_refuses_the_tool_and_adopts_no_backend() -> None:
    registry = ToolRegistry()
    own = ScriptedBackend()
    own.validate = lambda name, body: registry.close()  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match=r"^ToolRegistry is closed: register\(\) after close\(\) is not allowed$"):
        registry.register(ToolDefinition("t", "", {"type": "object"}, lambda a, r: "ok", backend=own))
    assert registry.get("t") is None and registry.statistics().tools == 0
    assert own.closes == 0  # not adopted: the closed registry never closes it


def test_statistics_report_tools_hooks_and_bodies_in_flight() -> None:
    with ToolRegistry() as registry:
        registry.register(tool("t", lambda a, r: registry.statistics().bodies_in_flight))
        registry.add_around_dispatch(TimeoutPolicy())
        stats = registry.statistics()
        assert stats.tools == 1 and stats.around_dispatch_hooks == 1 and stats.bodies_in_flight == 0
        assert registry.execute(call("t")).value == 1  # type: ignore[union-attr]
        assert registry.statistics().bodies_in_flight == 0 and not registry.statistics().closed
    assert registry.statistics().closed


class _ListeningThreads:
    """A user's backend with the ``ListeningBackend`` capability: it runs on a
    ``ThreadBackend`` and records which entry point the registry used."""

    def __init__(self) -> None:
        self.inner = ThreadBackend(1)
        self.used: list[str] = []
        self.made = 0

    @property
    def make_withdrawal(self) -> Any:
        def make() -> Any:
            self.made += 1
            return self.inner.make_withdrawal()

        return make

    def validate(self, name: str, body: Any) -> None:
        pass

    def submit(self, body: Any, args: object, run: ToolRunContext) -> Any:
        self.used.append("submit")
        return self.inner.submit(body, args, run)

    def submit_listening(self, body: Any, args: object, run: ToolRunContext, withdrawal: Any) -> Any:
        self.used.append("submit_listening")
        return self.inner.submit_listening(body, args, run, withdrawal)

    def close(self) -> None:
        self.inner.close()


def test_the_listening_capability_is_found_by_protocol_not_by_type() -> None:
    """The registry asks for ``ListeningBackend`` (docs/backends.md), never
    for the thread backend's type: a user's backend with the capability is
    called through ``submit_listening`` with a withdrawal it made, whether
    it is the registry's backend or a tool's; one without it through
    ``submit``; and a withdrawal still works through the capability (a
    queued call aborted by its caller never runs)."""
    from dshtools._backends.base import ListeningBackend

    assert isinstance(ThreadBackend(), ListeningBackend)
    assert not isinstance(ScriptedBackend(), ListeningBackend)
    listening, scripted = _ListeningThreads(), ScriptedBackend()
    assert isinstance(listening, ListeningBackend)
    with ToolRegistry(backend=listening) as registry:
        registry.register(tool("a", lambda a, r: "A"))
        registry.register(ToolDefinition("b", "", {"type": "object"}, lambda a, r: "B", backend=scripted))
        registry.register(ToolDefinition("c", "", {"type": "object"}, lambda a, r: "C", backend=_ListeningThreads()))
        assert [registry.execute(call(n, call_id=n)).value for n in "abc"] == ["A", "B", "C"]  # type: ignore[union-attr]
        assert listening.used == ["submit_listening"] and listening.made == 1
        assert scripted.submitted == ["b"]
        own = registry.get("c")
        assert own is not None and own.backend.used == ["submit_listening"]  # type: ignore[union-attr]
        # A withdrawal through the capability: the only worker is held, the
        # queued call is aborted by its caller once submitted, and never runs.
        started, release, ran = threading.Event(), threading.Event(), []

        def hog_body(a: Any, r: Any) -> str:
            started.set()
            release.wait(10)
            return "hog"

        registry.register(tool("hog", hog_body))
        registry.register(tool("queued", lambda a, r: ran.append(1)))
        hog, _ = run_in_thread(lambda: registry.execute(call("hog", call_id="h")))
        assert started.wait(5)
        controller = AbortController()
        waiter, box = run_in_thread(lambda: registry.execute(call("queued", signal=controller.signal, call_id="q")))
        wait_until(lambda: len(listening.used) == 3)  # a, hog, queued: submitted
        controller.abort("stop")
        waiter.join(5)
        release.set()
        hog.join(5)
    assert box[0].code == "ABORTED_BEFORE_DISPATCH" and box[0].body_invoked is False and ran == []
