"""``dshtools.langchain.tools``, driven by LangChain's own tool-calling
path: a ``GenericFakeChatModel`` (langchain-core's fake chat model; no
model, no network) answers with tool calls and each is run through
``tool.invoke``/``tool.ainvoke``, as an agent loop does. The schema
``bind_tools`` sends, calls that succeed and fail (sync and async), an
``ainvoke`` task cancelled (the body stopped and joined before the
cancellation returns, no process left behind, where LangChain's own sync
tool keeps running: benchmarks/frameworks_cancel.py measures both), and a
sync ``invoke`` stopped by the caller's signal."""

from __future__ import annotations

import asyncio
import os
from functools import partial

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, ToolCall, ToolMessage
from langchain_core.tools import StructuredTool
from langchain_core.utils.function_calling import convert_to_openai_tool

from dshtools import TOOL_ABORTED, AbortController, ToolRegistry, ToolSuccess
from dshtools.langchain import tools
from tests.frameworks.conftest import SLEEP
from tests.helpers.calls import tool
from tests.helpers.processes import alive, wait_for_descendant
from tests.helpers.recorders import CallEventRecorder
from tests.helpers.waiting import run_in_thread

pytestmark = pytest.mark.timeout(60)


def _model_calls(*calls: ToolCall) -> list[ToolCall]:
    """The tool calls of the fake chat model's answer."""
    chat = GenericFakeChatModel(messages=iter([AIMessage("", tool_calls=list(calls))]))
    message = chat.invoke("go")
    assert isinstance(message, AIMessage)
    return message.tool_calls


def _call(name: str, args: dict[str, object], call_id: str) -> ToolCall:
    return {"name": name, "args": args, "id": call_id, "type": "tool_call"}


def _untitled(schema: object) -> object:
    if isinstance(schema, dict):
        return {k: _untitled(v) for k, v in schema.items() if k != "title" or not isinstance(v, str)}
    return schema


def test_the_tools_and_what_bind_tools_sends_carry_the_registrys_names_descriptions_and_schemas(
    registry: ToolRegistry,
) -> None:
    built = tools(registry)
    assert all(isinstance(t, StructuredTool) and t.func and t.coroutine for t in built)
    sent = [convert_to_openai_tool(t)["function"] for t in built]
    schemas = registry.schemas()
    assert [f["name"] for f in sent] == ["add", "fs_boom", "slow"]  # a dotted name goes as its alias
    for built_tool, function, schema in zip(built, sent, schemas, strict=True):
        assert built_tool.args_schema == schema["parameters"]
        assert function["description"] == schema["description"]
        # LangChain's conversion drops the "title" annotations, nothing else
        assert function["parameters"] == _untitled(schema["parameters"])
    assert [t.name for t in tools(registry, "slow", "add")] == ["add", "slow"]
    with pytest.raises(ValueError, match="'nope'"):
        tools(registry, "nope")


def test_a_parameter_named_like_langchains_own_keywords_is_refused(registry: ToolRegistry) -> None:
    registry.register(
        tool("configure", lambda _a, _r: "ok", parameters={"type": "object", "properties": {"config": {}}})
    )
    with pytest.raises(ValueError, match="'config'"):
        tools(registry, "configure")


def test_invoke_and_ainvoke_run_the_call_through_the_registry(
    registry: ToolRegistry, recorder: CallEventRecorder
) -> None:
    (add,) = tools(registry, "add")
    (call,) = _model_calls(_call("add", {"a": 2, "b": 3}, "call-7"))

    sync = add.invoke(call)
    asynchronous = asyncio.run(add.ainvoke(call))

    for message in (sync, asynchronous):
        assert isinstance(message, ToolMessage)
        assert message.tool_call_id == "call-7" and message.content == "5" and message.status == "success"
        assert isinstance(message.artifact, ToolSuccess) and message.artifact.value == 5
    assert add.invoke({"a": 4, "b": 5}) == "9"  # plain arguments give the content alone
    assert len(recorder.results) == 3  # one registry call each, under ids of their own


def test_a_failure_is_an_error_tool_message_with_the_error_text(registry: ToolRegistry) -> None:
    add, boom, _slow = tools(registry)
    failing, invalid = _model_calls(_call("fs_boom", {"path": "/etc/x"}, "c1"), _call("add", {"a": "one"}, "c2"))

    message = boom.invoke(failing)
    rejected = asyncio.run(add.ainvoke(invalid))

    assert isinstance(message, ToolMessage) and message.status == "error"
    assert message.content == "Error: no such file: /etc/x"
    assert isinstance(rejected, ToolMessage) and rejected.status == "error"
    assert isinstance(rejected.content, str) and rejected.content.startswith("Error: invalid arguments")


def test_cancelling_the_ainvoke_task_aborts_and_joins_the_body_before_the_cancellation_returns(
    registry: ToolRegistry, recorder: CallEventRecorder
) -> None:
    (slow,) = tools(registry, "slow")
    (call,) = _model_calls(_call("slow", {}, "slow-1"))

    async def main() -> tuple[list[int], int]:
        task = asyncio.create_task(slow.ainvoke(call))
        pids = await asyncio.to_thread(partial(wait_for_descendant, matching_only=True), os.getpid(), SLEEP, 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return pids, len(recorder.order("body_end"))  # bodies ended when the caller saw the cancel

    pids, ended = asyncio.run(main())

    assert ended == 1
    assert len(recorder.order("aborted by TaskCancelled")) == 1  # the body saw the task's cancellation
    ((published,),) = recorder.results.values()
    assert published.code == TOOL_ABORTED and published.body_invoked
    assert registry.statistics().bodies_in_flight == 0
    assert alive(pids) == []


def test_a_sync_invoke_stops_when_the_callers_signal_aborts(
    registry: ToolRegistry, recorder: CallEventRecorder
) -> None:
    controller = AbortController()
    (slow,) = tools(registry, "slow", signal=controller.signal)
    (call,) = _model_calls(_call("slow", {}, "slow-2"))

    thread, box = run_in_thread(lambda: slow.invoke(call))
    pids = wait_for_descendant(os.getpid(), SLEEP, 10, matching_only=True)
    controller.abort("the user pressed stop")
    thread.join(10)

    assert not thread.is_alive()
    (message,) = box
    assert isinstance(message, ToolMessage) and message.status == "error"
    assert isinstance(message.content, str) and message.content.startswith("Error: ")
    assert len(recorder.order("aborted by str")) == 1  # the caller's reason
    assert alive(pids) == []
