"""ResultLimit and the post-execute API it needs: ``Accept(meta=...,
failure_content=...)`` and ``Block(meta=...)`` (docs/policies.md#resultlimit;
docs/contract.md#policies)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import dshtools
from dshtools import (
    AbortController,
    Accept,
    Block,
    PostExecuteDecision,
    ResultLimit,
    TimeoutPolicy,
    ToolExecution,
    ToolExecutionResult,
    ToolRegistry,
    ToolRunContext,
)
from dshtools._registry.result_limit import cut_content
from tests.helpers.calls import call, error_of, tool, value_of

Next = Callable[[], PostExecuteDecision]


def _text(result: ToolExecutionResult) -> str:
    return "".join(b["text"] for b in result.content if b.get("type") == "text")


def _sizes(result: ToolExecutionResult) -> dict[str, int]:
    sizes = result.meta["truncated"]
    assert isinstance(sizes, dict)
    return sizes


def _observed(registry: ToolRegistry) -> list[ToolExecutionResult]:
    seen: list[ToolExecutionResult] = []
    registry.add_result_observer(lambda _e, r: seen.append(r))
    return seen


@pytest.mark.timeout(10)
def test_a_long_success_is_cut_head_and_tail_and_keeps_its_value(registry: ToolRegistry) -> None:
    text = "a" * 60 + "b" * 40
    registry.register(tool("t", lambda _a, _r: text))
    registry.add_post_execute(ResultLimit(max_chars=20))
    seen = _observed(registry)
    result = registry.execute(call("t"))
    assert value_of(result) == text
    assert _text(result) == "a" * 10 + "\n[... 80 of 100 characters left out ...]\n" + "b" * 10
    assert result.meta["truncated"] == {"total_chars": 100, "kept_chars": 20, "omitted_chars": 80}
    assert seen == [result] and value_of(seen[0]) == text


@pytest.mark.timeout(10)
def test_content_within_the_limit_is_passed_on_unchanged(registry: ToolRegistry) -> None:
    registry.register(tool("t", lambda _a, _r: "x" * 20))
    registry.add_post_execute(ResultLimit(max_chars=20))
    result = registry.execute(call("t"))
    assert _text(result) == "x" * 20
    assert "truncated" not in result.meta


@pytest.mark.timeout(10)
def test_the_tools_own_limit_wins(registry: ToolRegistry) -> None:
    registry.register(tool("t", lambda _a, _r: "0123456789" * 3, max_output_chars=10))
    registry.add_post_execute(ResultLimit(max_chars=1000, keep="head"))
    result = registry.execute(call("t"))
    assert _text(result) == "0123456789\n[... 20 of 30 characters left out ...]"


@pytest.mark.timeout(10)
def test_an_error_text_is_cut_and_its_message_kept_whole(registry: ToolRegistry) -> None:
    message = "m" * 200

    def body(_a: Any, _r: ToolRunContext) -> None:
        raise RuntimeError(message)

    registry.register(tool("t", body))
    registry.add_post_execute(ResultLimit(max_chars=30, keep="tail"))
    result = registry.execute(call("t"))
    assert result.code == dshtools.TOOL_ERROR
    assert error_of(result).message == message
    assert _text(result) == "[... 177 of 207 characters left out ...]\n" + "m" * 30
    assert _sizes(result)["total_chars"] == len("Error: " + message)


@pytest.mark.timeout(10)
def test_an_inner_hooks_content_and_block_are_cut_too(registry: ToolRegistry) -> None:
    registry.register(tool("t", lambda _a, _r: "short"))
    registry.add_post_execute(ResultLimit(max_chars=4, keep="head"))
    inner: list[PostExecuteDecision] = [Accept(content="c" * 10, meta={"mine": 1})]
    registry.add_post_execute(lambda _e, _r, _n: inner[0])
    accepted = registry.execute(call("t"))
    assert _text(accepted) == "cccc\n[... 6 of 10 characters left out ...]"
    assert accepted.meta["mine"] == 1 and _sizes(accepted)["omitted_chars"] == 6
    inner[0] = Block("f" * 10)
    blocked = registry.execute(call("t", call_id="c2"))
    assert blocked.is_error
    assert _text(blocked) == "ffff\n[... 6 of 10 characters left out ...]"
    assert _sizes(blocked)["total_chars"] == 10


@pytest.mark.timeout(10)
def test_an_inner_block_within_the_limit_and_an_inner_value_pass_unchanged(registry: ToolRegistry) -> None:
    registry.register(tool("t", lambda _a, _r: "short"))
    registry.add_post_execute(ResultLimit(max_chars=4, keep="head"))
    inner: list[PostExecuteDecision] = [Block("ffff", meta={"mine": 1})]
    registry.add_post_execute(lambda _e, _r, _n: inner[0])
    blocked = registry.execute(call("t"))
    assert blocked.is_error and _text(blocked) == "ffff"
    assert blocked.meta["mine"] == 1 and "truncated" not in blocked.meta
    # A replacement value is rendered after the post-execute hooks: never cut.
    inner[0] = Accept(value="v" * 10)
    accepted = registry.execute(call("t", call_id="c2"))
    assert value_of(accepted) == "v" * 10 and _text(accepted) == "v" * 10
    assert "truncated" not in accepted.meta


@pytest.mark.timeout(10)
def test_non_text_blocks_are_kept_in_order() -> None:
    image = {"type": "image", "data": "AAAA", "mimeType": "image/png"}
    blocks = ({"type": "text", "text": "abcdef"}, image, {"type": "text", "text": "ghijkl"})
    cut = cut_content(blocks, 4)
    assert cut is not None
    out, sizes = cut
    assert out == (
        {"type": "text", "text": "ab\n[... 8 of 12 characters left out ...]\n"},
        image,
        {"type": "text", "text": "kl"},
    )
    assert sizes == {"total_chars": 12, "kept_chars": 4, "omitted_chars": 8}


@pytest.mark.timeout(10)
@pytest.mark.parametrize("code", [dshtools.INVALID_ARGS, dshtools.UNKNOWN_TOOL, dshtools.TOOL_ABORTED_BEFORE_DISPATCH])
def test_results_settled_before_post_execute_are_not_touched(registry: ToolRegistry, code: str) -> None:
    """INVALID_ARGS, UNKNOWN_TOOL (its text holds the name) and a pre-aborted
    call: post-execute does not run for the first and last; the limit is
    big enough to leave the unknown tool's text alone."""
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    registry.register(tool("t", lambda _a, _r: "x" * 100, parameters=schema))
    registry.add_post_execute(ResultLimit(max_chars=200))
    controller = AbortController()
    if code == dshtools.TOOL_ABORTED_BEFORE_DISPATCH:
        controller.abort()
    name = "missing" if code == dshtools.UNKNOWN_TOOL else "t"
    args = {"n": "x"} if code == dshtools.INVALID_ARGS else {"n": 1}
    result = registry.execute(call(name, args, signal=controller.signal))
    assert result.code == code
    assert "truncated" not in result.meta


@pytest.mark.timeout(10)
def test_timeouts_and_aborts_keep_their_codes_and_meta(registry: ToolRegistry) -> None:
    def body(_a: Any, run: ToolRunContext) -> str:
        run.signal.wait(5)
        return "late"

    registry.register(tool("t", body, timeout=0.02))
    registry.add_around_dispatch(TimeoutPolicy())
    registry.add_post_execute(ResultLimit(max_chars=10))
    timed = registry.execute(call("t"))
    assert timed.code == dshtools.TOOL_TIMEOUT
    assert "reason" in timed.meta and "truncated" in timed.meta
    assert error_of(timed).message.startswith("tool call timed out")

    def aborts(_a: Any, run: ToolRunContext) -> str:
        controller.abort()
        return "x" * 50

    controller = AbortController()
    registry.register(tool("a", aborts))
    aborted = registry.execute(call("a", signal=controller.signal))
    assert aborted.code == dshtools.TOOL_ABORTED


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [({"max_chars": 0}, ValueError), ({"max_chars": 1.5}, TypeError), ({"keep": "middle"}, ValueError)],
)
def test_bad_arguments_are_refused_where_the_limit_is_made(kwargs: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        ResultLimit(**kwargs)


def test_accept_and_block_take_meta_and_check_it() -> None:
    assert Accept(meta={"k": 1}).meta == {"k": 1}
    assert Accept().meta == {} and Block("no").meta == {}
    with pytest.raises(TypeError):
        Accept(meta=[("k", 1)])  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Block("no", meta={1: 2})  # type: ignore[dict-item]


@pytest.mark.timeout(10)
def test_accept_meta_and_failure_content_reach_the_result(registry: ToolRegistry) -> None:
    def body(_a: Any, _r: ToolRunContext) -> None:
        raise RuntimeError("boom")

    registry.register(tool("t", body))

    def hook(_e: ToolExecution, _r: ToolExecutionResult, _n: Next) -> PostExecuteDecision:
        return Accept(failure_content="Error: (hidden)", meta={"seen": True}, content="ignored on a failure")

    registry.add_post_execute(hook)
    result = registry.execute(call("t"))
    assert result.code == dshtools.TOOL_ERROR
    assert _text(result) == "Error: (hidden)"
    assert error_of(result).message == "boom"
    assert result.meta["seen"] is True


def test_the_limit_says_what_it_is() -> None:
    assert repr(ResultLimit(100, "head")) == "ResultLimit(max_chars=100, keep='head')"
