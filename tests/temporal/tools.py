"""The tools the Temporal tests run: ``tool_registry(bodies)`` builds the
registry the worker hosts; ``ignore_signal`` is importable by a
``ProcessBackend`` worker."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from dshtools import ToolDefinition, ToolRegistry, ToolRunContext
from dshtools._backends.process.backend import ProcessBackend
from dshtools.io import run_process
from tests.helpers.workers import write_line


class Bodies:
    """What the tools saw: the call ids they ran for, the signal's reason
    each saw, and ``started`` once a waiting body runs; ``release`` lets
    ``held`` return; ``finished`` is set when a waiting body has recorded
    its reason and returns."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()
        self.finished = threading.Event()
        self.runs: list[str] = []
        self.reasons: list[object] = []


# Each start of a body appends a line to ``<fifo>.runs``: how many times
# the side effect ran, counted after the worker has stopped.
SLEEP_CHILD = 'echo run >> "$1.runs"; echo $$ > "$1"; exec sleep 30'


def ignore_signal(args: dict[str, Any], run: ToolRunContext) -> str:
    """Counts its start in ``<fifo>.runs``, writes its pid to the FIFO
    ``args["fifo"]``, then blocks in one C call for ``args["seconds"]``,
    ignoring its signal."""
    with open(args["fifo"] + ".runs", "a", encoding="ascii") as runs:
        runs.write("run\n")
    write_line(args["fifo"], str(os.getpid()))
    time.sleep(args["seconds"])
    return "done"


@contextmanager
def tool_registry(bodies: Bodies) -> Iterator[ToolRegistry]:
    """A registry of ``add``, ``sleep_child`` (``sleep 30`` through
    ``run_process``, its pid written to a FIFO first), ``held``, ``wait_for_abort``
    and ``ignore_signal`` (on a ``ProcessBackend`` with ``kill_after=1``),
    closed on exit."""
    registry = ToolRegistry()

    @registry.tool
    def sleep_child(fifo: str, *, run: ToolRunContext) -> str:
        """Start ``sleep 30`` (through run_process), which first counts its start and writes its pid to ``fifo``.

        Args:
            fifo: A FIFO the test reads the child's pid from.
        """
        bodies.runs.append(run.call_id)
        run_process(["sh", "-c", SLEEP_CHILD, "sh", fifo], run.signal)
        return "slept"

    @registry.tool
    def held(*, run: ToolRunContext) -> str:
        """Run until the test sets ``bodies.release`` (at most 60 s), then
        record the signal's reason and return."""
        bodies.runs.append(run.call_id)
        bodies.started.set()
        bodies.release.wait(60)
        bodies.reasons.append(run.signal.reason)
        bodies.finished.set()
        return "released"

    @registry.tool
    def wait_for_abort(*, run: ToolRunContext) -> str:
        """Wait on the call's signal, then return what stopped it."""
        bodies.runs.append(run.call_id)
        bodies.started.set()
        run.signal.wait()
        bodies.reasons.append(run.signal.reason)
        bodies.finished.set()
        return "stopped"

    @registry.tool
    def add(a: int, b: int) -> int:
        """Add two numbers.

        Args:
            a: The first.
            b: The second.
        """
        return a + b

    registry.register(
        ToolDefinition(
            "ignore_signal",
            "Block, ignoring the signal.",
            {"type": "object"},
            ignore_signal,
            backend=ProcessBackend(max_workers=1, kill_after=1.0),
        )
    )
    with registry:
        yield registry
