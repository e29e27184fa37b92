"""Target 2: signal operations against ``threading.Event``.

Baselines (measured in the same run, rounds interleaved):

* ``create``, ``check``, ``abort_0``: ``threading.Event()``, ``is_set()``,
  ``set()``.
* operations with listeners (``abort_1``, ``abort_100``, the scaling runs,
  ``add_remove_listener``, ``any_of_*``): ``EventWithCallbacks``, the
  smallest hand-rolled equivalent, a ``threading.Event`` plus a plain list
  of callbacks that ``set()`` calls in order. It has none of the
  guarantees (no exactly-once under concurrent abort, no safe removal, no
  lock), so it is a floor, not a competitor.

``any_of_N_abort`` is one composite operation: derive a signal from N
pending sources, abort one source, read the derived signal's state.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from dshtools import AbortController, AbortSignal

from ._timing import CPU, Case, aborts, calls, paired_ratio, reads

__all__ = ["BASELINE", "OURS", "EventWithCallbacks", "add_remove", "cb", "cb0", "run"]


def cb(_signal: object) -> None:
    """A listener that does nothing (one argument)."""


def cb0() -> None:
    """A callback that does nothing (no argument, for autogen-core)."""


class EventWithCallbacks:
    __slots__ = ("callbacks", "event")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.callbacks: list[Callable[[Any], object]] = []

    def set(self) -> None:
        self.event.set()
        for callback in self.callbacks:
            callback(self)

    def set_from(self, _source: object) -> None:
        self.set()


# ------------------------------------------------------------------ dshtools


def ours_abort(listeners: int) -> Case:
    return aborts(
        AbortController, AbortController.abort, listen=lambda c: c.signal.add_listener(cb), listeners=listeners
    )


def ours_any_of(width: int) -> Case:
    def case(n: int) -> Callable[[], None]:
        items = []
        for _ in range(n):
            controllers = [AbortController() for _ in range(width)]
            items.append(([c.signal for c in controllers], controllers[0]))
        any_of = AbortSignal.any_of

        def go() -> None:
            for sources, first in items:
                derived = any_of(sources)
                first.abort()
                derived.aborted

        return go

    return case


def add_remove(add: Callable[[Callable[[Any], None]], Any]) -> Case:
    """``number`` times: add the listener ``cb`` through ``add`` and
    remove it through the handle ``add`` returns."""

    def case(n: int) -> Callable[[], None]:
        r = range(n)

        def go() -> None:
            for _ in r:
                add(cb).remove()

        return go

    return case


# ------------------------------------------------------------------ baseline


def ewc_abort(listeners: int) -> Case:
    return aborts(
        EventWithCallbacks, EventWithCallbacks.set, listen=lambda e: e.callbacks.append(cb), listeners=listeners
    )


def ewc_any_of(width: int) -> Case:
    def case(n: int) -> Callable[[], None]:
        items = [[EventWithCallbacks() for _ in range(width)] for _ in range(n)]

        def go() -> None:
            for sources in items:
                derived = EventWithCallbacks()
                set_from = derived.set_from
                for s in sources:
                    s.callbacks.append(set_from)
                sources[0].set()
                derived.event.is_set()

        return go

    return case


def ewc_add_remove(n: int) -> Callable[[], None]:
    r = range(n)
    callbacks = EventWithCallbacks().callbacks

    def go() -> None:
        for _ in r:
            callbacks.append(cb)
            callbacks.remove(cb)

    return go


# Operation name -> (dshtools case, baseline case, baseline label, ops per round full/quick)
OURS: dict[str, Case] = {
    "create": calls(AbortController),
    "check": reads(AbortController().signal, "aborted"),
    "abort_0": ours_abort(0),
    "abort_1": ours_abort(1),
    "abort_100": ours_abort(100),
    "any_of_2_abort": ours_any_of(2),
    "any_of_100_abort": ours_any_of(100),
    "add_remove_listener": add_remove(AbortController().signal.add_listener),
}

BASELINE: dict[str, tuple[Case, str]] = {
    "create": (calls(threading.Event), "threading.Event()"),
    "check": (calls(threading.Event().is_set), "Event.is_set()"),
    "abort_0": (aborts(threading.Event, threading.Event.set), "Event.set()"),
    "abort_1": (ewc_abort(1), "EventWithCallbacks.set(), 1 callback"),
    "abort_100": (ewc_abort(100), "EventWithCallbacks.set(), 100 callbacks"),
    "any_of_2_abort": (ewc_any_of(2), "EventWithCallbacks composite of 2"),
    "any_of_100_abort": (ewc_any_of(100), "EventWithCallbacks composite of 100"),
    "add_remove_listener": (ewc_add_remove, "list.append + list.remove"),
}

_NUMBER = {
    "create": 20000,
    "check": 100000,
    "abort_0": 20000,
    "abort_1": 10000,
    "abort_100": 300,
    "any_of_2_abort": 5000,
    "any_of_100_abort": 200,
    "add_remove_listener": 20000,
}

_SCALING = {10: 2000, 1000: 60, 100_000: 1}


def run(*, quick: bool = False) -> dict[str, Any]:
    """One entry per operation (``ns_per_op``, ``ratio``, the baseline's
    label and ``baseline_ns_per_op``), plus ``_scaling`` (abort cost per
    listener by N, and the linearity figure), which ``__main__`` files
    under the top-level key ``signal_scaling``."""
    rounds = 3 if quick else 15
    out: dict[str, Any] = {}
    for name, ours in OURS.items():
        base, label = BASELINE[name]
        number = max(1, _NUMBER[name] // (20 if quick else 1))
        ours_ns, base_ns, ratio = paired_ratio(ours, base, number=number, rounds=rounds, clock=CPU)
        out[name] = {"ns_per_op": ours_ns, "baseline": label, "baseline_ns_per_op": base_ns, "ratio": ratio}
    # Abort with N listeners: linear scaling.
    scaling: dict[str, Any] = {}
    sizes = [10, 1000] if quick else list(_SCALING)
    for size in sizes:
        number = _SCALING[size]
        big = size >= 100_000
        ours_ns, base_ns, ratio = paired_ratio(
            ours_abort(size),
            ewc_abort(size),
            number=number,
            rounds=3 if quick or big else rounds,
            warmup=0 if big else 1,
            clock=CPU,
        )
        key = f"abort_{size}"
        entry = {
            "ns_per_op": ours_ns,
            "ns_per_listener": ours_ns / size,
            "baseline": f"EventWithCallbacks.set(), {size} callbacks",
            "baseline_ns_per_op": base_ns,
            "ratio": ratio,
        }
        out[key] = entry
        scaling[key] = entry["ns_per_listener"]
    first, last = sizes[0], sizes[-1]
    out["_scaling"] = {
        "ns_per_listener": scaling,
        # 1.0 is perfectly linear: the per-listener cost at the largest N
        # divided by the per-listener cost at N=1000 (N=10 is dominated by
        # the fixed cost of abort itself).
        "linearity": scaling[f"abort_{last}"] / scaling["abort_1000"] if last != 1000 else 1.0,
        "sizes": sizes,
        "smallest": first,
    }
    return out
