"""The call's remaining budget reaches a body in another process
(docs/contract.md#a9; decision 0047): on ``ProcessBackend`` and
``RayBackend``, ``run.signal.deadline``/``time_left()`` answer as on the
thread backend. The seconds left cross with the call and are re-based on
the worker's clock; the worker's signal reports the budget and is aborted
only by the caller's abort.

Bounds without comparing clocks across processes: the caller measures
``elapsed``, the time ``execute`` took; whatever happened between the timer
being armed and the body reading ``time_left()`` lies inside it, so the
body sees ``seconds - elapsed <= time_left() <= seconds``. The same test
runs on every backend (Ray only when ``ray`` is installed, on the session
cluster of tests/conftest.py).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from dshtools import (
    TOOL_TIMEOUT,
    AbortController,
    AbortSignal,
    ProcessBackend,
    ToolDefinition,
    ToolError,
    ToolExecutionResult,
    ToolFailure,
    ToolRegistry,
    ToolSuccess,
    timeout_of,
)
from dshtools._backends.remote import call_controller
from tests.helpers.calls import OBJECT, call, registry_serving

LONG = 30.0  # a budget no call here comes near: the calls never time out
SHORT = 0.3  # the budget a body spends in full, waiting on a library's timeout


def budget(args: Any, run: Any) -> object:
    """What the body sees of its budget."""
    return {"left": run.signal.time_left(), "has_deadline": run.signal.deadline is not None}


def library_wait(args: Any, run: Any) -> object:
    """A body that follows docs/contract.md#a9 with a library that only
    takes a timeout, and never looks at its signal otherwise: without a
    budget it would block until the forced stop."""
    threading.Event().wait(run.signal.time_left())
    return "returned when its budget ran out"


def reason_seen(args: Any, run: Any) -> object:
    """Waits for its signal and says, as a ``ToolError`` (which keeps its
    code under cancellation), which abort reached it."""
    run.signal.wait()
    reason = timeout_of(run.signal)
    assert reason is not None, run.signal.reason
    raise ToolError(f"{reason.code} {reason.seconds} left={run.signal.time_left()}", "SAW_ABORT")


DEFINITIONS = (
    ToolDefinition("reason_seen", "reports the abort it saw", OBJECT, reason_seen),
    ToolDefinition("budget", "reports its budget", OBJECT, budget),
    ToolDefinition("budget_timed", "reports its budget", OBJECT, budget, timeout=LONG),
    ToolDefinition("library_wait", "waits out its budget", OBJECT, library_wait, timeout=SHORT),
)


@pytest.fixture(scope="module", params=["thread", "process", "ray"])
def registry(request: pytest.FixtureRequest) -> Iterator[ToolRegistry]:
    # A forced stop far beyond every test's timeout: a body that got no
    # budget blocks and the test fails on its timeout, never by a kill.
    if request.param == "thread":
        r = ToolRegistry()
    elif request.param == "process":
        r = ToolRegistry(backend=ProcessBackend(1, kill_after=120.0))
    else:
        pytest.importorskip("ray", reason="ray is not installed (pip install 'dshtools[ray]')")
        request.getfixturevalue("ray_cluster")
        from dshtools.ray import RayBackend

        r = ToolRegistry(backend=RayBackend(kill_after=120.0))
    yield from registry_serving(r, DEFINITIONS)


def _execute(registry: ToolRegistry, name: str, signal: AbortSignal) -> tuple[ToolExecutionResult, float]:
    started = time.monotonic()
    result = registry.execute(call(name, signal=signal))
    return result, time.monotonic() - started


def _seen(result: ToolExecutionResult) -> dict[str, Any]:
    assert isinstance(result, ToolSuccess), result
    return dict(result.value)


@pytest.mark.timeout(60)
def test_the_tool_timeout_reaches_the_body(registry: ToolRegistry) -> None:
    result, elapsed = _execute(registry, "budget_timed", AbortController().signal)
    seen = _seen(result)
    assert seen["has_deadline"] is True
    assert LONG - elapsed <= seen["left"] <= LONG


@pytest.mark.timeout(60)
def test_the_callers_own_deadline_reaches_the_body(registry: ToolRegistry) -> None:
    started = time.monotonic()
    with AbortSignal.timeout(LONG) as signal:
        result = registry.execute(call("budget", signal=signal))
    elapsed = time.monotonic() - started
    seen = _seen(result)
    assert seen["has_deadline"] is True
    assert LONG - elapsed <= seen["left"] <= LONG


@pytest.mark.timeout(60)
def test_the_earlier_of_the_callers_deadline_and_the_tool_timeout_wins(registry: ToolRegistry) -> None:
    earlier = LONG / 2
    started = time.monotonic()
    with AbortSignal.timeout(earlier) as signal:
        result = registry.execute(call("budget_timed", signal=signal))
    elapsed = time.monotonic() - started
    seen = _seen(result)
    assert earlier - elapsed <= seen["left"] <= earlier


@pytest.mark.timeout(60)
def test_no_timer_anywhere_is_no_budget(registry: ToolRegistry) -> None:
    result, _ = _execute(registry, "budget", AbortController().signal)
    assert _seen(result) == {"left": None, "has_deadline": False}


@pytest.mark.timeout(60)
def test_a_body_that_hands_its_budget_to_a_library_returns_on_time(registry: ToolRegistry) -> None:
    # The body returned by itself once its budget ran out: no forced stop
    # (kill_after is 120 s), and no sooner. Whether the caller's timer was
    # seen to fire before the body's return (TOOL_TIMEOUT) or the return
    # came first (its value) is a race the thread backend has too: the
    # library's wait and the timer end at the same instant.
    result, elapsed = _execute(registry, "library_wait", AbortController().signal)
    assert not (result.meta or {}).get("killed"), result
    assert elapsed >= SHORT
    if result.code != TOOL_TIMEOUT:
        assert isinstance(result, ToolSuccess), result
        assert result.value == "returned when its budget ran out"


@pytest.mark.timeout(60)
def test_the_body_is_aborted_by_the_callers_timer_with_its_reason(registry: ToolRegistry) -> None:
    # The worker's signal does not abort itself: the caller's timer does,
    # and the body sees that timer's reason with its budget spent.
    with AbortSignal.timeout(SHORT) as signal:
        result = registry.execute(call("reason_seen", signal=signal))
    assert isinstance(result, ToolFailure) and result.code == "SAW_ABORT", result
    assert result.error.message == f"TIMEOUT {SHORT} left=0.0"


# ------------------------------------------------------- the worker's signal


def test_without_a_budget_the_workers_signal_has_none() -> None:
    signal = call_controller(None, time.monotonic()).signal
    assert (signal.deadline, signal.time_left()) == (None, None)


def test_the_budget_is_rebased_on_the_receipt() -> None:
    received = time.monotonic()
    controller = call_controller(2.5, received)
    signal = controller.signal
    assert signal.deadline == received + 2.5
    left = signal.time_left()
    assert left is not None and 0.0 <= left <= 2.5
    # Derived signals see it, as they see a source's timer.
    with AbortSignal.any_of([signal, AbortController().signal]) as derived:
        assert derived.deadline == received + 2.5
    with AbortSignal.timeout(LONG) as later, AbortSignal.any_of([signal, later]) as both:
        assert both.deadline == received + 2.5
    with AbortSignal.timeout(1.0) as sooner, AbortSignal.any_of([signal, sooner]) as both:
        assert both.deadline == sooner.deadline


def test_a_spent_budget_reports_zero_and_leaves_the_abort_to_the_caller() -> None:
    controller = call_controller(0.0, time.monotonic())
    signal = controller.signal
    spent_at = signal.deadline
    assert spent_at is not None and signal.time_left() == 0.0
    assert not signal.aborted  # only the caller's abort message aborts it
    controller.abort("the caller's reason")
    assert (signal.deadline, signal.time_left(), signal.reason) == (None, 0.0, "the caller's reason")
