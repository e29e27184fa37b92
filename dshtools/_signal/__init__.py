"""The cancellation primitive, ``AbortController`` / ``AbortSignal``
(docs/contract.md#cancellation): the names the rest of the
package imports.

Guarantees and invariants live with the code that gives them: ``signal``
(``AbortSignal``, ``derive``), ``controller`` (``AbortController``, the
plain abort), ``state`` (``SignalState``: every signal's slots; listener
storage, the abort decision and dispatch, ``ListenerHandle``, the lock and
atomicity rationale), ``links`` (``LinkedState``: a linked signal's slots;
keep-alive and abort propagation),
``timer`` (the timer thread and abort runners),
``deadline`` and ``lifecycle``. Imports flow one way: this module ->
controller -> signal -> links -> state.
"""

from __future__ import annotations

from .controller import AbortController, budget_controller
from .links import abort_owned
from .signal import (
    AbortSignal,
    Listener,
    _ensure_signal,
    _timeout_signal,
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
