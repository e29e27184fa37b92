"""A timer never waits on listeners (docs/contract.md#cancellation and docs/contract.md#a15, field case
B58): the one timer thread only decides that a deadline is reached; each
fired timeout's abort runs on an abort runner, a new one when every runner
is busy, so a listener that blocks holds back no other timeout, deadline or
``TimeoutPolicy``. Pending timers still share one thread and the runners
end once idle.

B58 (seen in RxPY's shared ``TimeoutScheduler``): with every timeout on one
thread that also ran the callbacks, ``AbortSignal.timeout(0.05)`` with a
listener that waited 3 s made ``AbortSignal.timeout(0.2).wait(5)`` return
after 3.07 s, and every ``TimeoutPolicy`` deadline waited too.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dshtools import (
    TOOL_TIMEOUT,
    AbortController,
    AbortSignal,
    TimeoutPolicy,
    ToolRegistry,
    ToolRunContext,
    deadline,
)
from dshtools._signal import timer as _timer
from tests.conftest import Reports
from tests.helpers.calls import call, tool
from tests.helpers.cycles import young_heap


def _named(name: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == name]


@pytest.fixture
def blocker() -> Iterator[tuple[threading.Event, threading.Event]]:
    """``(entered, release)``: a listener made with ``_blocking`` sets
    ``entered`` and then blocks until ``release`` (at most 5 s); ``release``
    is set when the test ends, whatever it asserted."""
    entered, release = threading.Event(), threading.Event()
    yield entered, release
    release.set()


def _blocking(entered: threading.Event, release: threading.Event, seconds: float = 5.0) -> Any:
    def listener(_s: AbortSignal) -> None:
        entered.set()
        release.wait(seconds)

    return listener


@pytest.mark.timeout(30)
def test_b58_a_listener_blocking_5s_holds_back_no_timeout_and_no_timeout_policy(
    blocker: tuple[threading.Event, threading.Event],
) -> None:
    """B58 with its numbers: ``AbortSignal.timeout(0.05)`` whose listener
    blocks up to 5 s (it sets an Event first); once it runs, a new
    ``AbortSignal.timeout(0.2)`` waited on for up to 3 s aborts within
    0.7 s, a ``deadline`` of 0.2 s too, and a registry call under
    ``TimeoutPolicy`` with ``timeout=0.3`` on a body waiting on its signal
    is ``TOOL_TIMEOUT`` within 1 s."""
    entered, release = blocker
    stuck = AbortSignal.timeout(0.05)
    stuck.add_listener(_blocking(entered, release))
    assert entered.wait(5)

    start = time.monotonic()
    assert AbortSignal.timeout(0.2).wait(3)
    assert time.monotonic() - start < 0.7

    start = time.monotonic()
    with deadline(AbortController().signal, 0.2, "STEP") as dl:
        assert dl.signal.wait(3)
        assert dl.timed_out
    assert time.monotonic() - start < 0.7

    def body(_args: Mapping[str, Any], run: ToolRunContext) -> str:
        run.signal.wait(5)
        return "late"

    with ToolRegistry() as registry:
        registry.add_around_dispatch(TimeoutPolicy())
        registry.register(tool("waits", body, timeout=0.3))
        start = time.monotonic()
        result = registry.execute(call("waits"))
        elapsed = time.monotonic() - start
    assert result.is_error and result.code == TOOL_TIMEOUT
    assert elapsed < 1.0
    assert not release.is_set()  # the first listener was blocked all along


@pytest.mark.timeout(120)
@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    delays=st.lists(st.floats(min_value=0.0, max_value=0.3), min_size=200, max_size=200),
    blocks=st.lists(st.floats(min_value=0.0, max_value=1.0), min_size=200, max_size=200),
)
def test_every_timeout_aborts_within_50ms_of_its_deadline_while_a_third_of_the_listeners_block(
    delays: list[float], blocks: list[float]
) -> None:
    """200 timeouts with random delays; every third one has a listener that
    blocks for up to 1 s. Each aborts within 50 ms of its deadline (the
    instant its timer entry was due: ``signal.deadline`` read at creation).

    The 50 ms is generous on purpose: a fired timeout costs tens of
    microseconds, but this machine is shared and two cores may be running
    other test suites; a listener that held back the other timers would miss
    it by up to a second."""
    release = threading.Event()
    stamps: dict[int, float] = {}
    all_aborted = threading.Event()
    signals: list[tuple[float, AbortSignal]] = []

    def stamp(index: int) -> Any:
        def listener(_s: AbortSignal) -> None:
            stamps[index] = time.monotonic()  # the abort's first listener: when it aborted
            if len(stamps) == len(delays):
                all_aborted.set()

        return listener

    with young_heap():  # collections traverse only what this example makes
        try:
            for index, (delay, block) in enumerate(zip(delays, blocks, strict=True)):
                signal = AbortSignal.timeout(delay)
                due = signal.deadline
                assert due is not None
                signal.add_listener(stamp(index))
                if index % 3 == 0:
                    signal.add_listener(lambda _s, block=block: release.wait(block))  # type: ignore[misc]
                signals.append((due, signal))
            assert all_aborted.wait(10)
            late = {i: stamps[i] - due for i, (due, _s) in enumerate(signals) if stamps[i] - due > 0.05}
            assert not late, f"timeouts aborted more than 50 ms after their deadline: {late}"
            assert all(stamps[i] >= due for i, (due, _s) in enumerate(signals))
        finally:
            release.set()


@pytest.mark.timeout(60)
def test_10000_pending_timeouts_are_one_timer_thread_and_no_runner() -> None:
    assert AbortSignal.timeout(0).wait(5)  # the timer thread exists
    runners = len(_named("dshtools-abort"))
    signals = [AbortSignal.timeout(60) for _ in range(10_000)]
    for s in signals[:100]:
        s.add_listener(lambda _s: None)
    assert len(_named("dshtools-timer")) == 1
    assert len(_named("dshtools-abort")) <= runners  # pending timers start no runner
    for s in signals:
        s.close()


@pytest.mark.timeout(60)
def test_a_quiet_process_has_no_runner_thread_once_the_aborts_ran(
    blocker: tuple[threading.Event, threading.Event],
) -> None:
    entered, release = blocker
    ran = threading.Barrier(6)
    for _ in range(5):
        AbortSignal.timeout(0).add_listener(lambda _s: ran.wait(10))
    blocked = AbortSignal.timeout(0)
    blocked.add_listener(_blocking(entered, release))
    ran.wait(10)  # five aborts' listeners run at once: five runners at least
    assert entered.wait(5)
    assert _timer.runner_count() >= 6
    release.set()
    # Each runner ends RUNNER_IDLE_EXIT seconds after its last abort.
    for thread in _named("dshtools-abort"):
        thread.join(_timer.RUNNER_IDLE_EXIT + 10)
    assert _named("dshtools-abort") == []
    assert _timer.runner_count() == 0
    assert len(_named("dshtools-timer")) == 1  # the timer thread stays


@pytest.mark.timeout(30)
def test_a_timeout_fires_with_its_listener_while_an_earlier_abort_raised_on_its_runner(unraisable: Reports) -> None:
    err = RuntimeError("listener on a runner")

    def bad(_s: AbortSignal) -> None:
        raise err

    AbortSignal.timeout(0).add_listener(bad)
    done = threading.Event()
    AbortSignal.timeout(0.01).add_listener(lambda _s: done.set())
    assert done.wait(5)
    # The report is made on the runner that ran ``bad``: nothing orders it
    # before the other listener, so it is waited for, not assumed.
    assert unraisable.wait_for(1)
    assert [u.exc_value for u in unraisable] == [err]


# Run by a fresh interpreter (pytest itself must never fork: it is
# threaded). At the fork an abort runner of the parent is blocked in a
# listener; the child has no runner and its timeouts' listeners still run,
# each on a runner of its own, even one that blocks.
_FORK_RUNNERS = """
import os, sys, threading
from dshtools import AbortSignal
from dshtools._signal import timer as _timer
from tests.helpers.calls import call, tool
from tests.helpers.cycles import young_heap

entered, release = threading.Event(), threading.Event()
def block(_s):
    entered.set()
    release.wait(10)
AbortSignal.timeout(0).add_listener(block)
assert entered.wait(5) and _timer.runner_count() >= 1
pid = os.fork()
if pid == 0:
    code = 1
    try:
        ok = _timer.runner_count() == 0
        stuck, done = threading.Event(), threading.Event()
        AbortSignal.timeout(0).add_listener(lambda s: (stuck.set(), threading.Event().wait(10)))
        ok = ok and stuck.wait(5)
        AbortSignal.timeout(0.01).add_listener(lambda s: done.set())
        ok = ok and done.wait(5) and _timer.runner_count() >= 2
        code = 0 if ok else 3
    finally:
        os._exit(code)
_, status = os.waitpid(pid, 0)
release.set()
sys.exit(os.waitstatus_to_exitcode(status))
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.timeout(60)
def test_a_forked_child_has_no_runner_of_its_parent_and_its_timeouts_still_run_their_listeners() -> None:
    """Fork safety (docs/contract.md A10) of the runners."""
    proc = subprocess.run([sys.executable, "-c", _FORK_RUNNERS], capture_output=True, text=True, timeout=50)
    assert proc.returncode == 0, proc.stderr
