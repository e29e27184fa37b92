"""dshtools: cancellable, joined-never-abandoned tool execution for
synchronous Python LLM agents. The public API is re-exported here once;
see DESIGN.md and docs/ for the contract."""

from ._deadline import Deadline, deadline, timeout_of
from ._errors import AbortError, TimeoutReason
from ._signal import AbortController, AbortSignal, ListenerHandle

__all__ = [
    "AbortController",
    "AbortError",
    "AbortSignal",
    "Deadline",
    "ListenerHandle",
    "TimeoutReason",
    "deadline",
    "timeout_of",
]

__version__ = "0.1.0"
