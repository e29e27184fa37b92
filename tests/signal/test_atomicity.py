"""The atomicity entries of docs/atomicity.md that no other test forces:
the plain abort's claim (as built and with the free-threaded claim under a
lock) and a ``wait()`` racing an ``abort()`` (field case N20). Each race is
forced: a thread is paused at a chosen line of the library (a line-trace
hook on that thread only) while the other side runs to completion, so the
interleaving that used to lose happens every run, on every build."""

from __future__ import annotations

import inspect
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

import pytest

from dshtools import AbortController, AbortSignal
from dshtools._signal import controller as _controller
from tests.helpers.waiting import blocked_in_wait, run_in_thread, wait_until


def _line_of(fn: Callable[..., Any], text: str) -> int:
    """The number of the first line of ``fn`` whose source contains ``text``."""
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


class _Pause:
    """Pauses the thread that runs ``run()`` when it reaches the first line
    of ``fn`` whose source contains ``text`` (before the line runs), or,
    given ``when`` instead, the first line of ``fn`` at which ``when(frame)``
    holds: ``reached`` is set, and the thread goes on once ``go`` is set
    (10 s at most)."""

    def __init__(self, fn: Callable[..., Any], text: str = "", when: Callable[[FrameType], bool] | None = None) -> None:
        self.code = inspect.unwrap(fn).__code__
        if when is None:
            line = _line_of(inspect.unwrap(fn), text)
            when = lambda frame: frame.f_lineno == line  # noqa: E731
        self.when = when
        self.reached = threading.Event()
        self.go = threading.Event()

    def _local(self, frame: FrameType, event: str, _arg: object) -> Any:
        if event == "line" and not self.reached.is_set() and self.when(frame):
            self.reached.set()
            self.go.wait(10)
            return None
        return self._local

    def _tracer(self, frame: FrameType, _event: str, _arg: object) -> Any:
        return self._local if frame.f_code is self.code else None

    def run(self, fn: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
        def traced() -> Any:
            sys.settrace(self._tracer)
            try:
                return fn()
            finally:
                sys.settrace(None)

        thread, box = run_in_thread(traced)
        assert self.reached.wait(5), "the paused thread never reached its line"
        return thread, box


@pytest.fixture(params=["as built", "claimed under a lock"])
def claim(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The abort as this interpreter runs it, and the free-threaded build's
    claim under a lock (installed here on any build)."""
    if request.param == "claimed under a lock":
        plain = inspect.unwrap(AbortController.abort)
        monkeypatch.setattr(AbortController, "abort", _controller._claimed_under_lock(plain))
    yield request.param


def test_the_lock_claim_is_installed_exactly_when_the_gil_was_off_at_import() -> None:
    wrapped = hasattr(AbortController.abort, "__wrapped__")
    assert wrapped is (not _controller.GIL_AT_IMPORT)


@pytest.mark.timeout(30)
def test_an_abort_arriving_after_another_claimed_returns_at_once_and_runs_nothing(claim: str) -> None:
    """The first abort is paused right after its claim, before it stored its
    reason or ran a listener: a second abort returns at once without running
    the listener or touching the reason; the first then finishes alone."""
    c = AbortController()
    seen: list[object] = []
    c.signal.add_listener(lambda s: seen.append(s.reason))
    pause = _Pause(AbortController.abort, "listeners = signal._listeners")
    first, box = pause.run(lambda: c.abort("first"))
    c.abort("second")
    assert seen == [] and not c.signal.aborted
    pause.go.set()
    first.join(10)
    assert box == [None]
    assert seen == ["first"] and c.signal.reason == "first"


@pytest.mark.timeout(30)
@pytest.mark.parametrize("kind", ["plain", "derived"])
def test_a_waiter_that_finds_another_waiters_list_rereads_aborted(kind: str) -> None:
    """N20's lost wake-up, forced. Two waiters read ``aborted`` (false) and
    are paused before they look for the signal's list of waiters; the abort
    runs to completion (no list yet: nobody to wake); the first waiter then
    makes the list and returns. The second finds that list made: it must
    read ``aborted`` again rather than block where nobody will wake it."""
    c = AbortController()
    signal = c.signal if kind == "plain" else AbortSignal.any_of([c.signal])
    first = _Pause(AbortSignal.wait, "waiters = self._waiters")
    second = _Pause(AbortSignal.wait, "waiters = self._waiters")
    t1, box1 = first.run(lambda: signal.wait(10))
    t2, box2 = second.run(lambda: signal.wait(10))
    c.abort()
    first.go.set()
    t1.join(5)
    assert box1 == [True]
    second.go.set()
    t2.join(2)
    woken = not t2.is_alive()
    t2.join(10)
    assert woken, "the second waiter blocked where the abort never woke it"
    assert box2 == [True]


@pytest.mark.timeout(30)
def test_a_waiter_joining_the_list_while_the_first_waiter_makes_it_is_woken() -> None:
    """The first waiter is paused at its first line after the signal's list
    of waiters became visible (still inside the lock that made it). A second
    waiter finds that list and joins it without the lock; an abort then runs
    to completion. The abort must wake the second waiter: had the first
    stored the list before marking the signal watched, the abort would read
    "not watched" and wake nobody (on 3.13t, 1 of 200 000 waits)."""
    c = AbortController()
    signal = c.signal
    first = _Pause(AbortSignal.wait, when=lambda frame: frame.f_locals["self"]._waiters is not None)
    t1, box1 = first.run(lambda: signal.wait(10))
    assert signal._waiters is not None, "the first waiter paused before the list was visible"
    t2, box2 = run_in_thread(lambda: signal.wait(20))
    # Parked: it joined the list and read `aborted` false.
    wait_until(lambda: blocked_in_wait(t2))
    assert len(signal._waiters) == 1
    c.abort()
    t2.join(5)
    woken = not t2.is_alive()
    first.go.set()
    t1.join(10)
    t2.join(20)
    assert woken, "the abort never woke the waiter that joined the first waiter's list"
    assert box1 == [True] and box2 == [True]
