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
