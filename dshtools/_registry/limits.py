"""``ConcurrencyLimit`` and ``RateLimit``: around-dispatch wrappers that
make a call wait for a slot (docs/policies.md#concurrencylimit-and-ratelimit).

Guarantees:

* The wait is on the wrapper's signal: a call aborted while it waits (or
  aborted before it arrived) is never dispatched and returns
  ``not_dispatched(signal)``, an ``ABORTED_BEFORE_DISPATCH`` failure; its
  place in the queue is given up at once.
* Within one key the slots go to the waiters in the order they arrived
  (FIFO): a freed slot is handed to the oldest waiter, never taken by a
  newcomer.
* ``ConcurrencyLimit(n)`` holds its slot until ``next()`` returned, and
  ``next()`` returns only once the body did (the registry joins it), so at
  most ``n`` bodies of one key run at once.
* The wait happens before ``next()``: a ``TimeoutPolicy`` installed inside
  the wrapper arms its deadline only once the call has its slot.
* A key's state is dropped once nothing holds or waits for it.
"""

from __future__ import annotations

import re
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Hashable
from typing import Final

from .._core.interrupts import after_fork_in_child, interrupt_slice
from .._signal import AbortSignal
from .._types.calls import ToolExecutionResult, ToolFailure, aborted
from .._types.tools import ToolDispatchExecution

__all__ = ["ConcurrencyLimit", "Key", "RateLimit", "not_dispatched", "parse_rate"]

Key = Callable[[ToolDispatchExecution], Hashable]

# The limits alive in this process, for the fork handler below.
_limiters: weakref.WeakSet[_Queue] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    # Only the forking thread exists in the child: the waiters and holders
    # of the parent's other threads are gone, and so may be a held lock.
    for limiter in list(_limiters):
        limiter._reset()


after_fork_in_child(_after_fork_in_child)


def not_dispatched(signal: AbortSignal) -> ToolFailure:
    """The result of a call a wrapper did not dispatch because ``signal``
    aborted: ``ABORTED_BEFORE_DISPATCH`` with ``meta["reason"]`` the
    signal's reason and ``body_invoked`` ``False``. The registry keeps a
    wrapper's result as it is, so this is how a wrapper that never called
    ``next()`` reports a call that did not reach its body
    (docs/contract.md#policies)."""
    return aborted(signal.reason, invoked=False)


class _Waiter:
    __slots__ = ("event", "granted")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.granted = False


class _Gate:
    """One key's state: slots in use and the FIFO of waiters."""

    __slots__ = ("active", "stamps", "waiters")

    def __init__(self) -> None:
        self.active = 0
        self.waiters: deque[_Waiter] = deque()
        self.stamps: deque[float] = deque()  # RateLimit: monotonic start times in the window


class _Queue:
    """The wait-for-a-slot machinery shared by both limits. ``_lock`` guards
    ``_gates`` and every gate in it."""

    __slots__ = ("__weakref__", "_gates", "_key", "_lock")

    def __init__(self, key: Key | None) -> None:
        if key is not None and not callable(key):
            raise TypeError(f"key must be a callable of the call or None, not {type(key).__name__}")
        self._key = key
        self._lock = threading.Lock()
        self._gates: dict[Hashable, _Gate] = {}
        _limiters.add(self)

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._gates = {}

    # -- the policy's hooks, called with `_lock` held --

    def _free(self, gate: _Gate, now: float) -> float:
        """0.0 when a slot is free now, else seconds until one may be
        (``inf``: when a holder releases)."""
        raise NotImplementedError

    def _take(self, gate: _Gate, now: float) -> None:
        raise NotImplementedError

    # --

    def _drop_if_idle(self, key: Hashable, gate: _Gate) -> None:
        if not gate.active and not gate.waiters and not gate.stamps:
            self._gates.pop(key, None)

    def _grant_next(self, gate: _Gate) -> float:
        """Hand free slots to the oldest waiters; seconds until the next
        one may be free (``inf``: none is waiting or only a release helps)."""
        now = time.monotonic()
        while gate.waiters:
            wait = self._free(gate, now)
            if wait:
                return wait
            waiter = gate.waiters.popleft()
            self._take(gate, now)
            waiter.granted = True
            waiter.event.set()
        return float("inf")

    def acquire(self, execution: ToolDispatchExecution) -> tuple[Hashable, bool]:
        """Wait for a slot on ``execution.signal``. Returns the key and
        whether the slot was taken (``False``: the signal aborted first)."""
        key = None if self._key is None else self._key(execution)
        signal = execution.signal
        if signal.aborted:
            return key, False
        with self._lock:
            gate = self._gates.get(key)
            if gate is None:
                gate = self._gates[key] = _Gate()
            now = time.monotonic()
            if not gate.waiters and not self._free(gate, now):
                self._take(gate, now)
                return key, True
            waiter = _Waiter()
            gate.waiters.append(waiter)
        event = waiter.event
        handle = signal.add_listener(lambda _s: event.set())
        try:
            while True:
                with self._lock:
                    if waiter.granted:
                        break
                    # The head waiter of a rate window wakes when it opens.
                    wait = self._grant_next(gate) if gate.waiters[0] is waiter else float("inf")
                    if waiter.granted:
                        break
                if signal.aborted:
                    break
                step = interrupt_slice()
                if step is not None:
                    wait = min(wait, step)
                event.wait(None if wait == float("inf") else wait)
                if not waiter.granted:
                    event.clear()
        except BaseException:
            # A KeyboardInterrupt while waiting: give up the place (or the slot).
            self._withdraw(key, gate, waiter)
            raise
        finally:
            handle.remove()
        if signal.aborted:
            self._withdraw(key, gate, waiter)
            return key, False
        return key, True

    def _withdraw(self, key: Hashable, gate: _Gate, waiter: _Waiter) -> None:
        with self._lock:
            if waiter.granted:
                self._give_back(gate)
            else:
                try:
                    gate.waiters.remove(waiter)
                except ValueError:  # pragma: no cover - granted meanwhile is handled above
                    pass
                self._grant_next(gate)
            self._drop_if_idle(key, gate)

    def _give_back(self, gate: _Gate) -> None:
        """A taken slot is returned unused (its call was not dispatched)."""
        raise NotImplementedError

    def release(self, key: Hashable) -> None:
        """The call that held a slot of ``key`` returned."""
        raise NotImplementedError

    def __call__(
        self, execution: ToolDispatchExecution, next: Callable[[], ToolExecutionResult]
    ) -> ToolExecutionResult:
        """Around-dispatch: wait for a slot, run ``next``, release the slot."""
        key, taken = self.acquire(execution)
        if not taken:
            return not_dispatched(execution.signal)
        try:
            return next()
        finally:
            self.release(key)


class ConcurrencyLimit(_Queue):
    """Around-dispatch wrapper: at most ``n`` (an ``int`` ≥ 1) calls of one
    key are inside it at once; the others wait, first come first served.
    ``key(execution) -> hashable`` sorts calls into separate limits (e.g.
    ``key=lambda e: e.name`` for a limit per tool); ``None``: one limit for
    every call through this wrapper. A call aborted while it waits returns
    ``ABORTED_BEFORE_DISPATCH`` and never runs. Waits in the thread that
    runs the waterfall (a batch's dispatch thread for a batch call)."""

    __slots__ = ("_n",)

    def __init__(self, n: int, key: Key | None = None) -> None:
        if isinstance(n, bool) or not isinstance(n, int):
            raise TypeError(f"n must be an int, not {type(n).__name__}")
        if n < 1:
            raise ValueError(f"n must be at least 1, got {n}")
        super().__init__(key)
        self._n = n

    def _free(self, gate: _Gate, now: float) -> float:
        return 0.0 if gate.active < self._n else float("inf")

    def _take(self, gate: _Gate, now: float) -> None:
        gate.active += 1

    def _give_back(self, gate: _Gate) -> None:
        gate.active -= 1
        self._grant_next(gate)

    def release(self, key: Hashable) -> None:
        with self._lock:
            gate = self._gates[key]
            gate.active -= 1
            self._grant_next(gate)
            self._drop_if_idle(key, gate)

    def __repr__(self) -> str:
        return f"ConcurrencyLimit({self._n}{'' if self._key is None else ', key=...'})"


_PERIODS: Final = {"second": 1.0, "minute": 60.0, "hour": 3600.0, "day": 86400.0}
_RATE: Final = re.compile(r"\s*(\d+)\s*/\s*(\d*\.?\d*)\s*(second|minute|hour|day)s?\s*")


def parse_rate(rate: str) -> tuple[int, float]:
    """``"30/minute"`` -> ``(30, 60.0)``: calls and the window in seconds.
    Also ``"5/second"``, ``"100/hour"``, ``"1000/day"`` and a count of
    periods (``"10/5 seconds"``). Anything else: ``ValueError``."""
    if not isinstance(rate, str):
        raise TypeError(f"rate must be a str such as '30/minute', not {type(rate).__name__}")
    match = _RATE.fullmatch(rate)
    if match is None:
        raise ValueError(f"rate must read like '30/minute' (second, minute, hour or day), got {rate!r}")
    calls = int(match.group(1))
    periods = float(match.group(2)) if match.group(2) else 1.0
    if calls < 1 or periods <= 0:
        raise ValueError(f"rate must allow at least one call per positive period, got {rate!r}")
    return calls, periods * _PERIODS[match.group(3)]


class RateLimit(_Queue):
    """Around-dispatch wrapper: at most ``calls`` calls of one key start in
    any window of ``period`` seconds (a sliding window over the start
    times; ``rate`` like ``"30/minute"``, see ``parse_rate``). A call over
    the rate waits until the oldest start leaves the window, first come
    first served; a call aborted while it waits returns
    ``ABORTED_BEFORE_DISPATCH`` and takes no place in the window. ``key``
    as in ``ConcurrencyLimit``. Times are ``time.monotonic()``."""

    __slots__ = ("_calls", "_period", "_rate")

    def __init__(self, rate: str, key: Key | None = None) -> None:
        self._calls, self._period = parse_rate(rate)
        self._rate = rate
        super().__init__(key)

    def _expire(self, gate: _Gate, now: float) -> None:
        stamps = gate.stamps
        horizon = now - self._period
        while stamps and stamps[0] <= horizon:
            stamps.popleft()

    def _free(self, gate: _Gate, now: float) -> float:
        self._expire(gate, now)
        stamps = gate.stamps
        if len(stamps) < self._calls:
            return 0.0
        return max(stamps[0] + self._period - now, 1e-6)

    def _take(self, gate: _Gate, now: float) -> None:
        gate.stamps.append(now)

    def _give_back(self, gate: _Gate) -> None:
        # Granted but aborted before it started: its start never happened.
        if gate.stamps:
            gate.stamps.pop()
        self._grant_next(gate)

    def release(self, key: Hashable) -> None:
        with self._lock:
            gate = self._gates.get(key)
            if gate is not None:
                self._expire(gate, time.monotonic())
                self._drop_if_idle(key, gate)

    def __repr__(self) -> str:
        return f"RateLimit({self._rate!r}{'' if self._key is None else ', key=...'})"
