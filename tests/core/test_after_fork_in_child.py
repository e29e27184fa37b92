"""``after_fork_in_child(fn)`` runs ``fn`` in the child of every later
``os.fork()``, before the child's own code, and never in the parent; on a
platform without ``os.register_at_fork`` it registers nothing and does not
raise (``dshtools._core.interrupts``; docs/contract.md#a10)."""

from __future__ import annotations

import os

import pytest

from dshtools._core.interrupts import INTERRUPT_SLICE, after_fork_in_child

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


@pytest.mark.timeout(30)
def test_fn_runs_in_each_forked_child_before_its_code_and_never_in_the_parent() -> None:
    ran: list[int] = []
    after_fork_in_child(lambda: ran.append(os.getpid()))
    for _ in range(2):
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report what the handler recorded, then leave at once
            try:
                os.write(write, b"ok" if ran == [os.getpid()] else repr(ran).encode())
            finally:
                os._exit(0)
        os.close(write)
        with os.fdopen(read, "rb") as f:
            seen = f.read()
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert seen == b"ok", seen
    assert ran == []


def test_without_register_at_fork_nothing_is_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(os, "register_at_fork")
    after_fork_in_child(lambda: None)  # no AttributeError


def test_the_interrupt_slice_is_a_quarter_second() -> None:
    assert INTERRUPT_SLICE == 0.25
