"""execute_batch (docs/contract.md#scheduling) and field cases B14, B16, B32."""

from __future__ import annotations

import _thread
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from dshtools import (
    TOOL_ABORTED,
    TOOL_ABORTED_BEFORE_DISPATCH,
    TOOL_ERROR,
    UNKNOWN_TOOL,
    AbortController,
    AbortSignal,
    ToolExecutionResult,
    ToolRegistry,
    ToolRunContext,
    execute_batch,
)
from tests.helpers.calls import call, calls, error_of, value_of
from tests.helpers.recorders import CallEventRecorder, recorded_tool
from tests.helpers.waiting import run_in_thread

CANCELLED = {TOOL_ABORTED, TOOL_ABORTED_BEFORE_DISPATCH}


@pytest.fixture
def rec() -> CallEventRecorder:
    return CallEventRecorder()


@pytest.fixture
def registry(registry: ToolRegistry, rec: CallEventRecorder) -> ToolRegistry:
    rec.install(registry)
    return registry


def _assert_one_result_per_call(rec: CallEventRecorder, results: list[ToolExecutionResult], ids: list[str]) -> None:
    assert len(results) == len(ids)
    assert rec.order("result") == ids  # published once each, in model order
    for cid, result in zip(ids, results, strict=False):
        assert rec.results[cid] == [result]


def _assert_invocation_consistent(rec: CallEventRecorder, results: list[ToolExecutionResult], ids: list[str]) -> None:
    """ABORTED_BEFORE_DISPATCH exactly where the body never started."""
    for cid, result in zip(ids, results, strict=False):
        if result.code == TOOL_ABORTED_BEFORE_DISPATCH:
            assert cid not in rec.started, cid
        else:
            assert cid in rec.started, cid
    assert rec.running == 0  # drained: nothing still running after return


# --------------------------------------------------------------- basics


@pytest.mark.timeout(10)
def test_bad_arguments_are_rejected(registry: ToolRegistry) -> None:
    sig = AbortController().signal
    with pytest.raises(ValueError):
        execute_batch(registry, [], signal=sig, max_parallel=0)
    with pytest.raises(TypeError):
        execute_batch(registry, [], signal=None, max_parallel=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        execute_batch(registry, [{"id": "x"}], signal=sig)  # type: ignore[list-item]
    with pytest.raises(TypeError):
        execute_batch(registry, [], signal=sig, max_parallel=True)
    assert execute_batch(registry, [], signal=sig) == []


@pytest.mark.timeout(10)
def test_parallel_safe_calls_overlap(registry: ToolRegistry, rec: CallEventRecorder) -> None:
    # Both bodies must be inside each other's running window to pass the
    # barrier; run one after the other and the barrier breaks (timeout).
    barrier = threading.Barrier(2, timeout=5)
    registry.register(recorded_tool("meet", rec, lambda _a, _r: barrier.wait() >= 0))
    results = execute_batch(registry, calls("meet", 2, AbortController().signal), signal=AbortController().signal)
    assert [value_of(r) for r in results] == [True, True]


@pytest.mark.timeout(10)
def test_max_parallel_bounds_overlap(registry: ToolRegistry, rec: CallEventRecorder) -> None:
    peak = [0]
    gate = threading.Barrier(3, timeout=5)

    def body(_a: Any, _r: ToolRunContext) -> int:
        with rec.lock:
            peak[0] = max(peak[0], rec.running)
        gate.wait()  # three at a time must meet here
        return 1

    registry.register(recorded_tool("g", rec, body))
    results = execute_batch(
        registry, calls("g", 9, AbortController().signal), signal=AbortController().signal, max_parallel=3
    )
    assert [value_of(r) for r in results] == [1] * 9
    assert peak[0] == 3


@pytest.mark.timeout(10)
def test_exclusive_call_is_an_ordering_barrier(registry: ToolRegistry, rec: CallEventRecorder) -> None:
    registry.register(recorded_tool("p", rec, lambda _a, _r: "p"))
    registry.register(recorded_tool("x", rec, lambda _a, _r: "x", parallel=False))
    sig = AbortController().signal
    batch = [
        call("p", signal=sig, call_id="p1"),
        call("p", signal=sig, call_id="p2"),
        call("x", signal=sig, call_id="x1"),
        call("p", signal=sig, call_id="p3"),
    ]
    results = execute_batch(registry, batch, signal=AbortController().signal)
    assert [value_of(r) for r in results] == ["p", "p", "x", "p"]
    ev = rec.events
    idx = {e: ev.index(e) for e in ev}
    # x1 begins only after p1 and p2 were fully published ...
    assert idx[("pre", "x1")] > idx[("result", "p1")] and idx[("pre", "x1")] > idx[("result", "p2")]
    # ... and holds p3 back until its own result is published.
    assert idx[("pre", "p3")] > idx[("result", "x1")]
    _assert_one_result_per_call(rec, results, ["p1", "p2", "x1", "p3"])


@pytest.mark.timeout(10)
def test_post_execute_and_results_keep_model_order(registry: ToolRegistry, rec: CallEventRecorder) -> None:
    # c0's body finishes last: it waits until c2's body has finished.
    c2_done = threading.Event()

    def body(_a: Any, run: ToolRunContext) -> str:
        if run.call_id == "c0":
            assert c2_done.wait(5)
        if run.call_id == "c2":
            c2_done.set()
        return run.call_id

    registry.register(recorded_tool("t", rec, body))
    results = execute_batch(registry, calls("t", 3, AbortController().signal), signal=AbortController().signal)
    assert [value_of(r) for r in results] == ["c0", "c1", "c2"]
    assert rec.order("body_end")[-1] == "c0"
    assert rec.order("pre") == ["c0", "c1", "c2"]
    assert rec.order("post") == ["c0", "c1", "c2"]
    assert rec.order("result") == ["c0", "c1", "c2"]


@pytest.mark.timeout(10)
def test_execution_mode_only_exactly_true_is_parallel(rec: CallEventRecorder) -> None:
    from dshtools import ToolDefinition

    def make(name: str, classifier: Callable[[Any], Any] | None) -> ToolDefinition:
        return ToolDefinition(name, "d", {"type": "object"}, lambda _a, _r: None, is_concurrency_safe=classifier)

    def boom(_a: Any) -> bool:
        raise RuntimeError("classifier failed")

    with ToolRegistry() as r:
        r.register(make("yes", lambda _a: True))
        r.register(make("truthy", lambda _a: 1))
        r.register(make("raises", boom))
        r.register(make("none", None))
        sig = AbortController().signal
        modes = {
            n: r.execution_mode(call(n, signal=sig, call_id="c"))
            for n in ["yes", "truthy", "raises", "none", "unknown"]
        }
    assert modes == {
        "yes": "parallel",
        "truthy": "exclusive",
        "raises": "exclusive",
        "none": "exclusive",
        "unknown": "exclusive",
    }


@pytest.mark.timeout(10)
def test_a_call_with_its_own_aborted_signal_does_not_stop_the_batch(
    registry: ToolRegistry, rec: CallEventRecorder
) -> None:
    registry.register(recorded_tool("t", rec, lambda _a, _r: "ok"))
    live = AbortController().signal
    dead = AbortSignal.already_aborted("gone")
    batch = [
        call("t", signal=live, call_id="a"),
        call("t", signal=dead, call_id="b"),
        call("t", signal=live, call_id="c"),
    ]
    results = execute_batch(registry, batch, signal=AbortController().signal)
    assert [r.code for r in results] == [None, TOOL_ABORTED_BEFORE_DISPATCH, None]
    assert results[1].meta is not None and results[1].meta["reason"] == "gone"
    assert "b" not in rec.started
    assert rec.counts("pre")["b"] == 0  # step 2: no hook ran for it
    _assert_one_result_per_call(rec, results, ["a", "b", "c"])


@pytest.mark.timeout(10)
def test_unknown_tool_in_a_batch_is_a_result_not_an_exception(registry: ToolRegistry, rec: CallEventRecorder) -> None:
    registry.register(recorded_tool("t", rec, lambda _a, _r: "ok"))
    sig = AbortController().signal
    results = execute_batch(
        registry, [call("nope", signal=sig, call_id="a"), call("t", signal=sig, call_id="b")], signal=sig
    )
    assert [r.code for r in results] == [UNKNOWN_TOOL, None]


@pytest.mark.timeout(10)
def test_batch_leaves_no_listener_on_caller_signals(registry: ToolRegistry, rec: CallEventRecorder) -> None:
    registry.register(recorded_tool("t", rec, lambda _a, _r: "ok"))
    registry.register(recorded_tool("x", rec, lambda _a, _r: "ok", parallel=False))
    call_sig = AbortController().signal
    batch_sig = AbortController().signal
    batch = [call("t" if i % 3 else "x", signal=call_sig, call_id=f"c{i}") for i in range(12)]
    execute_batch(registry, batch, signal=batch_sig, max_parallel=4)
    assert call_sig.listener_count == 0
    assert batch_sig.listener_count == 0


# ------------------------------------------------------------ cancellation


@pytest.mark.timeout(20)
def test_abort_mid_batch_drains_started_and_settles_the_rest(registry: ToolRegistry, rec: CallEventRecorder) -> None:
    """20 calls, max_parallel=4, the batch is aborted as the 6th body starts."""
    batch = AbortController()
    abort_time: list[float] = []

    def body(_a: Any, run: ToolRunContext) -> str:
        n = len(rec.started)  # this body is the n-th to start
        if n >= 5:
            if n == 6:
                abort_time.append(time.monotonic())
                batch.abort("stop")
            run.signal.wait(10)
        return "ok"

    registry.register(recorded_tool("t", rec, body))
    ids = [f"c{i}" for i in range(20)]
    t0 = time.monotonic()
    results = execute_batch(registry, calls("t", 20, AbortController().signal), signal=batch.signal, max_parallel=4)
    assert time.monotonic() - t0 < 5
    _assert_one_result_per_call(rec, results, ids)
    _assert_invocation_consistent(rec, results, ids)
    codes = [r.code for r in results]
    assert len(rec.started) >= 6
    assert codes.count(TOOL_ABORTED_BEFORE_DISPATCH) == 20 - len(rec.started)
    assert codes.count(TOOL_ABORTED) >= 2  # the 5th and 6th were blocked on the signal
    assert all(r.meta is not None and r.meta["reason"] == "stop" for r in results if r.code in CANCELLED)
    # Nothing started after the abort but what was already in flight.
    late = [cid for cid, t in rec.started.items() if t > abort_time[0]]
    assert len(late) <= 4
    assert batch.signal.listener_count == 0


@pytest.mark.timeout(20)
def test_no_pre_execute_runs_after_the_batch_signal_aborted(registry: ToolRegistry, rec: CallEventRecorder) -> None:
    batch = AbortController()
    registry.register(recorded_tool("x", rec, lambda _a, _r: batch.abort("halt") or "ok", parallel=False))  # type: ignore[func-returns-value]
    results = execute_batch(registry, calls("x", 5, AbortController().signal), signal=batch.signal)
    assert [r.code for r in results] == [TOOL_ABORTED] + [TOOL_ABORTED_BEFORE_DISPATCH] * 4
    assert rec.order("pre") == ["c0"]
    assert rec.order("result") == [f"c{i}" for i in range(5)]


@pytest.mark.timeout(20)
def test_scheduler_fault_drains_and_raises_without_inventing_results(
    rec: CallEventRecorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Boom(Exception):
        pass

    with ToolRegistry() as registry:
        rec.install(registry)
        registry.register(recorded_tool("t", rec, lambda _a, run: (run.signal.wait(0.05) and "x") or "ok"))
        real = registry._dispatch

        def faulty(run: Any) -> Any:
            if run.call.call_id == "c3":
                raise Boom("scheduler bug")
            return real(run)

        monkeypatch.setattr(registry, "_dispatch", faulty)
        with pytest.raises(Boom):
            execute_batch(
                registry, calls("t", 8, AbortController().signal), signal=AbortController().signal, max_parallel=4
            )
        assert rec.running == 0  # started work drained before the raise
        # Only real outcomes were published; c3 got none.
        assert "c3" not in rec.results


# ------------------------------------------------------------- field cases


def _abort_batch_once_started(
    registry: ToolRegistry, n: int, max_parallel: int, started: threading.Barrier
) -> tuple[list[ToolExecutionResult], float, float]:
    """Run a batch of ``n`` calls of ``work`` (``max_parallel`` at a time)
    in a thread; once ``started`` trips, abort the batch's signal. Returns
    the results, the monotonic time of the abort and the seconds the batch
    took to return after it."""
    batch = AbortController()
    t, box = run_in_thread(
        lambda: execute_batch(
            registry, calls("work", n, AbortController().signal), signal=batch.signal, max_parallel=max_parallel
        )
    )
    started.wait()
    aborted_at = time.monotonic()
    batch.abort("stop")
    t.join(5)
    took = time.monotonic() - aborted_at
    assert box, "the batch did not return"
    return box[0], aborted_at, took


@pytest.mark.timeout(20)
def test_B14_every_call_yields_exactly_one_outcome_when_aborted(registry: ToolRegistry, rec: CallEventRecorder) -> None:
    two_started = threading.Barrier(3, timeout=5)

    def body(_a: Any, run: ToolRunContext) -> str:
        if len(rec.started) <= 2:
            two_started.wait()
        # 0.5 s of work, checking the signal every 10 ms
        for _ in range(50):
            if run.signal.wait(0.01):
                break
        return "done"

    registry.register(recorded_tool("work", rec, body))
    results, _, took = _abort_batch_once_started(registry, 10, 2, two_started)
    assert took < 0.3
    ids = [f"c{i}" for i in range(10)]
    _assert_one_result_per_call(rec, results, ids)
    _assert_invocation_consistent(rec, results, ids)
    codes = [r.code for r in results]
    assert codes.count(TOOL_ABORTED) == 2 and codes.count(TOOL_ABORTED_BEFORE_DISPATCH) == 8


def _thirty_cooperative_calls(registry: ToolRegistry, rec: CallEventRecorder, three_started: threading.Barrier) -> None:
    def body(_a: Any, run: ToolRunContext) -> str:
        if len(rec.started) <= 3:
            three_started.wait()
        run.signal.wait(1.0)  # 1 s of cooperative work
        return "done"

    registry.register(recorded_tool("work", rec, body))


@pytest.mark.timeout(20)
def test_B16_nothing_starts_after_the_batch_abort(registry: ToolRegistry, rec: CallEventRecorder) -> None:
    three = threading.Barrier(4, timeout=5)
    _thirty_cooperative_calls(registry, rec, three)
    results, aborted_at, took = _abort_batch_once_started(registry, 30, 3, three)
    assert took < 0.5
    codes = [r.code for r in results]
    assert codes.count(TOOL_ABORTED) == 3 and codes.count(TOOL_ABORTED_BEFORE_DISPATCH) == 27
    assert all(start <= aborted_at for start in rec.started.values())
    _assert_one_result_per_call(rec, results, [f"c{i}" for i in range(30)])


@pytest.mark.timeout(20)
def test_B16_a_single_keyboard_interrupt_cancels_the_batch(registry: ToolRegistry, rec: CallEventRecorder) -> None:
    assert threading.current_thread() is threading.main_thread()
    three = threading.Barrier(4, timeout=5)
    _thirty_cooperative_calls(registry, rec, three)
    interrupted_at: list[float] = []

    def interrupt() -> None:
        three.wait()
        interrupted_at.append(time.monotonic())
        _thread.interrupt_main()

    threading.Thread(target=interrupt).start()
    with pytest.raises(KeyboardInterrupt):
        execute_batch(
            registry, calls("work", 30, AbortController().signal), signal=AbortController().signal, max_parallel=3
        )
    raised_at = time.monotonic()
    assert raised_at - interrupted_at[0] < 0.5
    assert rec.running == 0  # the 3 running bodies were signalled and joined
    assert all(start <= interrupted_at[0] for start in rec.started.values())
    published = {cid: rs[0].code for cid, rs in rec.results.items()}
    assert len(published) == 30 and all(len(rs) == 1 for rs in rec.results.values())
    assert list(published.values()).count(TOOL_ABORTED) == 3
    assert list(published.values()).count(TOOL_ABORTED_BEFORE_DISPATCH) == 27
    for rs in rec.results.values():
        assert rs[0].meta is not None and isinstance(rs[0].meta["reason"], KeyboardInterrupt)


@pytest.mark.timeout(20)
def test_B32_one_failure_never_cancels_its_siblings(registry: ToolRegistry, rec: CallEventRecorder) -> None:
    all_started = threading.Barrier(5, timeout=5)
    failed = threading.Event()

    def body(_a: Any, run: ToolRunContext) -> str:
        all_started.wait()
        if run.call_id == "c1":
            failed.set()
            raise ValueError("grep: no match")
        assert failed.wait(5)
        # Finish after the sibling failed; the signal must still be clear.
        return "aborted?" if run.signal.aborted else "ok"

    registry.register(recorded_tool("t", rec, body))
    t0 = time.monotonic()
    results = execute_batch(registry, calls("t", 5, AbortController().signal), signal=AbortController().signal)
    assert time.monotonic() - t0 < 2
    assert results[1].is_error and results[1].code == TOOL_ERROR
    info = error_of(results[1]).info
    assert info is not None and info.name == "ValueError"
    assert [value_of(r) for i, r in enumerate(results) if i != 1] == ["ok"] * 4
    assert not any(r.code in CANCELLED for r in results)
