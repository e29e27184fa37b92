"""RetryPolicy and RetryWithFeedback (docs/policies.md#retrypolicy; docs/contract.md#policies)."""

from __future__ import annotations

import pickle
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

import dshtools
from dshtools import (
    AbortController,
    AbortSignal,
    Deny,
    RetryPolicy,
    RetryWithFeedback,
    TimeoutPolicy,
    ToolDefinition,
    ToolDispatchExecution,
    ToolExecution,
    ToolExecutionResult,
    ToolRegistry,
    ToolRunContext,
    deadline,
    not_dispatched,
)
from dshtools._registry.retry import DEFAULT_RETRY_ON
from dshtools._types.calls import failure
from tests.helpers.calls import call, error_of, tool, value_of
from tests.helpers.waiting import blocked_in_wait, run_in_thread, wait_until

Next = Callable[[], ToolExecutionResult]


class Flaky:
    """A body that raises for its first ``fails`` runs, then returns "ok";
    counts its runs (its side effect)."""

    def __init__(self, fails: int) -> None:
        self.fails = fails
        self.runs = 0
        self.lock = threading.Lock()

    def __call__(self, _args: Any, _run: ToolRunContext) -> str:
        with self.lock:
            self.runs += 1
            n = self.runs
        if n <= self.fails:
            raise RuntimeError(f"failure {n}")
        return "ok"


def _fail_first(code: str, times: int = 1, *, invoked: bool = False) -> Callable[[ToolDispatchExecution, Next], Any]:
    """An inner wrapper whose first ``times`` attempts fail with ``code``
    without calling ``next()``; later attempts dispatch."""
    seen = [0]

    def wrapper(_e: ToolDispatchExecution, nxt: Next) -> ToolExecutionResult:
        seen[0] += 1
        if seen[0] <= times:
            return failure("injected", name="Injected", code=code, body_invoked=invoked)
        return nxt()

    return wrapper


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    ("fails", "idempotent", "attempts", "runs", "outcome"),
    [
        pytest.param(5, False, None, 1, "failure 1", id="a-failing-body-with-side-effects-runs-once"),
        pytest.param(2, True, 3, 3, "ok", id="an-idempotent-body-is-retried-until-it-succeeds"),
        pytest.param(10, True, 4, 4, "failure 4", id="the-last-failure-is-returned-when-the-attempts-are-spent"),
    ],
)
def test_a_failing_body_is_retried_only_when_idempotent_and_only_as_often_as_allowed(
    registry: ToolRegistry, fails: int, idempotent: bool, attempts: int | None, runs: int, outcome: str
) -> None:
    """``outcome`` is the value returned ("ok") or the message of the
    ``TOOL_ERROR`` returned; every attempt ran the body. ``attempts`` is
    the policy's (its default when ``None``)."""
    body = Flaky(fails=fails)
    registry.register(tool("t", body, idempotent=idempotent))
    registry.add_around_dispatch(RetryPolicy(backoff=0) if attempts is None else RetryPolicy(attempts, backoff=0))
    result = registry.execute(call("t"))
    if outcome == "ok":
        assert value_of(result) == "ok"
    else:
        assert result.code == dshtools.TOOL_ERROR
        assert error_of(result).message == outcome
    assert body.runs == runs
    assert result.meta["attempts"] == runs
    assert result.body_invoked is True


@pytest.mark.timeout(10)
@pytest.mark.parametrize("code", sorted(DEFAULT_RETRY_ON))
def test_each_default_code_is_retried_when_the_body_did_not_run(registry: ToolRegistry, code: str) -> None:
    body = Flaky(fails=0)
    registry.register(tool("t", body))  # not idempotent: the body had not run
    registry.add_around_dispatch(RetryPolicy(backoff=0))
    registry.add_around_dispatch(_fail_first(code))
    result = registry.execute(call("t"))
    assert value_of(result) == "ok"
    assert body.runs == 1
    assert result.meta["attempts"] == 2


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    "code", [dshtools.DENIED, dshtools.INVALID_ARGS, dshtools.UNKNOWN_TOOL, dshtools.TOOL_TIMEOUT, "MY_CODE"]
)
def test_a_code_outside_retry_on_is_returned_at_once(registry: ToolRegistry, code: str) -> None:
    body = Flaky(fails=0)
    registry.register(tool("t", body, idempotent=True))
    registry.add_around_dispatch(RetryPolicy(backoff=0))
    registry.add_around_dispatch(_fail_first(code))
    result = registry.execute(call("t"))
    assert result.code == code
    assert result.meta["attempts"] == 1
    assert body.runs == 0


@pytest.mark.timeout(10)
def test_invalid_args_and_denied_calls_never_reach_the_retry(registry: ToolRegistry) -> None:
    body = Flaky(fails=0)
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    registry.register(tool("t", body, parameters=schema, idempotent=True))
    retry_ran: list[str] = []

    def spy(e: ToolDispatchExecution, nxt: Next) -> ToolExecutionResult:
        retry_ran.append(e.call_id)
        return nxt()

    registry.add_around_dispatch(spy)
    registry.add_around_dispatch(RetryPolicy(backoff=0))
    bad = registry.execute(call("t", {"n": "x"}))
    assert bad.code == dshtools.INVALID_ARGS
    registry.add_pre_execute(lambda e, nxt: Deny("no"))
    denied = registry.execute(call("t", {"n": 1}, call_id="c2"))
    assert denied.code == dshtools.DENIED
    assert retry_ran == []
    assert body.runs == 0
    assert "attempts" not in bad.meta and "attempts" not in denied.meta


@pytest.mark.parametrize(
    "code",
    [
        dshtools.DENIED,
        dshtools.INVALID_ARGS,
        dshtools.UNKNOWN_TOOL,
        dshtools.TOOL_ABORTED,
        dshtools.TOOL_ABORTED_BEFORE_DISPATCH,
        dshtools.RETRY_REQUESTED,
    ],
)
def test_retry_on_refuses_codes_that_are_never_retried(code: str) -> None:
    with pytest.raises(ValueError, match="never retried"):
        RetryPolicy(retry_on={dshtools.TOOL_ERROR, code})


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"attempts": 0}, ValueError),
        ({"attempts": 1.5}, TypeError),
        ({"attempts": True}, TypeError),
        ({"backoff": -1}, ValueError),
        ({"max_backoff": float("inf")}, ValueError),
        ({"jitter": 2}, ValueError),
        ({"jitter": "x"}, TypeError),
        ({"retry_on": "TOOL_ERROR"}, TypeError),
        ({"retry_on": [1]}, TypeError),
    ],
)
def test_bad_arguments_are_refused_where_the_policy_is_made(kwargs: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        RetryPolicy(**kwargs)


def test_the_back_off_doubles_up_to_its_cap() -> None:
    policy = RetryPolicy(backoff=0.5, max_backoff=3.0, jitter=0)
    assert [policy.delay(k) for k in (1, 2, 3, 4, 100)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    jittered = RetryPolicy(backoff=1.0, jitter=0.5)
    assert all(0.5 <= jittered.delay(1) <= 1.0 for _ in range(100))


@pytest.mark.timeout(10)
def test_retry_with_feedback_reaches_the_model_and_is_never_retried(registry: ToolRegistry) -> None:
    runs = []

    def body(_a: Any, _r: ToolRunContext) -> str:
        runs.append(1)
        raise RetryWithFeedback("the date must be ISO 8601")

    registry.register(tool("t", body, idempotent=True))
    registry.add_around_dispatch(RetryPolicy(backoff=0))
    result = registry.execute(call("t"))
    assert result.code == dshtools.RETRY_REQUESTED
    assert result.content == ({"type": "text", "text": "Error: the date must be ISO 8601"},)
    info = error_of(result).info
    assert info is not None and info.name == "RetryWithFeedback"
    assert len(runs) == 1


def test_retry_with_feedback_pickles_as_itself() -> None:
    again = pickle.loads(pickle.dumps(RetryWithFeedback("use a positive n")))
    assert type(again) is RetryWithFeedback
    assert again.message == "use a positive n" and again.code == dshtools.RETRY_REQUESTED


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    ("idempotent", "code"), [(True, dshtools.TOOL_ABORTED), (False, dshtools.TOOL_ABORTED_BEFORE_DISPATCH)]
)
def test_an_abort_during_the_back_off_ends_the_call_within_50_ms(
    registry: ToolRegistry, idempotent: bool, code: str
) -> None:
    """Bound: 50 ms from ``abort()`` to the published result (docs/contract.md#policies).
    The first attempt's body runs (idempotent) or is not reached (an inner
    wrapper fails it first); either way the policy is then parked in a
    30 s back-off."""
    body = Flaky(fails=5)
    registry.register(tool("t", body, idempotent=idempotent))
    registry.add_around_dispatch(RetryPolicy(backoff=30, jitter=0))
    returned = threading.Event()

    def attempt_returned(_e: ToolDispatchExecution, nxt: Next) -> ToolExecutionResult:
        result = nxt()
        returned.set()
        return result

    registry.add_around_dispatch(attempt_returned)
    if not idempotent:
        registry.add_around_dispatch(_fail_first(dshtools.TOOL_ERROR))
    published = threading.Event()
    at: list[float] = []

    def observer(_e: ToolExecution, _r: ToolExecutionResult) -> None:
        at.append(time.monotonic())
        published.set()

    registry.add_result_observer(observer)
    caller = AbortController()
    thread, box = run_in_thread(lambda: registry.execute(call("t", signal=caller.signal)))
    # After the first attempt returned, the only wait left is the back-off.
    assert returned.wait(5)
    wait_until(lambda: blocked_in_wait(thread))
    start = time.monotonic()
    caller.abort()
    assert published.wait(5)
    assert at[0] - start < 0.05
    thread.join(5)
    result = box[0]
    assert result.code == code
    assert result.meta["attempts"] == 1
    assert body.runs == (1 if idempotent else 0)


@pytest.mark.timeout(10)
def test_an_attempt_that_cannot_start_before_the_deadline_is_skipped(registry: ToolRegistry) -> None:
    body = Flaky(fails=5)
    registry.register(tool("t", body, idempotent=True))
    registry.add_around_dispatch(RetryPolicy(backoff=5, jitter=0))
    with deadline(AbortController().signal, 2.0, "CALLER_DEADLINE") as dl:
        result = registry.execute(call("t", signal=dl.signal))
        assert not dl.signal.aborted  # returned at once, not at the deadline
    assert result.code == dshtools.TOOL_ERROR
    assert result.meta["attempts"] == 1
    assert result.meta["retry_skipped"] == "deadline"
    assert body.runs == 1


@pytest.mark.timeout(10)
def test_a_caller_abort_as_the_deadline_is_read_is_an_abort_not_a_skipped_retry(
    registry: ToolRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The caller aborts at the moment the policy reads ``time_left()`` (the
    read itself aborts, after the failed attempt): the caller's abort wins,
    ``ABORTED``, never the last failure tagged ``retry_skipped="deadline"``."""
    body = Flaky(fails=5)
    registry.register(tool("t", body, idempotent=True))
    registry.add_around_dispatch(RetryPolicy(backoff=5, jitter=0))
    read = AbortSignal.time_left
    user = AbortController()
    with deadline(user.signal, 30.0, "CALLER_DEADLINE") as dl:
        caller = dl.signal

        def aborting_read(self: AbortSignal) -> float | None:
            if self is caller and body.runs == 1 and not caller.aborted:
                user.abort("the user stopped it")
            return read(self)

        monkeypatch.setattr(AbortSignal, "time_left", aborting_read)
        result = registry.execute(call("t", signal=caller))
    assert result.code == dshtools.TOOL_ABORTED
    assert "retry_skipped" not in result.meta
    assert result.meta["attempts"] == 1
    assert body.runs == 1


@pytest.mark.timeout(10)
def test_a_caller_abort_during_an_attempt_is_never_retried(registry: ToolRegistry) -> None:
    caller = AbortController()
    runs = []

    def body(_a: Any, run: ToolRunContext) -> str:
        runs.append(1)
        caller.abort()
        run.signal.throw_if_aborted()
        return "unreachable"

    registry.register(tool("t", body, idempotent=True))
    registry.add_around_dispatch(RetryPolicy(backoff=0, retry_on={dshtools.TOOL_ERROR, dshtools.TOOL_TIMEOUT}))
    result = registry.execute(call("t", signal=caller.signal))
    assert result.code == dshtools.TOOL_ABORTED
    assert len(runs) == 1


def _waits_for_its_signal(runs: list[int], succeed_from: int) -> Callable[[Any, ToolRunContext], str]:
    def body(_a: Any, run: ToolRunContext) -> str:
        runs.append(1)
        if len(runs) < succeed_from:
            run.signal.wait(5)
            run.signal.throw_if_aborted()
        return "ok"

    return body


@pytest.mark.timeout(10)
def test_an_outer_timeout_is_never_retried(registry: ToolRegistry) -> None:
    runs: list[int] = []
    registry.register(tool("t", _waits_for_its_signal(runs, 99), idempotent=True, timeout=0.05))
    registry.add_around_dispatch(TimeoutPolicy())  # outermost
    registry.add_around_dispatch(RetryPolicy(backoff=0, retry_on={dshtools.TOOL_ERROR, dshtools.TOOL_TIMEOUT}))
    result = registry.execute(call("t"))
    assert result.code == dshtools.TOOL_TIMEOUT
    assert len(runs) == 1


@pytest.mark.timeout(10)
@pytest.mark.parametrize("idempotent", [True, False])
def test_an_inner_timeout_is_retried_only_when_named_and_idempotent(registry: ToolRegistry, idempotent: bool) -> None:
    runs: list[int] = []
    registry.register(tool("t", _waits_for_its_signal(runs, 2), idempotent=idempotent, timeout=0.05))
    registry.add_around_dispatch(RetryPolicy(backoff=0, retry_on={dshtools.TOOL_ERROR, dshtools.TOOL_TIMEOUT}))
    registry.add_around_dispatch(TimeoutPolicy())  # per attempt
    result = registry.execute(call("t"))
    if idempotent:
        assert value_of(result) == "ok"
        assert result.meta["attempts"] == 2
        assert len(runs) == 2
    else:
        assert result.code == dshtools.TOOL_TIMEOUT
        assert result.body_invoked is True
        assert len(runs) == 1


@pytest.mark.timeout(10)
def test_a_first_success_records_one_attempt(registry: ToolRegistry) -> None:
    registry.register(tool("t", Flaky(fails=0)))
    registry.add_around_dispatch(RetryPolicy())
    result = registry.execute(call("t"))
    assert value_of(result) == "ok"
    assert result.meta["attempts"] == 1


def test_idempotent_and_max_output_chars_are_checked_and_taken_by_from_function() -> None:
    def echo(text: str) -> str:
        """Echo."""
        return text

    definition = ToolDefinition.from_function(echo, idempotent=True, max_output_chars=10)
    assert definition.idempotent is True and definition.max_output_chars == 10
    assert ToolDefinition.from_function(echo).idempotent is False
    with pytest.raises(TypeError):
        ToolDefinition.from_function(echo, idempotent=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        ToolDefinition.from_function(echo, max_output_chars=0)
    with pytest.raises(TypeError):
        ToolDefinition.from_function(echo, max_output_chars=True)


def test_the_policy_says_what_it_is() -> None:
    text = repr(RetryPolicy(attempts=2, backoff=0.1, retry_on={dshtools.TOOL_ERROR}, jitter=0))
    assert text == "RetryPolicy(attempts=2, backoff=0.1, max_backoff=8.0, retry_on=['TOOL_ERROR'], jitter=0.0)"


@pytest.mark.timeout(10)
def test_a_later_attempt_withdrawn_after_a_body_ran_is_aborted_not_before_dispatch(registry: ToolRegistry) -> None:
    body = Flaky(fails=1)
    caller = AbortController()
    registry.register(tool("t", body, idempotent=True))
    registry.add_around_dispatch(RetryPolicy(backoff=0))
    seen = [0]

    def withdraw_second(e: ToolDispatchExecution, nxt: Next) -> ToolExecutionResult:
        seen[0] += 1
        if seen[0] == 1:
            return nxt()
        caller.abort("late")
        return not_dispatched(e.signal)

    registry.add_around_dispatch(withdraw_second)
    result = registry.execute(call("t", signal=caller.signal))
    assert result.code == dshtools.TOOL_ABORTED
    assert result.body_invoked is True and body.runs == 1
    assert result.meta["attempts"] == 2 and result.meta["reason"] == "late"


def test_an_abort_just_after_the_back_off_elapsed_starts_no_further_attempt(
    registry: ToolRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The back-off's wait times out and the abort lands before the next
    attempt starts: the signal's ``wait`` is made to return at once, as
    timed out, with the abort right behind it."""
    body = Flaky(fails=5)
    caller = AbortController()
    registry.register(tool("t", body, idempotent=True))
    registry.add_around_dispatch(RetryPolicy(attempts=3, backoff=0.01, jitter=0, retry_on={dshtools.TOOL_ERROR}))
    waits: list[float | None] = []

    def timed_out_then_aborted(_signal: AbortSignal, timeout: float | None = None) -> bool:
        waits.append(timeout)
        caller.abort("after the back-off")
        return False

    monkeypatch.setattr(type(caller.signal), "wait", timed_out_then_aborted)
    result = registry.execute(call("t", signal=caller.signal))
    assert waits == [0.01]  # the one back-off, nothing else waited
    assert result.code == dshtools.TOOL_ABORTED
    assert result.body_invoked is True and body.runs == 1
    assert result.meta["attempts"] == 1 and result.meta["reason"] == "after the back-off"


def _asks_for_iso_dates(_args: Any, _run: ToolRunContext) -> str:
    raise RetryWithFeedback("dates are YYYY-MM-DD")


@pytest.mark.timeout(60)
def test_retry_with_feedback_crosses_a_process_backend() -> None:
    from dshtools import ProcessBackend

    with ProcessBackend(1) as backend, ToolRegistry(backend=backend) as registry:
        registry.register(tool("book", _asks_for_iso_dates))
        registry.add_around_dispatch(RetryPolicy(backoff=0))
        result = registry.execute(call("book"))
    assert result.code == dshtools.RETRY_REQUESTED
    assert result.content == ({"type": "text", "text": "Error: dates are YYYY-MM-DD"},)
    assert result.meta["attempts"] == 1
