"""The cancellation primitive, ``AbortController`` / ``AbortSignal``
(docs/contract.md §1): the names the rest of the package imports.

Guarantees and invariants live with the code that gives them:
``_signal_surface`` (``AbortSignal``, ``derive``; the public guarantees and
the atomicity assumptions), ``_signal_controller`` (``AbortController``),
``_signal_claim`` (listener storage, abort decision and claim,
``ListenerHandle``), ``_signal_links`` (keep-alive and abort propagation),
``_signal_budget`` (``deadline``). Imports flow one way: this module ->
controller -> surface -> links -> claim; budget -> claim.
"""

from __future__ import annotations

from .controller import AbortController, budget_controller
from .signal import (
    AbortSignal,
    Listener,
    _ensure_signal,
    _timeout_signal,
    abort_owned,
    deadline_signal,
    derive,
    timer_fired,
)
from .state import ListenerHandle

# The public names and the package-internal ones other modules import from
# here (listed so strict type checkers see them as re-exported).
__all__ = [
    "AbortController",
    "AbortSignal",
    "Listener",
    "ListenerHandle",
    "_ensure_signal",
    "_timeout_signal",
    "abort_owned",
    "budget_controller",
    "deadline_signal",
    "derive",
    "timer_fired",
]
