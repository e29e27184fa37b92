"""``dshtools.mypy_plugin`` rejects ``del view.signal`` on the around-dispatch
view wherever the ``del`` statement stands (docs/contract.md#calls): at module
level, in a function, a method, a decorated or overloaded function, and in
every compound statement (if/elif/else, while/for with their ``else``,
with, try/except/else/finally, match), also as an item of a tuple or list
target. Reading ``view.signal``, deleting another attribute and deleting
``signal`` of another type stay accepted.

mypy runs in a child process with the repository's configuration (the
plugin enabled); each case line carries a ``# DEL`` marker, and the test
checks that mypy reports exactly the marked lines."""

from __future__ import annotations

import pathlib
import re

import pytest

from tests.helpers.processes import run_mypy

ROOT = pathlib.Path(__file__).resolve().parents[2]

# The clauses of each compound statement kind, in order; each clause of
# ``statements`` below holds one marked ``del``.
COMPOUND_CLAUSES = [
    ["if flag:", "elif items:", "else:"],
    ["while flag:", "else:"],
    ["for _ in items:", "else:"],
    ['with open("x") as _f:'],
    ["try:", "except ValueError:", "else:", "finally:"],
]
IN_EVERY_CLAUSE = "".join(
    f"    {clause}\n        del view.signal  # DEL\n" for clauses in COMPOUND_CLAUSES for clause in clauses
)

CASES = (
    """\
from __future__ import annotations

from typing import overload

from dshtools import ToolDispatchExecution


class Other:
    signal: int
    name: str


def decorate(fn: object) -> object:
    return fn


def statements(view: ToolDispatchExecution, flag: bool, items: list[int], other: Other) -> None:
"""
    + IN_EVERY_CLAUSE
    + """\
    match items:
        case [1]:
            del view.signal  # DEL
        case _:
            pass
    del (view.signal, other.name)  # DEL
    del [view.signal]  # DEL
    del other.signal
    del other.name
    print(view.signal)


async def asynchronous(view: ToolDispatchExecution, flag: bool) -> None:
    if flag:
        del view.signal  # DEL


class Holder:
    def method(self, view: ToolDispatchExecution) -> None:
        del view.signal  # DEL

    class Inner:
        def method(self, view: ToolDispatchExecution) -> None:
            del view.signal  # DEL


@decorate
def decorated(view: ToolDispatchExecution) -> None:
    del view.signal  # DEL


@overload
def overloaded(view: ToolDispatchExecution, n: int) -> int: ...
@overload
def overloaded(view: ToolDispatchExecution, n: str) -> str: ...
def overloaded(view: ToolDispatchExecution, n: int | str) -> int | str:
    del view.signal  # DEL
    return n


def module_level(view: ToolDispatchExecution) -> None:
    def nested() -> None:
        del view.signal  # DEL

    nested()
"""
)


@pytest.mark.timeout(300)
def test_del_of_the_dispatch_views_signal_is_reported_in_every_statement_kind(tmp_path: pathlib.Path) -> None:
    target = tmp_path / "del_cases.py"
    target.write_text(CASES, encoding="utf-8")
    expected = {n for n, line in enumerate(CASES.splitlines(), start=1) if line.endswith("# DEL")}
    assert len(expected) == 21
    proc = run_mypy(target)
    found: dict[int, str] = {}
    for out in proc.stdout.splitlines():
        m = re.match(r".*del_cases\.py:(\d+): error: (.*)$", out)
        if m:
            found[int(m.group(1))] = m.group(2)
    assert set(found) == expected, proc.stdout + proc.stderr
    for message in found.values():
        assert message == (
            '"signal" of the around-dispatch view cannot be deleted; assign another AbortSignal  [misc]'
        ), message
