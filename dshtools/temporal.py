"""Durable tools on Temporal, with dshtools' guarantees
(docs/contract.md#temporal, docs/temporal.md; extra ``temporal``).

Two halves, one on each side of Temporal:

* **Worker side:** ``tool_activity(registry)`` is one synchronous activity
  (default name ``dshtools.execute_tool``) that a
  ``temporalio.worker.Worker`` hosts on its ``activity_executor`` thread
  pool and that runs any tool of ``registry``. It is declared with
  ``no_thread_cancel_exception=True``: temporalio never injects an
  exception into its thread. A watcher thread, started in the activity's
  context, heartbeats and turns Temporal's cancellation (delivered with a
  heartbeat's answer, or a heartbeat timeout the server reports) and the
  worker's shutdown into an abort of the call's signal; the activity
  returns only after the registry joined the body, with the result as a
  JSON value (``ToolCallResult``). A body that ignores its signal is
  stopped as its backend stops it (``ProcessBackend``: ``kill_after``).
* **Workflow side:** ``await execute_tool(name, arguments, call_id=...,
  start_to_close_timeout=...)`` runs that activity and always returns a
  ``ToolCallResult``: with the default ``WAIT_CANCELLATION_COMPLETED``, a
  cancelled workflow learns the real outcome (``ABORTED`` after the body
  was joined, ``ABORTED_BEFORE_DISPATCH`` when no attempt had started);
  timeouts and exhausted retries come back as coded results
  (``TOOL_TIMEOUT``, ``WORKER_LOST``), never as exceptions.

With a journal on the registry (``ToolRegistry(journal=...)``), the
activity names the call's session (the workflow id unless ``execute_tool``
was given ``session=``) and its call id: Temporal's retry of an attempt
whose worker died finds the claim and answers ``OUTCOME_UNKNOWN`` instead of
running a non-idempotent body again (docs/durable.md).

Workflow code imports this module through
``workflow.unsafe.imports_passed_through()`` (it imports the registry,
which the sandbox need not re-import); ``execute_tool`` itself only calls
``workflow.execute_activity`` and is deterministic.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import threading
import weakref
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Final, TypedDict

from temporalio import activity, workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, CancelledError, TimeoutError, TimeoutType

from ._core.errors import safe_str
from ._core.freeze import thaw
from ._interop.calls import provider_text
from ._signal import AbortController
from ._types.calls import (
    TOOL_ABORTED,
    TOOL_ABORTED_BEFORE_DISPATCH,
    TOOL_TIMEOUT,
    WORKER_LOST,
    ToolExecutionInput,
    ToolExecutionResult,
)

if TYPE_CHECKING:
    from agents import FunctionTool

    from ._registry.registry import ToolRegistry
    from ._types.tools import ToolDefinition

__all__ = [
    "DEFAULT_ACTIVITY_NAME",
    "DEFAULT_HEARTBEAT_TIMEOUT",
    "ToolCallResult",
    "activity_as_tool",
    "execute_tool",
    "join_tool_calls",
    "tool_activity",
]

DEFAULT_ACTIVITY_NAME: Final = "dshtools.execute_tool"
DEFAULT_HEARTBEAT_TIMEOUT: Final = timedelta(seconds=2)
"""The default ``heartbeat_timeout`` of ``execute_tool``: a worker that died
is noticed within it, and a cancellation reaches a running body within about
one heartbeat (measured in docs/temporal.md)."""

_WATCH_INTERVAL: Final = 0.1
"""Seconds between the watcher's looks at the activity's cancellation and
the worker's shutdown (temporalio offers no callback for a synchronous
activity); heartbeats are throttled by temporalio itself."""

WORKER_SHUTDOWN: Final = "the Temporal worker shut down"
WORKFLOW_CANCELLED: Final = "the workflow cancelled the tool call"


class ToolCallResult(TypedDict):
    """A tool call's result as a JSON value: ``code`` (``None`` for a
    success), ``is_error``, ``text`` (what the model is sent),
    ``content`` (content blocks), ``value`` (a success's value, else
    ``None``), ``body_invoked``, ``killed`` (a backend force-stopped the
    body), ``meta`` (JSON; values that are not JSON as their text)."""

    code: str | None
    is_error: bool
    text: str
    content: list[dict[str, Any]]
    value: Any
    body_invoked: bool
    killed: bool
    meta: dict[str, Any]


def result_json(result: ToolExecutionResult) -> ToolCallResult:
    """``result`` as a ``ToolCallResult``; never raises for a result the
    registry returned (a value that is not JSON becomes its text)."""
    meta = json.loads(json.dumps(thaw(result.meta), default=_text))
    return ToolCallResult(
        code=result.code,
        is_error=result.is_error,
        text=provider_text(result),
        content=json.loads(json.dumps(thaw(result.content), default=_text)),
        value=None if result.is_error else json.loads(json.dumps(thaw(result.value), default=_text)),
        body_invoked=result.body_invoked,
        killed=bool(result.meta.get("killed", False)),
        meta=meta,
    )


def _text(value: object) -> str:
    if isinstance(value, BaseException):
        return safe_str(value) or type(value).__name__
    try:
        return str(value)
    except Exception:
        return f"<{type(value).__name__}>"


# ------------------------------------------------------------------ worker side


def tool_activity(
    registry: ToolRegistry, *, name: str = DEFAULT_ACTIVITY_NAME
) -> Callable[[dict[str, Any]], ToolCallResult]:
    """The activity that runs ``registry``'s tools, for
    ``Worker(client, task_queue=..., activities=[tool_activity(registry)],
    activity_executor=ThreadPoolExecutor(...))``.

    It takes the request ``execute_tool`` sends (``{"name", "arguments",
    "call_id", "session"}``) and runs it with ``registry.execute`` on the
    executor's thread, under a signal of its own that is aborted when
    Temporal cancels the activity (reason ``WORKFLOW_CANCELLED``) or the
    worker starts shutting down (``WORKER_SHUTDOWN``). It returns after the
    body was joined, with the ``ToolCallResult``; it raises only for a
    request that is not one (``TypeError``), which Temporal reports as the
    activity's failure. The registry's pipeline (policies, backend, journal)
    applies as to any call; the registry is the caller's to close."""

    @activity.defn(name=name, no_thread_cancel_exception=True)
    def run_tool(request: dict[str, Any]) -> ToolCallResult:
        tool, arguments, call_id, session = _request(request)
        controller = AbortController()
        call = ToolExecutionInput(call_id, tool, arguments, controller.signal, session=session)
        finished = threading.Event()
        watcher = threading.Thread(
            target=contextvars.copy_context().run,
            args=(_watch, controller, finished),
            name=f"dshtools-temporal-watch-{call_id}",
            daemon=True,
        )
        watcher.start()
        try:
            result = registry.execute(call)
        finally:
            finished.set()
            watcher.join()
        return result_json(result)

    return run_tool


def _request(request: object) -> tuple[str, object, str, str | None]:
    if not isinstance(request, Mapping):
        raise TypeError(f"a dshtools tool request is a JSON object, not {type(request).__name__}")
    tool, call_id, session = request.get("name"), request.get("call_id"), request.get("session")
    if not isinstance(tool, str) or not isinstance(call_id, str) or not (session is None or isinstance(session, str)):
        raise TypeError('a dshtools tool request has a str "name" and "call_id" and a str or null "session"')
    return tool, request.get("arguments"), call_id, session


def _watch(controller: AbortController, finished: threading.Event) -> None:
    """Runs on the watcher thread, in the activity's context: heartbeats
    (temporalio throttles what it sends) and aborts the call on
    cancellation or shutdown, until the call has finished."""
    while not finished.is_set():
        if activity.is_cancelled():
            controller.abort(WORKFLOW_CANCELLED)
            return
        if activity.is_worker_shutdown():
            controller.abort(WORKER_SHUTDOWN)
            return
        activity.heartbeat()
        finished.wait(_WATCH_INTERVAL)


# ------------------------------------------------------------------ workflow side


async def execute_tool(
    name: str,
    arguments: object,
    *,
    call_id: str,
    start_to_close_timeout: timedelta,
    heartbeat_timeout: timedelta = DEFAULT_HEARTBEAT_TIMEOUT,
    cancellation_type: workflow.ActivityCancellationType = workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
    retry_policy: RetryPolicy | None = None,
    task_queue: str | None = None,
    session: str | None = None,
    activity_name: str = DEFAULT_ACTIVITY_NAME,
) -> ToolCallResult:
    """Run tool ``name`` with ``arguments`` (a JSON value) as the
    ``tool_activity`` activity, from workflow code; returns its
    ``ToolCallResult``.

    ``call_id`` names the call (the model's tool call id; with a journal,
    the key is ``(session, call_id)``, ``session`` defaulting to the
    workflow id). ``start_to_close_timeout`` bounds one attempt;
    ``heartbeat_timeout`` (seconds as a ``timedelta``; default
    ``DEFAULT_HEARTBEAT_TIMEOUT``) bounds how long a dead worker goes
    unnoticed. With ``WAIT_CANCELLATION_COMPLETED`` (the default) a
    cancelled workflow waits for the activity to abort and join its body and
    gets that result; with ``TRY_CANCEL`` or ``ABANDON`` it gets
    ``ABORTED`` at once (``meta["abandoned"]``: the body may still be
    running). A call cancelled before any attempt started is
    ``ABORTED_BEFORE_DISPATCH``; an attempt's timeout is ``TOOL_TIMEOUT``; a
    worker that stopped heartbeating, or retries that ran out, is
    ``WORKER_LOST``. A cancelled workflow gets its result and goes on (it
    may re-raise ``asyncio.CancelledError`` to end cancelled). Raises only
    what Temporal raises for misuse (outside a workflow, a bad option)."""
    request = {
        "name": name,
        "arguments": arguments,
        "call_id": call_id,
        "session": session if session is not None else workflow.info().workflow_id,
    }
    loop = asyncio.get_running_loop()
    settled: asyncio.Future[None] = loop.create_future()
    in_flight = _in_flight.setdefault(loop, set())
    in_flight.add(settled)
    try:
        return await _run_activity(
            activity_name,
            request,
            start_to_close_timeout,
            heartbeat_timeout,
            cancellation_type,
            retry_policy,
            task_queue,
        )
    finally:
        in_flight.discard(settled)
        settled.set_result(None)


async def join_tool_calls() -> None:
    """Wait, from workflow code, until every ``execute_tool`` call this
    workflow run has started has its result (each activity has completed:
    with ``WAIT_CANCELLATION_COMPLETED``, after its body was joined).

    For a workflow whose agent runner does not wait for the tool calls it
    cancels: openai-agents' ``Runner.run``, cancelled with its workflow,
    cancels its tool tasks and re-raises at once, so the workflow would end
    "cancelled" while a body still runs. Call it before re-raising::

        try:
            result = await Runner.run(agent, user_input)
        except asyncio.CancelledError:
            await dshtools.temporal.join_tool_calls()
            raise

    Runs in the workflow's event loop; returns at once when no call is in
    flight and raises nothing of its own (``RuntimeError`` with no running
    event loop). Source: docs/temporal.md#agent-runners."""
    pending = _in_flight.get(asyncio.get_running_loop())
    if pending:
        await workflow.wait(set(pending))


# The results not yet settled of each workflow run's execute_tool calls,
# keyed by the run's event loop (a workflow instance is its own loop), so a
# run's entry goes with its instance.
_in_flight: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, set[asyncio.Future[None]]] = (
    weakref.WeakKeyDictionary()
)


async def _run_activity(
    activity_name: str,
    request: dict[str, Any],
    start_to_close_timeout: timedelta,
    heartbeat_timeout: timedelta,
    cancellation_type: workflow.ActivityCancellationType,
    retry_policy: RetryPolicy | None,
    task_queue: str | None,
) -> ToolCallResult:
    try:
        result: ToolCallResult = await workflow.execute_activity(
            activity_name,
            request,
            start_to_close_timeout=start_to_close_timeout,
            heartbeat_timeout=heartbeat_timeout,
            cancellation_type=cancellation_type,
            retry_policy=retry_policy,
            task_queue=task_queue,
            result_type=dict,
        )
        return result
    except ActivityError as err:
        return _failure_of(err, cancellation_type)
    except asyncio.CancelledError:
        # The workflow was cancelled before the activity was scheduled (a
        # scheduled one resolves as an ActivityError): no attempt started.
        return _coded(TOOL_ABORTED_BEFORE_DISPATCH, "tool call aborted before dispatch", invoked=False)


def _failure_of(err: ActivityError, cancellation_type: workflow.ActivityCancellationType) -> ToolCallResult:
    cause = err.cause
    started = bool(err.started_event_id)
    if isinstance(cause, CancelledError):
        if not started:
            return _coded(TOOL_ABORTED_BEFORE_DISPATCH, "tool call aborted before dispatch", invoked=False)
        abandoned = cancellation_type != workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED
        meta = {"abandoned": True} if abandoned else {}
        return _coded(TOOL_ABORTED, "tool call aborted", invoked=True, meta=meta)
    if isinstance(cause, TimeoutError) and cause.type == TimeoutType.HEARTBEAT:
        return _coded(WORKER_LOST, "the Temporal worker stopped heartbeating during the call", invoked=started)
    if isinstance(cause, TimeoutError):
        return _coded(
            TOOL_TIMEOUT, f"tool call timed out ({cause.type.name if cause.type else 'timeout'})", invoked=started
        )
    message = safe_str(cause) if cause is not None else err.message
    return _coded(WORKER_LOST, f"the tool activity failed: {message}", invoked=started)


def _coded(code: str, message: str, *, invoked: bool, meta: dict[str, Any] | None = None) -> ToolCallResult:
    text = f"Error: {message}"
    return ToolCallResult(
        code=code,
        is_error=True,
        text=text,
        content=[{"type": "text", "text": text}],
        value=None,
        body_invoked=invoked,
        killed=False,
        meta=meta or {},
    )


# ------------------------------------------------------------------ openai-agents


def activity_as_tool(
    tool: ToolDefinition,
    *,
    start_to_close_timeout: timedelta,
    heartbeat_timeout: timedelta = DEFAULT_HEARTBEAT_TIMEOUT,
    cancellation_type: workflow.ActivityCancellationType = workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
    retry_policy: RetryPolicy | None = None,
    task_queue: str | None = None,
    activity_name: str = DEFAULT_ACTIVITY_NAME,
    strict_json_schema: bool = False,
) -> FunctionTool:
    """An openai-agents ``FunctionTool`` for ``tool`` (a ``ToolDefinition``
    of the registry the worker's ``tool_activity`` hosts: its name,
    description and parameters) that runs it through ``execute_tool`` from
    workflow code: the shape of temporalio's
    ``openai_agents.workflow.activity_as_tool``, with
    ``WAIT_CANCELLATION_COMPLETED`` instead of ``TRY_CANCEL``. The model is
    sent the result's text (a failure's ``Error: ...``); arguments that are
    not a JSON object are answered with an error text and no activity.
    The call id is the model's (``ToolContext.tool_call_id``). Requires
    openai-agents (extra ``agents``)."""
    from agents import FunctionTool
    from agents.tool_context import ToolContext

    async def invoke(context: ToolContext[Any], arguments: str) -> str:
        try:
            parsed = json.loads(arguments or "{}")
        except ValueError as exc:
            return f"Error: the arguments are not valid JSON ({exc})"
        result = await execute_tool(
            tool.name,
            parsed,
            call_id=context.tool_call_id,
            start_to_close_timeout=start_to_close_timeout,
            heartbeat_timeout=heartbeat_timeout,
            cancellation_type=cancellation_type,
            retry_policy=retry_policy,
            task_queue=task_queue,
            activity_name=activity_name,
        )
        return result["text"]

    return FunctionTool(
        name=tool.name,
        description=tool.description,
        params_json_schema=thaw(tool.parameters),
        on_invoke_tool=invoke,
        strict_json_schema=strict_json_schema,
    )
