"""What the random-abort stress tests share: ``Aborter`` (aborts
controllers at scheduled times on its own thread) and ``drive`` (runs a
list of planned calls from several caller threads, aborting each as its
plan says)."""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Callable
from typing import Any

from dshtools import AbortController, ToolExecutionInput, ToolExecutionResult, ToolRegistry

__all__ = ["Aborter", "drive"]


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


def drive(
    registry: ToolRegistry,
    plans: list[dict[str, Any]],
    arguments: Callable[[dict[str, Any]], dict[str, Any]],
    *,
    threads: int,
    lock: threading.Lock,
    running: set[str],
    problems: list[str],
) -> tuple[dict[str, ToolExecutionResult], dict[str, AbortController]]:
    """Execute each plan's call (tool ``work``, call id ``plan["id"]``,
    ``arguments(plan)``) from ``threads`` caller threads. ``plan["abort"]``
    is ``"before"`` (aborted before ``execute``), ``"random"`` (aborted
    ``plan["delay"]`` seconds after it is scheduled) or anything else (never
    aborted). A call whose id is still in ``running`` (under ``lock``) when
    its ``execute`` returned is added to ``problems``. Returns the results
    and the controllers by call id."""
    aborter = Aborter()
    results: dict[str, ToolExecutionResult] = {}
    controllers: dict[str, AbortController] = {}

    def caller(chunk: list[dict[str, Any]]) -> None:
        for plan in chunk:
            controller = AbortController()
            controllers[plan["id"]] = controller
            if plan["abort"] == "before":
                controller.abort("before")
            elif plan["abort"] == "random":
                aborter.schedule(controller, plan["delay"])
            result = registry.execute(ToolExecutionInput(plan["id"], "work", arguments(plan), controller.signal))
            with lock:
                if plan["id"] in running:
                    problems.append(f"{plan['id']}: execute returned while its body was running")
                results[plan["id"]] = result

    callers = [threading.Thread(target=caller, args=(plans[i::threads],)) for i in range(threads)]
    for t in callers:
        t.start()
    for t in callers:
        t.join(100)
    aborter.stop()
    return results, controllers
