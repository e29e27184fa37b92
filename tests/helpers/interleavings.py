"""Forcing interleavings, on every interpreter.

``race_in_lockstep`` (steps on threads of their own that start each round
together); ``interrupt_at`` (KeyboardInterrupt at the n-th point of a
function where a real SIGINT can land) and ``interruption_points`` (how
many such points one run walks).
"""

from __future__ import annotations

import dis
import sys
import threading
from collections.abc import Callable
from types import CodeType, FrameType
from typing import Any, Final

# Busy-wait iterations of a lockstep rendezvous before a thread goes on
# alone (about 0.1 ms): on a loaded machine the other thread may not be
# running at all, and a round must not wait for the scheduler.
_SPIN_AT_MOST: Final = 2_000


def race_in_lockstep(
    rounds: int,
    *steps: Callable[[int], object],
    barrier_timeout: float = 10,
    join: float = 50,
    spin: bool = False,
) -> None:
    """Run each of ``steps`` on a daemon thread of its own for ``rounds``
    rounds: in round ``i`` every thread waits at one barrier, then calls its
    ``step(i)`` (what it returns is ignored), so the steps of a round start
    together and the race is forced every round; after the last round they
    meet at the barrier once more. With ``spin`` on an interpreter running
    without the GIL, the threads of a round also meet at a busy-wait
    rendezvous after the barrier (bounded: a thread not running within
    about 0.1 ms is not waited for), so they start within a few hundred
    nanoseconds of each other rather than a thread wake-up apart (with the
    GIL a busy wait would only wait for the switch interval: ignored). A
    barrier wait longer than ``barrier_timeout`` seconds (a round whose
    steps did not all return in time) breaks the barrier. Raises the first
    exception a step raised (``threading.BrokenBarrierError`` for a round
    too slow); fails if a thread is still blocked ``join`` seconds after the
    start of its join (a deadlock)."""
    barrier = threading.Barrier(len(steps))
    errors: list[BaseException] = []
    spin = spin and not getattr(sys, "_is_gil_enabled", lambda: True)()
    arrived = [0] * len(steps)  # round i + 1, once thread k reached round i

    def meet(k: int, i: int) -> None:
        arrived[k] = i + 1
        for _ in range(_SPIN_AT_MOST):
            if min(arrived) > i:
                return

    def loop(k: int, step: Callable[[int], object]) -> None:
        try:
            for i in range(rounds):
                barrier.wait(timeout=barrier_timeout)
                if spin:
                    meet(k, i)
                step(i)
            barrier.wait(timeout=barrier_timeout)
        except BaseException as exc:
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=loop, args=(k, step), daemon=True) for k, step in enumerate(steps)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(join)
    assert not any(t.is_alive() for t in threads), "a thread is still blocked (deadlock)"
    if errors:
        raise errors[0]


# After which instructions CPython runs signal handlers, so where a real
# SIGINT's KeyboardInterrupt can appear besides a frame's first instruction:
# after a call returned, after a backward jump. 3.11+ names, and 3.10's
# (which checks before nearly every instruction: its calls and jumps are a
# subset of the real points there).
_BREAK_AFTER = frozenset(
    {
        "CALL",
        "CALL_KW",
        "CALL_FUNCTION_EX",
        "CALL_INTRINSIC_1",
        "JUMP_BACKWARD",
        "CALL_FUNCTION",
        "CALL_FUNCTION_KW",
        "CALL_METHOD",
        "JUMP_ABSOLUTE",
    }
)


class _Points:
    """Counts the interruption points of the frames it is shown and raises
    KeyboardInterrupt at point ``step`` (never when ``step`` is negative)."""

    def __init__(self, step: int) -> None:
        self.step = step
        self.count = 0
        self.fired = False
        self._previous: dict[FrameType, str] = {}

    def instruction(self, frame: FrameType, offset: int) -> None:
        if self.fired:
            return
        last = self._previous.get(frame)
        self._previous[frame] = dis.opname[frame.f_code.co_code[offset]]
        if last is not None and last not in _BREAK_AFTER:
            return
        if self.count == self.step:
            self.fired = True
            raise KeyboardInterrupt
        self.count += 1


def _walk_with_monitoring(fn: Callable[[], None], codes: set[CodeType], points: _Points) -> None:
    # 3.12+: opcode events requested from a settrace call event no longer
    # fire; INSTRUCTION events of sys.monitoring do, set on ``codes`` only.
    # They fire in every thread running those codes: only this one counts.
    monitoring = sys.monitoring  # type: ignore[attr-defined,unused-ignore]
    tool = next(i for i in range(6) if monitoring.get_tool(i) is None)
    me = threading.get_ident()

    def on_instruction(code: CodeType, offset: int) -> object:
        if threading.get_ident() == me:
            points.instruction(sys._getframe(1), offset)
        return None

    monitoring.use_tool_id(tool, "tests.helpers.interleavings.interrupt_at")
    try:
        monitoring.register_callback(tool, monitoring.events.INSTRUCTION, on_instruction)
        for code in codes:
            monitoring.set_local_events(tool, code, monitoring.events.INSTRUCTION)
        fn()
    finally:
        for code in codes:
            monitoring.set_local_events(tool, code, 0)
        monitoring.register_callback(tool, monitoring.events.INSTRUCTION, None)
        monitoring.free_tool_id(tool)


def _walk_with_settrace(fn: Callable[[], None], codes: set[CodeType], points: _Points) -> None:
    def local(frame: FrameType, event: str, _arg: object) -> Any:
        if event == "opcode":
            points.instruction(frame, frame.f_lasti)
        return local

    def tracer(frame: FrameType, _event: str, _arg: object) -> Any:
        if frame.f_code in codes:
            frame.f_trace_opcodes = True
            return local
        return None

    before = sys.gettrace()  # coverage's tracer, when measuring: put back
    sys.settrace(tracer)
    try:
        fn()
    finally:
        sys.settrace(before)


_walk = _walk_with_monitoring if sys.version_info >= (3, 12) else _walk_with_settrace


def interrupt_at(step: int, fn: Callable[[], None], codes: set[CodeType]) -> bool:
    """Run ``fn`` in this thread, raising KeyboardInterrupt at its ``step``-th
    interruption point (0-based), counted across the frames of ``codes``:
    a frame's first instruction and the instruction after a call or a
    backward jump, where a real SIGINT can land. Returns whether the
    interrupt was raised (False: ``fn`` has at most ``step`` points and ran
    to its end). ``sys.monitoring`` INSTRUCTION events on 3.12+, settrace
    opcode events before."""
    points = _Points(step)
    try:
        _walk(fn, codes, points)
    except KeyboardInterrupt:
        if not points.fired:
            raise
    return points.fired


def interruption_points(fn: Callable[[], None], codes: set[CodeType]) -> int:
    """How many interruption points (see ``interrupt_at``) one uninterrupted
    run of ``fn`` walks through the frames of ``codes``."""
    points = _Points(-1)
    _walk(fn, codes, points)
    return points.count
