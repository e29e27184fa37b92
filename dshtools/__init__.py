"""dshtools: cancellable, joined-never-abandoned tool execution for
synchronous Python LLM agents. The public API is re-exported here once;
see DESIGN.md and docs/ for the contract."""

from ._deadline import Deadline, deadline, timeout_of
from ._errors import AbortError, TimeoutReason
from ._signal import AbortController, AbortSignal, ListenerHandle
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
from ._registry import ToolRegistry
from ._policies import TimeoutPolicy
from ._batch import execute_batch
from ._types import (
    DENIED,
    INVALID_ARGS,
    INVALID_TOOL_OUTPUT,
    TOOL_ABORTED,
    TOOL_ABORTED_BEFORE_DISPATCH,
    TOOL_TIMEOUT,
    UNKNOWN_TOOL,
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
    "AbortController",
    "AbortError",
    "AbortSignal",
    "Deadline",
    "ListenerHandle",
    "TimeoutReason",
    "deadline",
    "timeout_of",
    # policies and scheduling (DESIGN.md §4)
    "TimeoutPolicy",
    "execute_batch",
    # registry (DESIGN.md §2, §3)
    "Accept",
    "Allow",
    "ApprovalDecision",
    "ApprovalRequest",
    "Approver",
    "AroundDispatch",
    "Ask",
    "Block",
    "DENIED",
    "Deny",
    "ErrorDetail",
    "ErrorInfo",
    "ExecutionToken",
    "Guard",
    "INVALID_ARGS",
    "INVALID_TOOL_OUTPUT",
    "PostExecuteDecision",
    "PostExecuteHook",
    "PreExecuteDecision",
    "PreExecuteHook",
    "ResultObserver",
    "TOOL_ABORTED",
    "TOOL_ABORTED_BEFORE_DISPATCH",
    "TOOL_TIMEOUT",
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
    "UNKNOWN_TOOL",
    "thaw",
]

__version__ = "0.1.0"
