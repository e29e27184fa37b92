"""Field case N20 (docs/field-cases.md): concurrent aborts and waits racing
aborts, at the counts that showed the free-threaded failures (on 3.13t two
concurrent ``abort()`` calls both won in about 8 % of lockstep rounds, and
4 of 21 000 waits racing an abort were never woken). The same tests run on
every interpreter; on a GIL build they must simply hold.

Round counts come from ``DSHTOOLS_STRESS_ROUNDS``: unset, a few thousand
(the default test command stays fast); ``full``, the field case's counts
(100 000 lockstep rounds, 50 000 swept controllers, 100 000 wait rounds);
a number, that many of each. Each test counts every violation over all its
rounds and reports the count, so a failure says how often, not only that.
Threads meet at barriers (each round starts together); nothing sleeps."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

import pytest

from dshtools import AbortController, AbortSignal
from tests.helpers.interleavings import race_in_lockstep

_FULL = {"lockstep": 100_000, "sweep": 50_000, "wait": 100_000}
_DEFAULT = {"lockstep": 3_000, "sweep": 5_000, "wait": 2_000}


def _rounds(kind: str) -> int:
    setting = os.environ.get("DSHTOOLS_STRESS_ROUNDS", "")
    if setting == "full":
        return _FULL[kind]
    if setting:
        return int(setting)
    return _DEFAULT[kind]


# Controllers are made in batches, so that 100 000 rounds never hold
# 100 000 controllers and their listeners at once.
_BATCH = 2_000


def _recording(seen: list[tuple[int, object]], k: int) -> Callable[[AbortSignal], None]:
    def listener(signal: AbortSignal) -> None:
        seen.append((k, signal.reason))  # list.append is atomic on every build

    return listener


def _violations(controllers: list[AbortController], seen: list[list[tuple[int, object]]], listeners: int) -> int:
    """Rounds whose listeners did not each run exactly once, or read a
    reason other than the one the signal reports now."""
    bad = 0
    for controller, calls in zip(controllers, seen, strict=True):
        reason = controller.signal.reason
        if sorted(k for k, _ in calls) != list(range(listeners)) or any(r is not reason for _, r in calls):
            bad += 1
    return bad


def _armed_batch(n: int, listeners: int) -> tuple[list[AbortController], list[list[tuple[int, object]]]]:
    controllers = [AbortController() for _ in range(n)]
    seen: list[list[tuple[int, object]]] = [[] for _ in range(n)]
    for controller, calls in zip(controllers, seen, strict=True):
        for k in range(listeners):
            controller.signal.add_listener(_recording(calls, k))
    return controllers, seen


@pytest.mark.timeout(900)
@pytest.mark.parametrize("listeners", [1, 3])
def test_two_threads_aborting_one_controller_in_lockstep_have_one_winner(listeners: int) -> None:
    """Two threads start each round together at a barrier and abort the same
    fresh controller with different reasons: every listener runs exactly
    once and reads the reason the signal keeps."""
    rounds = _rounds("lockstep")
    bad = 0
    for start in range(0, rounds, _BATCH):
        n = min(_BATCH, rounds - start)
        controllers, seen = _armed_batch(n, listeners)
        race_in_lockstep(
            n, lambda i: controllers[i].abort("first"), lambda i: controllers[i].abort("second"), spin=True
        )
        bad += _violations(controllers, seen, listeners)
    assert bad == 0, f"{bad} of {rounds} rounds ran a listener twice or changed the reason"


@pytest.mark.timeout(900)
def test_eight_threads_sweeping_the_same_controllers_abort_each_once() -> None:
    """Eight threads, released together, each abort every controller of the
    same list in the same order, so they collide on most of them: every
    listener runs exactly once, with the one reason the signal keeps."""
    count = _rounds("sweep")
    controllers, seen = _armed_batch(count, 2)
    threads = 8
    barrier = threading.Barrier(threads)
    errors: list[BaseException] = []

    def sweep(me: int) -> None:
        try:
            barrier.wait(timeout=60)
            for controller in controllers:
                controller.abort(me)
        except BaseException as exc:
            errors.append(exc)

    workers = [threading.Thread(target=sweep, args=(me,), daemon=True) for me in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join(600)
    assert not any(t.is_alive() for t in workers), "a sweeping thread is still running"
    assert not errors, errors[0]
    bad = _violations(controllers, seen, 2)
    assert bad == 0, f"{bad} of {count} controllers ran a listener twice or changed the reason"


# A waiter whose wait lasts this long was not woken: the abort of its round
# returned long before (seconds; the bound of every wait below).
_UNWOKEN_AFTER = 5.0


@pytest.mark.timeout(900)
def test_waits_racing_an_abort_are_all_woken() -> None:
    """Each round two threads wait on a fresh controller's signal while a
    third aborts it, all released by one barrier: the first waiter makes
    the signal's Event, the second may find it made, and the abort may come
    at any point of either. Every wait returns ``True`` well before its
    bound: none is left to its timeout."""
    rounds = _rounds("wait")
    unwoken = 0
    lock = threading.Lock()

    def waiting(controllers: list[AbortController]) -> Callable[[int], object]:
        def step(i: int) -> None:
            nonlocal unwoken
            start = time.monotonic()
            woken = controllers[i].signal.wait(_UNWOKEN_AFTER)
            if not woken or time.monotonic() - start >= _UNWOKEN_AFTER:
                with lock:
                    unwoken += 1

        return step

    for start in range(0, rounds, _BATCH):
        n = min(_BATCH, rounds - start)
        controllers = [AbortController() for _ in range(n)]
        race_in_lockstep(
            n,
            waiting(controllers),
            waiting(controllers),
            lambda i: controllers[i].abort(),
            barrier_timeout=2 * _UNWOKEN_AFTER,
            join=600,
            spin=True,
        )
    assert unwoken == 0, f"{unwoken} of {2 * rounds} waits were never woken by the abort"
