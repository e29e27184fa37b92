"""A backend's report may carry a ``Value``'s content blocks and entries for
the final ``meta`` (``BodyReport.content``/``meta``; decision 0063): the
registry uses the blocks instead of rendering the value, and adds the
entries to whatever result the call ends with."""

from __future__ import annotations

from typing import Any

from dshtools import (
    TOOL_ABORTED,
    AbortController,
    Accept,
    ToolExecution,
    ToolExecutionResult,
    ToolRegistry,
    ToolRunContext,
    ToolSuccess,
    thaw,
)
from dshtools._backends.base import BodyReport, Error, Value
from dshtools._backends.thread import _Settled  # a dispatch settled before submit() returned
from dshtools._core.errors import AbortError
from tests.helpers.calls import call, tool

IMAGE = {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}


class _Reporting:
    def __init__(self, report: BodyReport, abort: AbortController | None = None) -> None:
        self.report = report
        self.abort = abort

    def validate(self, name: str, body: Any) -> None:
        pass

    def submit(self, body: Any, args: object, run: ToolRunContext) -> _Settled:
        if self.abort is not None:
            self.abort.abort("stop")
        return _Settled(self.report)

    def close(self) -> None:
        pass


def _registry(report: BodyReport, abort: AbortController | None = None) -> ToolRegistry:
    registry = ToolRegistry()
    registry.register(
        tool("remote", lambda args, run: None, output_schema={"type": "object"}, backend=_Reporting(report, abort))
    )
    return registry


def _run(registry: ToolRegistry, controller: AbortController | None = None) -> ToolExecutionResult:
    return registry.execute(call("remote", signal=controller.signal if controller is not None else None))


def test_a_values_content_blocks_are_kept_and_the_meta_is_added() -> None:
    report = BodyReport(outcome=Value({"n": 1}), content=(IMAGE,), meta={"remote": "answered"})
    with _registry(report) as registry:
        result = _run(registry)
    assert isinstance(result, ToolSuccess)
    assert thaw(result.value) == {"n": 1}
    assert [thaw(b) for b in result.content] == [IMAGE]
    assert result.meta == {"remote": "answered"}


def test_the_meta_survives_a_post_execute_hook_and_an_abort() -> None:
    controller = AbortController()
    report = BodyReport(outcome=Error(AbortError("stop")), meta={"remote": "cancelled, no answer in 2.0 s"})
    with _registry(report, abort=controller) as registry:

        def keep(execution: ToolExecution, result: ToolExecutionResult, next: Any) -> Any:
            return Accept()

        registry.add_post_execute(keep)
        result = _run(registry, controller)
    assert result.code == TOOL_ABORTED
    assert result.meta is not None
    assert result.meta["reason"] == "stop"
    assert result.meta["remote"] == "cancelled, no answer in 2.0 s"


def test_without_content_the_value_is_rendered_as_for_any_body() -> None:
    with _registry(BodyReport(outcome=Value({"n": 2}))) as registry:
        result = _run(registry)
    assert isinstance(result, ToolSuccess)
    assert [thaw(b) for b in result.content] == [{"type": "text", "text": '{"n": 2}'}]
    assert not result.meta
