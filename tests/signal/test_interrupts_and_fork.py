"""A KeyboardInterrupt/SystemExit raised by a listener is never swallowed
(decision 0011), and a fork cannot inherit the signal lock held (B16's kind:
"several interrupts needed"; a deadlocked child)."""

from __future__ import annotations

import os
import sys
from typing import Any

import pytest

from dshtools import AbortController, AbortSignal
from tests.helpers.processes import fork_while_held, run_python


def _raiser(exc: BaseException) -> Any:
    def listener(_s: AbortSignal) -> None:
        raise exc

    return listener


@pytest.mark.timeout(10)
def test_keyboard_interrupt_in_a_listener_is_reraised_after_all_listeners_ran() -> None:
    c = AbortController()
    log: list[int] = []
    c.signal.add_listener(lambda _s: log.append(1))
    c.signal.add_listener(_raiser(KeyboardInterrupt()))
    c.signal.add_listener(lambda _s: log.append(3))
    with pytest.raises(KeyboardInterrupt):
        c.abort("stop")
    assert log == [1, 3]
    assert c.signal.aborted and c.signal.reason == "stop"
    assert c.signal.listener_count == 0


@pytest.mark.timeout(10)
def test_first_interrupt_wins_and_dependents_listeners_still_run() -> None:
    c = AbortController()
    derived = AbortSignal.any_of([c.signal])
    log: list[str] = []
    first = SystemExit(3)
    c.signal.add_listener(_raiser(first))
    derived.add_listener(_raiser(KeyboardInterrupt()))
    derived.add_listener(lambda _s: log.append("dependent"))
    with pytest.raises(SystemExit) as info:
        c.abort()
    assert info.value is first
    assert log == ["dependent"]
    assert derived.aborted


@pytest.mark.timeout(10)
def test_interrupt_from_a_listener_run_inline_propagates_to_the_registering_thread() -> None:
    signal = AbortSignal.already_aborted("done")
    with pytest.raises(KeyboardInterrupt):
        signal.add_listener(_raiser(KeyboardInterrupt()))


@pytest.mark.timeout(10)
def test_ordinary_exceptions_are_still_reported_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    reported: list[BaseException | None] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda args: reported.append(args.exc_value))
    c = AbortController()
    boom = RuntimeError("listener bug")
    c.signal.add_listener(_raiser(boom))
    c.abort()  # does not raise
    assert reported == [boom]


# Run by a fresh interpreter (pytest itself must never fork: it is threaded).
_FORK_WHILE_LOCKED = fork_while_held(
    "_signal_claim._LOCK",
    setup="""
    from dshtools import AbortController, AbortSignal
    from dshtools._signal import state as _signal_claim
    """,
    child="""
    c = AbortController()  # the lock must be usable at once
    ran = []
    derived = AbortSignal.any_of([c.signal, AbortSignal.timeout(3600)])
    derived.add_listener(lambda _s: ran.append(2))
    c.signal.add_listener(lambda _s: ran.append(1))
    c.abort()
    code = 0 if ran == [1, 2] and derived.aborted and c.signal.listener_count == 0 else 3
    """,
)


@pytest.mark.timeout(60)
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_a_fork_while_another_thread_holds_the_signal_lock_does_not_deadlock_the_child() -> None:
    # docs/contract.md#a10. A deadlocked child would hang the helper; the
    # subprocess timeout bounds it.
    run_python(_FORK_WHILE_LOCKED)
