"""Tickets survive honest JSON round trips and refuse everything else with
``TicketError`` (docs/contract.md#a27; field case N17): a ticket written
again by any conforming JSON writer (integral floats as integers, keys in
any order, any whitespace, any escapes) resumes; any change of its
content, hostile text of any depth or size, and a store whose claim fails
are ``TicketError``, never another exception."""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dshtools import (
    APPROVAL_PENDING,
    AbortController,
    ApprovalTickets,
    Ask,
    FileTicketStore,
    TicketError,
    ToolRegistry,
    ToolRunContext,
    thaw,
)
from tests.helpers.calls import call, tool, value_of


def _echo(args: Any, _run: ToolRunContext) -> Any:
    return args


def _deferring(tickets: ApprovalTickets | None = None) -> ToolRegistry:
    """A registry whose every call of ``echo`` (any object) waits for approval."""
    registry = ToolRegistry(approver=lambda _request: "deferred", tickets=tickets)
    registry.register(tool("echo", _echo))
    registry.add_pre_execute(lambda execution, next: Ask("approve?"))
    return registry


@pytest.fixture(scope="module")
def deferring() -> Iterator[ToolRegistry]:
    with _deferring() as registry:
        yield registry


def _issue(registry: ToolRegistry, arguments: dict[str, Any]) -> dict[str, Any]:
    result = registry.execute(call("echo", arguments))
    assert result.code == APPROVAL_PENDING, result
    plain: dict[str, Any] = json.loads(json.dumps(result.meta["ticket"]))
    return plain


def _resume(registry: ToolRegistry, ticket: object) -> Any:
    """The arguments the resumed call ran with, thawed (a success is required)."""
    return thaw(value_of(registry.resume(ticket, "allowed-once", signal=AbortController().signal)))


# ------------------------------------------------- a conforming JSON writer


def _write(value: Any, rng: random.Random) -> str:
    """JSON text of ``value`` as some conforming writer may give it: a
    number in any form of its value (a browser writes ``2.0`` as ``2``),
    object members in any order, whitespace anywhere it is allowed,
    string characters escaped or not."""

    def ws() -> str:
        return "".join(rng.choice(" \t\n\r") for _ in range(rng.choice((0, 0, 1, 2))))

    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, int):
        forms = [str(value)]
        if abs(value) < 2**53:  # exactly a double: a browser may write it as one
            forms += [f"{value}.0", f"{value}e0", f"{value * 10}E-1"]  # 0 is "0E-1": JSON has no "00"
        return rng.choice(forms)
    if isinstance(value, float):
        forms = [repr(value)]
        if value.is_integer() and abs(value) < 2**53:
            forms.append(str(int(value)))  # JSON.stringify(2.0) == "2"
        return rng.choice(forms)
    if isinstance(value, str):
        out = []
        for ch in value:
            escaped = ch in '"\\' or ord(ch) < 0x20
            if escaped or rng.random() < 0.3:
                code = ord(ch)
                if code > 0xFFFF:
                    code -= 0x10000
                    out.append(f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04X}")
                else:
                    out.append(f"\\u{code:04x}" if rng.random() < 0.5 or escaped else f"\\u{code:04X}")
            else:
                out.append(ch)
        return '"' + "".join(out) + '"'
    if isinstance(value, list):
        return "[" + ws() + ("," + ws()).join(_write(v, rng) + ws() for v in value) + "]"
    items = list(value.items())
    rng.shuffle(items)
    members = (ws() + json.dumps(k) + ws() + ":" + ws() + _write(v, rng) + ws() for k, v in items)
    return "{" + ",".join(members) + ws() + "}"


_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.integers(min_value=-(2**53), max_value=2**53).map(float)  # integral floats: 2.0
    | st.text(max_size=8)
)
_JSON = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=16,
)
_ARGUMENTS = st.dictionaries(st.text(max_size=6), _JSON, max_size=5)


def _same_value(a: Any, b: Any) -> bool:
    """JSON values equal by value (``2 == 2.0``; ``-0.0 == 0``)."""
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None:
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same_value(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_value(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


@pytest.mark.timeout(120)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(arguments=_ARGUMENTS, seed=st.integers(0, 2**32))
def test_a_ticket_written_again_by_any_conforming_json_writer_resumes(
    deferring: ToolRegistry, arguments: dict[str, Any], seed: int
) -> None:
    ticket = _issue(deferring, arguments)
    text = _write(ticket, random.Random(seed))
    ran_with = _resume(deferring, text)
    assert _same_value(ran_with, arguments)


def _mutations(ticket: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every single change of a ticket's content by value, each a new copy:
    every scalar replaced, every container grown and shrunk, every field
    removed."""
    skeleton = json.dumps(ticket)

    def fresh() -> dict[str, Any]:
        copy: dict[str, Any] = json.loads(skeleton)
        return copy

    paths: list[tuple[Any, ...]] = []
    todo: list[tuple[tuple[Any, ...], Any]] = [((), ticket)]
    while todo:
        path, value = todo.pop()
        paths.append(path)
        if isinstance(value, dict):
            todo.extend((path + (k,), v) for k, v in value.items())
        elif isinstance(value, list):
            todo.extend((path + (i,), v) for i, v in enumerate(value))

    def at(root: Any, path: tuple[Any, ...]) -> Any:
        for part in path:
            root = root[part]
        return root

    for path in paths:
        value = at(ticket, path)
        if isinstance(value, dict):
            changed = fresh()
            at(changed, path)["\x00added"] = 0
            yield f"{path}: a member added", changed
            if path and value:
                changed = fresh()
                del at(changed, path)[next(iter(value))]
                yield f"{path}: a member removed", changed
        elif isinstance(value, list):
            changed = fresh()
            at(changed, path).append(None)
            yield f"{path}: an item added", changed
            if value:
                changed = fresh()
                at(changed, path).pop()
                yield f"{path}: an item removed", changed
        if path:
            changed = fresh()
            parent = at(changed, path[:-1])
            if isinstance(value, bool) or value is None:
                parent[path[-1]] = 1 if value is None else not value
            elif isinstance(value, (int, float)):
                bumped = value + 1 if abs(value) < 2**52 else value * 2 or 1
                parent[path[-1]] = bumped if math.isfinite(bumped) and bumped != value else 0.5
            elif isinstance(value, str):
                parent[path[-1]] = value + "x"
            else:
                parent[path[-1]] = "replaced"
            yield f"{path}: replaced", changed
            if len(path) == 1:
                changed = fresh()
                del changed[path[0]]
                yield f"{path}: removed", changed


@pytest.mark.timeout(120)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(arguments=_ARGUMENTS)
def test_any_change_of_a_tickets_content_is_refused_and_the_ticket_still_resumes(
    deferring: ToolRegistry, arguments: dict[str, Any]
) -> None:
    ticket = _issue(deferring, arguments)
    for what, changed in _mutations(ticket):
        for given_as in (changed, json.dumps(changed)):
            with pytest.raises(TicketError):
                _resume(deferring, given_as)
                pytest.fail(f"a ticket with {what} resumed")
    assert _same_value((_resume(deferring, ticket)), arguments)


# ------------------------------------------------------------ N17: hostile


def _nested(depth: int, open_: str, close: str, inner: str = "1") -> str:
    return open_ * depth + inner + close * depth


_HOSTILE = {
    **{f"array {d}": _nested(d, "[", "]") for d in (10, 1_000, 100_000)},
    **{f"object {d}": _nested(d, '{"a":', "}") for d in (10, 1_000, 100_000)},
    "50 MB of arrays": _nested(25 * 1024 * 1024, "[", "]", ""),
    "50 MB string": json.dumps({"arguments": {"text": "x" * (50 * 1024 * 1024)}}),
}


@pytest.mark.timeout(120)
def test_hostile_ticket_texts_are_refused_within_2_s_and_the_real_ticket_still_resumes(
    deferring: ToolRegistry,
) -> None:
    """N17: nested 10 / 1 000 / 100 000 deep (arrays and objects), 50 MB,
    and a valid ticket whose arguments are a 10 000-deep array, as text and
    as a mapping."""
    ticket = _issue(deferring, {"path": "/tmp/x", "n": 2.0})
    text = json.dumps(ticket)
    deep = _nested(10_000, "[", "]")
    hostile: dict[str, object] = {
        **_HOSTILE,
        "deep arguments, as text": text.replace('{"path": "/tmp/x", "n": 2.0}', deep),
        "deep arguments, as a mapping": {**ticket, "arguments": _deep_list(10_000)},
    }
    assert hostile["deep arguments, as text"] != text
    for what, bad in hostile.items():
        started = time.monotonic()
        with pytest.raises(TicketError):
            _resume(deferring, bad)
        assert time.monotonic() - started < 2.0, what
    assert _same_value((_resume(deferring, text)), {"path": "/tmp/x", "n": 2})


def _deep_list(depth: int) -> list[Any]:
    root: list[Any] = []
    inner = root
    for _ in range(depth):
        inner.append([])
        inner = inner[0]
    return root


@pytest.mark.parametrize(
    "not_json",
    [
        pytest.param({"x": float("nan")}, id="nan"),
        pytest.param({1: "int key"}, id="int-key"),
        pytest.param({"x": {1, 2}}, id="set"),
        pytest.param({"x": object()}, id="object"),
        pytest.param({"x": 10**5000}, id="huge-int"),
    ],
)
def test_a_ticket_mapping_whose_arguments_are_not_json_is_refused(
    deferring: ToolRegistry, not_json: dict[Any, Any]
) -> None:
    ticket = _issue(deferring, {"a": 1})
    with pytest.raises(TicketError, match="not JSON"):
        _resume(deferring, {**ticket, "arguments": not_json})


def test_a_ticket_that_contains_itself_is_refused(deferring: ToolRegistry) -> None:
    ticket = _issue(deferring, {"a": 1})
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(TicketError, match="contain itself"):
        _resume(deferring, {**ticket, "arguments": {"loop": loop}})


@pytest.mark.parametrize("text", ["NaN", '{"arguments": Infinity}', b"\xff\xfe\x00", "[1,"])
def test_text_that_is_not_json_is_refused(deferring: ToolRegistry, text: str | bytes) -> None:
    with pytest.raises(TicketError, match="not JSON"):
        _resume(deferring, text)


# -------------------------------------------------- a store that cannot claim


class _FailingClaims(FileTicketStore):
    """A file store whose ``claim`` hits ``OSError`` while ``failing``."""

    failing = True

    def claim(self, key: str) -> bool:
        if self.failing:
            raise PermissionError(13, "Permission denied", str(self.directory / key))
        return super().claim(key)


def test_a_store_whose_claim_hits_oserror_refuses_and_keeps_the_ticket(tmp_path: Path) -> None:
    store = _FailingClaims(tmp_path)
    with _deferring(ApprovalTickets(store)) as registry:
        ticket = _issue(registry, {"path": "/tmp/x"})
        with pytest.raises(TicketError, match=r"was kept, not resumed.*PermissionError") as raised:
            _resume(registry, ticket)
        assert isinstance(raised.value.__cause__, PermissionError)
        store.failing = False
        assert (_resume(registry, ticket)) == {"path": "/tmp/x"}
