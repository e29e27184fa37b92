"""TimeoutPolicy (docs/contract.md#scheduling) and field cases B21, B23, B28, B30, B31."""

from __future__ import annotations

import signal as process_signal
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from dshtools import (
    TOOL_ABORTED,
    TOOL_ABORTED_BEFORE_DISPATCH,
    TOOL_ERROR,
    TOOL_TIMEOUT,
    AbortController,
    AbortSignal,
    TimeoutPolicy,
    TimeoutReason,
    ToolDefinition,
    ToolDispatchExecution,
    ToolExecutionResult,
    ToolRegistry,
    ToolRunContext,
    deadline,
    execute_batch,
    timeout_of,
)
from dshtools._signal import timer as _timer
from dshtools._types.calls import failure
from dshtools.io import sleep as io_sleep
from tests.helpers.calls import call, error_of, tool
from tests.helpers.recorders import CallEventRecorder, recorded_tool
from tests.helpers.waiting import stops_when_aborted


@pytest.fixture
def registry(registry: ToolRegistry) -> ToolRegistry:
    registry.add_around_dispatch(TimeoutPolicy())
    return registry


@pytest.mark.timeout(10)
def test_cooperative_body_times_out_and_was_joined_before_execute_returned(registry: ToolRegistry) -> None:
    rec = CallEventRecorder()
    saw: list[object] = []

    def body(_a: Any, run: ToolRunContext) -> str:
        run.signal.wait(5)
        saw.append(run.signal.reason)
        return "finished"

    registry.register(recorded_tool("slow", rec, body, timeout=0.05))
    caller = AbortController()
    result = registry.execute(call("slow", signal=caller.signal))
    # The body had returned (recorded its end) before execute() returned.
    assert rec.finished.keys() == {"c1"} and rec.running == 0
    assert result.code == TOOL_TIMEOUT
    assert result.is_error
    info = error_of(result).info
    assert info is not None and info.name == "ToolTimeoutError"
    assert result.content[0]["text"] == "Error: tool call timed out after 50ms"
    assert result.meta is not None
    reason = result.meta["reason"]
    assert isinstance(reason, TimeoutReason) and reason.code == TOOL_TIMEOUT and reason.seconds == 0.05
    assert saw == [reason]  # the body observed the policy's own reason
    assert not caller.signal.aborted
    assert caller.signal.listener_count == 0


@pytest.mark.timeout(10)
def test_caller_abort_before_the_deadline_stays_a_cancellation(registry: ToolRegistry) -> None:
    rec = CallEventRecorder()
    started = threading.Event()

    registry.register(recorded_tool("slow", rec, stops_when_aborted(started, "ignored"), timeout=5))
    caller = AbortController()
    threading.Thread(target=lambda: (started.wait(5), caller.abort("user"))).start()  # type: ignore[func-returns-value]
    result = registry.execute(call("slow", signal=caller.signal))
    assert result.code == TOOL_ABORTED
    assert result.meta is not None and result.meta["reason"] == "user"
    assert timeout_of(caller.signal) is None
    assert caller.signal.listener_count == 0


@pytest.mark.timeout(10)
def test_tool_without_timeout_passes_through_without_a_timer(registry: ToolRegistry) -> None:
    rec = CallEventRecorder()
    seen: list[tuple[AbortSignal, int]] = []

    def inner(execution: ToolDispatchExecution, nxt: Callable[[], ToolExecutionResult]) -> ToolExecutionResult:
        seen.append((execution.signal, _timer.pending_count()))
        return nxt()

    registry.add_around_dispatch(inner)  # registered after TimeoutPolicy: runs inside it
    registry.register(recorded_tool("plain", rec, lambda _a, _r: "ok"))
    caller = AbortController()
    before = _timer.pending_count()
    result = registry.execute(call("plain", signal=caller.signal))
    assert result.code is None and not result.is_error
    assert seen == [(caller.signal, before)]  # same signal object, no timer armed


@pytest.mark.timeout(10)
def test_timer_is_cancelled_after_a_fast_call(registry: ToolRegistry) -> None:
    rec = CallEventRecorder()
    pending_inside: list[int] = []

    def body(_a: Any, _run: ToolRunContext) -> str:
        pending_inside.append(_timer.pending_count())
        return "fast"

    registry.register(recorded_tool("fast", rec, body, timeout=60))
    caller = AbortController()
    before = _timer.pending_count()
    result = registry.execute(call("fast", signal=caller.signal))
    assert result.code is None
    assert pending_inside == [before + 1]  # armed while the body ran
    assert _timer.pending_count() == before  # and gone afterwards


def _raises_once_aborted(
    execution: ToolDispatchExecution, nxt: Callable[[], ToolExecutionResult]
) -> ToolExecutionResult:
    """An around-dispatch hook (inside TimeoutPolicy) that runs the body,
    then raises if the signal it handed on was aborted by then."""
    result = nxt()
    if execution.signal.aborted:
        raise RuntimeError("hook broke after the abort")
    return result


@pytest.mark.timeout(10)
def test_an_inner_hook_raising_after_the_deadline_fired_is_reported_as_the_timeout(registry: ToolRegistry) -> None:
    registry.add_around_dispatch(_raises_once_aborted)  # registered after TimeoutPolicy: runs inside it
    registry.register(tool("slow", lambda _a, run: run.signal.wait(5), timeout=0.05))
    result = registry.execute(call("slow"))
    assert result.code == TOOL_TIMEOUT
    assert result.content[0]["text"] == "Error: tool call timed out after 50ms"
    assert result.body_invoked  # no result says otherwise: the call counts as started
    assert result.meta is not None and isinstance(result.meta["reason"], TimeoutReason)


@pytest.mark.timeout(10)
def test_an_inner_hook_raising_after_a_caller_abort_is_not_turned_into_a_timeout(registry: ToolRegistry) -> None:
    started = threading.Event()
    registry.add_around_dispatch(_raises_once_aborted)
    registry.register(tool("slow", stops_when_aborted(started, "ignored"), timeout=5))
    caller = AbortController()
    threading.Thread(target=lambda: (started.wait(5), caller.abort("user"))).start()  # type: ignore[func-returns-value]
    result = registry.execute(call("slow", signal=caller.signal))
    assert result.code == TOOL_ERROR  # the hook's own failure, not a timeout
    info = error_of(result).info
    assert info is not None and info.name == "RuntimeError"
    assert result.content[0]["text"] == "Error: hook broke after the abort"


def _gives_up_at_the_deadline(*, raises: bool) -> Callable[..., ToolExecutionResult]:
    """An around-dispatch hook (inside TimeoutPolicy) that waits for the
    signal it was handed to abort and never calls ``next()``: then raises,
    or returns a failure of its own that claims the body ran."""

    def hook(execution: ToolDispatchExecution, nxt: Callable[[], ToolExecutionResult]) -> ToolExecutionResult:
        assert execution.signal.wait(5)
        if raises:
            raise RuntimeError("gave up")
        return failure("gave up", name="GaveUp", code=None, body_invoked=True)

    return hook


@pytest.mark.timeout(10)
@pytest.mark.parametrize("raises", [True, False], ids=["raises", "returns"])
def test_a_wrapper_that_gives_up_at_the_deadline_without_the_body_says_it_never_started(
    registry: ToolRegistry, raises: bool
) -> None:
    """The text and ``body_invoked`` agree: the registry's record says the
    body never ran, so the timeout's text says so too."""
    ran: list[int] = []
    registry.add_around_dispatch(_gives_up_at_the_deadline(raises=raises))
    registry.register(tool("slow", lambda _a, _run: ran.append(1), timeout=0.05))
    result = registry.execute(call("slow"))
    assert result.code == TOOL_TIMEOUT and ran == []
    assert result.body_invoked is False
    assert result.content[0]["text"] == "Error: tool call timed out after 50ms before it started"


def test_timeout_policy_repr_names_the_policy() -> None:
    assert repr(TimeoutPolicy()) == "TimeoutPolicy()"


def _outer_deadline(seconds: float, fired: list[str]) -> Callable[..., ToolExecutionResult]:
    """An around-dispatch wrapper with its own budget and the *same* code as
    TimeoutPolicy, to prove the policy scopes by its own timer, not by code."""
    from dshtools._types.calls import failure

    def wrapper(execution: ToolDispatchExecution, nxt: Callable[[], ToolExecutionResult]) -> ToolExecutionResult:
        upstream = execution.signal
        with deadline(upstream, seconds, TOOL_TIMEOUT) as dl:
            execution.signal = dl.signal
            try:
                result = nxt()
            finally:
                execution.signal = upstream
            if dl.timed_out:
                fired.append("outer")
                return failure("outer budget spent", name="OuterTimeout", code="OUTER_TIMEOUT")
            return result

    return wrapper


@pytest.mark.timeout(10)
@pytest.mark.parametrize(("outer", "inner", "expected"), [(0.05, 5.0, "OUTER_TIMEOUT"), (5.0, 0.05, TOOL_TIMEOUT)])
def test_nested_timeout_wrappers_each_report_only_their_own(outer: float, inner: float, expected: str) -> None:
    rec = CallEventRecorder()
    fired: list[str] = []
    inner_results: list[ToolExecutionResult] = []

    def spy(execution: ToolDispatchExecution, nxt: Callable[[], ToolExecutionResult]) -> ToolExecutionResult:
        r = nxt()
        return r

    policy = TimeoutPolicy()

    def recording_policy(
        execution: ToolDispatchExecution, nxt: Callable[[], ToolExecutionResult]
    ) -> ToolExecutionResult:
        r = policy(execution, nxt)
        inner_results.append(r)
        return r

    with ToolRegistry() as registry:
        registry.add_around_dispatch(_outer_deadline(outer, fired))
        registry.add_around_dispatch(recording_policy)
        registry.register(recorded_tool("slow", rec, lambda _a, run: run.signal.wait(10), timeout=inner))
        result = registry.execute(call("slow"))
    assert result.code == expected
    if expected == "OUTER_TIMEOUT":
        # The inner policy saw the outer's abort, not its own timer: a
        # cancellation (before dispatch when, under load, the 50 ms passed
        # before a worker took the body).
        assert inner_results[0].code in (TOOL_ABORTED, TOOL_ABORTED_BEFORE_DISPATCH)
        assert fired == ["outer"]
    else:
        assert inner_results[0].code == TOOL_TIMEOUT
        assert fired == []


# ----------------------------------------------------------- field cases


@pytest.mark.timeout(20)
def test_B21_late_completion_after_timeout_is_never_delivered() -> None:
    rec = CallEventRecorder()
    post_seen: list[object] = []

    def body(_a: Any, _run: ToolRunContext) -> str:
        threading.Event().wait(0.4)  # the tool's own work: ignores its signal
        return "late"

    with ToolRegistry() as registry:
        registry.add_around_dispatch(TimeoutPolicy())
        rec.install(registry)
        registry.add_post_execute(lambda e, r, nxt: (post_seen.append(r), nxt())[1])  # type: ignore[func-returns-value]
        registry.register(recorded_tool("stubborn", rec, body, timeout=0.1))
        caller = AbortController()
        t0 = time.monotonic()
        single = registry.execute(call("stubborn", signal=caller.signal, call_id="solo"))
        single_elapsed = time.monotonic() - t0
        t0 = time.monotonic()
        batch = execute_batch(
            registry,
            [call("stubborn", signal=caller.signal, call_id=f"b{i}") for i in range(3)],
            signal=caller.signal,
        )
        batch_elapsed = time.monotonic() - t0
        assert rec.running == 0  # every body returned: nothing can arrive later
    for r in [single, *batch]:
        assert r.code == TOOL_TIMEOUT
        assert "late" not in repr(r)
    assert all("late" not in repr(r) for r in post_seen)
    assert rec.counts("result") == {"solo": 1, "b0": 1, "b1": 1, "b2": 1}
    assert rec.counts("post") == {"solo": 1, "b0": 1, "b1": 1, "b2": 1}
    # Joined, never abandoned: returns when the body does (0.4 s), not later.
    assert 0.39 <= single_elapsed < 1.2
    assert 0.39 <= batch_elapsed < 1.2  # the three overlapped


@pytest.mark.timeout(20)
def test_B23_timeouts_work_off_the_main_thread_and_use_no_process_signals() -> None:
    alarms: list[int] = []
    previous = process_signal.signal(process_signal.SIGALRM, lambda *_: alarms.append(1))
    try:
        rec = CallEventRecorder()
        results: dict[str, tuple[str | None, float]] = {}
        with ToolRegistry() as registry:
            registry.add_around_dispatch(TimeoutPolicy())
            registry.register(recorded_tool("slow", rec, lambda _a, run: run.signal.wait(1), timeout=0.1))

            def timed(where: str) -> None:
                t0 = time.monotonic()
                r = registry.execute(call("slow", call_id=where))
                results[where] = (r.code, time.monotonic() - t0)

            def outer_body(_a: Any, _run: ToolRunContext) -> str:
                timed("pool-worker")
                return "done"

            registry.register(ToolDefinition("outer", "calls slow from a worker", {"type": "object"}, outer_body))
            timed("main")
            t = threading.Thread(target=timed, args=("thread",))
            t.start()
            t.join(5)
            outer = registry.execute(call("outer", call_id="outer"))
            assert outer.code is None
        assert set(results) == {"main", "thread", "pool-worker"}
        for where, (code, elapsed) in results.items():
            assert code == TOOL_TIMEOUT, where
            assert 0.09 <= elapsed < 0.6, (where, elapsed)
        assert process_signal.getsignal(process_signal.SIGALRM) is not previous
        assert alarms == []
    finally:
        process_signal.signal(process_signal.SIGALRM, previous)


@pytest.mark.timeout(60)
def test_B28_timeout_and_user_abort_are_never_confused() -> None:
    rec = CallEventRecorder()
    with ToolRegistry() as registry:
        registry.add_around_dispatch(TimeoutPolicy())
        started = threading.Event()

        def body(_a: Any, run: ToolRunContext) -> bool:
            started.set()
            return run.signal.wait(5)

        registry.register(recorded_tool("waits", rec, body, timeout=0.1))
        registry.register(recorded_tool("racy", rec, lambda _a, run: run.signal.wait(5), timeout=0.01))

        # (a) the timeout fires
        a = registry.execute(call("waits", call_id="a"))
        assert a.code == TOOL_TIMEOUT
        assert a.meta is not None and isinstance(a.meta["reason"], TimeoutReason)

        # (b) the user aborts first (once the body is running)
        caller = AbortController()
        started.clear()
        threading.Thread(target=lambda: (started.wait(5), caller.abort("user"))).start()  # type: ignore[func-returns-value]
        b = registry.execute(call("waits", signal=caller.signal, call_id="b"))
        assert b.code == TOOL_ABORTED
        assert b.meta is not None and b.meta["reason"] == "user"

        # (c) the user's abort races the timer. Reduced from 1 000 runs of a
        # 0.1 s budget to 300 runs of 0.01 s (same race, 10x less waiting);
        # the abort lands in [-1 ms, +1 ms] around the deadline.
        import random

        rng = random.Random(28)
        outcomes: dict[str | None, int] = {}
        for i in range(300):
            caller = AbortController()
            delay = 0.01 + rng.uniform(-0.001, 0.001)
            t = threading.Timer(delay, caller.abort, args=("user",))
            t.start()
            r = registry.execute(call("racy", signal=caller.signal, call_id=f"c{i}"))
            t.join()
            assert r.meta is not None
            reason = r.meta["reason"]
            if r.code == TOOL_TIMEOUT:
                assert isinstance(reason, TimeoutReason) and reason.code == TOOL_TIMEOUT
            else:
                # The user won; if that was before the body started, it is
                # ABORTED_BEFORE_DISPATCH - still a user abort, never a timeout.
                assert r.code in (TOOL_ABORTED, TOOL_ABORTED_BEFORE_DISPATCH), r
                assert reason == "user"
            outcomes[r.code] = outcomes.get(r.code, 0) + 1
        assert sum(outcomes.values()) == 300


@pytest.mark.timeout(20)
@pytest.mark.parametrize("variant", ["timeout", "caller-abort"])
def test_B30_cancellation_crosses_the_nested_call_boundary(variant: str) -> None:
    rec = CallEventRecorder()
    inner_woke: list[float] = []
    inner_results: list[ToolExecutionResult] = []

    def inner_body(_a: Any, run: ToolRunContext) -> str:
        try:
            io_sleep(10, run.signal)
        finally:
            inner_woke.append(time.monotonic())
        return "slept"

    def outer_body(_a: Any, run: ToolRunContext) -> str:
        r = run.dispatch("inner", {})
        inner_results.append(r)
        return "outer done"

    with ToolRegistry() as registry:
        registry.add_around_dispatch(TimeoutPolicy())
        registry.register(recorded_tool("inner", rec, inner_body))
        registry.register(recorded_tool("outer", rec, outer_body, timeout=0.2))
        caller = AbortController()
        t0 = time.monotonic()
        if variant == "caller-abort":
            timer = threading.Timer(0.1, caller.abort, args=("stop",))
            timer.start()
        result = registry.execute(call("outer", signal=caller.signal, call_id="outer"))
        returned = time.monotonic()
        assert rec.running == 0  # inner's body exited before outer's call returned
    fire = 0.2 if variant == "timeout" else 0.1
    assert inner_results[0].code == TOOL_ABORTED
    assert result.code == (TOOL_TIMEOUT if variant == "timeout" else TOOL_ABORTED)
    assert inner_woke and fire <= inner_woke[0] - t0 < fire + 0.15
    assert returned - t0 < fire + 0.2
    assert caller.signal.listener_count == 0


@pytest.mark.timeout(20)
def test_B31_a_wrapper_replaced_signal_is_still_linked_to_the_caller() -> None:
    rec = CallEventRecorder()
    body_saw_abort_at: list[float] = []
    started = threading.Event()

    def own_signal_wrapper(
        execution: ToolDispatchExecution, nxt: Callable[[], ToolExecutionResult]
    ) -> ToolExecutionResult:
        upstream = execution.signal
        execution.signal = AbortController().signal  # NOT linked to the caller
        try:
            return nxt()
        finally:
            execution.signal = upstream

    def body(_a: Any, run: ToolRunContext) -> object:
        started.set()
        run.signal.wait(10)
        body_saw_abort_at.append(time.monotonic())
        return run.signal.reason

    with ToolRegistry() as registry:
        registry.add_around_dispatch(TimeoutPolicy())
        registry.add_around_dispatch(own_signal_wrapper)
        registry.register(recorded_tool("waits", rec, body, timeout=10))
        caller = AbortController()
        aborted_at: list[float] = []

        def stop() -> None:
            started.wait(5)
            aborted_at.append(time.monotonic())
            caller.abort("stop")

        threading.Thread(target=stop).start()
        result = registry.execute(call("waits", signal=caller.signal))
    assert result.code == TOOL_ABORTED
    assert result.meta is not None and result.meta["reason"] == "stop"
    assert body_saw_abort_at[0] - aborted_at[0] < 0.02
    assert caller.signal.listener_count == 0
