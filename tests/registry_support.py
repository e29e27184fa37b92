"""Shared helpers for the registry tests (tests/test_registry*.py)."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from dshtools import (
    AbortController,
    AbortSignal,
    ErrorDetail,
    ToolDefinition,
    ToolExecution,
    ToolExecutionInput,
    ToolExecutionResult,
    ToolFailure,
    ToolRegistry,
    ToolSuccess,
)
from dshtools._backends import thread as _thread_backend

OBJECT: dict[str, Any] = {"type": "object"}


def call(
    name: str, arguments: object = None, signal: AbortSignal | None = None, call_id: str = "c1"
) -> ToolExecutionInput:
    return ToolExecutionInput(call_id, name, {} if arguments is None else arguments, signal or AbortController().signal)


def tool(name: str, body: Callable[[Any, Any], object], **kw: Any) -> ToolDefinition:
    params = kw.pop("parameters", OBJECT)
    return ToolDefinition(name, f"{name} tool", params, body, **kw)


class Recorder:
    """Records every hook invocation and every published result."""

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


def run_in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    """Start ``fn`` in a thread; the returned list receives its result or exception."""
    box: list[Any] = []

    def target() -> None:
        try:
            box.append(fn())
        except BaseException as exc:  # pragma: no cover - surfaced by the test
            box.append(exc)

    t = threading.Thread(target=target, daemon=True)
    t.start()
    return t, box


def wait_until(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    """Poll a condition that no event can signal (e.g. "a thread is parked")."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.0005)


def blocked_in_wait(thread: threading.Thread) -> bool:
    """The thread is parked: in ``threading``'s ``wait`` (a Condition or an
    Event), or in the thread backend's join (it blocks in a C-level
    ``Lock.acquire`` called from the dispatch's ``wait``, the innermost
    Python frame)."""
    frame = sys._current_frames().get(thread.ident or -1)
    if frame is not None and frame.f_code.co_name == "wait" and frame.f_code.co_filename == _thread_backend.__file__:
        return True
    while frame is not None:
        if frame.f_code.co_name == "wait" and frame.f_code.co_filename == threading.__file__:
            return True
        frame = frame.f_back
    return False


def tool_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("dshtools-tool")]


def value_of(result: ToolExecutionResult) -> Any:
    """A success's value; any other result fails the test, showing it."""
    assert isinstance(result, ToolSuccess), f"expected a success, got {result!r}"
    return result.value


def error_of(result: ToolExecutionResult) -> ErrorDetail:
    """A failure's error; a success fails the test, showing it."""
    assert isinstance(result, ToolFailure), f"expected a failure, got {result!r}"
    return result.error
