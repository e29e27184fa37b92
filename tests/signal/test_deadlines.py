"""``deadline()`` / ``Deadline`` / ``timeout_of()`` (docs/contract.md#cancellation, deadline helpers)."""

from __future__ import annotations

import gc
import math
import threading
import time
from typing import Any

import pytest

from dshtools import AbortController, AbortError, AbortSignal, Deadline, TimeoutReason, deadline, timeout_of
from dshtools._signal import signal as _signal_surface
from dshtools._signal import timer as _timer
from dshtools._signal.signal import _LinkedSignal


def _linked(signal: AbortSignal) -> _LinkedSignal:
    """A timeout or deadline signal, as the timer sees it (to fire it by hand)."""
    assert isinstance(signal, _LinkedSignal)
    return signal


def pending_baseline() -> int:
    gc.collect()
    return _timer.pending_count()


@pytest.mark.timeout(30)
def test_deadline_aborts_with_timeout_reason_of_its_code_and_seconds() -> None:
    up = AbortController()
    start = time.monotonic()
    with deadline(up.signal, 0.05, "TOOL_TIMEOUT") as dl:
        assert isinstance(dl, Deadline)
        assert dl.seconds == 0.05 and dl.code == "TOOL_TIMEOUT"
        assert dl.timed_out is False
        assert dl.signal.wait(5)
        assert time.monotonic() - start >= 0.045
        reason = dl.signal.reason
        assert isinstance(reason, TimeoutReason)
        assert (reason.code, reason.seconds) == ("TOOL_TIMEOUT", 0.05)
        assert dl.timed_out is True
        assert timeout_of(dl.signal) is reason
        assert timeout_of(dl.signal, "TOOL_TIMEOUT") is reason
        assert timeout_of(dl.signal, "OTHER") is None
    assert up.signal.aborted is False  # a deadline never aborts its upstream


@pytest.mark.timeout(30)
def test_deadline_without_upstream_times_out() -> None:
    with deadline(None, 0.01, "T") as dl:
        assert dl.signal.wait(5)
        assert dl.timed_out


@pytest.mark.timeout(30)
def test_upstream_abort_wins_and_is_not_mistaken_for_a_timeout() -> None:
    up = AbortController()
    with deadline(up.signal, 60, "T") as dl:
        up.abort("user")
        assert dl.signal.reason == "user"
        assert dl.timed_out is False
        assert timeout_of(dl.signal) is None
        # Now let the deadline's own timer fire, as an abort runner would
        # (by hand: deterministic even on a loaded machine): the first abort
        # stays.
        _linked(dl.signal)._on_timer()
        assert dl.signal.reason == "user"
        assert dl.timed_out is False
        assert timeout_of(dl.signal) is None


def test_already_aborted_upstream_gives_an_already_aborted_deadline() -> None:
    with deadline(AbortSignal.already_aborted("early"), 60, "T") as dl:
        assert dl.signal.aborted and dl.signal.reason == "early"
        assert dl.timed_out is False


def test_a_deadline_over_an_aborted_upstream_arms_no_timer() -> None:
    baseline = pending_baseline()
    with deadline(AbortSignal.already_aborted("early"), 60, "T") as dl:
        assert dl.signal.aborted
        assert _timer.pending_count() == baseline  # nothing left to fire


def test_an_outer_deadline_of_the_same_code_firing_is_not_the_inner_ones_timeout() -> None:
    """Nested deadlines of one code: only the one whose own timer decided
    the abort reports ``timed_out`` (field cases B28, B31)."""
    up = AbortController()
    with deadline(up.signal, 60, "T") as outer, deadline(outer.signal, 60, "T") as inner:
        _linked(outer.signal)._on_timer()  # the outer timer fires, as an abort runner would
        assert inner.signal.aborted and inner.signal.reason is outer.signal.reason
        assert outer.timed_out is True
        assert inner.timed_out is False


@pytest.mark.parametrize("seconds", [None, 0, 0.0, -1, -0.5], ids=repr)
def test_none_or_non_positive_seconds_arm_no_timer(seconds: float | None) -> None:
    baseline = pending_baseline()
    up = AbortController()
    dl = deadline(up.signal, seconds, "T")
    assert _timer.pending_count() == baseline
    assert dl.seconds is None
    assert dl.signal is up.signal  # only the upstream
    dl.close()
    up.abort("u")
    assert dl.signal.reason == "u"
    assert dl.timed_out is False


def test_no_timer_and_no_upstream_gives_a_signal_that_never_aborts() -> None:
    baseline = pending_baseline()
    dl = deadline(None, None, "T")
    assert _timer.pending_count() == baseline
    assert dl.signal.aborted is False
    assert dl.signal.wait(0.01) is False
    dl.close()


def test_closing_a_timerless_deadline_leaves_a_derived_upstream_attached() -> None:
    root = AbortController()
    upstream = AbortSignal.any_of([root.signal])
    with deadline(upstream, None, "T") as dl:
        assert dl.signal is upstream
    root.abort("r")
    assert upstream.reason == "r"


@pytest.mark.parametrize("bad", [math.nan, math.inf], ids=repr)
def test_deadline_rejects_nan_and_infinite_seconds(bad: float) -> None:
    with pytest.raises(ValueError):
        deadline(None, bad, "T")


@pytest.mark.parametrize("bad", [True, False, "1", b"1", [1]], ids=repr)
def test_deadline_rejects_non_number_seconds(bad: Any) -> None:
    with pytest.raises(TypeError):
        deadline(None, bad, "T")


def test_deadline_rejects_a_non_str_code_and_a_non_signal_upstream() -> None:
    with pytest.raises(TypeError):
        deadline(None, 1, 5)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        deadline("signal", 1, "T")  # type: ignore[arg-type]


def test_close_cancels_the_timer_detaches_and_never_aborts() -> None:
    baseline = pending_baseline()
    up = AbortController()
    dl = deadline(up.signal, 60, "T")
    assert _timer.pending_count() == baseline + 1
    assert up.signal.listener_count == 1
    gc.disable()
    try:
        dl.close()
        dl.close()  # idempotent
        assert _timer.pending_count() == baseline
        assert up.signal.listener_count == 0
    finally:
        gc.enable()
    up.abort()
    assert dl.signal.aborted is False
    assert dl.timed_out is False


def test_with_returns_the_deadline_itself_and_closes_it() -> None:
    baseline = pending_baseline()
    up = AbortController()
    dl = deadline(up.signal, 60, "T")
    with dl as entered:
        assert entered is dl
    assert _timer.pending_count() == baseline
    assert up.signal.listener_count == 0


def test_a_deadlines_repr_gives_its_code_seconds_and_signal() -> None:
    with deadline(None, 5, "MY_TIMEOUT") as dl:
        assert repr(dl) == f"<Deadline code='MY_TIMEOUT' seconds=5.0 signal={dl.signal!r}>"


def test_deadline_over_a_derived_upstream_links_to_the_original_sources() -> None:
    root = AbortController()
    upstream = AbortSignal.any_of([root.signal])
    with deadline(upstream, 60, "T") as dl:
        del upstream
        gc.collect()
        assert root.signal.listener_count == 1  # the deadline's signal, flattened
        root.abort("r")
        assert dl.signal.reason == "r"


@pytest.mark.timeout(30)
def test_deadline_timer_listeners_run_on_a_library_thread() -> None:
    with deadline(AbortController().signal, 0.01, "T") as dl:
        names: list[str] = []
        done = threading.Event()

        def on_abort(_s: AbortSignal) -> None:
            names.append(threading.current_thread().name)
            done.set()

        dl.signal.add_listener(on_abort)
        assert done.wait(5)
        assert names == ["dshtools-abort"]


@pytest.mark.timeout(60)
def test_1000_deadlines_closed_leave_no_timer_and_no_listener() -> None:
    baseline = pending_baseline()
    up = AbortController()
    for _ in range(1000):
        with deadline(up.signal, 30, "T") as dl:
            dl.signal.add_listener(lambda s: None)
        assert up.signal.listener_count == 0
    assert _timer.pending_count() == baseline


@pytest.mark.timeout(60)
def test_upstream_abort_racing_the_timer_reason_and_timed_out_always_agree() -> None:
    # B28's kind at the primitive level: whichever fires first decides both
    # the reason and `timed_out`; they never disagree.
    outcomes = {"timeout": 0, "user": 0}
    for i in range(300):
        up = AbortController()
        seconds = 0.002
        with deadline(up.signal, seconds, "T") as dl:
            # Not synchronisation: a varying offset around the deadline so
            # that both sources win sometimes (sleeping releases the GIL the
            # timer thread needs).
            time.sleep(seconds * (i % 20) / 10)
            up.abort("user")
            assert dl.signal.wait(5)
            if dl.timed_out:
                assert isinstance(dl.signal.reason, TimeoutReason)
                assert timeout_of(dl.signal, "T") is dl.signal.reason
                outcomes["timeout"] += 1
            else:
                assert dl.signal.reason == "user"
                assert timeout_of(dl.signal) is None
                outcomes["user"] += 1
    assert outcomes["user"] > 0 and outcomes["timeout"] > 0, outcomes


# ---------------------------------------------------------------- timeout_of


def test_timeout_of_reads_a_timeout_reason_directly_or_through_abort_errors() -> None:
    r = TimeoutReason("A", 1)
    assert timeout_of(r) is r
    assert timeout_of(AbortError(r)) is r
    assert timeout_of(AbortError(AbortError(r))) is r
    assert timeout_of(AbortError(r), "A") is r
    assert timeout_of(AbortError(r), "B") is None


def test_timeout_of_a_signal_aborted_by_a_timeout_reason() -> None:
    r = TimeoutReason("A", 1)
    s = AbortSignal.already_aborted(r)
    assert timeout_of(s) is r
    assert timeout_of(s, "A") is r
    assert timeout_of(s, "B") is None
    with pytest.raises(AbortError) as info:
        s.throw_if_aborted()
    assert timeout_of(info.value, "A") is r


@pytest.mark.parametrize(
    "source",
    [
        AbortController().signal,  # pending
        AbortSignal.already_aborted("user"),
        AbortSignal.already_aborted(),
        AbortSignal.already_aborted(TimeoutError("plain timeout, not a TimeoutReason")),
        ValueError("x"),
        AbortError("x"),
        AbortError(),
    ],
    ids=repr,
)
def test_timeout_of_is_none_when_no_timeout_reason_is_involved(source: Any) -> None:
    assert timeout_of(source) is None


def test_timeout_of_rejects_other_types() -> None:
    with pytest.raises(TypeError):
        timeout_of("TIMEOUT")  # type: ignore[arg-type]


# ------------------------------------------- remaining budget (docs/contract.md#a9)


class _Clock:
    """A stand-in for the ``time`` module inside ``dshtools._signal.signal`` (where ``time_left`` reads the clock)."""

    def __init__(self, now: float) -> None:
        self.now = now

    def monotonic(self) -> float:
        return self.now


def test_a_signal_without_a_timer_has_no_deadline() -> None:
    c = AbortController()
    for s in (c.signal, AbortSignal(), AbortSignal.any_of([c.signal]), AbortSignal.any_of([])):
        assert s.deadline is None
        assert s.time_left() is None


def test_timeout_deadline_is_the_timer_instant_and_time_left_counts_down(monkeypatch: pytest.MonkeyPatch) -> None:
    before = time.monotonic()
    with AbortSignal.timeout(30) as s:
        after = time.monotonic()
        at = s.deadline
        assert at is not None and before + 30 <= at <= after + 30
        clock = _Clock(at - 12.5)
        monkeypatch.setattr(_signal_surface, "time", clock)
        assert s.time_left() == pytest.approx(12.5)
        clock.now = at + 5  # past the instant, timer not fired yet: never negative
        assert s.time_left() == 0.0


def test_any_of_deadline_is_the_earliest_timer_among_its_sources_through_flattening() -> None:
    c = AbortController()
    with AbortSignal.timeout(60) as late, AbortSignal.timeout(20) as early:
        inner = AbortSignal.any_of([c.signal, late])
        outer = AbortSignal.any_of([inner, early])
        assert inner.deadline == late.deadline
        assert outer.deadline == early.deadline
        nested = AbortSignal.any_of([AbortSignal.any_of([outer])])
        assert nested.deadline == early.deadline
        early.close()  # that timer can no longer abort them
        assert outer.deadline == late.deadline


def test_deadline_helper_signal_reports_the_earliest_of_its_timer_and_upstreams() -> None:
    with deadline(None, 30, "OUTER") as outer, deadline(outer.signal, 10, "INNER") as inner:
        assert outer.signal.deadline is not None and inner.signal.deadline is not None
        assert inner.signal.deadline < outer.signal.deadline
        with deadline(inner.signal, 100, "WIDE") as wide:
            assert wide.signal.deadline == inner.signal.deadline  # the upstream's is earlier
        with deadline(inner.signal, None, "NONE") as same:
            assert same.signal.deadline == inner.signal.deadline


def test_closed_and_aborted_signals_have_no_deadline_and_no_time_left() -> None:
    c = AbortController()
    t = AbortSignal.timeout(30)
    derived = AbortSignal.any_of([c.signal, t])
    closed = AbortSignal.any_of([t])
    closed.close()
    assert closed.deadline is None and closed.time_left() is None
    c.abort()
    assert derived.aborted
    assert derived.deadline is None
    assert derived.time_left() == 0.0  # aborted: no time left
    t.close()
    assert t.deadline is None and t.time_left() is None


@pytest.mark.timeout(10)
def test_a_fired_timeout_has_no_time_left() -> None:
    s = AbortSignal.timeout(0)
    assert s.wait(5)
    assert s.time_left() == 0.0
    assert s.deadline is None
