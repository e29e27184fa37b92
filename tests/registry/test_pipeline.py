"""The pipeline of one ``execute`` (docs/contract.md#pipeline steps 1-7) and the
precedence of docs/contract.md#precedence: one test per cancellation
scenario of docs/contract.md#registry, plus
the dispatch mechanics (queue withdrawal, joining, fused signal, nesting,
close). Bad inputs: test_malformed_input.py; stress:
test_random_aborts_stress.py; field cases: test_cancellation_at_scale.py."""

from __future__ import annotations

import _thread
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

import pytest

import dshtools
from dshtools import (
    AbortController,
    AbortError,
    AbortSignal,
    Accept,
    Allow,
    Ask,
    Block,
    Deny,
    ErrorDetail,
    ThreadBackend,
    ToolError,
    ToolExecutionInput,
    ToolExecutionResult,
    ToolFailure,
    ToolRegistry,
    ToolSuccess,
    thaw,
)
from tests.helpers.calls import call, error_of, swapping_signal, tool, value_of
from tests.helpers.cycles import cyclic_garbage_of
from tests.helpers.recorders import HookRecorder
from tests.helpers.waiting import blocked_in_wait, run_in_thread, stops_when_aborted, wait_until


@pytest.fixture
def registry_options() -> dict[str, Any]:
    return {"max_workers": 4}


def ok_body(args: Any, run: Any) -> Any:
    return {"ok": True}


# ----------------------------------------------------------------- basics


def test_success_is_frozen_and_rendered_as_json(registry: ToolRegistry) -> None:
    registry.register(tool("t", lambda a, r: {"n": [1, 2]}))
    result = registry.execute(call("t"))
    assert isinstance(result, ToolSuccess) and not result.is_error and result.code is None
    assert thaw(result.value) == {"n": [1, 2]}
    assert result.value["n"] == (1, 2)
    with pytest.raises(TypeError):
        result.value["x"] = 1
    assert [dict(b) for b in result.content] == [{"type": "text", "text": '{"n": [1, 2]}'}]


def test_string_value_is_its_own_text(registry: ToolRegistry) -> None:
    registry.register(tool("t", lambda a, r: "hello"))
    assert registry.execute(call("t")).content[0]["text"] == "hello"


def test_invalid_args_wins_over_an_already_aborted_signal(registry: ToolRegistry) -> None:
    rec = HookRecorder()
    rec.install_all(registry)
    registry.register(tool("t", ok_body, parameters={"type": "object", "properties": {"n": {"type": "integer"}}}))
    result = registry.execute(call("t", {"n": "x"}, AbortSignal.already_aborted("stop")))
    assert result.code == dshtools.INVALID_ARGS
    assert result.content[0]["text"] == 'Error: invalid arguments: "x" is not of type "integer" at $.n'
    assert rec.events == []  # skips every later phase, post-execute included
    assert len(rec.results) == 1


def test_unknown_tool(registry: ToolRegistry) -> None:
    result = registry.execute(call("nope"))
    assert result.code == dshtools.UNKNOWN_TOOL
    assert result.content[0]["text"] == 'Error: unknown tool "nope"'


def test_unknown_tool_still_passes_post_execute(registry: ToolRegistry) -> None:
    rec = HookRecorder()
    rec.install_all(registry)
    assert registry.execute(call("nope")).code == dshtools.UNKNOWN_TOOL
    assert rec.events == ["pre-execute", "guard", "post-execute"]


def test_plain_exception_becomes_tool_error_with_its_class_name(registry: ToolRegistry) -> None:
    def body(a: Any, r: Any) -> Any:
        raise ValueError("bad thing")

    registry.register(tool("t", body))
    result = registry.execute(call("t"))
    assert isinstance(result, ToolFailure)
    assert result.error.message == "bad thing" and result.error.info is not None
    assert result.error.info.name == "ValueError" and result.code == dshtools.TOOL_ERROR
    assert [dict(b) for b in result.content] == [{"type": "text", "text": "Error: bad thing"}]


def test_tool_error_keeps_its_code(registry: ToolRegistry) -> None:
    def body(a: Any, r: Any) -> Any:
        raise ToolError("no such file", "ENOENT")

    registry.register(tool("t", body))
    result = registry.execute(call("t"))
    assert result.code == "ENOENT" and result.content[0]["text"] == "Error: no such file"


# ---------------------- cancellation scenarios (docs/contract.md#registry)


@pytest.mark.timeout(10)
def test_pre_abort_skips_every_phase_and_publishes_one_result(registry: ToolRegistry) -> None:
    rec = HookRecorder()
    rec.install_all(registry)
    approvals: list[object] = []
    registry._approver = lambda req: approvals.append(req) or "allowed-once"  # type: ignore[func-returns-value]
    body_ran = threading.Event()
    registry.register(tool("t", lambda a, r: body_ran.set()))
    result = registry.execute(call("t", signal=AbortSignal.already_aborted("early")))
    assert result.code == dshtools.TOOL_ABORTED_BEFORE_DISPATCH
    assert result.content[0]["text"] == "Error: tool call aborted before dispatch"
    assert result.error.info is not None and result.error.info.name == "AbortError"  # type: ignore[union-attr]
    assert result.meta is not None and result.meta["reason"] == "early"
    assert rec.events == [] and approvals == [] and not body_ran.is_set()
    assert [r for _, r in rec.results] == [result]


def _aborted_once_reached(
    registry: ToolRegistry,
    reached: threading.Event,
    reason: object = None,
    then: Callable[[], object] = lambda: None,
    name: str = "t",
) -> Any:
    """Execute tool ``name`` in a thread; once ``reached`` is set (5 s at
    most), abort the call's signal with ``reason`` (``None``: the default
    ``AbortError``), call ``then`` (e.g. release a waiting hook) and return
    the result, checking that no listener is left on the caller's signal."""
    controller = AbortController()
    t, box = run_in_thread(lambda: registry.execute(call(name, signal=controller.signal)))
    reached.wait(5)
    controller.abort(reason)
    then()
    t.join(5)
    assert box, "execute did not return"
    assert controller.signal.listener_count == 0  # nothing left on the caller's signal
    return box[0]


@pytest.mark.parametrize("site", ["pre_execute", "guard"])
@pytest.mark.parametrize("caller_aborts", [False, True])
def test_an_abort_error_from_a_hook_is_cancellation_only_when_the_caller_aborted(
    site: str, caller_aborts: bool
) -> None:
    controller = AbortController()

    def hook(*_a: Any) -> Any:
        if caller_aborts:
            controller.abort("stop")  # while the hook runs
        raise AbortError("the hook's own")

    with ToolRegistry() as registry:
        registry.register(tool("t", ok_body))
        getattr(registry, "add_" + site)(hook)
        result = registry.execute(call("t", signal=controller.signal))
    assert not result.body_invoked
    if caller_aborts:  # the caller's cancellation, observed by the hook
        assert result.code == dshtools.TOOL_ABORTED_BEFORE_DISPATCH
        assert result.meta is not None and result.meta["reason"] == "stop"
    else:  # a fault like any other, failing closed
        assert result.code == dshtools.DENIED
        assert result.content[0]["text"].endswith(" failed: AbortError: operation aborted: the hook's own")


@pytest.mark.timeout(10)
def test_cancellation_while_pre_execute_waits_is_aborted_before_dispatch(registry: ToolRegistry) -> None:
    entered, release = threading.Event(), threading.Event()
    body_ran = threading.Event()

    def pre(e: Any, nxt: Any) -> Any:
        entered.set()
        release.wait(5)
        return nxt()

    registry.add_pre_execute(pre)
    registry.register(tool("t", lambda a, r: body_ran.set()))
    result = _aborted_once_reached(registry, entered, "stop", then=release.set)
    assert result.code == dshtools.TOOL_ABORTED_BEFORE_DISPATCH and result.meta["reason"] == "stop"
    assert not body_ran.is_set()


def test_the_approver_is_asked_with_the_calls_name_arguments_id_and_the_ask_reason() -> None:
    asked: list[tuple[object, ...]] = []

    def approver(request: Any) -> Any:
        asked.append((request.name, thaw(request.arguments), request.call_id, request.reason))
        assert request.execution.name == request.name  # the view's own fields
        return "allowed-once"

    with ToolRegistry(approver=approver) as registry:
        registry.add_pre_execute(lambda e, nxt: Ask("dangerous"))
        registry.register(tool("t", ok_body))
        result = registry.execute(call("t", {"path": "/tmp"}, call_id="id-7"))
    assert result.code is None
    assert asked == [("t", {"path": "/tmp"}, "id-7", "dangerous")]


@pytest.mark.timeout(10)
def test_cancellation_during_approval_is_aborted_before_dispatch() -> None:
    asked = threading.Event()

    def approver(request: Any) -> Any:
        asked.set()
        request.signal.wait(5)
        return "cancelled" if request.signal.aborted else "allowed-once"

    with ToolRegistry(approver=approver) as registry:
        registry.add_pre_execute(lambda e, nxt: Ask("dangerous"))
        registry.register(tool("t", ok_body))
        controller = AbortController()
        t, box = run_in_thread(lambda: registry.execute(call("t", signal=controller.signal)))
        asked.wait(5)
        controller.abort("user")
        t.join(5)
    assert box[0].code == dshtools.TOOL_ABORTED_BEFORE_DISPATCH


def test_cancelled_approval_without_caller_abort_is_a_denial() -> None:
    with ToolRegistry(approver=lambda req: "cancelled") as registry:
        registry.add_pre_execute(lambda e, nxt: Ask())
        registry.register(tool("t", ok_body))
        assert registry.execute(call("t")).code == dshtools.DENIED


@pytest.mark.parametrize("answer", ["rejected", "unavailable"])
def test_rejected_and_unavailable_approvals_are_denials(answer: str) -> None:
    with ToolRegistry(approver=lambda req: answer) as registry:  # type: ignore[arg-type,return-value]
        registry.add_pre_execute(lambda e, nxt: Ask("why"))
        registry.register(tool("t", ok_body))
        assert registry.execute(call("t")).code == dshtools.DENIED


def test_ask_without_approver_is_a_denial(registry: ToolRegistry) -> None:
    registry.add_pre_execute(lambda e, nxt: Ask())
    registry.register(tool("t", ok_body))
    assert registry.execute(call("t")).code == dshtools.DENIED


@pytest.mark.timeout(10)
def test_denial_that_settles_after_cancellation_stays_denied(registry: ToolRegistry) -> None:
    entered, release = threading.Event(), threading.Event()

    def pre(e: Any, nxt: Any) -> Any:
        entered.set()
        release.wait(5)
        return Deny("not allowed here")

    registry.add_pre_execute(pre)
    registry.register(tool("t", ok_body))
    result = _aborted_once_reached(registry, entered, then=release.set)
    assert result.code == dshtools.DENIED and result.content[0]["text"] == "Error: not allowed here"


@pytest.mark.timeout(10)
def test_rejection_after_cancellation_stays_denied() -> None:
    controller = AbortController()

    def approver(request: Any) -> Any:
        controller.abort()
        return "rejected"

    with ToolRegistry(approver=approver) as registry:
        registry.add_pre_execute(lambda e, nxt: Ask())
        registry.register(tool("t", ok_body))
        assert registry.execute(call("t", signal=controller.signal)).code == dshtools.DENIED


@pytest.mark.timeout(10)
def test_wrapper_that_supplies_an_aborted_signal_never_invokes_the_body(registry: ToolRegistry) -> None:
    body_ran = threading.Event()

    registry.add_around_dispatch(swapping_signal(AbortSignal.already_aborted("wrapper says no")))
    registry.register(tool("t", lambda a, r: body_ran.set()))
    caller = AbortController().signal
    result = registry.execute(call("t", signal=caller))
    assert result.code == dshtools.TOOL_ABORTED_BEFORE_DISPATCH
    assert result.meta is not None and result.meta["reason"] == "wrapper says no"
    assert not body_ran.is_set() and caller.listener_count == 0


@pytest.mark.timeout(10)
def test_wrapper_short_circuit_overtaken_by_cancellation(registry: ToolRegistry) -> None:
    controller = AbortController()
    rec = HookRecorder()
    registry.add_result_observer(rec.observer)

    def wrapper(e: Any, nxt: Any) -> Any:
        controller.abort("late")  # cancellation arrives while the wrapper decides
        return ToolSuccess({"cached": True}, "cached")

    registry.add_around_dispatch(wrapper)
    registry.register(tool("t", ok_body))
    result = registry.execute(call("t", signal=controller.signal))
    assert result.code == dshtools.TOOL_ABORTED_BEFORE_DISPATCH
    assert [r.code for _, r in rec.results] == [dshtools.TOOL_ABORTED_BEFORE_DISPATCH]


def _aborted_while_the_body_runs(registry: ToolRegistry, then: Callable[[Any], object], reason: object = None) -> Any:
    """Register tool ``t``, whose body waits on its signal (5 s at most)
    and then returns ``then(run)``; abort the call once the body runs and
    return the result."""
    started = threading.Event()

    def body(args: Any, run: Any) -> Any:
        started.set()
        run.signal.wait(5)
        return then(run)

    registry.register(tool("t", body))
    return _aborted_once_reached(registry, started, reason)


@pytest.mark.timeout(10)
def test_cancellation_while_body_runs_is_aborted(registry: ToolRegistry) -> None:
    seen: list[object] = []

    def finish_anyway(run: Any) -> object:
        seen.append(run.signal.reason)
        return "finished anyway"

    result = _aborted_while_the_body_runs(registry, finish_anyway, "stop")
    assert result.code == dshtools.TOOL_ABORTED and result.content[0]["text"] == "Error: tool call aborted"
    assert result.meta["reason"] == "stop" and seen == ["stop"]


def _raise_partial_write(run: Any) -> object:
    raise ToolError("partial write", "EPARTIAL")


@pytest.mark.timeout(10)
def test_tool_error_after_observing_abort_keeps_its_code(registry: ToolRegistry) -> None:
    assert _aborted_while_the_body_runs(registry, _raise_partial_write).code == "EPARTIAL"


@pytest.mark.timeout(10)
def test_body_raising_abort_error_is_aborted(registry: ToolRegistry) -> None:
    result = _aborted_while_the_body_runs(registry, lambda run: run.signal.throw_if_aborted(), "halt")
    assert result.code == dshtools.TOOL_ABORTED and result.meta["reason"] == "halt"


def test_abort_error_without_cancellation_is_a_plain_failure(registry: ToolRegistry) -> None:
    def body(args: Any, run: Any) -> Any:
        raise AbortError("my own deadline")

    registry.register(tool("t", body))
    result = registry.execute(call("t"))
    assert result.code == dshtools.TOOL_ERROR and result.error.info.name == "AbortError"  # type: ignore[union-attr]


@pytest.mark.timeout(10)
def test_late_post_execute_success_becomes_aborted_and_keeps_contexts(registry: ToolRegistry) -> None:
    controller = AbortController()

    def body(args: Any, run: Any) -> Any:
        run.defer_context({"from": "tool"})
        return "ok"

    def wrapper(e: Any, nxt: Any) -> Any:
        r = nxt()
        return ToolSuccess(r.value, r.content, additional_contexts=[{"from": "wrapper"}])

    def post(e: Any, result: Any, nxt: Any) -> Any:
        controller.abort("too late")  # cancellation while post-execute runs
        return Accept(additional_contexts=[{"from": "post"}])

    registry.add_around_dispatch(wrapper)
    registry.add_post_execute(post)
    registry.register(tool("t", body))
    result = registry.execute(call("t", signal=controller.signal))
    assert result.code == dshtools.TOOL_ABORTED
    assert [thaw(c) for c in result.additional_contexts] == [{"from": "tool"}, {"from": "wrapper"}, {"from": "post"}]


@pytest.mark.timeout(10)
def test_wrapper_failure_after_cancellation_stays_a_failure(registry: ToolRegistry) -> None:
    controller = AbortController()
    rec = HookRecorder()

    def wrapper(e: Any, nxt: Any) -> Any:
        nxt()
        controller.abort()
        raise RuntimeError("wrapper broke")

    registry.add_around_dispatch(wrapper)
    registry.add_post_execute(lambda e, r, nxt: rec.note("post") or nxt())  # type: ignore[func-returns-value]
    registry.register(tool("t", ok_body))
    result = registry.execute(call("t", signal=controller.signal))
    assert result.error.info.name == "RuntimeError" and result.code == dshtools.TOOL_ERROR  # type: ignore[union-attr]
    assert rec.events == []  # post-execute skipped for a wrapper that raised


def _wrapper_returns_a_failure(registry: ToolRegistry, controller: AbortController) -> None:
    def wrapper(e: Any, nxt: Any) -> Any:
        nxt()
        controller.abort()
        return ToolFailure(ErrorDetail("nope", None), "Error: nope")

    registry.add_around_dispatch(wrapper)


def _post_execute_raises(registry: ToolRegistry, controller: AbortController) -> None:
    def post(e: Any, r: Any, nxt: Any) -> Any:
        controller.abort()
        raise LookupError("post broke")

    registry.add_post_execute(post)


def _post_execute_blocks(registry: ToolRegistry, controller: AbortController) -> None:
    def post(e: Any, r: Any, nxt: Any) -> Any:
        controller.abort()
        return Block("redacted")

    registry.add_post_execute(post)


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    "install, is_that_failure",
    [
        (_wrapper_returns_a_failure, lambda r: error_of(r).message == "nope"),
        (_post_execute_raises, lambda r: getattr(error_of(r).info, "name", None) == "LookupError"),
        (_post_execute_blocks, lambda r: r.is_error and r.content[0]["text"] == "redacted"),
    ],
    ids=["wrapper-returns-a-failure", "post-execute-raises", "post-execute-blocks"],
)
def test_a_failure_a_hook_makes_after_cancellation_stays_that_failure(
    registry: ToolRegistry,
    install: Callable[[ToolRegistry, AbortController], None],
    is_that_failure: Callable[[ToolExecutionResult], bool],
) -> None:
    """The caller's signal aborts while a wrapper or a post-execute hook
    runs, and the hook then fails the call (returns a failure, raises,
    blocks): the result is that failure, not ``ABORTED``."""
    controller = AbortController()
    install(registry, controller)
    registry.register(tool("t", ok_body))
    result = registry.execute(call("t", signal=controller.signal))
    assert is_that_failure(result), result


# ------------------------------------------------------- dispatch mechanics


@pytest.mark.timeout(10)
def test_queued_call_withdrawn_on_abort_never_runs() -> None:
    with ToolRegistry(max_workers=1) as registry:
        blocker_started, release = threading.Event(), threading.Event()
        queued_ran = threading.Event()
        registry.register(tool("block", lambda a, r: blocker_started.set() or release.wait(5)))  # type: ignore[func-returns-value]
        registry.register(tool("queued", lambda a, r: queued_ran.set()))
        t1, _box1 = run_in_thread(lambda: registry.execute(call("block")))
        blocker_started.wait(5)
        controller = AbortController()
        t2, box2 = run_in_thread(lambda: registry.execute(call("queued", signal=controller.signal)))
        wait_until(lambda: blocked_in_wait(t2))
        controller.abort("withdraw")
        t2.join(5)
        # Returned while the only worker is still busy: withdrawn from the queue.
        assert not t2.is_alive() and t1.is_alive()
        assert box2[0].code == dshtools.TOOL_ABORTED_BEFORE_DISPATCH and box2[0].meta["reason"] == "withdraw"
        release.set()
        t1.join(5)
    assert not queued_ran.is_set()
    assert controller.signal.listener_count == 0


@pytest.mark.timeout(10)
def test_uncooperative_body_keeps_execute_pending(registry: ToolRegistry) -> None:
    started, release = threading.Event(), threading.Event()

    def body(args: Any, run: Any) -> Any:
        started.set()
        release.wait(5)  # ignores its signal
        return "done"

    registry.register(tool("t", body))
    controller = AbortController()
    t, box = run_in_thread(lambda: registry.execute(call("t", signal=controller.signal)))
    started.wait(5)
    controller.abort()
    t.join(0.3)
    assert t.is_alive() and box == []  # never returns early
    release.set()
    t.join(5)
    assert box[0].code == dshtools.TOOL_ABORTED


def test_body_sees_the_fused_signal_and_the_wrapper_signal_is_restored(registry: ToolRegistry) -> None:
    caller = AbortController().signal
    wrapper_ctrl = AbortController()
    seen: dict[str, Any] = {}

    def wrapper(e: Any, nxt: Any) -> Any:
        upstream = e.signal
        seen["upstream_is_caller"] = upstream is caller
        e.signal = wrapper_ctrl.signal
        try:
            return nxt()
        finally:
            seen["after_next"] = e.signal
            e.signal = upstream

    def body(args: Any, run: Any) -> Any:
        seen["body_signal"] = run.signal
        wrapper_ctrl.abort("wrapper")  # the wrapper's own signal reaches the body
        seen["body_saw"] = run.signal.aborted
        return "x"

    registry.add_around_dispatch(wrapper)
    registry.register(tool("t", body))
    result = registry.execute(call("t", signal=caller))
    assert seen["upstream_is_caller"] and seen["after_next"] is wrapper_ctrl.signal
    assert seen["body_signal"] not in (caller, wrapper_ctrl.signal) and seen["body_saw"]
    # The wrapper's own signal aborting turns the body's success into ABORTED.
    assert result.code == dshtools.TOOL_ABORTED and result.meta["reason"] == "wrapper"
    assert caller.listener_count == 0 and wrapper_ctrl.signal.listener_count == 0


def test_registry_restores_the_caller_signal_whatever_a_wrapper_left(registry: ToolRegistry) -> None:
    caller = AbortController().signal
    views: list[Any] = []

    def sloppy(e: Any, nxt: Any) -> Any:
        views.append(e)
        e.signal = AbortController().signal  # never restored
        return nxt()

    registry.add_around_dispatch(sloppy)
    registry.register(tool("t", ok_body))
    assert not registry.execute(call("t", signal=caller)).is_error
    assert views[0].signal is caller


def test_hooks_see_read_only_views_with_the_caller_signal(registry: ToolRegistry) -> None:
    caller = AbortController().signal
    seen: list[Any] = []
    registry.add_pre_execute(lambda e, nxt: seen.append(e) or nxt())  # type: ignore[func-returns-value]
    registry.register(tool("t", ok_body))
    registry.execute(ToolExecutionInput("id-1", "t", {"a": [1]}, caller, agent="bot"))
    view = seen[0]
    assert view.signal is caller and view.call_id == "id-1" and view.root_call_id == "id-1"
    assert view.agent == "bot" and view.parent is None and view.definition is registry.get("t")
    assert thaw(view.arguments) == {"a": [1]}
    with pytest.raises(AttributeError):
        view.signal = AbortController().signal
    with pytest.raises(TypeError):
        view.arguments["a"] = 2


def test_dispatch_view_signal_accepts_only_signals(registry: ToolRegistry) -> None:
    problems: list[str] = []

    def wrapper(e: Any, nxt: Any) -> Any:
        with pytest.raises(TypeError):
            e.signal = None
        with pytest.raises(AttributeError):
            del e.signal
        with pytest.raises(AttributeError):
            e.name = "other"
        problems.append("checked")
        return nxt()

    registry.add_around_dispatch(wrapper)
    registry.register(tool("t", ok_body))
    assert not registry.execute(call("t")).is_error and problems == ["checked"]


def test_arguments_are_snapshotted_at_call_start(registry: ToolRegistry) -> None:
    args = {"items": [1, 2]}
    seen: list[Any] = []

    def pre(e: Any, nxt: Any) -> Any:
        args["items"].append(3)  # the caller mutates its dict after the call started
        return nxt()

    registry.add_pre_execute(pre)
    registry.register(tool("t", lambda a, r: seen.append(a) or "ok"))  # type: ignore[func-returns-value]
    registry.execute(call("t", args))
    assert thaw(seen[0]) == {"items": [1, 2]}


def test_output_schema_violation_is_invalid_tool_output(registry: ToolRegistry) -> None:
    registry.register(
        tool("t", lambda a, r: {"n": "x"}, output_schema={"type": "object", "properties": {"n": {"type": "integer"}}})
    )
    result = registry.execute(call("t"))
    assert result.code == dshtools.INVALID_TOOL_OUTPUT
    assert result.content[0]["text"] == 'Error: tool "t" returned invalid output: "x" is not of type "integer" at $.n'


@pytest.mark.parametrize("value", [{1, 2}, b"x", float("nan"), {1: "a"}, object()])
def test_non_json_output_is_invalid_even_without_schema(registry: ToolRegistry, value: object) -> None:
    registry.register(tool("t", lambda a, r: value))
    assert registry.execute(call("t")).code == dshtools.INVALID_TOOL_OUTPUT


def test_dag_output_is_valid_json(registry: ToolRegistry) -> None:
    shared = [1, 2]
    registry.register(tool("t", lambda a, r: {"a": shared, "b": shared}))
    assert thaw(value_of(registry.execute(call("t")))) == {"a": [1, 2], "b": [1, 2]}


def test_cyclic_output_is_invalid(registry: ToolRegistry) -> None:
    loop: list[Any] = []
    loop.append(loop)
    registry.register(tool("t", lambda a, r: loop))
    assert registry.execute(call("t")).code == dshtools.INVALID_TOOL_OUTPUT


def test_wrapper_authored_success_is_validated(registry: ToolRegistry) -> None:
    registry.add_around_dispatch(lambda e, nxt: ToolSuccess({"n": "not an int"}, "fake"))
    registry.register(tool("t", ok_body, output_schema={"type": "object", "properties": {"n": {"type": "integer"}}}))
    assert registry.execute(call("t")).code == dshtools.INVALID_TOOL_OUTPUT


def test_accept_value_is_validated_and_rerendered(registry: ToolRegistry) -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    registry.register(tool("good", lambda a, r: {"n": 1}, output_schema=schema))
    unregister = registry.add_post_execute(lambda e, r, nxt: Accept(value={"n": 2}))
    result = registry.execute(call("good"))
    assert thaw(value_of(result)) == {"n": 2} and result.content[0]["text"] == '{"n": 2}'
    unregister()
    registry.add_post_execute(lambda e, r, nxt: Accept(value={"n": "two"}))
    assert registry.execute(call("good")).code == dshtools.INVALID_TOOL_OUTPUT


def test_accept_content_and_value_together_is_refused() -> None:
    with pytest.raises(ValueError):
        Accept(content="x", value=1)


def test_an_accept_without_a_value_says_so_in_its_repr() -> None:
    assert "value=UNSET," in repr(Accept())
    assert "value=1," in repr(Accept(value=1))


def test_deferred_contexts_order_and_block_discards_tool_contexts(registry: ToolRegistry) -> None:
    def body(args: Any, run: Any) -> Any:
        run.defer_context({"n": 1})
        run.defer_context({"n": 2})
        return "v"

    def wrapper(e: Any, nxt: Any) -> Any:
        r = nxt()
        return ToolSuccess(r.value, r.content, additional_contexts=[{"n": 3}])  # drops nothing it never had

    registry.add_around_dispatch(wrapper)
    unregister = registry.add_post_execute(lambda e, r, nxt: Accept(additional_contexts=[{"n": 4}]))
    registry.register(tool("t", body))
    result = registry.execute(call("t"))
    assert [c["n"] for c in result.additional_contexts] == [1, 2, 3, 4]
    unregister()
    registry.add_post_execute(lambda e, r, nxt: Block([{"type": "text", "text": "no"}], additional_contexts=[{"n": 5}]))
    blocked = registry.execute(call("t"))
    assert blocked.is_error and [dict(b) for b in blocked.content] == [{"type": "text", "text": "no"}]
    assert [c["n"] for c in blocked.additional_contexts] == [3, 5]


def test_finalize_content_replaces_only_success_content(registry: ToolRegistry) -> None:
    registry.register(tool("t", lambda a, r: {"big": "x" * 50}, finalize_content=lambda e, r: "truncated"))
    result = registry.execute(call("t"))
    assert result.content[0]["text"] == "truncated" and thaw(value_of(result)) == {"big": "x" * 50}


def test_waterfalls_run_first_registered_outermost(registry: ToolRegistry) -> None:
    order: list[str] = []
    for name in ("a", "b"):

        def pre(e: Any, nxt: Any, name: str = name) -> Any:
            order.append(f"pre-{name}-in")
            d = nxt()
            order.append(f"pre-{name}-out")
            return d

        def around(e: Any, nxt: Any, name: str = name) -> Any:
            order.append(f"around-{name}-in")
            r = nxt()
            order.append(f"around-{name}-out")
            return r

        registry.add_pre_execute(pre)
        registry.add_around_dispatch(around)
    registry.register(tool("t", ok_body))
    registry.execute(call("t"))
    assert order == [
        "pre-a-in",
        "pre-b-in",
        "pre-b-out",
        "pre-a-out",
        "around-a-in",
        "around-b-in",
        "around-b-out",
        "around-a-out",
    ]


def test_guard_string_is_a_final_denial(registry: ToolRegistry) -> None:
    later: list[str] = []
    registry.add_guard(lambda e: "read-only mode")
    registry.add_guard(lambda e: later.append("ran"))
    registry.register(tool("t", ok_body))
    result = registry.execute(call("t"))
    assert result.code == dshtools.DENIED and result.content[0]["text"] == "Error: read-only mode" and later == []


def test_allow_and_unregistering_hooks(registry: ToolRegistry) -> None:
    unregister = registry.add_pre_execute(lambda e, nxt: Deny("no"))
    registry.register(tool("t", ok_body))
    assert registry.execute(call("t")).code == dshtools.DENIED
    unregister()
    unregister()  # idempotent
    registry.add_pre_execute(lambda e, nxt: Allow())
    assert not registry.execute(call("t")).is_error


def test_observer_that_raises_is_reported_and_changes_nothing(registry: ToolRegistry, unraisable: list[Any]) -> None:
    rec = HookRecorder()

    def bad(e: Any, r: Any) -> None:
        raise RuntimeError("observer broke")

    registry.add_result_observer(bad)
    registry.add_result_observer(rec.observer)
    registry.register(tool("t", ok_body))
    result = registry.execute(call("t"))
    assert not result.is_error and [r for _, r in rec.results] == [result]
    assert len(unraisable) == 1 and isinstance(unraisable[0].exc_value, RuntimeError)


def test_observers_see_the_frozen_final_result_once(registry: ToolRegistry) -> None:
    rec = HookRecorder()
    registry.add_result_observer(rec.observer)
    registry.add_post_execute(lambda e, r, nxt: Accept(content="post"))
    registry.register(tool("t", ok_body))
    result = registry.execute(call("t"))
    assert len(rec.results) == 1 and rec.results[0][1] is result
    assert result.content[0]["text"] == "post"


def test_schemas_get_and_duplicate_registration(registry: ToolRegistry) -> None:
    d = tool("t", ok_body, parameters={"type": "object", "properties": {"q": {"type": "string"}}})
    unregister = registry.register(d)
    assert registry.get("t") is d and registry.get("x") is None
    schemas = registry.schemas()
    assert schemas == [
        {
            "name": "t",
            "description": "t tool",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
        }
    ]
    schemas[0]["parameters"]["type"] = "mutated"  # a fresh copy
    assert registry.schemas()[0]["parameters"]["type"] == "object"
    with pytest.raises(ValueError):
        registry.register(tool("t", ok_body))
    unregister()
    assert registry.get("t") is None


def test_execution_mode(registry: ToolRegistry) -> None:
    registry.register(tool("safe", ok_body, is_concurrency_safe=lambda a: a.get("ro") is True))
    registry.register(tool("plain", ok_body))
    assert registry.execution_mode(call("safe", {"ro": True})) == "parallel"
    assert registry.execution_mode(call("safe", {"ro": 1})) == "exclusive"
    assert registry.execution_mode(call("plain")) == "exclusive"
    assert registry.execution_mode(call("missing")) == "exclusive"


# ------------------------------------------------------------ nested calls


def test_nested_dispatch_carries_parent_signal_and_ids(registry: ToolRegistry) -> None:
    seen: dict[str, Any] = {}

    def inner(args: Any, run: Any) -> Any:
        seen["inner"] = run
        return args["x"] * 2

    def outer(args: Any, run: Any) -> Any:
        seen["outer"] = run
        first = run.dispatch("inner", {"x": 2})
        second = run.dispatch("inner", {"x": 3}, call_id="explicit")
        return [first.value, second.value]

    registry.register(tool("inner", inner))
    registry.register(tool("outer", outer))
    result = registry.execute(ToolExecutionInput("root", "outer", {}, AbortController().signal, agent="bot"))
    assert thaw(value_of(result)) == [4, 6]
    o, i = seen["outer"], seen["inner"]
    assert i.parent == o.token and i.root_call_id == "root" and i.agent == "bot"
    assert i.call_id == "explicit"


def test_nested_call_ids_are_numbered_and_signal_is_the_bodys(registry: ToolRegistry) -> None:
    ids: list[str] = []
    sources: list[Any] = []
    registry.register(tool("inner", lambda a, r: ids.append(r.call_id) or "ok"))  # type: ignore[func-returns-value]

    def outer(args: Any, run: Any) -> Any:
        sources.append(run.signal)
        run.dispatch("inner", {})
        run.dispatch("inner", {})
        return "ok"

    registry.register(tool("outer", outer))
    controller = AbortController()
    registry.execute(call("outer", signal=controller.signal, call_id="p"))
    assert ids == ["p:1", "p:2"]


@pytest.mark.timeout(20)
def test_fifty_deep_nesting_on_one_worker_completes() -> None:
    with ToolRegistry(max_workers=1) as registry:

        def body(args: Any, run: Any) -> Any:
            depth = args["depth"]
            if depth == 0:
                return 0
            return run.dispatch("nest", {"depth": depth - 1}).value + 1

        registry.register(tool("nest", body))
        assert value_of(registry.execute(call("nest", {"depth": 50}))) == 50


@pytest.mark.timeout(10)
def test_abort_reaches_nested_body_through_the_parent_signal(registry: ToolRegistry) -> None:
    inner_started = threading.Event()
    results: dict[str, Any] = {}

    inner = stops_when_aborted(inner_started, "late", wait=5)

    def outer(args: Any, run: Any) -> Any:
        results["inner"] = run.dispatch("inner", {})
        return "outer"

    registry.register(tool("inner", inner))
    registry.register(tool("outer", outer))
    result = _aborted_once_reached(registry, inner_started, name="outer")
    assert results["inner"].code == dshtools.TOOL_ABORTED and result.code == dshtools.TOOL_ABORTED


# -------------------------------------------------------------- lifecycle


@pytest.mark.timeout(10)
def test_close_waits_for_in_flight_bodies_and_refuses_new_calls() -> None:
    registry = ToolRegistry(max_workers=2)
    started, release = threading.Event(), threading.Event()
    finished = threading.Event()

    def body(args: Any, run: Any) -> Any:
        started.set()
        release.wait(5)
        finished.set()
        return "done"

    registry.register(tool("t", body))
    t, box = run_in_thread(lambda: registry.execute(call("t")))
    started.wait(5)
    closer, _ = run_in_thread(registry.close)
    closer.join(0.2)
    assert closer.is_alive()  # still waiting for the body
    release.set()
    closer.join(5)
    assert not closer.is_alive() and finished.is_set()
    t.join(5)
    assert box[0].value == "done"
    with pytest.raises(RuntimeError, match="closed"):
        registry.execute(call("t"))
    registry.close()  # idempotent


def test_context_manager_yields_the_registry() -> None:
    with ToolRegistry() as registry:
        assert isinstance(registry, ToolRegistry)
    with pytest.raises(RuntimeError):
        registry.execute(call("t"))


def test_default_max_workers_is_32() -> None:
    backend = ThreadBackend()
    try:
        assert backend.max_workers == 32 and backend.executor()._max_workers == 32  # type: ignore[attr-defined]
    finally:
        backend.close()


def test_supplied_executor_is_used_and_not_shut_down() -> None:
    from concurrent.futures import ThreadPoolExecutor

    names: list[str] = []
    with ThreadPoolExecutor(1, thread_name_prefix="mine") as pool:
        with ToolRegistry(executor=pool) as registry:
            registry.register(tool("t", lambda a, r: names.append(threading.current_thread().name) or "ok"))  # type: ignore[func-returns-value]
            registry.execute(call("t"))
        assert pool.submit(lambda: 1).result() == 1
    assert names[0].startswith("mine")


# ---------------------------------------------------------- KeyboardInterrupt


@pytest.mark.timeout(15)
def test_keyboard_interrupt_while_joining_aborts_joins_publishes_and_reraises(registry: ToolRegistry) -> None:
    assert threading.current_thread() is threading.main_thread()
    started = threading.Event()
    body_done = threading.Event()
    rec = HookRecorder()
    registry.add_result_observer(rec.observer)

    def body(args: Any, run: Any) -> Any:
        started.set()
        run.signal.wait(10)
        body_done.set()
        return "stopped"

    registry.register(tool("t", body))
    caller = AbortController().signal
    interrupter = threading.Thread(target=lambda: (started.wait(5), _thread.interrupt_main()))  # type: ignore[func-returns-value]
    interrupter.start()
    with pytest.raises(KeyboardInterrupt):
        registry.execute(call("t", signal=caller))
    interrupter.join()
    assert body_done.is_set()  # joined before the interrupt surfaced
    assert [r.code for _, r in rec.results] == [dshtools.TOOL_ABORTED]
    assert isinstance(rec.results[0][1].meta["reason"], KeyboardInterrupt)
    assert not caller.aborted and caller.listener_count == 0


@pytest.mark.timeout(15)
@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_keyboard_interrupt_during_pre_execute_publishes_aborted_before_dispatch(registry: ToolRegistry) -> None:
    assert threading.current_thread() is threading.main_thread()
    rec = HookRecorder()
    registry.add_result_observer(rec.observer)
    body_ran = threading.Event()
    entered = threading.Event()

    def pre(e: Any, nxt: Any) -> Any:
        entered.set()
        never = threading.Event()
        for _ in range(100):  # interrupted here, in the main thread (sliced wait)
            never.wait(0.05)
        return nxt()

    registry.add_pre_execute(pre)
    registry.register(tool("t", lambda a, r: body_ran.set()))
    # A real SIGINT aimed at the main thread (interrupt_main() would not wake
    # the wait before it ends; a process-directed signal may land elsewhere).
    main = threading.main_thread().ident
    assert main is not None
    helper = threading.Thread(target=lambda: (entered.wait(5), signal.pthread_kill(main, signal.SIGINT)))  # type: ignore[func-returns-value]
    helper.start()
    with pytest.raises(KeyboardInterrupt):
        registry.execute(call("t"))
    helper.join()
    assert [r.code for _, r in rec.results] == [dshtools.TOOL_ABORTED_BEFORE_DISPATCH] and not body_ran.is_set()


def test_phase_api_composes_to_execute(registry: ToolRegistry) -> None:
    """The package-internal phases the batch uses: begin (steps 1-3),
    dispatch (4-5), complete (6-7)."""
    rec = HookRecorder()
    registry.add_result_observer(rec.observer)
    registry.register(tool("t", lambda a, r: "v"))
    run = registry._begin(call("t"))
    assert run.result is None and run.definition is registry.get("t") and not run.body_invoked
    assert registry._dispatch(run) is run
    assert run.body_invoked and isinstance(run.result, ToolSuccess) and rec.results == []
    final = registry._complete(run)
    assert final.value == "v" and [r for _, r in rec.results] == [final]
    assert registry._complete(run) is final and len(rec.results) == 1  # published once
    early = registry._begin(call("missing"))
    assert early.result is not None and early.result.code == dshtools.UNKNOWN_TOOL
    assert registry._dispatch(early) is early and not early.body_invoked
    pre_aborted = registry._begin(call("t", signal=AbortSignal.already_aborted()))
    assert pre_aborted.result is not None and pre_aborted.result.code == dshtools.TOOL_ABORTED_BEFORE_DISPATCH


@pytest.mark.timeout(10)
def test_submit_marks_the_worker_so_dispatch_runs_the_body_inline() -> None:
    with ToolRegistry(max_workers=1) as registry:
        threads: list[str] = []
        registry.register(tool("t", lambda a, r: threads.append(threading.current_thread().name) or "ok"))  # type: ignore[func-returns-value]

        def work() -> str:
            run = registry._begin(call("t"))
            registry._dispatch(run)  # on the only worker: must not wait for a second one
            threads.append(threading.current_thread().name)
            return registry._complete(run).value  # type: ignore[no-any-return,union-attr]

        assert registry._threads.run_marked(work).result(timeout=5) == "ok"
    assert threads[0] == threads[1]


def test_close_from_inside_a_body_is_refused(registry: ToolRegistry) -> None:
    errors: list[BaseException] = []

    def body(args: Any, run: Any) -> Any:
        try:
            registry.close()
        except RuntimeError as exc:
            errors.append(exc)
        return "ok"

    registry.register(tool("t", body))
    assert not registry.execute(call("t")).is_error and len(errors) == 1


@pytest.mark.timeout(30)
@pytest.mark.parametrize("hooked", [False, True], ids=["plain", "every-hook-kind"])
def test_a_finished_call_leaves_no_reference_cycle(hooked: bool) -> None:
    """Every object of a finished call is freed by reference counting: none
    waits for the cyclic garbage collector (no self-referential ``next``,
    no hand-off <-> signal loop). Counted by ``cyclic_garbage_of``, which
    holds on free-threaded builds too."""
    from dshtools import TimeoutPolicy, ToolDefinition

    with ToolRegistry(max_workers=2) as registry:
        registry.register(ToolDefinition("t", "t", {"type": "object"}, lambda a, r: {"n": 1}, timeout=60.0))
        if hooked:
            registry.add_pre_execute(lambda e, next: next())
            registry.add_guard(lambda e: None)
            registry.add_around_dispatch(TimeoutPolicy())
            registry.add_around_dispatch(lambda v, next: next())
            registry.add_post_execute(lambda e, r, next: next())
            registry.add_result_observer(lambda e, r: None)
        signal = AbortController().signal

        def run(i: int) -> None:
            assert value_of(registry.execute(call("t", signal=signal, call_id=f"c{i}"))) == {"n": 1}

        found, kinds = cyclic_garbage_of(run, repeat=20)
    assert found == 0, kinds


@pytest.mark.timeout(30)
def test_nested_calls_made_at_once_from_a_bodys_threads_get_distinct_ids() -> None:
    """Default child ids are ``<call_id>:<n>``, n counting from 1 per parent,
    even when the body's threads make their first nested calls at once."""
    width = 8
    seen: list[str] = []
    barrier = threading.Barrier(width)

    def child(args: Any, run: Any) -> Any:
        seen.append(run.call_id)
        return None

    def parent(args: Any, run: Any) -> Any:
        def nested() -> None:
            barrier.wait(10)
            assert not run.dispatch("child", {}).is_error

        threads = [threading.Thread(target=nested) for _ in range(width)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        return None

    with ToolRegistry(max_workers=2) as registry:
        registry.register(tool("child", child))
        registry.register(tool("parent", parent))
        assert not registry.execute(call("parent", call_id="p")).is_error
    assert sorted(seen) == sorted(f"p:{n}" for n in range(1, width + 1))
