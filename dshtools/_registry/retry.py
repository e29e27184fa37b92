"""``RetryPolicy`` and ``RetryWithFeedback`` (docs/policies.md#retrypolicy).

``RetryPolicy`` is an around-dispatch wrapper: it calls ``next()`` again
for a failed attempt whose code it may retry, waiting between attempts on
the call's signal.

Guarantees:

* Never retried, whatever ``retry_on`` says: a refusal or a call that
  cannot run as written (``DENIED``, ``INVALID_ARGS``, ``UNKNOWN_TOOL``,
  ``INVALID_CALL``), a cancellation (``ABORTED``,
  ``ABORTED_BEFORE_DISPATCH``), a body's request to the model
  (``RETRY_REQUESTED``), and any attempt that ended while the signal this
  wrapper was given is aborted (the caller's abort, or an outer
  ``TimeoutPolicy``'s deadline: its ``TOOL_TIMEOUT`` is decided outside).
* An attempt whose body ran (``result.body_invoked``) is retried only for
  a tool marked ``ToolDefinition(idempotent=True)``: a body with side
  effects runs at most once.
* The back-off is a wait on the wrapper's signal: an abort during it ends
  the call at once with ``ABORTED`` (a body ran before) or
  ``ABORTED_BEFORE_DISPATCH``; the next attempt is not started when the
  signal's deadline (``signal.time_left()``) comes before the back-off ends.
* Every result it returns carries ``meta["attempts"]``, the number of
  attempts made (``next()`` calls), and says ``ABORTED`` rather than
  ``ABORTED_BEFORE_DISPATCH`` once any attempt's body ran.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable
from typing import Final

import attrs

from .._core.errors import check_items
from .._types.calls import (
    DENIED,
    INVALID_ARGS,
    INVALID_CALL,
    TOOL_ABORTED,
    TOOL_ABORTED_BEFORE_DISPATCH,
    TOOL_ERROR,
    UNKNOWN_TOOL,
    WORKER_LOST,
    ToolError,
    ToolExecutionResult,
    aborted,
)
from .._types.tools import ToolDispatchExecution

__all__ = ["DEFAULT_RETRY_ON", "NEVER_RETRIED", "RETRY_REQUESTED", "RetryPolicy", "RetryWithFeedback"]

RETRY_REQUESTED: Final = "RETRY_REQUESTED"
"""The code of a ``RetryWithFeedback`` failure: the body asks the model to
call again differently (docs/policies.md#retrywithfeedback)."""

DEFAULT_RETRY_ON: Final = frozenset(
    {
        TOOL_ERROR,
        WORKER_LOST,
        # A remote (MCP) tool's own error, and the timeouts of the I/O
        # helpers of dshtools.io (the codes of their TimeoutReason).
        "REMOTE_TOOL_ERROR",
        "PROCESS_TIMEOUT",
        "HTTP_TIMEOUT",
    }
)
"""The codes ``RetryPolicy`` retries by default."""

NEVER_RETRIED: Final = frozenset(
    {DENIED, INVALID_ARGS, UNKNOWN_TOOL, INVALID_CALL, TOOL_ABORTED, TOOL_ABORTED_BEFORE_DISPATCH, RETRY_REQUESTED}
)
"""Codes ``RetryPolicy`` refuses in ``retry_on`` (``ValueError``)."""


class RetryWithFeedback(ToolError):
    """Raised by a tool body to send the model ``text`` as a correction
    (e.g. "the date must be ISO 8601") instead of being retried: the call
    fails with code ``RETRY_REQUESTED`` and content ``Error: <text>``, and
    ``RetryPolicy`` never retries it. Crosses process and Ray backends
    (it pickles as ``RetryWithFeedback(text)``)."""

    def __init__(self, text: str) -> None:
        super().__init__(text, RETRY_REQUESTED)

    def __reduce__(self) -> tuple[type[RetryWithFeedback], tuple[str]]:
        return (RetryWithFeedback, (self.message,))


def _with_attempts(result: ToolExecutionResult, attempts: int, ran: bool, **extra: object) -> ToolExecutionResult:
    if ran and result.code == TOOL_ABORTED_BEFORE_DISPATCH:
        # A later attempt was withdrawn, but an earlier one's body ran: the
        # call was not aborted before dispatch.
        result = aborted(result.meta.get("reason"), invoked=True, additional_contexts=result.additional_contexts)
    return attrs.evolve(result, meta={**result.meta, "attempts": attempts, **extra})


class RetryPolicy:
    """Around-dispatch wrapper: up to ``attempts`` (an ``int`` ≥ 1) calls of
    ``next()`` for one tool call.

    A failed attempt is retried when its code is in ``retry_on`` (an
    iterable of codes; default ``DEFAULT_RETRY_ON``: ``TOOL_ERROR``,
    ``WORKER_LOST``, ``REMOTE_TOOL_ERROR``, ``PROCESS_TIMEOUT``,
    ``HTTP_TIMEOUT``; a code of ``NEVER_RETRIED`` there is a
    ``ValueError``), the wrapper's signal has not aborted, and either the
    body did not run or the tool is ``idempotent``. Before attempt ``k + 1``
    it waits ``min(max_backoff, backoff * 2 ** (k - 1))`` seconds, less a
    random part of up to ``jitter`` (a fraction in [0, 1]) of it, on the
    signal; an abort then returns ``ABORTED`` (a body ran) or
    ``ABORTED_BEFORE_DISPATCH`` at once, and a back-off that would end
    after the signal's deadline returns the last failure with
    ``meta["retry_skipped"] = "deadline"``. Every result gets
    ``meta["attempts"]``. Waits in the thread that runs the waterfall.

    Install it outside a ``TimeoutPolicy`` for a deadline per attempt
    (``retry_on`` must then name ``TOOL_TIMEOUT`` for a timed-out attempt to
    be retried), inside one for one deadline over all attempts and the
    back-offs (docs/policies.md#retrypolicy).
    """

    __slots__ = ("_attempts", "_backoff", "_jitter", "_max_backoff", "_random", "_retry_on")

    def __init__(
        self,
        attempts: int = 3,
        backoff: float = 0.5,
        max_backoff: float = 8.0,
        retry_on: Iterable[str] = DEFAULT_RETRY_ON,
        jitter: float = 0.1,
    ) -> None:
        if isinstance(attempts, bool) or not isinstance(attempts, int):
            raise TypeError(f"attempts must be an int, not {type(attempts).__name__}")
        if attempts < 1:
            raise ValueError(f"attempts must be at least 1, got {attempts}")
        for what, value in (("backoff", backoff), ("max_backoff", max_backoff), ("jitter", jitter)):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"{what} must be a number, not {type(value).__name__}")
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"{what} must be finite and not negative, got {value!r}")
        if jitter > 1:
            raise ValueError(f"jitter is a fraction of the back-off in [0, 1], got {jitter!r}")
        codes = frozenset(
            check_items(
                retry_on,
                str,
                one="retry_on is an iterable of codes, not one str",
                item="retry_on holds codes (str), not {}",
            )
        )
        refused = sorted(codes & NEVER_RETRIED)
        if refused:
            raise ValueError(f"never retried: {', '.join(refused)}")
        self._attempts = attempts
        self._backoff = float(backoff)
        self._max_backoff = float(max_backoff)
        self._jitter = float(jitter)
        self._retry_on = codes
        self._random = random.Random()

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt ``attempt`` (1-based), jitter
        included."""
        base = min(self._max_backoff, self._backoff * 2.0 ** min(attempt - 1, 64))
        if self._jitter:
            base -= base * self._jitter * self._random.random()
        return base

    def __call__(
        self, execution: ToolDispatchExecution, next: Callable[[], ToolExecutionResult]
    ) -> ToolExecutionResult:
        definition = execution.definition
        idempotent = definition is not None and definition.idempotent
        signal = execution.signal
        retry_on = self._retry_on
        ran = False
        attempt = 0
        while True:
            attempt += 1
            result = next()
            ran = ran or result.body_invoked
            if (
                not result.is_error
                or attempt >= self._attempts
                or result.code not in retry_on
                or signal.aborted
                or (result.body_invoked and not idempotent)
            ):
                return _with_attempts(result, attempt, ran)
            delay = self.delay(attempt)
            left = signal.time_left()
            if left is not None and left <= delay:
                if signal.aborted:
                    # Aborted by the time the deadline was read (time_left()
                    # reads 0.0 then): the abort wins, as during the back-off.
                    return _with_attempts(aborted(signal.reason, invoked=ran), attempt, ran)
                # The next attempt could not start before the deadline.
                return _with_attempts(result, attempt, ran, retry_skipped="deadline")
            if delay > 0 and signal.wait(delay):
                return _with_attempts(aborted(signal.reason, invoked=ran), attempt, ran)
            if signal.aborted:
                return _with_attempts(aborted(signal.reason, invoked=ran), attempt, ran)

    def __repr__(self) -> str:
        return (
            f"RetryPolicy(attempts={self._attempts}, backoff={self._backoff!r}, "
            f"max_backoff={self._max_backoff!r}, retry_on={sorted(self._retry_on)!r}, jitter={self._jitter!r})"
        )
