"""Property test: ``add_listener``, ``remove``, ``abort`` and ``any_of`` mixed
across 8 threads, 2 000 rounds (docs/contract.md#cancellation, "Semantics").

Each round starts the 8 workers on a barrier over fresh controllers; each
worker makes a few random operations on the round's signals (the derived
ones included, as they are made), then the main thread aborts every
controller and checks, for every listener:

* it ran at most once;
* it ran exactly once unless it was removed (registered and never removed;
  or refused with ``run_if_aborted=True``), and never when refused with
  ``run_if_aborted=False``;
* it never ran when ``remove()`` returned before any abort of its signal's
  sources had begun;
* per signal, the listeners that ran as registered ran in registration
  order.

Registration on one signal is serialised by a test-side lock, only so that
the test knows the registration order; aborts, removals and ``any_of`` race
with it freely.
"""

from __future__ import annotations

import itertools
import random
import sys
import threading
from collections import Counter
from dataclasses import dataclass, field

import pytest

from dshtools import AbortController, AbortSignal, ListenerHandle

THREADS = 8
ROUNDS = 2000
OPS_PER_ROUND = 5
CONTROLLERS = 3


@dataclass
class _Record:
    signal: int
    run_if_aborted: bool
    handle: ListenerHandle | None = None
    removed: bool = False
    must_not_run: bool = False


@dataclass
class _Round:
    controllers: list[AbortController]
    signals: list[AbortSignal] = field(default_factory=list)
    roots: list[frozenset[int]] = field(default_factory=list)  # controller indices
    locks: list[threading.Lock] = field(default_factory=list)
    order: list[list[int]] = field(default_factory=list)  # registered ids, in order
    started: list[bool] = field(default_factory=list)  # per controller: abort began
    runs: list[tuple[int, int]] = field(default_factory=list)  # (signal, listener id)
    records: dict[int, _Record] = field(default_factory=dict)
    grow: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def fresh(cls) -> _Round:
        r = cls([AbortController() for _ in range(CONTROLLERS)])
        for i, c in enumerate(r.controllers):
            r._append(c.signal, frozenset([i]))
        r.started = [False] * CONTROLLERS
        return r

    def _append(self, signal: AbortSignal, roots: frozenset[int]) -> None:
        with self.grow:
            self.locks.append(threading.Lock())
            self.order.append([])
            self.roots.append(roots)
            self.signals.append(signal)  # last: the others exist once it is visible


_ids = itertools.count()


def _worker(rnd: _Round, rng: random.Random) -> None:
    mine: list[int] = []
    for _ in range(OPS_PER_ROUND):
        op = rng.random()
        n = len(rnd.signals)
        if op < 0.45:
            sid = rng.randrange(n)
            lid = next(_ids)
            rec = _Record(sid, rng.random() < 0.5)
            rnd.records[lid] = rec

            def listener(_s: AbortSignal, sid: int = sid, lid: int = lid) -> None:
                rnd.runs.append((sid, lid))

            with rnd.locks[sid]:
                handle = rnd.signals[sid].add_listener(listener, run_if_aborted=rec.run_if_aborted)
                if handle.registered:
                    rnd.order[sid].append(lid)
            rec.handle = handle
            mine.append(lid)
        elif op < 0.65 and mine:
            lid = mine.pop(rng.randrange(len(mine)))
            rec = rnd.records[lid]
            assert rec.handle is not None
            rec.handle.remove()
            rec.removed = True
            if not any(rnd.started[i] for i in rnd.roots[rec.signal]):
                rec.must_not_run = True  # remove() returned before any abort began
        elif op < 0.8:
            i = rng.randrange(CONTROLLERS)
            rnd.started[i] = True
            rnd.controllers[i].abort(rng.choice([None, "r", 0]))
        else:
            picks = rng.sample(range(n), min(n, rng.randint(1, 3)))
            derived = AbortSignal.any_of([rnd.signals[i] for i in picks])
            rnd._append(derived, frozenset().union(*(rnd.roots[i] for i in picks)))


def _check(rnd: _Round) -> None:
    count = Counter(lid for _, lid in rnd.runs)
    assert all(n == 1 for n in count.values()), count.most_common(3)
    for lid, rec in rnd.records.items():
        assert rec.handle is not None
        ran = count[lid]
        if rec.must_not_run:
            assert ran == 0, (lid, rec)
        elif not rec.removed:
            expected = 1 if rec.handle.registered or rec.run_if_aborted else 0
            assert ran == expected, (lid, rec)
    for sid, order in enumerate(rnd.order):
        registered = set(order)
        ran_in_order = [lid for s, lid in rnd.runs if s == sid and lid in registered]
        assert ran_in_order == [lid for lid in order if count[lid]], sid


@pytest.mark.timeout(120)
def test_concurrent_add_remove_abort_any_of_run_each_listener_once_in_order() -> None:
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # switch often, so the operations really interleave
    start = threading.Barrier(THREADS + 1)
    done = threading.Barrier(THREADS + 1)
    current: list[_Round] = []
    errors: list[BaseException] = []

    def loop(t: int) -> None:
        rng = random.Random(1000 + t)
        for _ in range(ROUNDS):
            start.wait()
            try:
                _worker(current[-1], rng)
            except BaseException as exc:  # reported by the main thread
                errors.append(exc)
            done.wait()

    threads = [threading.Thread(target=loop, args=(t,), daemon=True) for t in range(THREADS)]
    finished = False
    try:
        for thread in threads:
            thread.start()
        for _ in range(ROUNDS):
            rnd = _Round.fresh()
            current.append(rnd)
            start.wait(timeout=30)
            done.wait(timeout=30)
            assert not errors, errors[0]
            for i, c in enumerate(rnd.controllers):
                rnd.started[i] = True
                c.abort()
            _check(rnd)
            current.clear()
        finished = True
    finally:
        sys.setswitchinterval(old)
        if not finished:  # release the workers (aborting a barrier they just left would break them)
            start.abort()
            done.abort()
        for thread in threads:
            thread.join(5)
