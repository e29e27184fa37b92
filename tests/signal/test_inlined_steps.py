"""The two steps ``AbortController`` keeps inlined, each compared with the
shared step it copies (they are inlined only because callgrind shows the
call costs more than 5 % of a benchmarked operation:
``python -m benchmarks.signal_instructions create abort_1``):

* ``AbortController.__init__`` writes a plain signal's initial slots itself
  instead of calling ``AbortSignal.__init__`` ("create");
* ``AbortController.abort`` runs the one listener before the boundary
  itself instead of calling ``_dispatch_plain`` / ``_dispatch``
  ("abort_1").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from dshtools import AbortController, AbortSignal
from dshtools._signal import budget_controller
from dshtools._signal.signal import _PlainSignal
from dshtools._signal.state import _BOUNDARY, _DEFAULT_REASON, _dispatch_plain, _reason_of


def _slots(signal: AbortSignal) -> dict[str, Any]:
    names = [n for cls in type(signal).__mro__ for n in getattr(cls, "__slots__", ()) if n != "__weakref__"]
    missing = object()
    return {n: getattr(signal, n, missing) for n in names if getattr(signal, n, missing) is not missing}


def test_a_controllers_signal_starts_in_the_state_abort_signal_init_writes() -> None:
    shared = _PlainSignal()
    AbortSignal.__init__(shared)
    assert _slots(AbortController().signal) == _slots(shared) == _slots(AbortSignal())
    budget = budget_controller(123.0).signal
    assert {k: v for k, v in _slots(budget).items() if k != "_budget_at"} == _slots(shared)
    assert budget.deadline == 123.0


def _outcome(abort: Callable[[AbortController], None], listener: Callable[[AbortSignal], None]) -> list[object]:
    """What one listener's dispatch does: the calls it made, and what the
    abort raised."""
    c = AbortController()
    calls: list[object] = []

    def recorded(s: AbortSignal) -> None:
        calls.append(s is c.signal)
        listener(s)

    c.signal.add_listener(recorded)
    try:
        abort(c)
    except BaseException as exc:
        calls.append(type(exc))
    calls.append(c.signal.listener_count)
    return calls


def _inlined(c: AbortController) -> None:
    c.abort()  # one listener: the inlined path


def _shared(c: AbortController) -> None:
    # The plain abort's steps, with the shared dispatch.
    signal = c.signal
    del signal._armed
    listeners = signal._listeners
    if listeners is not None:
        listeners[_BOUNDARY] = None
    signal._reason = _DEFAULT_REASON
    signal._aborted = True
    if listeners:
        interrupt = _dispatch_plain(signal, listeners)
        if interrupt is not None:
            raise interrupt


def _returns(_s: AbortSignal) -> None:
    pass


def _raises(_s: AbortSignal) -> None:
    raise ValueError("listener")


def _interrupts(_s: AbortSignal) -> None:
    raise KeyboardInterrupt


@pytest.mark.parametrize("listener", [_returns, _raises, _interrupts])
def test_the_one_listener_abort_does_what_the_shared_dispatch_does(
    listener: Callable[[AbortSignal], None], unraisable: list[Any]
) -> None:
    inlined = _outcome(_inlined, listener)
    reported = [(type(u.exc_value), u.err_msg.split(" at 0x")[0]) for u in unraisable]
    unraisable.clear()
    shared = _outcome(_shared, listener)
    assert inlined == shared
    assert reported == [(type(u.exc_value), u.err_msg.split(" at 0x")[0]) for u in unraisable]
    if listener is _raises:
        assert len(reported) == 1 and reported[0][1].startswith("Exception in abort listener ")


def test_the_shared_abort_steps_above_are_a_controllers_abort() -> None:
    c = AbortController()
    _shared(c)
    assert c.signal.aborted and _reason_of(c.signal) is c.signal.reason
    c.abort("again")  # the shared steps deleted `_armed`: this one loses
    assert c.signal.reason != "again"
