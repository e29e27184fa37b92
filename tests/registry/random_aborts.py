"""What the random-abort stress tests share: ``plan_calls`` (the seeded
random plans), ``Aborter`` (aborts controllers at scheduled times on its
own thread), ``Tracker`` (what the bodies and the observer saw, and the
tool body that waits as its plan says), ``arm`` (aborts one controller
as its plan says), ``in_threads`` (one piece of work split over
threads), ``drive`` (runs a list of planned calls from several
caller threads) and ``check_every_call`` (what holds for every call
whatever its plan)."""

from __future__ import annotations

import contextlib
import heapq
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from dshtools import (
    TOOL_ABORTED,
    TOOL_ABORTED_BEFORE_DISPATCH,
    AbortController,
    ToolExecutionInput,
    ToolExecutionResult,
    ToolRegistry,
)

__all__ = ["Aborter", "Tracker", "arm", "check_every_call", "drive", "in_threads", "plan_calls"]

T = TypeVar("T")


def plan_calls(seed: int, calls: int, **fields: Sequence[Any] | Callable[[random.Random], Any]) -> list[dict[str, Any]]:
    """``calls`` plans drawn from ``random.Random(seed)``: plan ``i`` has the
    id ``call-i`` and, for each of ``fields`` in order, a value drawn by
    ``rng.choice`` from a sequence or returned by a callable given the
    generator."""
    rng = random.Random(seed)
    return [
        {"id": f"call-{i}", **{k: v(rng) if callable(v) else rng.choice(v) for k, v in fields.items()}}
        for i in range(calls)
    ]


class Aborter:
    """Aborts controllers at scheduled monotonic times, on its own thread."""

    def __init__(self) -> None:
        self.heap: list[tuple[float, int, AbortController]] = []
        self.cond = threading.Condition()
        self.stopped = False
        self.seq = 0
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def schedule(self, controller: AbortController, delay: float) -> None:
        with self.cond:
            self.seq += 1
            heapq.heappush(self.heap, (time.monotonic() + delay, self.seq, controller))
            self.cond.notify()

    def loop(self) -> None:
        while True:
            with self.cond:
                while not self.stopped and (not self.heap or self.heap[0][0] > time.monotonic()):
                    timeout = None if not self.heap else max(0.0, self.heap[0][0] - time.monotonic())
                    self.cond.wait(timeout)
                if self.stopped and not self.heap:
                    return
                _, _, controller = heapq.heappop(self.heap)
            controller.abort("random")

    def stop(self) -> None:
        with self.cond:
            self.stopped = True
            self.cond.notify()
        self.thread.join(10)


class Tracker:
    """What the bodies and the result observer of a stress run saw, under
    one lock: ``invoked`` (bodies started, by call id), ``running`` (the
    call ids whose body is running now), ``most`` (the most bodies that ran
    at once), ``observed`` (results published, by call id) and ``problems``
    (what ``drive`` found wrong). ``abort_on_start`` holds the controllers
    of the calls planned to abort while their body runs: the body's first
    start aborts it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.abort_on_start: dict[str, AbortController] = {}
        self.invoked: Counter[str] = Counter()
        self.running: set[str] = set()
        self.most = 0
        self.observed: Counter[str] = Counter()
        self.problems: list[str] = []

    @contextlib.contextmanager
    def body(self, call_id: str) -> Iterator[int]:
        """Around a body's work: yields how many times this call's body has
        started (this one included)."""
        with self.lock:
            self.invoked[call_id] += 1
            self.running.add(call_id)
            self.most = max(self.most, len(self.running))
            attempt = self.invoked[call_id]
            controller = self.abort_on_start.pop(call_id, None)
        if controller is not None:
            controller.abort("while running")
        try:
            yield attempt
        finally:
            with self.lock:
                self.running.discard(call_id)

    def observer(self, e: Any, r: Any) -> None:
        """A result observer counting each call's published results."""
        with self.lock:
            self.observed[e.call_id] += 1

    def waiting_body(self, then: Callable[[Any, Any, int], object]) -> Callable[[Any, Any], object]:
        """A tool body, run inside ``body``: it waits on its signal for
        ``args["wait"]`` seconds, then returns ``then(args, run, attempt)``."""

        def work(args: Any, run: Any) -> object:
            with self.body(run.call_id) as attempt:
                run.signal.wait(args["wait"])
                return then(args, run, attempt)

        return work


def arm(
    how: str, controller: AbortController, *, call_id: str, delay: float, aborter: Aborter, tracker: Tracker
) -> None:
    """Abort ``controller`` as a plan says: ``"before"`` now, ``"random"``
    ``delay`` seconds from now on ``aborter``, ``"running"`` at the first
    start of call ``call_id``'s body (``Tracker.body``; a controller already
    armed for that call keeps its place), anything else never."""
    if how == "before":
        controller.abort("before")
    elif how == "random":
        aborter.schedule(controller, delay)
    elif how == "running":
        with tracker.lock:
            tracker.abort_on_start.setdefault(call_id, controller)


def in_threads(threads: int, items: Sequence[T], work: Callable[[Sequence[T]], object]) -> None:
    """Run ``work`` on ``threads`` threads at once, thread ``i`` given every
    ``threads``-th item from item ``i``; returns once they all ended (100
    seconds at most each)."""
    workers = [threading.Thread(target=work, args=(items[i::threads],)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(100)


def drive(
    registry: ToolRegistry,
    plans: list[dict[str, Any]],
    arguments: Sequence[str],
    tracker: Tracker,
    *,
    threads: int = 8,
) -> tuple[dict[str, ToolExecutionResult], dict[str, AbortController]]:
    """Execute each plan's call (tool ``work``, call id ``plan["id"]``, the
    plan's values of the keys ``arguments`` as its arguments) from
    ``threads`` caller threads, each aborted as ``arm`` reads
    ``plan["abort"]`` and ``plan["delay"]``. A call whose body is still
    running when its ``execute`` returned is added to ``tracker.problems``.
    Returns the results and the controllers by call id."""
    aborter = Aborter()
    results: dict[str, ToolExecutionResult] = {}
    controllers: dict[str, AbortController] = {}

    def caller(chunk: Sequence[dict[str, Any]]) -> None:
        for plan in chunk:
            controller = AbortController()
            controllers[plan["id"]] = controller
            arm(plan["abort"], controller, call_id=plan["id"], delay=plan["delay"], aborter=aborter, tracker=tracker)
            args = {key: plan[key] for key in arguments}
            result = registry.execute(ToolExecutionInput(plan["id"], "work", args, controller.signal))
            with tracker.lock:
                if plan["id"] in tracker.running:
                    tracker.problems.append(f"{plan['id']}: execute returned while its body was running")
                results[plan["id"]] = result

    in_threads(threads, plans, caller)
    aborter.stop()
    return results, controllers


def check_every_call(
    plans: list[dict[str, Any]],
    results: dict[str, ToolExecutionResult],
    controllers: dict[str, AbortController],
    seen: Tracker,
) -> Counter[str | None]:
    """Assert what holds for every planned call of a ``drive`` run: no
    problem the bodies saw, one result and one observer call per call, a
    call aborted before dispatch ran no body and one aborted while running
    ran one, a plan aborted before its call is refused before dispatch, no
    listener left on a caller's signal, no body still running. Returns the
    count of each result code."""
    assert seen.problems == []
    assert len(results) == len(plans)
    assert all(seen.observed[p["id"]] == 1 for p in plans), "every call published exactly once"
    codes: Counter[str | None] = Counter()
    for plan in plans:
        cid = plan["id"]
        result = results[cid]
        codes[result.code] += 1
        if result.code == TOOL_ABORTED_BEFORE_DISPATCH:
            assert seen.invoked[cid] == 0, f"{cid}: ABORTED_BEFORE_DISPATCH but a body ran"
        elif result.code == TOOL_ABORTED:
            assert seen.invoked[cid] > 0, f"{cid}: ABORTED but no body ran"
        if plan["abort"] == "before":
            assert result.code == TOOL_ABORTED_BEFORE_DISPATCH
        assert controllers[cid].signal.listener_count == 0
    assert seen.running == set()
    return codes
