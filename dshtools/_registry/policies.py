"""Around-dispatch policies (docs/contract.md#timeout-policy).

``TimeoutPolicy`` is the *classification* half of a tool timeout: it arms a
deadline over the dispatch signal (what ``deadline()`` makes: one signal
derived from the upstream, carrying its own timer), hands that signal to the
inner wrappers and the body, and afterwards says whether **its own** timer
fired. Termination stays with the body (cooperative) and quiescence with the
registry, which joins the body however long it takes.

Guarantees:

* A tool whose definition has no ``timeout`` passes through untouched: no
  timer is armed, no signal is swapped.
* ``exec.signal`` is restored to the upstream signal on every exit path, and
  the timer is cancelled as soon as the inner waterfall settles (no pending
  timer outlives a fast call).
* The outcome is ``TOOL_TIMEOUT`` exactly when this wrapper's timer aborted
  the deadline signal *before* anything upstream did. The check asks the
  signal whether its own timer decided its abort (``Deadline.timed_out``
  asks the same), not which code the reason carries, so
  nested timeout wrappers each report only their own budget and a caller
  abort that won the race stays a cancellation.
"""

from __future__ import annotations

from collections.abc import Callable

from .._signal import deadline_signal, timer_fired
from .._types.calls import TOOL_TIMEOUT, ToolExecutionResult, failure
from .._types.tools import ToolDispatchExecution, body_invoked_so_far

__all__ = ["TimeoutPolicy"]


def _format_ms(seconds: float) -> str:
    """``0.05`` -> ``"50"``, ``1234.5678`` -> ``"1234567.8"``: plain
    decimal milliseconds (never an exponent), no trailing zeros."""
    return f"{seconds * 1000:.3f}".rstrip("0").rstrip(".")


class TimeoutPolicy:
    """Around-dispatch wrapper enforcing ``ToolDefinition.timeout`` (seconds).

    Install with ``registry.add_around_dispatch(TimeoutPolicy())``. Runs in
    the thread that runs the around-dispatch waterfall; the timer fires on
    the shared timer thread. When its own timer fired it returns a
    ``ToolFailure`` with code ``TOOL_TIMEOUT``, info name
    ``ToolTimeoutError``, text ``Error: tool call timed out after <ms>ms``
    (``... <ms>ms before it started`` when the body never started, e.g. it
    was still queued behind a busy pool) and ``meta["reason"]`` the
    ``TimeoutReason`` — whatever the body returned or raised. Source:
    docs/contract.md#timeout-policy.
    """

    __slots__ = ()

    def __call__(
        self, execution: ToolDispatchExecution, next: Callable[[], ToolExecutionResult]
    ) -> ToolExecutionResult:
        definition = execution.definition
        seconds = definition.timeout if definition is not None else None
        if seconds is None:
            return next()
        upstream = execution.signal
        # `definition.timeout` was checked when the definition was made
        # (positive, finite): the deadline is armed without a Deadline.
        signal = deadline_signal(upstream, seconds if type(seconds) is float else float(seconds), TOOL_TIMEOUT)
        try:
            execution.signal = signal
            try:
                result = next()
            except Exception:
                if not timer_fired(signal):
                    raise
                result = None
            finally:
                execution.signal = upstream
            if timer_fired(signal):
                # A call still queued when the deadline fired never ran, nor
                # did one whose inner wrapper gave up without calling next():
                # the text says so, as the result's body_invoked (which the
                # registry corrects to its record) does (docs/contract.md#a16).
                started = body_invoked_so_far(execution)
                if started is None:  # a view no registry made: the result's word
                    started = result is None or result.body_invoked
                return failure(
                    f"tool call timed out after {_format_ms(seconds)}ms" + ("" if started else " before it started"),
                    name="ToolTimeoutError",
                    code=TOOL_TIMEOUT,
                    meta={"reason": signal.reason},
                    body_invoked=started,
                )
            assert result is not None
            return result
        finally:
            signal.close()

    def __repr__(self) -> str:
        return "TimeoutPolicy()"
