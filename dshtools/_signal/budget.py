"""The remaining budget of a signal: the earliest pending timer that can
abort it (``AbortSignal.deadline`` / ``time_left``; docs/contract.md#a9).

Guarantees: ``_deadline_of`` returns the earliest ``time.monotonic()``
instant (seconds) among the timer entry of the signal itself, those of its
pending linked sources and the carried deadlines of its pending plain
sources (a remote body's signal), or ``None`` when none can
abort it. It takes no lock and never blocks.

Relies on: ``_timer`` and ``_sources`` are replaced whole, never mutated,
so a read without ``_LOCK`` sees a consistent value; a stale read only
reports a timer that just fired.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .signal import AbortSignal

__all__: list[str] = []


def _deadline_of(signal: AbortSignal) -> float | None:
    timer = signal._timer
    best = None if timer is None else timer.when
    for source in signal._sources:
        if not source._aborted:
            at = _deadline_of(source) if source._linked else source._budget_at
            if at is not None and (best is None or at < best):
                best = at
    return best
