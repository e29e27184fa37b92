"""The replay runner behind ``python -m dshtools demo`` and ``replay``
(docs/contract.md#interop-and-cli) and its instrumentation: the dispatch meter, the result
collector and the progress ticker.

Guarantees:

* Every assistant message's ``tool_calls`` run as one ``execute_batch``,
  in transcript order, on the calling (main) thread, with one caller-owned
  ``AbortController`` for the whole run; ``cancel_after`` arms
  ``AbortSignal.timeout`` whose listener (on the shared timer thread)
  aborts it mid-turn, and the run's signal reports that timer's deadline,
  so every body sees the budget (``run.signal.deadline``, ``time_left()``).
* Exactly one row per call, built after every batch ran, from the results
  the collector saw published: a Ctrl-C between or during batches cannot
  lose one. Batches after an interruption still run with the controller
  aborted, so their calls are reported as ``ABORTED_BEFORE_DISPATCH``.
* BODY is observed by ``_Meter``, registered as the innermost
  around-dispatch wrapper (``_Meter.body_invoked`` states the rule).
* The meter, the collector and the cancel timer's listener are removed,
  and the ticker thread stopped and joined, before ``_run_batches``
  returns.
"""

from __future__ import annotations

import builtins
import itertools
import sys
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from typing import IO, Any, NamedTuple

import attrs

from .. import anthropic as danthropic
from .. import openai as dopenai
from .._registry.batch import execute_batch
from .._registry.registry import ToolRegistry
from .._signal import AbortController, AbortSignal, budget_controller
from .._types.calls import (
    TOOL_ABORTED,
    TOOL_ABORTED_BEFORE_DISPATCH,
    ExecutionToken,
    ToolExecutionInput,
    ToolExecutionResult,
    ToolFailure,
)
from .._types.hooks import ProgressUpdate
from .._types.tools import ToolDispatchExecution, ToolExecution
from .inputs import ANTHROPIC, Batch, _to_inputs
from .signals import current as _current_interrupts

_TICK = 0.25  # progress refresh period (seconds)
# A cooperative body returns within milliseconds of its abort: one still
# running this long after the run was cancelled is ignoring its signal.
_STUBBORN_AFTER = 0.5


# ---------------------------------------------------------------------------
# Instrumentation: dispatch meter, result collector, progress ticker


@attrs.define
class _Row:
    batch: int
    call_id: str
    name: str
    result: ToolExecutionResult | None = None
    arguments: object = None
    token: ExecutionToken | None = None
    started: float | None = None
    ended: float | None = None
    progress: ProgressUpdate | None = None


def _registry_not_invoked(result: object) -> bool:
    """Whether ``result`` is the registry's own "body not invoked" answer
    (``ABORTED_BEFORE_DISPATCH`` with info name ``AbortError``), as opposed
    to, say, a ``ToolError`` a body raised with that code."""
    if not isinstance(result, ToolFailure) or result.code != TOOL_ABORTED_BEFORE_DISPATCH:
        return False
    info = result.error.info
    return info is not None and info.name == "AbortError"


class _Meter:
    """An around-dispatch wrapper that times each dispatch, knows what is
    in flight and observes whether the tool body was invoked. Runs on the
    thread that runs the around-dispatch waterfall (a registry worker or
    the batch's calling thread).

    It must be registered **last** (innermost): then its ``next`` is the
    registry's own innermost step, which either returns
    ``ABORTED_BEFORE_DISPATCH`` (name ``AbortError``) without invoking the
    body - the dispatch signal was already aborted, or the call was
    withdrawn while still queued - or invokes the body, joins it and
    returns the body's result, already classified (success, the body's
    failure, or ``ABORTED``). Outer wrappers may then rewrite that result
    (``TimeoutPolicy`` turns it into ``TOOL_TIMEOUT`` whether or not the
    body started), which is why the final code alone cannot tell, and the
    observation is made here. See ``body_invoked`` for the rule.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._keys = itertools.count()
        self._in_flight: dict[int, tuple[str, str, float]] = {}
        self.spans: dict[ExecutionToken, tuple[float, float]] = {}
        self._invoked: set[ExecutionToken] = set()
        self._raised: set[ExecutionToken] = set()

    def __call__(
        self, execution: ToolDispatchExecution, next: Callable[[], ToolExecutionResult]
    ) -> ToolExecutionResult:
        # A wrapper may call next() more than once, even concurrently (a
        # retry or a hedge): each entry gets its own key.
        with self._lock:
            key = builtins.next(self._keys)
        token = execution.token
        start = time.monotonic()
        with self._lock:
            self._in_flight[key] = (execution.call_id, execution.name, start)
        returned = False
        try:
            result = next()
            returned = True
            if not _registry_not_invoked(result):
                with self._lock:
                    self._invoked.add(token)
            return result
        finally:
            end = time.monotonic()
            with self._lock:
                del self._in_flight[key]
                if not returned:
                    self._raised.add(token)
                span = self.spans.get(token)
                self.spans[token] = (start, end) if span is None else (min(span[0], start), max(span[1], end))

    def in_flight(self) -> list[tuple[str, str, float]]:
        with self._lock:
            return sorted(self._in_flight.values(), key=lambda item: item[2])

    def body_invoked(self, token: ExecutionToken | None, result: ToolExecutionResult | None) -> str:
        """``"yes"``, ``"no"`` or ``"?"`` for the call with ``token`` whose
        final (published) result is ``result``. The rule:

        * the innermost ``next()`` returned anything but the registry's own
          ``ABORTED_BEFORE_DISPATCH`` at least once: ``yes``;
        * it raised (``KeyboardInterrupt`` while the body was joined): the
          registry then settles the call itself, as ``ABORTED`` exactly when
          the body was invoked and ``ABORTED_BEFORE_DISPATCH`` otherwise, so
          the final code tells; any other outcome: ``?``;
        * a journaled key answered from its record (replayed, or
          ``OUTCOME_UNKNOWN``): the result's ``body_invoked``;
        * it was reached but only returned ``ABORTED_BEFORE_DISPATCH``, or
          it was never reached (refused before dispatch: invalid
          arguments, unknown tool, denied, pre-aborted, or an outer wrapper
          answered without calling ``next()``): ``no``;
        * no result was published for the call: ``?``.
        """
        if result is None or token is None:
            return "?"
        with self._lock:
            invoked = token in self._invoked
            raised = token in self._raised
        if invoked:
            return "yes"
        if raised:
            if result.code == TOOL_ABORTED:
                return "yes"
            return "no" if result.code == TOOL_ABORTED_BEFORE_DISPATCH else "?"
        # A journaled key answered without running here (replayed, or
        # OUTCOME_UNKNOWN): the journal's record says whether its body ran.
        return "yes" if result.body_invoked else "no"


class _Published(NamedTuple):
    token: ExecutionToken
    nested: bool  # a call a body made through run.dispatch (it has a parent)
    result: ToolExecutionResult


class _Collector:
    """A result observer that keeps every published result, in publication
    order (model order within a batch; docs/contract.md#batch), nested calls
    marked as such."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.published: list[_Published] = []

    def __call__(self, execution: ToolExecution, result: ToolExecutionResult) -> None:
        with self._lock:
            self.published.append(_Published(execution.token, execution.parent is not None, result))

    def take(self) -> list[_Published]:
        with self._lock:
            out, self.published = self.published, []
            return out


class _Progress:
    """A progress observer that keeps each call's last update, by token
    (docs/policies.md#progress); runs on the ``dshtools-progress`` thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: dict[ExecutionToken, ProgressUpdate] = {}

    def __call__(self, execution: ToolExecution, update: ProgressUpdate) -> None:
        with self._lock:
            self._last[execution.token] = update

    def last(self, token: ExecutionToken | None) -> ProgressUpdate | None:
        with self._lock:
            return None if token is None else self._last.get(token)


# How to end the process at once, told to whoever cancelled by a signal.
_QUIT_NOW = {"Ctrl-C": "; Ctrl-\\ quits now", "SIGTERM": "; SIGQUIT quits now", "SIGHUP": "; SIGQUIT quits now"}


def _cancelling_text(items: list[tuple[str, str, float]], cause: str) -> str:
    """``cancelling (<cause>) — waiting for <calls>``; after a signal, the
    one that ends the process at once (Ctrl-\\ after a Ctrl-C)."""
    waiting = ", ".join(f"{cid} ({name})" for cid, name, _ in items)
    return f"cancelling ({cause}) — waiting for {waiting}" + _QUIT_NOW.get(cause, "")


class _Ticker:
    """The status line on ``stream`` (stderr), from a thread that ``stop()``
    stops and joins.

    * On a terminal, every _TICK seconds: the calls in flight and for how
      long, on one line rewritten in place (cleared by ``stop()``).
    * Once the run is cancelled (``cancelled_since()`` returns the
      ``time.monotonic()`` it happened and its cause: ``"Ctrl-C"``, a
      signal's name, or ``"--cancel-after 1.5s elapsed"``), a call still
      in flight _STUBBORN_AFTER seconds later is a body ignoring its
      signal, and the CLI is waiting for it: the line says so, naming the
      cause and the calls, and, when a signal cancelled the run, how to
      end the process at once (Ctrl-\\ after Ctrl-C, SIGQUIT after SIGTERM
      or SIGHUP). On a terminal it replaces the progress line; elsewhere
      it is written once per set of calls waited for, as a line of its own
      (docs/contract.md#a13, docs/contract.md#a33).
    """

    def __init__(
        self, meter: _Meter, stream: IO[str], cancelled_since: Callable[[], tuple[float, str] | None] = lambda: None
    ) -> None:
        self._meter = meter
        self._stream = stream
        self._cancelled_since = cancelled_since
        self._stop = threading.Event()
        isatty = getattr(stream, "isatty", None)
        self._tty = bool(isatty is not None and isatty())
        self._said = ""
        self._thread: threading.Thread | None = threading.Thread(
            target=self._run, name="dshtools-progress", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(_TICK):
            now = time.monotonic()
            items = self._meter.in_flight()
            cancelled = self._cancelled_since()
            stubborn = [
                item for item in items if cancelled is not None and now - max(cancelled[0], item[2]) >= _STUBBORN_AFTER
            ]
            if stubborn and cancelled is not None:
                text = _cancelling_text(stubborn, cancelled[1])
                if self._tty:
                    self._stream.write(f"\r\x1b[K{text}")
                elif text != self._said:
                    self._said = text
                    self._stream.write(f"dshtools: {text}\n")
                else:
                    continue
            elif self._tty:
                text = ", ".join(f"{cid} {name} {now - t0:.1f}s" for cid, name, t0 in items) or "-"
                self._stream.write(f"\r\x1b[K  in flight: {text}"[:200])
            else:
                continue
            self._stream.flush()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
            if self._tty:
                self._stream.write("\r\x1b[K")
                self._stream.flush()


# ---------------------------------------------------------------------------
# Running a transcript


@attrs.define
class _Replay:
    rows: list[_Row]
    interrupted: bool
    cancelled_at: float | None
    elapsed: float
    listener_count: int
    tool_messages: list[Any]


def _pair(
    calls: list[ToolExecutionInput], returned: list[ToolExecutionResult] | None, published: list[_Published]
) -> list[tuple[ToolExecutionResult | None, ExecutionToken | None]]:
    """``(result, token)`` for each model call of one batch, by identity,
    never by call id (ids may repeat across a transcript, and a nested call
    may reuse its parent's). ``returned`` is what ``execute_batch`` returned, one result
    per call in model order; its token is that of the published entry
    holding the very same result object. Without it (the batch was
    interrupted and re-raised), the batch's top-level publications, in
    publication order (model order), are the calls' results. Nested calls
    are never paired with a model call."""
    top = [entry for entry in published if not entry.nested]
    if returned is not None:
        tokens = {id(entry.result): entry.token for entry in top}
        return [(result, tokens.get(id(result))) for result in returned]
    out: list[tuple[ToolExecutionResult | None, ExecutionToken | None]] = [
        (entry.result, entry.token) for entry in top[: len(calls)]
    ]
    return out + [(None, None)] * (len(calls) - len(out))


def _answers(batches: list[Batch], inputs: list[list[ToolExecutionInput]], rows: list[_Row]) -> list[Any]:
    """What goes back to the model, in the transcript's format: OpenAI
    ``role: "tool"`` messages (one per call), or one Anthropic ``role:
    "user"`` message of ``tool_result`` blocks per batch."""
    out: list[Any] = []
    by_call = iter(rows)
    for batch, calls in zip(batches, inputs, strict=True):
        pairs = [(call, next(by_call).result) for call in calls]
        answered = [(call, result) for call, result in pairs if result is not None]
        if batch.fmt == ANTHROPIC:
            if answered:
                content = [danthropic.tool_result(call.call_id, result) for call, result in answered]
                out.append({"role": "user", "content": content})
        else:
            out.extend(dopenai.tool_message(call.call_id, result) for call, result in answered)
    return out


def _run_batches(
    registry: ToolRegistry,
    batches: list[Batch],
    *,
    source: str,
    cancel_after: float | None,
    max_parallel: int,
    meter: _Meter,
    session: str | None = None,
) -> _Replay:
    """Run every batch through ``execute_batch`` on this (the main) thread;
    ``session``: the journal session of every call (``replay --journal``)."""
    # With --cancel-after the run's signal reports the timer's deadline as
    # its budget, so bodies see it (run.signal.deadline, time_left()); the
    # timer, not the controller, aborts it.
    timer = None if cancel_after is None else AbortSignal.timeout(cancel_after)
    controller = AbortController() if timer is None else budget_controller(timer.deadline or time.monotonic())
    inputs = _to_inputs(batches, controller.signal, source, registry, session)
    collector = _Collector()
    progress = _Progress()
    cancelled_at: list[float] = []
    interrupted = False
    paired: list[list[tuple[ToolExecutionResult | None, ExecutionToken | None]]] = []
    t0 = time.monotonic()
    with ExitStack() as stack:
        stack.callback(registry.add_around_dispatch(meter))
        stack.callback(registry.add_result_observer(collector))
        stack.callback(registry.add_progress_observer(progress))
        if timer is not None:
            stack.callback(timer.close)

            def cancel(_signal: AbortSignal) -> None:
                cancelled_at.append(time.monotonic() - t0)
                controller.abort(f"--cancel-after {cancel_after:g}s elapsed")

            stack.callback(timer.add_listener(cancel).remove)
        interrupts = _current_interrupts()

        def cancelled_since() -> tuple[float, str] | None:
            # The first of a signal (recorded by the handler) and --cancel-after.
            causes = []
            if interrupts.since is not None:
                causes.append((interrupts.since, interrupts.name()))
            if cancelled_at:
                causes.append((t0 + cancelled_at[0], f"--cancel-after {cancel_after:g}s elapsed"))
            return min(causes) if causes else None

        ticker = _Ticker(meter, sys.stderr, cancelled_since)
        stack.callback(ticker.stop)
        for calls in inputs:
            returned: list[ToolExecutionResult] | None = None
            try:
                try:
                    returned = execute_batch(registry, calls, signal=controller.signal, max_parallel=max_parallel)
                except KeyboardInterrupt:
                    # execute_batch published every result before re-raising.
                    interrupted = True
                    controller.abort(KeyboardInterrupt(f"interrupted ({interrupts.name()})"))
            except KeyboardInterrupt:  # a second Ctrl-C, or one between batches
                interrupted = True
                controller.abort(KeyboardInterrupt(f"interrupted ({interrupts.name()})"))
            paired.append(_pair(calls, returned, collector.take()))
    # Rows are built once everything ran, so a Ctrl-C between batches
    # cannot lose one. A batch that never started (a Ctrl-C between
    # batches) has no pairs: its rows say NO RESULT.
    rows: list[_Row] = []
    for number, calls in enumerate(inputs, 1):
        pairs = paired[number - 1] if number <= len(paired) else [(None, None)] * len(calls)
        for call, (result, token) in zip(calls, pairs, strict=True):
            row = _Row(number, call.call_id, call.name, result, arguments=call.arguments)
            row.token = token
            # The last update delivered by now: a body reports before it
            # returns, and the delivery thread hands each update on at once.
            row.progress = progress.last(token)
            # The dispatch view and the observer's view of one execution
            # carry the same token.
            span = meter.spans.get(token) if token is not None else None
            if span is not None:
                row.started, row.ended = span[0] - t0, span[1] - t0
            rows.append(row)
    tool_messages = _answers(batches, inputs, rows)
    elapsed = time.monotonic() - t0
    return _Replay(
        rows=rows,
        interrupted=interrupted,
        cancelled_at=cancelled_at[0] if cancelled_at else None,
        elapsed=elapsed,
        listener_count=controller.signal.listener_count,
        tool_messages=tool_messages,
    )
