"""Floors: the least two signal operations can cost in pure Python with the
shape the contract gives them, measured in the same run as dshtools and the
figure it is held to.

A *floor* does strictly less than the contract asks (docs/contract.md#cancellation)
and nothing else, so no implementation of that contract in pure Python can
be cheaper than it. Where a floor is already slower than the figure a target
compares dshtools with, that target cannot be met by changing dshtools
alone; docs/decisions/0048 says which targets that is and why.

* ``abort_100``: a controller whose abort sets a flag and calls each of 100
  callbacks held in a plain list as ``callback(signal)`` (docs/contract.md#cancellation: a listener is
  called with the signal), each call in a ``try`` (docs/contract.md#cancellation: a listener that
  raises does not stop the others). No lock, no ``Event``, no snapshot, no
  per-listener handle, so no removal guarantee and no late-registration
  rule. Compared with autogen-core's ``CancellationToken.cancel()`` over 100
  callbacks, which calls each as ``callback()`` with no argument.
* ``add_remove_listener``: ``add_listener(callback)`` that makes a
  two-slot handle, stores it in a dict (the O(1) store that a ``remove()``
  which never waits needs) and returns it; ``handle.remove()`` deletes it.
  No ``callable()`` check, no abort race, no removal guarantee for a running
  dispatch. Compared with ``list.append`` + ``list.remove``, the baseline of
  ``benchmarks.signals``.

``run()`` times each floor beside dshtools and the comparison (rounds
interleaved, the calling thread's CPU time, as ``benchmarks.signals``);
``python -m benchmarks.signal_instructions OP --side ours floor ...``
counts instructions.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from . import signals
from ._timing import CPU, Case, aborts, median, paired_samples

__all__ = ["FLOOR", "FloorController", "FloorSignal", "run"]


class FloorSignal:
    """The least state a signal with listeners needs: a flag, a list of
    callbacks (the abort floor) and a dict of handles (the add/remove
    floor)."""

    __slots__ = ("aborted", "callbacks", "handles")

    def __init__(self) -> None:
        self.aborted = False
        self.callbacks: list[Callable[[Any], object]] = []
        self.handles: dict[FloorHandle, Callable[[Any], object]] = {}

    def add_listener(self, callback: Callable[[Any], object]) -> FloorHandle:
        handle = FloorHandle()
        handle.signal = self
        handle.callback = callback
        self.handles[handle] = callback
        return handle


class FloorHandle:
    __slots__ = ("callback", "signal")
    signal: FloorSignal
    callback: Callable[[Any], object]

    def remove(self) -> None:
        del self.signal.handles[self]


class FloorController:
    __slots__ = ("signal",)

    def __init__(self) -> None:
        self.signal = FloorSignal()

    def abort(self) -> None:
        signal = self.signal
        signal.aborted = True
        for callback in signal.callbacks:
            try:
                callback(signal)
            except Exception:  # contained: the next callback still runs
                pass


FLOOR: dict[str, Case] = {
    "abort_100": aborts(
        FloorController, FloorController.abort, listen=lambda c: c.signal.callbacks.append(signals.cb), listeners=100
    ),
    "add_remove_listener": signals.add_remove(FloorSignal().add_listener),
}

_NUMBER = {"abort_100": 300, "add_remove_listener": 20000}


def _comparison(op: str) -> tuple[str, Case] | None:
    """What the target for ``op`` compares dshtools with: the peer for
    ``abort_100`` (when installed), the own baseline for add/remove."""
    if op == "add_remove_listener":
        return "baseline", signals.BASELINE[op][0]
    dist = "autogen-core"
    module, factory = importlib.import_module("benchmarks.peers").PEERS[dist]
    try:
        importlib.import_module(module)
    except ImportError:
        return None
    return dist, factory()[op]


def _median_ratio(top: list[float], bottom: list[float]) -> float:
    return median([x / y for x, y in zip(top, bottom, strict=True)])


def run(*, quick: bool = False) -> dict[str, Any]:
    """``{op: {"floor_ns_per_op", "dshtools_ns_per_op", "against",
    "against_ns_per_op", "floor_ratio", "dshtools_over_floor"}}``: medians
    over rounds, the ratios as medians of per-round ratios. ``floor_ratio``
    is floor / the comparison (above 1: no pure-Python
    implementation of the contract reaches the comparison) and ``against``
    names it; an op whose comparison is not installed has ``against`` None
    and no comparison figures."""
    rounds = 3 if quick else 15
    out: dict[str, Any] = {}
    for op, floor in FLOOR.items():
        number = max(1, _NUMBER[op] // (20 if quick else 1))
        other = _comparison(op)
        cases = [floor, signals.OURS[op]] + ([other[1]] if other else [])
        samples = paired_samples(cases, number=number, rounds=rounds, clock=CPU)
        entry: dict[str, Any] = {
            "floor_ns_per_op": median(samples[0]),
            "dshtools_ns_per_op": median(samples[1]),
            "dshtools_over_floor": _median_ratio(samples[1], samples[0]),
            "against": other[0] if other else None,
        }
        if other:
            entry["against_ns_per_op"] = median(samples[2])
            entry["floor_ratio"] = _median_ratio(samples[0], samples[2])
        out[op] = entry
    return out
