"""Waiting without sleeping, in threads of the test.

``run_in_thread``, ``ExecutingInThread`` (one ``execute`` in a thread of
its own), ``cancel_during_join`` (an asyncio task cancelled again and
again), ``wait_until``, ``blocked_in_wait``, ``tool_threads``,
``AbortLater``, ``Gate`` (holds the thread that reaches it until the test
opens it); the bodies ``stops_when_aborted`` (a cooperative body) and
``late_after_abort`` (a body that overruns its abort).
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from dshtools import AbortController, AbortSignal
from dshtools._backends import thread as _thread_backend
from dshtools._signal import wake as _wake

if TYPE_CHECKING:  # only in annotations
    from dshtools import ToolExecutionInput, ToolExecutionResult, ToolRegistry


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


class ExecutingInThread:
    """``registry.execute(call)`` running in a daemon thread of its own;
    ``result(timeout)`` joins it and returns the result, failing the test
    if ``execute`` has not returned within ``timeout`` seconds."""

    def __init__(self, registry: ToolRegistry, call: ToolExecutionInput) -> None:
        self._out: list[ToolExecutionResult] = []
        self._thread = threading.Thread(target=lambda: self._out.append(registry.execute(call)), daemon=True)
        self._thread.start()

    def result(self, timeout: float = 60.0) -> ToolExecutionResult:
        self._thread.join(timeout)
        assert self._out, "execute did not return"
        return self._out[0]


async def cancel_during_join(task: asyncio.Future[Any], *, times: int, turns: int) -> None:
    """Cancel ``task`` ``times`` times, each followed by ``turns`` turns of
    the running asyncio loop (in which a wait that abandoned its body would
    have ended the task), asserting after each that the task is not done."""
    for _ in range(times):
        task.cancel()
        for _ in range(turns):
            await asyncio.sleep(0)
        assert not task.done()


def wait_until(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    """Poll a condition that no event can signal (e.g. "a thread is parked")."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.0005)


# The innermost frames that block in a C-level `Lock.acquire`.
_PARKED_IN: Final = {("wait", _thread_backend.__file__), ("wait_on", _wake.__file__)}


def blocked_in_wait(thread: threading.Thread) -> bool:
    """The thread is parked: in ``threading``'s ``wait`` (a Condition or an
    Event), in the thread backend's join (it blocks in a C-level
    ``Lock.acquire`` called from the dispatch's ``wait``, the innermost
    Python frame), or in a signal's wait (the same, from ``wait_on``)."""
    frame = sys._current_frames().get(thread.ident or -1)
    if frame is not None and (frame.f_code.co_name, frame.f_code.co_filename) in _PARKED_IN:
        return True
    while frame is not None:
        if frame.f_code.co_name == "wait" and frame.f_code.co_filename == threading.__file__:
            return True
        frame = frame.f_back
    return False


def threads_but_abort_runners() -> set[threading.Thread]:
    """Live threads, less the process's abort runners (``dshtools-abort``):
    fired timeouts and bursts of cancellations start them, and each ends
    ``RUNNER_IDLE_EXIT`` seconds after its last abort
    (docs/contract.md#a15), so a test's thread baseline that they move is
    not a leak."""
    return {t for t in threading.enumerate() if t.name != "dshtools-abort"}


def tool_threads() -> list[threading.Thread]:
    """The live threads of the thread backend's pools."""
    return [t for t in threading.enumerate() if t.name.startswith("dshtools-tool")]


class Gate:
    """Where a test holds another thread: ``hold()`` sets ``entered``, then
    blocks until ``opened`` is set (10 seconds at most)."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.opened = threading.Event()

    def hold(self) -> None:
        self.entered.set()
        self.opened.wait(10)


def stops_when_aborted(
    started: threading.Event, returns: object = "stopped", wait: float = 10
) -> Callable[[Any, Any], object]:
    """A cooperative body: it sets ``started``, waits for its signal
    (``wait`` seconds at most) and returns ``returns``."""

    def cooperative(args: Any, run: Any) -> object:
        started.set()
        run.signal.wait(wait)
        return returns

    return cooperative


def late_after_abort(started: threading.Event, seconds: float, wait: float = 10) -> Callable[[Any, Any], object]:
    """A body that sets ``started``, waits for its signal (``wait`` seconds
    at most), then works ``seconds`` more (the overrun: work done after the
    abort, the scenario's timing) and returns ``"late"``."""

    def late(args: Any, run: Any) -> object:
        started.set()
        run.signal.wait(wait)
        time.sleep(seconds)
        return "late"

    return late


class AbortLater:
    """Abort ``controller`` with ``reason`` after ``seconds`` on the shared
    timer thread, recording the monotonic time of the abort in ``at``."""

    def __init__(self, controller: AbortController, seconds: float, reason: object) -> None:
        self.at: float | None = None
        self._controller = controller
        self._reason = reason
        self._timer = AbortSignal.timeout(seconds)
        self._timer.add_listener(self._fire)

    def _fire(self, _s: AbortSignal) -> None:
        self.at = time.monotonic()
        self._controller.abort(self._reason)

    def cancel(self) -> None:
        self._timer.close()
