"""Shared by the dshtools.io tests: abort a controller later, from the
shared timer thread, recording when."""

from __future__ import annotations

import time

from dshtools import AbortController, AbortSignal


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


def wait_for_descendant(root: int, argv: list[str], timeout: float) -> list[int]:
    """Poll (every 10 ms, up to ``timeout`` seconds) until a live descendant
    of ``root`` runs exactly ``argv``; return the pids of every descendant
    seen then. Raises ``AssertionError`` when none appears in time."""
    import psutil

    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            family = psutil.Process(root).children(recursive=True)
        except psutil.NoSuchProcess:
            break
        for proc in family:
            try:
                if proc.cmdline() == argv:
                    return [p.pid for p in family]
            except psutil.Error:
                pass
        time.sleep(0.01)
    raise AssertionError(f"no descendant of {root} ran {argv} within {timeout}s")


def alive(pids: list[int]) -> list[int]:
    """The pids among ``pids`` that are still running (not zombies)."""
    import psutil

    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:
            pass
    return out
