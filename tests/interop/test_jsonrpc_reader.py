"""The MCP server's line reader, in process (``dshtools._interop.jsonrpc``;
docs/contract.md#a19): it never raises, every line carrying a usable
request id leaves it either handed on under an id of the server's own or
answered exactly once under that id, and ids are matched by type and value.
``tests/mcp/test_wire.py`` checks the same over a real server's stdio."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dshtools._interop.jsonrpc import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    PARSE_ERROR,
    Forward,
    Reply,
    RequestIds,
    read_line,
)


def _request(request_id: object, method: str = "ping", **extra: Any) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, **extra}).encode()


def _cancel(request_id: object) -> bytes:
    return json.dumps(
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": request_id}}
    ).encode()


def test_each_request_gets_an_id_of_its_own_that_int_cannot_fold() -> None:
    ids = RequestIds()
    inner = []
    for request_id in (10, "1_0", 1, "1"):
        routed = read_line(_request(request_id), ids)
        assert isinstance(routed, Forward)
        inner.append(routed.message["id"])
    assert len(set(inner)) == 4
    for value in inner:
        assert isinstance(value, str)
        with pytest.raises(ValueError):
            int(value)
    assert [ids.outer_of(i) for i in inner] == [10, "1_0", 1, "1"]


def test_a_cancel_is_forwarded_only_for_the_request_it_names_exactly() -> None:
    ids = RequestIds()
    ten = read_line(_request(10), ids)
    one_zero = read_line(_request("1_0"), ids)
    assert isinstance(ten, Forward) and isinstance(one_zero, Forward)
    assert read_line(_cancel("10"), ids) is None
    assert read_line(_cancel(10.0), ids) is None
    assert read_line(_cancel(True), ids) is None
    cancel = read_line(_cancel(10), ids)
    assert isinstance(cancel, Forward)
    assert cancel.message["params"]["requestId"] == ten.message["id"]
    # The cancelled request is never answered; the other one is, once.
    assert ids.answer(ten.message["id"]) == (False, None)
    assert ids.answer(one_zero.message["id"]) == (True, "1_0")
    assert ids.answer(one_zero.message["id"]) == (False, None)
    assert ids.in_flight() == 0


def test_an_id_in_flight_is_refused_and_free_again_once_answered() -> None:
    ids = RequestIds()
    first = read_line(_request(5), ids)
    assert isinstance(first, Forward)
    assert read_line(_request(5), ids) == [
        Reply(5, INVALID_REQUEST, "Invalid Request: a request with this id is still in flight")
    ]
    assert isinstance(read_line(_request("5"), ids), Forward)  # another id
    assert ids.answer(first.message["id"]) == (True, 5)
    assert isinstance(read_line(_request(5), ids), Forward)


def test_ids_the_sdk_did_not_get_from_the_table_pass_through() -> None:
    ids = RequestIds()
    assert ids.answer(3) == (True, 3)
    assert ids.answer(None) == (True, None)
    assert ids.answer("client-chosen") == (True, "client-chosen")


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (b"{", [(None, PARSE_ERROR)]),
        (b"\xff", [(None, PARSE_ERROR)]),
        (b"NaN", [(None, PARSE_ERROR)]),
        (b"null", [(None, INVALID_REQUEST)]),
        (b"[]", [(None, INVALID_REQUEST)]),
        (
            b'[{"jsonrpc": "2.0", "id": 1, "method": "ping"}, {"jsonrpc": "2.0", "id": "1", "method": "ping"}]',
            [(1, INVALID_REQUEST), ("1", INVALID_REQUEST)],
        ),
        (_request(1, params="x"), [(1, INVALID_REQUEST)]),
        (_request(1, params=[1]), [(1, INVALID_PARAMS)]),
        (_request(1.5), [(None, INVALID_REQUEST)]),
        (_request(None), [(None, INVALID_REQUEST)]),
        (b'{"jsonrpc": "2.0", "id": 8}', [(8, INVALID_REQUEST)]),
    ],
)
def test_what_the_sdk_would_drop_is_answered_here(line: bytes, expected: list[tuple[object, int]]) -> None:
    routed = read_line(line, RequestIds())
    assert isinstance(routed, list)
    assert [(r.id, r.code) for r in routed] == expected
    assert all(type(r.id) is type(e) for r, (e, _) in zip(routed, expected, strict=True))


def test_notifications_and_responses_are_never_answered() -> None:
    ids = RequestIds()
    assert isinstance(read_line(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}', ids), Forward)
    assert isinstance(read_line(b'{"jsonrpc": "2.0", "id": 1, "result": {}}', ids), Forward)
    assert read_line(b'{"jsonrpc": "2.0", "method": "notifications/cancelled", "params": 3}', ids) is None


def test_lone_surrogates_are_kept_for_the_registry_to_refuse() -> None:
    line = (
        b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "e", "arguments": {"t": "\\ud800"}}}'
    )
    routed = read_line(line, RequestIds())
    assert isinstance(routed, Forward)
    assert routed.message["params"]["arguments"] == {"t": "\ud800"}


@pytest.mark.parametrize("depth", [995, 1003, 100_000])
def test_a_line_too_deep_to_read_is_answered_under_its_id(depth: int) -> None:
    nested = b"[" * depth + b"]" * depth
    line = b'{"jsonrpc": "2.0", "method": "tools/call", "params": {"arguments": {"v": ' + nested + b'}}, "id": "deep"}'
    routed = read_line(line, RequestIds())
    if depth + 3 <= 1002:
        assert isinstance(routed, Forward)
    else:
        assert isinstance(routed, list)
        assert [(r.id, r.code) for r in routed] == [("deep", INVALID_PARAMS)]


def test_a_line_too_deep_to_read_with_no_readable_id_is_answered_with_id_null() -> None:
    routed = read_line(b"[" * 5000, RequestIds())
    assert isinstance(routed, list)
    assert [(r.id, r.code) for r in routed] == [(None, INVALID_REQUEST)]


def test_the_id_table_holds_under_threads() -> None:
    ids = RequestIds()
    barrier = threading.Barrier(4)
    minted: list[list[str]] = [[] for _ in range(4)]

    def work(slot: int) -> None:
        barrier.wait()
        for n in range(500):
            inner = ids.admit(f"{slot}-{n}")
            assert inner is not None
            minted[slot].append(inner)
            assert ids.answer(inner) == (True, f"{slot}-{n}")

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len({i for m in minted for i in m}) == 2000
    assert ids.in_flight() == 0


_ids = st.one_of(
    st.integers(), st.text(max_size=4), st.none(), st.booleans(), st.floats(allow_nan=False, allow_infinity=False)
)
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=4), children, max_size=3),
    max_leaves=10,
)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=80))
def test_read_line_never_raises_on_any_bytes(line: bytes) -> None:
    routed = read_line(line, RequestIds())
    assert routed is None or isinstance(routed, (Forward, list))


@settings(max_examples=300, deadline=None)
@given(
    request_id=_ids,
    method=st.one_of(st.text(max_size=8), st.integers()),
    params=_json,
    jsonrpc=st.sampled_from(["2.0", "1.0"]),
)
def test_a_request_with_a_usable_id_is_handed_on_or_answered_once_under_it(
    request_id: object, method: object, params: object, jsonrpc: str
) -> None:
    ids = RequestIds()
    routed = read_line(
        json.dumps({"jsonrpc": jsonrpc, "id": request_id, "method": method, "params": params}).encode(), ids
    )
    usable = isinstance(request_id, (int, str)) and not isinstance(request_id, bool)
    if isinstance(routed, Forward):
        assert usable
        assert ids.outer_of(routed.message["id"]) == request_id
    else:
        assert isinstance(routed, list) and len(routed) == 1
        assert routed[0].id == (request_id if usable else None)
        assert routed[0].code in (INVALID_REQUEST, INVALID_PARAMS)


@pytest.mark.parametrize("line", [b"", b"   ", b"\t\r"])
def test_a_blank_line_is_no_message_and_gets_no_answer(line: bytes) -> None:
    assert read_line(line, RequestIds()) is None
