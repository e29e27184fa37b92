"""dshtools: cancellable, joined-never-abandoned tool execution for
synchronous Python LLM agents. The public API is re-exported here once;
see docs/contract.md and docs/ for the contract."""

import logging

from ._backends.base import Backend
from ._backends.process.backend import ProcessBackend
from ._backends.thread import ThreadBackend
from ._core.errors import AbortError, TimeoutReason
from ._core.freeze import FrozenDict, thaw
from ._io.process import ProcessAbortError
from ._registry.aio import TaskCancelled
from ._registry.batch import execute_batch, execute_batch_async
from ._registry.limits import ConcurrencyLimit, RateLimit, not_dispatched
from ._registry.policies import TimeoutPolicy
from ._registry.registry import ToolRegistry
from ._registry.result_limit import ResultLimit
from ._registry.retry import RETRY_REQUESTED, RetryPolicy, RetryWithFeedback
from ._registry.tickets import ApprovalTickets, FileTicketStore, MemoryTicketStore, TicketError, TicketStore
from ._signal import AbortController, AbortSignal, ListenerHandle
from ._signal.deadline import Deadline, deadline, timeout_of
from ._signal.lifecycle import SignalReason, abort_on_signals
from ._types.calls import (
    APPROVAL_PENDING,
    DENIED,
    INVALID_ARGS,
    INVALID_CALL,
    INVALID_TOOL_OUTPUT,
    JOURNAL_ERROR,
    OUTCOME_UNKNOWN,
    TOOL_ABORTED,
    TOOL_ABORTED_BEFORE_DISPATCH,
    TOOL_ERROR,
    TOOL_TIMEOUT,
    UNKNOWN_TOOL,
    WORKER_LOST,
    ErrorDetail,
    ErrorInfo,
    ExecutionToken,
    ToolError,
    ToolExecutionInput,
    ToolExecutionResult,
    ToolFailure,
    ToolSuccess,
)
from ._types.hooks import (
    Accept,
    Allow,
    ApprovalDecision,
    ApprovalRequest,
    Approver,
    AroundDispatch,
    Ask,
    Block,
    Deny,
    Guard,
    PostExecuteDecision,
    PostExecuteHook,
    PreExecuteDecision,
    PreExecuteHook,
    ProgressObserver,
    ProgressUpdate,
    ResultObserver,
    ResumeDecision,
    ToolDefinition,
)
from ._types.marks import tool, tools_from_module
from ._types.tools import ToolDispatchExecution, ToolExecution, ToolRunContext

__all__ = [
    "APPROVAL_PENDING",
    "DENIED",
    "INVALID_ARGS",
    "INVALID_CALL",
    "INVALID_TOOL_OUTPUT",
    "JOURNAL_ERROR",
    "OUTCOME_UNKNOWN",
    "RETRY_REQUESTED",
    "TOOL_ABORTED",
    "TOOL_ABORTED_BEFORE_DISPATCH",
    "TOOL_ERROR",
    "TOOL_TIMEOUT",
    "UNKNOWN_TOOL",
    "WORKER_LOST",
    "AbortController",
    "AbortError",
    "AbortSignal",
    # registry (docs/contract.md#calls, docs/contract.md#registry)
    "Accept",
    "Allow",
    "ApprovalDecision",
    "ApprovalRequest",
    "ApprovalTickets",
    "Approver",
    "AroundDispatch",
    "Ask",
    "Backend",
    "Block",
    "ConcurrencyLimit",
    "Deadline",
    "Deny",
    "ErrorDetail",
    "ErrorInfo",
    "ExecutionToken",
    "FileTicketStore",
    "FrozenDict",
    "Guard",
    "ListenerHandle",
    "MemoryTicketStore",
    "PostExecuteDecision",
    "PostExecuteHook",
    "PreExecuteDecision",
    "PreExecuteHook",
    "ProcessAbortError",
    "ProcessBackend",
    "ProgressObserver",
    "ProgressUpdate",
    "RateLimit",
    "ResultLimit",
    "ResultObserver",
    "ResumeDecision",
    "RetryPolicy",
    "RetryWithFeedback",
    "SignalReason",
    "TaskCancelled",
    "ThreadBackend",
    "TicketError",
    "TicketStore",
    # policies and scheduling (docs/contract.md#scheduling)
    "TimeoutPolicy",
    "TimeoutReason",
    "ToolDefinition",
    "ToolDispatchExecution",
    "ToolError",
    "ToolExecution",
    "ToolExecutionInput",
    "ToolExecutionResult",
    "ToolFailure",
    "ToolRegistry",
    "ToolRunContext",
    "ToolSuccess",
    "abort_on_signals",
    "deadline",
    "execute_batch",
    "execute_batch_async",
    "not_dispatched",
    "thaw",
    "timeout_of",
    # typed tools (docs/contract.md#typed-tools)
    "tool",
    "tools_from_module",
]

__version__ = "0.1.0"

# The library logs through "dshtools" and its children and prints nothing
# itself (docs/contract.md#a8).
logging.getLogger(__name__).addHandler(logging.NullHandler())


def _report_public_module() -> None:
    from types import FunctionType

    # Public classes and functions say where users import them from
    # (``dshtools.ToolRegistry`` in reprs, tracebacks and pickles), not the
    # private module that defines them, as httpx and trio do. Every name in
    # ``__all__`` is covered, including names exported later; each is a
    # class or function defined in Python, whose ``__module__`` is writable.
    # The test is on the object's real type: ``isinstance`` reads
    # ``__class__``, which a ``Callable[[X], Y]`` alias forwards to its origin
    # on 3.10, and an alias's ``__module__`` is read-only.
    for name in __all__:
        obj = globals()[name]
        if issubclass(type(obj), (type, FunctionType)):
            obj.__module__ = __name__


_report_public_module()
