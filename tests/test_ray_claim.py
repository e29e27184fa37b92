"""The claim of a Ray call against its withdrawal, without a cluster
(docs/contract.md §9, §10; decision 0042).

The signal actor and a worker's channel are plain classes: these tests drive
them directly, in the orders a cluster would produce only by chance, and
check the one rule — a call whose abort reached the worker process first is
never claimed there, and a claimed call gets its abort on its
``run.signal``. The cluster tests are in test_ray_backend.py.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

pytest.importorskip("ray", reason="ray is not installed (pip install 'dshtools[ray]')")

from dshtools import (
    AbortController,
    _ray_remote,
)
from dshtools._ray_remote import WorkerId, _Channel, _SignalActor
from dshtools.ray import _pickle_reason

PID_A: WorkerId = ("node-1", (101, 5, 101))
PID_B: WorkerId = ("node-1", (102, 6, 102))


def _channel() -> _Channel:
    """A worker's channel with no actor behind it (its watcher is not started)."""
    channel = object.__new__(_Channel)
    channel.lock = threading.Lock()
    channel.running = {}
    channel.withdrawn = {}
    return channel


# ------------------------------------------------------------------ the worker's claim


def test_an_abort_that_reached_the_worker_first_makes_the_claim_fail() -> None:
    channel = _channel()
    assert channel.deliver([("k1", _pickle_reason("stop"))]) == []  # no body of k1 runs here
    assert channel.claim("k1", "task-1") is None
    # Another call is not affected, and the refused call's note is spent.
    assert channel.claim("k2", "task-2") is not None
    assert "k1" not in channel.withdrawn


def test_a_claimed_body_gets_its_abort_with_the_callers_reason() -> None:
    channel = _channel()
    controller = channel.claim("k1", "task-1")
    assert controller is not None
    assert channel.deliver([("k1", _pickle_reason(ValueError("user pressed stop")))]) == ["k1"]
    assert controller.signal.aborted
    assert repr(controller.signal.reason) == "ValueError('user pressed stop')"
    # A body that returned is no longer running: a late abort is only noted.
    channel.release("k1")
    assert channel.deliver([("k1", _pickle_reason("late"))]) == []


def test_rays_interrupt_before_the_claim_withdraws_only_its_own_task(monkeypatch: pytest.MonkeyPatch) -> None:
    channel = _channel()
    monkeypatch.setattr(_ray_remote, "_interrupted_task", "task-1")
    assert channel.claim("k1", "task-1") is None
    assert channel.claim("k2", "task-2") is not None


def test_the_worker_remembers_a_bounded_number_of_withdrawn_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_ray_remote, "_WITHDRAWN_KEPT", 3)
    channel = _channel()
    channel.deliver([(f"k{i}", b"") for i in range(5)])
    assert list(channel.withdrawn) == ["k2", "k3", "k4"]  # the oldest are forgotten first


@pytest.mark.timeout(10)
def test_claim_and_delivery_racing_decide_once() -> None:
    # Many rounds of a claim (the task's main thread) racing the delivery of
    # the same call's abort (the watcher thread): each round either refuses
    # the claim or aborts the claimed body, never runs a body that missed it.
    for i in range(300):
        channel = _channel()
        key = f"k{i}"
        start = threading.Barrier(2)
        claimed: list[AbortController | None] = []

        def claim(channel: _Channel = channel, key: str = key, start: threading.Barrier = start) -> None:
            start.wait()
            claimed.append(channel.claim(key, "task"))

        thread = threading.Thread(target=claim)
        thread.start()
        start.wait()
        delivered = channel.deliver([(key, _pickle_reason("stop"))])
        thread.join()
        (controller,) = claimed
        if controller is None:
            assert delivered == []
        else:
            assert delivered == [key]
            assert controller.signal.aborted


# ------------------------------------------------------------------ the signal actor


def _actor() -> Any:
    """The signal actor's class used in this process (its methods typed by
    Ray as remote methods: called directly here)."""
    return _SignalActor()


def test_a_worker_that_subscribes_late_learns_every_abort_not_yet_forgotten() -> None:
    actor = _actor()
    actor.abort("k1", b"r1")
    actor.abort("k2", b"r2")
    actor.forget("k1")  # k1 settled: its task ended and never starts again
    assert actor.subscribe("w1", PID_A) == [("k2", b"r2")]


def test_every_subscribed_worker_gets_every_abort_until_it_is_forgotten() -> None:
    actor = _actor()
    assert actor.subscribe("w1", PID_A) == []
    assert actor.subscribe("w2", PID_B) == []
    actor.abort("k1", b"r1")
    actor.abort("k1", b"again")  # idempotent
    # Between two watch calls the worker stays subscribed: nothing is lost.
    assert actor.watch("w1", PID_A, []) == [("k1", b"r1")]
    actor.abort("k2", b"r2")
    assert actor.watch("w1", PID_A, []) == [("k2", b"r2")]
    assert actor.watch("w2", PID_B, []) == [("k1", b"r1"), ("k2", b"r2")]


def test_a_worker_dropped_for_silence_is_subscribed_again_with_the_snapshot() -> None:
    actor = _actor()
    actor.subscribe("w1", PID_A)
    actor.abort("k1", b"r1")
    del actor._mailboxes["w1"]  # as abort() does for a worker silent for _MAILBOX_KEPT_S
    assert actor.watch("w1", PID_A, []) == [("k1", b"r1")]


def test_a_forget_that_overtakes_its_abort_keeps_the_abort_from_spreading() -> None:
    actor = _actor()
    actor.subscribe("w1", PID_A)
    actor.forget("k1")
    actor.abort("k1", b"r1")
    actor.abort("k2", b"r2")
    assert actor.watch("w1", PID_A, []) == [("k2", b"r2")]
    assert actor.subscribe("w2", PID_B) == [("k2", b"r2")]


def test_where_names_the_worker_that_reported_running_the_body() -> None:
    actor = _actor()
    actor.subscribe("w1", PID_A)
    actor.abort("k1", b"r1")
    assert actor.where("k1", 0) is None  # not reported yet
    actor.abort("k2", b"r2")  # something to return the next watch at once
    actor.watch("w1", PID_A, ["k1"])
    assert actor.where("k1", 0) == PID_A
    actor.forget("k1")
    assert actor.where("k1", 0) is None
