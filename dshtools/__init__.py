"""dshtools: cancellable, joined-never-abandoned tool execution for
synchronous Python LLM agents. The public API is re-exported here once;
see docs/contract.md and docs/ for the contract."""

import logging

from ._backend import Backend
from ._batch import execute_batch
from ._deadline import Deadline, deadline, timeout_of
from ._errors import AbortError, TimeoutReason
from ._freeze import thaw
from ._hooks import (
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
    ResultObserver,
    ToolDefinition,
)
from ._policies import TimeoutPolicy
from ._registry import ToolRegistry
from ._signal import AbortController, AbortSignal, ListenerHandle
from ._thread_backend import ThreadBackend
from ._types import (
    DENIED,
    INVALID_ARGS,
    INVALID_TOOL_OUTPUT,
    TOOL_ABORTED,
    TOOL_ABORTED_BEFORE_DISPATCH,
    TOOL_ERROR,
    TOOL_TIMEOUT,
    UNKNOWN_TOOL,
    WORKER_LOST,
    ErrorDetail,
    ErrorInfo,
    ExecutionToken,
    ToolDispatchExecution,
    ToolError,
    ToolExecution,
    ToolExecutionInput,
    ToolExecutionResult,
    ToolFailure,
    ToolRunContext,
    ToolSuccess,
)

__all__ = [
    "DENIED",
    "INVALID_ARGS",
    "INVALID_TOOL_OUTPUT",
    "TOOL_ABORTED",
    "TOOL_ABORTED_BEFORE_DISPATCH",
    "TOOL_ERROR",
    "TOOL_TIMEOUT",
    "UNKNOWN_TOOL",
    "WORKER_LOST",
    "AbortController",
    "AbortError",
    "AbortSignal",
    # registry (docs/contract.md §2, §3)
    "Accept",
    "Allow",
    "ApprovalDecision",
    "ApprovalRequest",
    "Approver",
    "AroundDispatch",
    "Ask",
    "Backend",
    "Block",
    "Deadline",
    "Deny",
    "ErrorDetail",
    "ErrorInfo",
    "ExecutionToken",
    "Guard",
    "ListenerHandle",
    "PostExecuteDecision",
    "PostExecuteHook",
    "PreExecuteDecision",
    "PreExecuteHook",
    "ResultObserver",
    "ThreadBackend",
    # policies and scheduling (docs/contract.md §4)
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
    "deadline",
    "execute_batch",
    "thaw",
    "timeout_of",
]

__version__ = "0.1.0"

# The library logs through "dshtools" and its children and prints nothing
# itself (docs/contract.md §8 A8).
logging.getLogger(__name__).addHandler(logging.NullHandler())
