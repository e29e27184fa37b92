"""Faults contained as whole kinds (docs/contract.md#a1, docs/contract.md#a2, docs/contract.md#a3, docs/contract.md#a4, docs/contract.md#a5, docs/contract.md#a7, docs/contract.md#a8):
a batch's wait is not the call's time, BaseException from every hook site,
objects that cannot be printed, misbehaving executors, the caller's
context in bodies, overrun reporting."""

from __future__ import annotations

import contextvars
import json
import logging
import os
import pathlib
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any

import pytest

from dshtools import (
    DENIED,
    TOOL_ABORTED,
    TOOL_ABORTED_BEFORE_DISPATCH,
    TOOL_ERROR,
    AbortController,
    Accept,
    Ask,
    ToolDefinition,
    ToolExecutionResult,
    ToolRegistry,
    ToolSuccess,
    execute_batch,
)
from dshtools._registry.observer import set_call_observer
from tests.helpers.calls import call, tool
from tests.helpers.faults import Unprintable, Unrepresentable
from tests.helpers.recorders import CallWatchRecorder, HookRecorder
from tests.helpers.waiting import late_after_abort


def nap_tool(name: str = "nap") -> ToolDefinition:
    """A parallel-safe tool that sleeps cooperatively ``args["s"]`` seconds."""

    def body(args: Any, run: Any) -> Any:
        run.signal.wait(args["s"])
        return args["s"]

    return tool(name, body, is_concurrency_safe=lambda a: True)


# ------------------------------------------------------------------ A1 (N1)


def abort_later(controller: AbortController, after: threading.Event, delay: float = 0.0) -> None:
    """Abort ``controller`` ``delay`` seconds (the scenario's timing, not a
    synchronization) after ``after`` is set."""
    assert after.wait(5)
    if delay:
        time.sleep(delay)
    controller.abort("stop")


@pytest.mark.timeout(20)
def test_n1_batch_cancel_does_not_relabel_a_call_that_finished_while_waiting_its_turn() -> None:
    """Field case N1: ``execute_batch([s=5, s=0.01])`` aborted at 0.3 s: the
    first is ABORTED, the second a success with its value, and the observers
    see exactly those."""
    rec = HookRecorder()
    controller = AbortController()
    with ToolRegistry() as registry:
        registry.register(nap_tool())
        registry.add_result_observer(rec.observer)
        fast_done = threading.Event()

        def note_fast(e: Any, nxt: Callable[[], ToolExecutionResult]) -> ToolExecutionResult:
            result = nxt()
            if e.call_id == "fast":
                fast_done.set()
            return result

        registry.add_around_dispatch(note_fast)
        timer = threading.Thread(target=abort_later, args=(controller, fast_done, 0.3))
        timer.start()
        calls = [
            call("nap", {"s": 5}, call_id="slow"),
            call("nap", {"s": 0.01}, call_id="fast"),
        ]
        started = time.monotonic()
        results = execute_batch(registry, calls, signal=controller.signal)
        timer.join(5)
    assert time.monotonic() - started < 4
    assert results[0].code == TOOL_ABORTED
    assert isinstance(results[1], ToolSuccess) and results[1].value == 0.01
    assert [(e.call_id, r.code) for e, r in rec.results] == [("slow", TOOL_ABORTED), ("fast", None)]


@pytest.mark.timeout(20)
def test_batch_abort_during_the_calls_own_post_execute_still_replaces_its_success() -> None:
    """A1 keeps the TypeScript rule for the call's own time: cancellation
    arriving while its post-execute runs makes the success ABORTED."""
    controller = AbortController()
    in_post = threading.Event()

    def post(e: Any, result: ToolExecutionResult, nxt: Callable[[], Any]) -> Any:
        in_post.set()
        e.signal.wait(5)  # blocked until the batch is cancelled
        return nxt()

    with ToolRegistry() as registry:
        registry.register(nap_tool())
        registry.add_post_execute(post)
        aborter = threading.Thread(target=abort_later, args=(controller, in_post))
        aborter.start()
        results = execute_batch(registry, [call("nap", {"s": 0}, call_id="a")], signal=controller.signal)
        aborter.join(5)
    assert results[0].code == TOOL_ABORTED


@pytest.mark.timeout(10)
def test_single_execute_post_execute_blocked_then_cancelled_is_aborted() -> None:
    controller = AbortController()
    in_post = threading.Event()

    def post(e: Any, result: ToolExecutionResult, nxt: Callable[[], Any]) -> Any:
        in_post.set()
        e.signal.wait(5)
        return nxt()

    with ToolRegistry() as registry:
        registry.register(tool("t", lambda a, r: "ok"))
        registry.add_post_execute(post)
        aborter = threading.Thread(target=abort_later, args=(controller, in_post))
        aborter.start()
        result = registry.execute(call("t", signal=controller.signal))
        aborter.join(5)
    assert result.code == TOOL_ABORTED and result.meta is not None and result.meta["reason"] == "stop"


@pytest.mark.timeout(10)
def test_a_body_still_running_at_abort_that_returns_success_is_aborted() -> None:
    controller = AbortController()
    started, release = threading.Event(), threading.Event()

    def body(a: Any, run: Any) -> Any:
        started.set()
        release.wait(5)  # ignores its signal, then reports success
        return "done anyway"

    with ToolRegistry() as registry:
        registry.register(tool("t", body))

        def abort_then_release() -> None:
            abort_later(controller, started)
            release.set()

        aborter = threading.Thread(target=abort_then_release)
        aborter.start()
        result = registry.execute(call("t", signal=controller.signal))
        aborter.join(5)
    assert result.code == TOOL_ABORTED


# ------------------------------------------------------------------ A3


class HookExit(BaseException):
    """A BaseException that is not an Exception, like SystemExit."""


SITES = ["pre_execute", "guard", "approver", "wrapper_before", "wrapper_after", "post_execute", "render", "finalize"]


def _registry_raising_at(site: str, exc: BaseException, body_ran: threading.Event) -> ToolRegistry:
    def raise_it(*_a: Any) -> Any:
        raise exc

    def body(a: Any, r: Any) -> Any:
        body_ran.set()
        return "v"

    registry = ToolRegistry(approver=raise_it if site == "approver" else None)
    registry.register(
        tool(
            "t",
            body,
            render=raise_it if site == "render" else None,
            finalize_content=raise_it if site == "finalize" else None,
        )
    )
    if site == "pre_execute":
        registry.add_pre_execute(lambda e, nxt: raise_it())
    elif site == "approver":
        registry.add_pre_execute(lambda e, nxt: Ask("check"))
    elif site == "guard":
        registry.add_guard(raise_it)
    elif site == "wrapper_before":
        registry.add_around_dispatch(lambda e, nxt: raise_it())
    elif site == "wrapper_after":

        def after_next(e: Any, nxt: Callable[[], ToolExecutionResult]) -> ToolExecutionResult:
            nxt()
            return raise_it()  # type: ignore[no-any-return]

        registry.add_around_dispatch(after_next)
    elif site == "post_execute":
        registry.add_post_execute(lambda e, r, nxt: raise_it())
    return registry


@pytest.mark.timeout(10)
@pytest.mark.parametrize("kind", [HookExit, SystemExit, GeneratorExit, KeyboardInterrupt])
@pytest.mark.parametrize("site", SITES)
def test_base_exception_from_a_hook_publishes_one_result_then_is_reraised(site: str, kind: type[BaseException]) -> None:
    body_ran = threading.Event()
    exc = kind()
    registry = _registry_raising_at(site, exc, body_ran)
    rec = HookRecorder()
    registry.add_result_observer(rec.observer)
    with pytest.raises(kind) as raised:
        registry.execute(call("t"))
    assert raised.value is exc
    assert len(rec.results) == 1
    result = rec.results[0][1]
    if site in ("pre_execute", "guard", "approver", "wrapper_before"):
        assert result.code == TOOL_ABORTED_BEFORE_DISPATCH and not body_ran.is_set()
    else:
        assert result.code == TOOL_ABORTED and body_ran.is_set()
    assert registry.statistics().bodies_in_flight == 0
    registry.close()


@pytest.mark.timeout(10)
@pytest.mark.parametrize("site", SITES)
def test_base_exception_from_a_hook_in_a_batch_publishes_every_result_then_is_reraised(site: str) -> None:
    body_ran = threading.Event()
    registry = _registry_raising_at(site, HookExit(), body_ran)
    rec = HookRecorder()
    registry.add_result_observer(rec.observer)
    calls = [call("t", call_id="a"), call("t", call_id="b")]
    with pytest.raises(HookExit):
        execute_batch(registry, calls, signal=AbortController().signal)
    assert [e.call_id for e, _ in rec.results] == ["a", "b"]
    assert rec.results[1][1].code == TOOL_ABORTED_BEFORE_DISPATCH
    registry.close()


def test_base_exception_from_a_result_observer_is_contained_and_reported(unraisable: list[Any]) -> None:
    seen: list[str] = []
    with ToolRegistry() as registry:
        registry.register(tool("t", lambda a, r: "v"))
        registry.add_result_observer(lambda e, r: (_ for _ in ()).throw(SystemExit(3)))
        registry.add_result_observer(lambda e, r: seen.append(e.call_id))
        result = registry.execute(call("t"))
    assert result.code is None and seen == ["c1"]
    assert [type(u.exc_value) for u in unraisable] == [SystemExit]


class _WatchFaultingMidCall(CallWatchRecorder):
    """A call observer whose watch raises from ``progress`` and ``aborted``,
    the two events it is handed while the body runs."""

    def progress(self, _update: object) -> None:
        raise RuntimeError("progress bug")

    def aborted(self, _signal: object) -> None:
        raise RuntimeError("aborted bug")


@pytest.mark.timeout(10)
def test_a_call_watch_raising_on_progress_or_abort_is_reported_and_changes_no_result(
    registry: ToolRegistry, unraisable: list[Any]
) -> None:
    caller = AbortController()
    after: list[str] = []

    def body(_a: Any, run: Any) -> str:
        run.report_progress(1, 2)
        after.append("progress")
        caller.abort("stop")  # the watch is told in this thread
        after.append("abort")
        return "late"

    registry.register(tool("t", body))
    set_call_observer(registry, _WatchFaultingMidCall())
    try:
        result = registry.execute(call("t", signal=caller.signal))
    finally:
        set_call_observer(registry, None)
    assert after == ["progress", "abort"]  # neither fault reached the body
    assert result.code == TOOL_ABORTED and result.meta is not None and result.meta["reason"] == "stop"
    assert [str(u.exc_value) for u in unraisable] == ["progress bug", "aborted bug"]
    assert all("Exception in call observer" in u.err_msg for u in unraisable)


# ------------------------------------------------------------------ A4


@pytest.mark.timeout(10)
@pytest.mark.parametrize("site", ["body", "pre_execute", "guard", "approver", "wrapper", "post_execute", "render"])
def test_an_exception_whose_str_raises_is_handled_like_any_fault(site: str, unraisable: list[Any]) -> None:
    log: list[str] = []
    bad = Unrepresentable(log)
    with ToolRegistry(approver=bad.raising_hook if site == "approver" else None) as registry:
        registry.register(
            tool(
                "t",
                bad.raising_hook if site == "body" else (lambda a, r: "v"),
                render=bad.raising_hook if site == "render" else None,
            )
        )
        if site == "pre_execute":
            registry.add_pre_execute(bad.raising_hook)
        elif site == "approver":
            registry.add_pre_execute(lambda e, nxt: Ask())
        elif site == "guard":
            registry.add_guard(bad.raising_hook)
        elif site == "wrapper":
            registry.add_around_dispatch(bad.raising_hook)
        elif site == "post_execute":
            registry.add_post_execute(bad.raising_hook)
        registry.add_result_observer(bad.raising_observer)
        registry.add_result_observer(lambda e, r: log.append("second observer ran"))
        result = registry.execute(call("t"))
    assert result.is_error and result.code is not None
    assert "Unprintable" in result.error.message or "Unprintable" in (result.error.info.name or "")  # type: ignore[union-attr]
    assert log == ["observer ran", "second observer ran"]
    assert len(unraisable) == 1 and isinstance(unraisable[0].exc_value, Unprintable)


class _NamelessHook:
    """A hook object whose ``__qualname__`` (any missing attribute) raises
    something other than ``AttributeError``: messages name its type."""

    def __getattr__(self, name: str) -> object:
        raise RuntimeError(f"no {name}")

    def __call__(self, *_a: Any) -> object:
        return 42


def _answers_42(*_a: Any) -> object:
    return 42


@pytest.mark.parametrize(
    ("site", "expected"),
    [
        ("pre_execute", "pre-execute hook {} returned int, expected Allow, Deny or Ask"),
        ("guard", "guard {} returned int, expected str or None"),
    ],
)
@pytest.mark.parametrize(
    ("hook", "name"), [(_answers_42, "_answers_42"), (_NamelessHook(), "_NamelessHook")], ids=["function", "nameless"]
)
def test_a_hook_returning_the_wrong_type_is_a_denial_naming_the_hook(
    site: str, expected: str, hook: Callable[..., object], name: str
) -> None:
    with ToolRegistry() as registry:
        registry.register(tool("t", lambda a, r: "v"))
        if site == "pre_execute":
            registry.add_pre_execute(hook)  # type: ignore[arg-type]
        else:
            registry.add_guard(hook)  # type: ignore[arg-type]
        result = registry.execute(call("t"))
    assert result.code == DENIED
    assert result.content[0]["text"] == "Error: " + expected.format(name)


def test_an_approver_answer_whose_repr_raises_is_a_denial() -> None:
    log: list[str] = []
    with ToolRegistry(approver=lambda request: Unrepresentable(log)) as registry:  # type: ignore[arg-type, return-value]
        registry.register(tool("t", lambda a, r: "v"))
        registry.add_pre_execute(lambda e, nxt: Ask())
        result = registry.execute(call("t"))
    assert result.code == "DENIED" and "Unrepresentable" in result.error.message  # type: ignore[union-attr]


@pytest.mark.timeout(10)
def test_a_raising_listener_with_a_bad_repr_does_not_stop_the_withdrawal_of_a_queued_call(
    unraisable: list[Any],
) -> None:
    log: list[str] = []
    bad = Unrepresentable(log)
    controller = AbortController()
    controller.signal.add_listener(bad.raising_listener)
    blocker_started, release = threading.Event(), threading.Event()
    queued_ran = threading.Event()

    def block(a: Any, r: Any) -> bool:
        blocker_started.set()
        return release.wait(5)

    with ToolRegistry(max_workers=1) as registry:
        registry.register(tool("block", block))
        registry.register(tool("queued", lambda a, r: queued_ran.set()))
        blocker = threading.Thread(target=lambda: registry.execute(call("block", call_id="b")))
        blocker.start()
        assert blocker_started.wait(5)
        box: list[ToolExecutionResult] = []
        queued = threading.Thread(target=lambda: box.append(registry.execute(call("queued", signal=controller.signal))))
        queued.start()
        while registry.statistics().bodies_in_flight < 2:
            time.sleep(0.001)  # polling a state no event reports
        controller.abort("withdraw")  # must not raise
        queued.join(5)
        assert box and box[0].code == TOOL_ABORTED_BEFORE_DISPATCH
        release.set()
        blocker.join(5)
    assert not queued_ran.is_set() and log == ["listener ran"]
    assert len(unraisable) == 1


# ------------------------------------------------------------------ A5


class NotAFutureExecutor(Executor):
    """Runs the work on its own thread but returns a string from submit()."""

    def __init__(self) -> None:
        self.threads: list[threading.Thread] = []

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        t = threading.Thread(target=fn, args=args, kwargs=kwargs)
        self.threads.append(t)
        t.start()
        return "not a future"


class RaisingExecutor(Executor):
    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        raise ValueError("no capacity")


@pytest.mark.timeout(15)
def test_submit_returning_not_a_future_still_joins_the_body_and_gives_one_result() -> None:
    executor = NotAFutureExecutor()
    finished = threading.Event()

    def body(a: Any, r: Any) -> Any:
        time.sleep(1)  # the body's own work: it is joined, not raced
        finished.set()
        return "slept"

    rec = HookRecorder()
    registry = ToolRegistry(executor=executor)
    registry.register(tool("t", body, is_concurrency_safe=lambda a: True))
    registry.add_result_observer(rec.observer)
    result = registry.execute(call("t"))
    assert finished.is_set() and isinstance(result, ToolSuccess) and result.value == "slept"
    finished.clear()
    results = execute_batch(
        registry, [call("t", call_id="b1"), call("t", call_id="b2")], signal=AbortController().signal
    )
    assert [r.value for r in results] == ["slept", "slept"]  # type: ignore[union-attr]
    assert [e.call_id for e, _ in rec.results] == ["c1", "b1", "b2"]
    registry.close()
    for t in executor.threads:
        t.join(5)


@pytest.mark.timeout(10)
def test_a_raising_submit_gives_one_result_per_call_in_model_order() -> None:
    rec = HookRecorder()
    ran = threading.Event()
    registry = ToolRegistry(executor=RaisingExecutor())
    registry.register(tool("par", lambda a, r: ran.set(), is_concurrency_safe=lambda a: True))
    registry.register(tool("excl", lambda a, r: ran.set()))
    registry.add_result_observer(rec.observer)
    single = registry.execute(call("excl"))
    assert single.code == TOOL_ABORTED_BEFORE_DISPATCH and isinstance(single.meta["reason"], ValueError)
    calls = [call("par", call_id="p1"), call("excl", call_id="x"), call("par", call_id="p2"), call("par", call_id="p3")]
    results = execute_batch(registry, calls, signal=AbortController().signal)
    assert len(results) == 4
    assert all(r.code == TOOL_ABORTED_BEFORE_DISPATCH for r in results)
    assert [e.call_id for e, _ in rec.results] == ["c1", "p1", "x", "p2", "p3"]
    assert not ran.is_set()
    registry.close()


# ------------------------------------------------------------------ A7


REQUEST: contextvars.ContextVar[str] = contextvars.ContextVar("request", default="unset")


@pytest.mark.timeout(10)
def test_b44_bodies_see_the_callers_context_and_nothing_leaks() -> None:
    """Field case B44: one worker, the caller sets "caller-A"; three bodies
    record the value, then set "leak-<i>"; no body and not the caller ever
    sees a leaked value."""
    seen: list[str] = []

    def body(args: Any, run: Any) -> Any:
        seen.append(REQUEST.get())
        REQUEST.set(f"leak-{args['i']}")
        return None

    def in_fresh_context() -> None:
        REQUEST.set("caller-A")
        with ToolRegistry(max_workers=1) as registry:
            registry.register(tool("t", body, is_concurrency_safe=lambda a: True))
            for i in range(3):
                registry.execute(call("t", {"i": i}, call_id=f"c{i}"))
            execute_batch(
                registry,
                [call("t", {"i": i}, call_id=f"b{i}") for i in range(3, 6)],
                signal=AbortController().signal,
            )
            assert REQUEST.get() == "caller-A"

    contextvars.copy_context().run(in_fresh_context)
    assert seen == ["caller-A"] * 6
    assert REQUEST.get() == "unset"


# ------------------------------------------------------------------ A8


@pytest.mark.timeout(10)
def test_an_overrun_is_in_meta_and_logged_as_a_warning_naming_the_tool(caplog: pytest.LogCaptureFixture) -> None:
    controller = AbortController()
    started = threading.Event()

    stubborn = late_after_abort(started, 0.2, wait=5)  # overruns its abort by 0.2 s

    with ToolRegistry() as registry, caplog.at_level(logging.WARNING, logger="dshtools"):
        registry.register(tool("stubborn", stubborn))
        registry.register(tool("prompt", lambda a, r: "ok"))
        aborter = threading.Thread(target=abort_later, args=(controller, started))
        aborter.start()
        result = registry.execute(call("stubborn", signal=controller.signal))
        aborter.join(5)
        prompt = registry.execute(call("prompt", call_id="c2"))
    assert result.code == TOOL_ABORTED
    assert result.meta is not None and 0.15 < result.meta["overrun_s"] < 5  # type: ignore[operator]
    assert prompt.meta == {} and "overrun_s" not in prompt.meta  # empty, never None (A16)
    records = [r for r in caplog.records if r.name == "dshtools" and r.levelno == logging.WARNING]
    assert len(records) == 1 and "stubborn" in records[0].getMessage()


def test_the_package_logger_has_a_null_handler() -> None:
    assert any(isinstance(h, logging.NullHandler) for h in logging.getLogger("dshtools").handlers)


# ------------------------------------------------------------------ A2


def test_every_failure_has_a_code_and_success_has_none() -> None:
    from dshtools import AbortError, TimeoutReason, ToolError

    def body(args: Any, run: Any) -> Any:
        kind = args["kind"]
        if kind == "tool_error":
            raise ToolError("no code")
        if kind == "timeout":
            raise AbortError(TimeoutReason("PROCESS_TIMEOUT", 1.0))
        if kind == "plain":
            raise KeyError("k")
        return "ok"

    with ToolRegistry() as registry:
        registry.register(tool("t", body))

        def post(e: Any, r: ToolExecutionResult, nxt: Callable[[], Any]) -> Any:
            if e.arguments["kind"] == "post":
                raise ZeroDivisionError("post broke")
            return Accept()

        registry.add_post_execute(post)
        codes = {
            kind: registry.execute(call("t", {"kind": kind})).code
            for kind in ["ok", "tool_error", "timeout", "plain", "post"]
        }
    assert codes == {
        "ok": None,
        "tool_error": TOOL_ERROR,
        "timeout": "PROCESS_TIMEOUT",
        "plain": TOOL_ERROR,
        "post": TOOL_ERROR,
    }


# ------------------------------------------------------------------ A10


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.timeout(60)
def test_a_registry_created_before_fork_works_in_the_child_or_refuses_naming_the_fork() -> None:
    """docs/contract.md#a10: the child gets fresh worker threads for an
    owned pool (even with a body blocked in the parent at the fork) and a
    refusal naming the fork for a supplied executor; never a hang. Forked
    in a helper script: pytest itself never forks a threaded process."""
    checkout = pathlib.Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-m", "tests.registry.fork_child"],
        cwd=checkout,
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {"own_pool": [None, True], "supplied": [TOOL_ABORTED_BEFORE_DISPATCH, True], "closed": True}


# ------------------------------------------------- what a tool's author sees


def _lookup_path(args: Any, run: Any) -> Any:
    found: dict[str, object] = {}
    return found["path"]


def test_a_raising_body_logs_its_traceback_at_debug_while_the_model_gets_the_message(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with ToolRegistry() as registry, caplog.at_level(logging.DEBUG, logger="dshtools"):
        registry.register(tool("lookup", _lookup_path))
        result = registry.execute(call("lookup", call_id="c7"))
    assert result.code == TOOL_ERROR and result.content[0]["text"] == "Error: KeyError: 'path'"
    (record,) = [r for r in caplog.records if r.levelno == logging.DEBUG and "raised" in r.getMessage()]
    assert record.getMessage() == "tool 'lookup' (call 'c7') raised"
    assert record.exc_info is not None and isinstance(record.exc_info[1], KeyError)
    assert "_lookup_path" in caplog.text  # the body's own frame is in the traceback


def test_an_aborted_body_logs_no_traceback(caplog: pytest.LogCaptureFixture) -> None:
    controller = AbortController()

    def cooperative(args: Any, run: Any) -> None:
        controller.abort("stop")
        run.signal.throw_if_aborted()

    with ToolRegistry() as registry, caplog.at_level(logging.DEBUG, logger="dshtools"):
        registry.register(tool("t", cooperative))
        assert registry.execute(call("t", signal=controller.signal)).code == TOOL_ABORTED
    assert not [r for r in caplog.records if "raised" in r.getMessage()]


def test_a_raising_concurrency_predicate_runs_the_call_alone_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    def predicate(args: Any) -> bool:
        return bool(args["missing"])

    with ToolRegistry() as registry, caplog.at_level(logging.WARNING, logger="dshtools"):
        registry.register(tool("t", lambda a, r: "ok", is_concurrency_safe=predicate))
        assert registry.execution_mode(call("t")) == "exclusive"
    (record,) = caplog.records
    assert record.getMessage() == "is_concurrency_safe of tool 't' raised: the call runs alone"
    assert record.exc_info is not None and isinstance(record.exc_info[1], KeyError)
