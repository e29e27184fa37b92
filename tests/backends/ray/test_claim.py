"""The claim of a Ray call against its withdrawal, without a cluster
(docs/contract.md#backends, docs/contract.md#ray; decision 0042).

The signal actor and a worker's channel are plain classes: these tests drive
them directly, in the orders a cluster would produce only by chance, and
check the one rule — a call whose abort reached the worker process first is
never claimed there, and a claimed call gets its abort on its
``run.signal``. The cluster tests are in test_cluster.py.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

pytest.importorskip("ray", reason="ray is not installed (pip install 'dshtools[ray]')")

from dshtools import AbortController
from dshtools._backends.ray import remote as _ray_remote
from dshtools._backends.ray.backend import _pickle_reason
from dshtools._backends.ray.remote import RUNNING, WITHDRAWN, WorkerId, _Channel, _SignalActor

PID_A: WorkerId = ("node-1", (101, 5, 101))
PID_B: WorkerId = ("node-1", (102, 6, 102))


def _channel() -> _Channel:
    """A worker's channel with no actor behind it (its watcher is not started)."""
    return _Channel("test", None, PID_A)


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
    assert channel.deliver([("k1", _pickle_reason(ValueError("user pressed stop")))]) == [("k1", RUNNING)]
    assert controller.signal.wait(5)  # aborted on a thread of its own
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


def test_an_abort_between_the_tasks_arrival_and_its_claim_is_reported_withdrawn() -> None:
    # The task of k1 runs here and is still loading its body when the abort
    # comes: the claim can no longer win, and the worker says so (decision
    # 0046), so that the forced stop can end the task as withdrawn.
    channel = _channel()
    assert channel.arrive("k1")
    assert channel.deliver([("k1", _pickle_reason("stop")), ("k2", _pickle_reason("stop"))]) == [("k1", WITHDRAWN)]
    assert channel.claim("k1", "task-1") is None
    assert channel.starting == {}
    # k2's task is not here: only noted, never reported.
    assert "k2" in channel.withdrawn


def test_an_abort_before_the_task_arrives_makes_it_return_without_loading_its_body() -> None:
    channel = _channel()
    assert channel.deliver([("k1", _pickle_reason("stop"))]) == []
    assert not channel.arrive("k1")
    assert channel.starting == {} and "k1" not in channel.withdrawn


def test_a_task_whose_body_failed_to_load_is_no_longer_reported() -> None:
    channel = _channel()
    assert channel.arrive("k1")
    channel.leave("k1")  # the body raised while loading: the task ended
    assert channel.deliver([("k1", _pickle_reason("stop"))]) == []
    assert channel.starting == {}


def test_a_claimed_call_is_reported_running_never_withdrawn() -> None:
    channel = _channel()
    assert channel.arrive("k1")
    controller = channel.claim("k1", "task-1")
    assert controller is not None
    assert channel.deliver([("k1", _pickle_reason("stop"))]) == [("k1", RUNNING)]
    assert controller.signal.wait(5)


@pytest.mark.timeout(10)
def test_claim_and_delivery_racing_decide_once() -> None:
    # Many rounds of a task (its arrival, then its claim, on the main
    # thread) racing the delivery of the same call's abort (the watcher
    # thread). Each round ends one of three ways, and a call reported
    # withdrawn is never claimed: "withdrawn" means the body never ran. The
    # cluster tests force each order (tests/backends/ray/test_forced_interleavings.py).
    for i in range(300):
        channel = _channel()
        key = f"k{i}"
        start = threading.Barrier(2)
        task: list[tuple[bool, AbortController | None]] = []

        def run_task(channel: _Channel = channel, key: str = key, start: threading.Barrier = start) -> None:
            start.wait()
            if not channel.arrive(key):
                task.append((False, None))
                return
            task.append((True, channel.claim(key, "task")))

        thread = threading.Thread(target=run_task)
        thread.start()
        start.wait()
        delivered = channel.deliver([(key, _pickle_reason("stop"))])
        thread.join()
        ((arrived, controller),) = task
        if not arrived:
            assert delivered == []  # the abort came first: noted, the task returned at once
        elif controller is None:
            assert delivered == [(key, WITHDRAWN)]
        else:
            assert delivered == [(key, RUNNING)]
            assert controller.signal.wait(5)
        assert channel.starting == {}


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
    actor.watch("w1", PID_A, [("k1", RUNNING)])
    assert actor.where("k1", 0) == (RUNNING, PID_A)
    actor.forget("k1")
    assert actor.where("k1", 0) is None


def test_where_says_withdrawn_when_the_worker_reported_it_and_running_wins() -> None:
    actor = _actor()
    actor.subscribe("w1", PID_A)
    actor.subscribe("w2", PID_B)
    actor.abort("k1", b"r1")
    actor.abort("k2", b"r2")
    actor.watch("w1", PID_A, [("k1", WITHDRAWN), ("k2", RUNNING)])
    assert actor.where("k1", 0) == (WITHDRAWN, PID_A)
    # Only one process runs a call's task, so the two reports cannot both
    # be true; should they meet, the conservative one stands.
    actor.watch("w2", PID_B, [("k2", WITHDRAWN)])
    assert actor.where("k2", 0) == (RUNNING, PID_A)


def test_a_report_of_a_call_never_aborted_or_already_forgotten_is_dropped() -> None:
    actor = _actor()
    actor.subscribe("w1", PID_A)
    actor.abort("k2", b"r2")  # something to return the watch at once
    actor.watch("w1", PID_A, [("k1", WITHDRAWN)])
    assert actor.where("k1", 0) is None


@pytest.mark.timeout(10)
def test_where_asked_before_the_abort_arrived_waits_for_the_report() -> None:
    # The caller sends the abort, then (its forced stop) asks where; the
    # actor's threads may run the question first. It must wait for the
    # worker's report, not answer "nowhere" because the abort is not there
    # yet: that answer would kill a task as if its body ran.
    actor = _actor()
    asking = threading.Event()

    class _Noting(threading.Condition):
        def wait_for(self, predicate: Any, timeout: float | None = None) -> Any:
            asking.set()
            return super().wait_for(predicate, timeout)

    actor._news = _Noting(actor._lock)
    actor.subscribe("w1", PID_A)
    answers: list[Any] = []
    thread = threading.Thread(target=lambda: answers.append(actor.where("k1", 10)))
    thread.start()
    assert asking.wait(5)  # the question is in, before the abort
    actor.abort("k1", b"r1")
    actor.watch("w1", PID_A, [])  # the worker gets the abort ...
    actor.abort("k2", b"r2")  # (something to return the next watch at once)
    actor.watch("w1", PID_A, [("k1", WITHDRAWN)])  # ... and reports on its next watch
    thread.join(10)
    assert answers == [(WITHDRAWN, PID_A)]
