"""``carry`` (dshtools/_core/context.py), the one way a call's work takes
the asking thread's ``contextvars`` to the thread that does it
(docs/contract.md#a22): the work sees the values current when it was
carried, not later ones; what it sets reaches neither the asking thread
nor other work carried from the same context. The thread backend's
inlined copy is held to the same rules by
tests/registry/test_context_on_every_path.py."""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable

import pytest

from dshtools._core.context import carry

VAR: contextvars.ContextVar[str] = contextvars.ContextVar("VAR", default="default")


def read_then_set(tag: str) -> str:
    seen = VAR.get()
    VAR.set(tag)
    return seen


def on_a_thread(fn: Callable[[], object]) -> list[object]:
    out: list[object] = []
    thread = threading.Thread(target=lambda: out.append(fn()))
    thread.start()
    thread.join(10)
    return out


@pytest.mark.timeout(20)
def test_the_work_sees_the_values_of_the_moment_it_was_carried() -> None:
    VAR.set("asked")
    first = carry(read_then_set)
    VAR.set("later")
    second = carry(read_then_set)
    assert on_a_thread(lambda: first("one")) == ["asked"]
    assert on_a_thread(lambda: second("two")) == ["later"]
    assert VAR.get() == "later"  # nothing the work set came back


def test_two_carries_of_one_context_are_isolated_from_each_other() -> None:
    VAR.set("asked")
    one, two = carry(read_then_set), carry(read_then_set)
    assert one("one") == "asked"
    assert two("two") == "asked"  # not "one"
    assert VAR.get() == "asked"


def test_what_the_work_raises_reaches_the_caller() -> None:
    def fail() -> None:
        raise LookupError("inside")

    with pytest.raises(LookupError, match="inside"):
        carry(fail)()
