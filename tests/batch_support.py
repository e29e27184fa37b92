"""Shared fixtures for the timeout-policy and batch tests: a recorder of
every hook event and body start/finish, keyed by call id."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from dshtools import (
    Accept,
    Allow,
    ToolDefinition,
    ToolExecution,
    ToolExecutionInput,
    ToolExecutionResult,
    ToolRegistry,
    ToolRunContext,
)


class Recorder:
    """Thread-safe log of (event, call_id) in the order they happened."""

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


Body = Callable[[Mapping[str, Any], ToolRunContext], Any]


def tool(
    name: str,
    recorder: Recorder,
    fn: Callable[[Mapping[str, Any], ToolRunContext], Any],
    *,
    parallel: bool = True,
    timeout: float | None = None,
) -> ToolDefinition:
    """A tool whose body is recorded (start/end) around ``fn``."""

    def body(args: Mapping[str, Any], run: ToolRunContext) -> Any:
        recorder.body_start(run.call_id)
        try:
            return fn(args, run)
        finally:
            recorder.body_end(run.call_id)

    return ToolDefinition(
        name,
        f"test tool {name}",
        {"type": "object"},
        body,
        timeout=timeout,
        is_concurrency_safe=(lambda _a: True) if parallel else None,
    )


def calls(name: str, n: int, signal: Any, args: Mapping[str, Any] | None = None) -> list[ToolExecutionInput]:
    return [ToolExecutionInput(f"c{i}", name, dict(args or {}), signal) for i in range(n)]


__all__ = ["Accept", "Allow", "Recorder", "calls", "tool"]
