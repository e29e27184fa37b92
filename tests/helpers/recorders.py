"""Recording what hooks, bodies and observers saw.

``HookRecorder`` records which hooks ran and what was published;
``CallEventRecorder`` records, per call id, the hook events and the start
and end of each body (``recorded_tool`` wraps a body for it);
``ProgressRecorder`` is a progress observer that records the updates it is
handed (and can hold the delivery thread); ``CallWatchRecorder`` is a call
observer whose watch records them.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from dshtools import AbortSignal, ToolDefinition, ToolExecutionInput
from tests.helpers.calls import tool

if TYPE_CHECKING:  # only in annotations
    from dshtools import (
        ProgressUpdate,
        ToolExecution,
        ToolExecutionResult,
        ToolRegistry,
        ToolRunContext,
    )


class HookRecorder:
    """Records the name of every hook invocation (``events``, in order) and
    every published result (``results``); thread-safe."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.results: list[tuple[ToolExecution, ToolExecutionResult]] = []
        self.lock = threading.Lock()

    def note(self, event: str) -> None:
        with self.lock:
            self.events.append(event)

    def observer(self, execution: ToolExecution, result: ToolExecutionResult) -> None:
        with self.lock:
            self.results.append((execution, result))

    def install_all(self, registry: ToolRegistry) -> None:
        """Install a pass-through hook of every kind that records itself."""

        def pre(e: Any, nxt: Any) -> Any:
            self.note("pre-execute")
            return nxt()

        def guard(e: Any) -> None:
            self.note("guard")

        def around(e: Any, nxt: Any) -> Any:
            self.note("around-dispatch")
            return nxt()

        def post(e: Any, r: Any, nxt: Any) -> Any:
            self.note("post-execute")
            return nxt()

        registry.add_pre_execute(pre)
        registry.add_guard(guard)
        registry.add_around_dispatch(around)
        registry.add_post_execute(post)
        registry.add_result_observer(self.observer)


class CallEventRecorder:
    """Thread-safe log of ``(event, call_id)`` in the order they happened:
    ``pre``/``post``/``result`` from the hooks ``install`` adds,
    ``body_start``/``body_end`` from bodies built by ``recorded_tool``; with
    the monotonic start and end time of each body and the results published
    per call id."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.events: list[tuple[str, str]] = []
        self.started: dict[str, float] = {}
        self.finished: dict[str, float] = {}
        self.running = 0
        self.results: dict[str, list[ToolExecutionResult]] = {}

    def log(self, event: str, call_id: str) -> None:
        with self.lock:
            self.events.append((event, call_id))

    def body_start(self, call_id: str) -> int:
        with self.lock:
            self.started[call_id] = time.monotonic()
            self.running += 1
            self.events.append(("body_start", call_id))
            return len(self.started)

    def body_end(self, call_id: str) -> None:
        with self.lock:
            self.finished[call_id] = time.monotonic()
            self.running -= 1
            self.events.append(("body_end", call_id))

    def counts(self, event: str) -> Counter[str]:
        with self.lock:
            return Counter(cid for ev, cid in self.events if ev == event)

    def order(self, event: str) -> list[str]:
        with self.lock:
            return [cid for ev, cid in self.events if ev == event]

    def install(self, registry: ToolRegistry) -> None:
        def pre(execution: ToolExecution, nxt: Callable[[], Any]) -> Any:
            self.log("pre", execution.call_id)
            return nxt()

        def post(execution: ToolExecution, result: ToolExecutionResult, nxt: Callable[[], Any]) -> Any:
            self.log("post", execution.call_id)
            return nxt()

        def observe(execution: ToolExecution, result: ToolExecutionResult) -> None:
            with self.lock:
                self.events.append(("result", execution.call_id))
                self.results.setdefault(execution.call_id, []).append(result)

        registry.add_pre_execute(pre)
        registry.add_post_execute(post)
        registry.add_result_observer(observe)


class ProgressRecorder:
    """A progress observer recording each update it is handed
    (``updates``), the thread that handed it (``threads``) and its call id
    (``call_ids``); it sets ``last`` once it sees ``progress == final``.
    With ``hold``, each delivery first sets ``entered``, then holds the
    delivery thread until ``hold`` is set (10 seconds at most) before it
    records the update."""

    def __init__(self, final: float | None = None, *, hold: threading.Event | None = None) -> None:
        self.final = final
        self.hold = hold
        self.updates: list[ProgressUpdate] = []
        self.threads: set[str] = set()
        self.call_ids: set[str] = set()
        self.entered = threading.Event()
        self.last = threading.Event()

    def __call__(self, execution: ToolExecution, update: ProgressUpdate) -> None:
        if self.hold is not None:
            self.entered.set()
            assert self.hold.wait(10)
        self.updates.append(update)
        self.threads.add(threading.current_thread().name)
        self.call_ids.add(execution.call_id)
        if update.progress == self.final:
            self.last.set()


class CallWatchRecorder:
    """A call observer (``dshtools._registry.observer``) that watches every
    call with itself; the watch records each progress update it is handed
    (``updates``, in the body's thread) and does nothing else."""

    def __init__(self) -> None:
        self.updates: list[ProgressUpdate] = []

    def started(self, _call: ToolExecutionInput, _d: ToolDefinition | None) -> CallWatchRecorder:
        return self

    def enter(self) -> object:
        return None

    def exit(self, _token: object) -> None:
        pass

    def aborted(self, _signal: AbortSignal) -> None:
        pass

    def progress(self, update: ProgressUpdate) -> None:
        self.updates.append(update)

    def finished(self, _result: ToolExecutionResult) -> None:
        pass


def recorded_tool(
    name: str,
    recorder: CallEventRecorder,
    fn: Callable[[Mapping[str, Any], ToolRunContext], Any],
    *,
    parallel: bool = True,
    timeout: float | None = None,
) -> ToolDefinition:
    """A tool whose body is recorded (start/end) around ``fn``; concurrency
    safe unless ``parallel=False``."""

    def body(args: Mapping[str, Any], run: ToolRunContext) -> Any:
        recorder.body_start(run.call_id)
        try:
            return fn(args, run)
        finally:
            recorder.body_end(run.call_id)

    return tool(name, body, timeout=timeout, is_concurrency_safe=(lambda _a: True) if parallel else None)
