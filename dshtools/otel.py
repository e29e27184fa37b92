"""OpenTelemetry for every tool call: one GenAI ``execute_tool`` span per
call, whatever its outcome, and a duration histogram
(docs/observability.md).

``instrument(registry)`` installs a call observer on the registry; the
returned ``Instrumentation``'s ``uninstrument()`` takes it off. Needs the
``otel`` extra (``opentelemetry-api``); ``import dshtools`` never imports
OpenTelemetry, only this module does.

Guarantees:

* One span per call for every outcome, ``INVALID_ARGS``, ``UNKNOWN_TOOL``,
  ``DENIED`` and pre-aborted calls included. It starts in the caller's
  thread with the caller's context current, so it is a child of the
  caller's current span, and the calls of one ``execute_batch`` are
  siblings under the span current when the batch started. It ends after
  the join, when the call's one result is published: never before a body
  that ran on after its abort has returned.
* While the body is dispatched the span is the current span of the context
  the body runs in (thread backend bodies, and nested calls they make, are
  its children).
* A span has at most one abort event: the abort its body saw (its dispatch
  signal's reason), else the caller's abort that cancelled the call; an
  abort that arrived only while a settled call waited for its model-order
  turn is not on it (docs/contract.md#a1). A forced stop is timed when the
  dispatch settled. Events are in time order.
* Progress the body reports is kept while it runs, in its thread, without
  a lock: the last ``MAX_PROGRESS_EVENTS`` updates become events and the
  span counts them all. An uninstrumented call pays nothing for it.
* Arguments and results are recorded only on opt-in, each cut to
  ``MAX_CONTENT_CHARS`` characters with a marker.
* While any instrumentation is installed, the W3C trace context crosses
  with every call a ``ProcessBackend`` or ``RayBackend`` sends to a
  worker: a span a body starts there (with an SDK configured in the
  worker) is a child of its call's span.
* With no SDK installed (the API's no-op providers), a call costs one
  method call more and makes no span; a provider set later is picked up by
  the next call.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import itertools
import json
import os
import threading
import time
from collections import deque
from collections.abc import Iterator
from typing import Any, Final

from opentelemetry import context as otel_context
from opentelemetry import metrics, propagate, trace
from opentelemetry.metrics import Histogram, MeterProvider, NoOpHistogram
from opentelemetry.trace import NoOpTracer, ProxyTracer, SpanKind, Status, StatusCode, Tracer, TracerProvider

from ._backends.remote import Carried, set_context_carrier
from ._core.errors import safe_repr, safe_str, safe_type_name
from ._core.freeze import thaw
from ._registry.observer import CallWatch
from ._registry.registry import ToolRegistry
from ._signal import AbortSignal, ListenerHandle
from ._types.calls import InvalidCall, ToolExecutionInput, ToolExecutionResult, ToolFailure
from ._types.hooks import ProgressUpdate, ToolDefinition

__all__ = [
    "CAPTURE_CONTENT_ENV",
    "MAX_CONTENT_CHARS",
    "MAX_PROGRESS_EVENTS",
    "Instrumentation",
    "carried_context",
    "instrument",
]

# The GenAI semantic conventions' names, pinned here (the conventions'
# package is incubating and is not imported at run time).
GEN_AI_OPERATION_NAME: Final = "gen_ai.operation.name"
GEN_AI_TOOL_NAME: Final = "gen_ai.tool.name"
GEN_AI_TOOL_CALL_ID: Final = "gen_ai.tool.call.id"
GEN_AI_TOOL_DESCRIPTION: Final = "gen_ai.tool.description"
GEN_AI_TOOL_TYPE: Final = "gen_ai.tool.type"
GEN_AI_TOOL_CALL_ARGUMENTS: Final = "gen_ai.tool.call.arguments"
GEN_AI_TOOL_CALL_RESULT: Final = "gen_ai.tool.call.result"
ERROR_TYPE: Final = "error.type"
EXECUTE_TOOL: Final = "execute_tool"
TOOL_TYPE_FUNCTION: Final = "function"
EXECUTE_TOOL_DURATION: Final = "gen_ai.execute_tool.duration"
CAPTURE_CONTENT_ENV: Final = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
"""The conventions' opt-in for content: ``true`` (or ``span_only``,
``span_and_event``), any case, records arguments and results."""
_CAPTURE_ON: Final = frozenset({"true", "1", "span_only", "span_and_event"})

# dshtools' own attributes and events.
BODY_INVOKED: Final = "dshtools.body_invoked"
KILLED: Final = "dshtools.killed"
OVERRUN_S: Final = "dshtools.overrun_s"
BACKEND: Final = "dshtools.backend"
ATTEMPTS: Final = "dshtools.attempts"
ABORT_EVENT: Final = "dshtools.abort"
ABORT_REASON: Final = "dshtools.abort.reason"
ABORT_MESSAGE: Final = "dshtools.abort.message"
FORCED_STOP_EVENT: Final = "dshtools.forced_stop"
PROGRESS_EVENT: Final = "dshtools.progress"
PROGRESS_VALUE: Final = "dshtools.progress.value"
PROGRESS_TOTAL: Final = "dshtools.progress.total"
PROGRESS_MESSAGE: Final = "dshtools.progress.message"
PROGRESS_COUNT: Final = "dshtools.progress.count"

MAX_CONTENT_CHARS: Final = 8192
"""Characters of arguments or result kept on a span; more is cut and marked."""

MAX_PROGRESS_EVENTS: Final = 16
"""Progress updates kept on a span as events: the last ones reported; the
span's ``dshtools.progress.count`` says how many there were in all."""

_SCOPE: Final = "dshtools"


def _scope_version() -> str:
    """The installed distribution's version, else the package's own."""
    try:
        return importlib.metadata.version("dshtools")
    except importlib.metadata.PackageNotFoundError:  # run from a checkout
        from . import __version__

        return __version__


def _bounded(text: str) -> str:
    if len(text) <= MAX_CONTENT_CHARS:
        return text
    return f"{text[:MAX_CONTENT_CHARS]}…[truncated {len(text) - MAX_CONTENT_CHARS} characters]"


def _reason_text(reason: object) -> str:
    """An abort reason as a reader wants it: a string as it is, an
    exception as ``Type: message`` (its type alone when it has none),
    anything else by its ``repr``; at most ``MAX_CONTENT_CHARS``."""
    if isinstance(reason, str):
        text = reason
    elif isinstance(reason, BaseException):
        message = safe_str(reason)
        text = f"{safe_type_name(reason)}: {message}" if message else safe_type_name(reason)
    else:
        text = safe_repr(reason)
    return _bounded(text)


def _json(value: object) -> str:
    try:
        return json.dumps(thaw(value), ensure_ascii=False, default=repr)
    except Exception:  # a value json cannot walk (a cycle, say)
        return repr(value)


def _progress_attributes(update: ProgressUpdate) -> dict[str, Any]:
    attributes: dict[str, Any] = {PROGRESS_VALUE: update.progress}
    if update.total is not None:
        attributes[PROGRESS_TOTAL] = update.total
    if update.message is not None:
        attributes[PROGRESS_MESSAGE] = _bounded(update.message)
    return attributes


def _capture_from_env() -> bool:
    return os.environ.get(CAPTURE_CONTENT_ENV, "").strip().lower() in _CAPTURE_ON


# How many instrumentations are installed; the context carrier of process
# workers is installed while there is one. Guarded by _carrying_lock.
_carrying_lock = threading.Lock()
_carrying = 0


def _carry() -> Carried | None:
    """The current context as W3C headers, for a call sent to a worker now."""
    headers: dict[str, str] = {}
    propagate.inject(headers)
    return (__name__, headers) if headers else None


@contextlib.contextmanager
def carried_context(headers: dict[str, str]) -> Iterator[None]:
    """In a worker process: run the body inside the context whose W3C
    headers crossed with its call (``dshtools._backends.remote``)."""
    token = otel_context.attach(propagate.extract(headers))
    try:
        yield
    finally:
        otel_context.detach(token)


def _carrying_changed(delta: int) -> None:
    global _carrying
    with _carrying_lock:
        _carrying += delta
        set_context_carrier(_carry if _carrying > 0 else None)


# Where a recorded abort came from: a dispatch signal of the call (what its
# body sees), the caller's signal before the call's dispatch settled, after.
_BODY: Final = 0
_CALLER: Final = 1
_LATE: Final = 2


class _Watch:
    """One call's span and timing (``observer.CallWatch``). Made and
    finished by the registry's call path.

    What it records while the call is in flight, lock-free (list and deque
    appends; a count from ``itertools.count``): each abort that reaches the
    call, as ``(time_ns, reason, source)`` (``_on_abort`` in the thread that
    aborted the caller's signal, ``aborted`` in the thread that aborted the
    body's dispatch signal); ``settled_at``, the time its
    dispatch settled (``exit``); the last ``MAX_PROGRESS_EVENTS`` progress
    updates and how many were reported (``progress``, the body's thread).
    ``finished`` turns them into events once, in the publishing thread."""

    __slots__ = (
        "_aborts",
        "_listener",
        "_progress",
        "_reported",
        "call",
        "instrumentation",
        "settled_at",
        "span",
        "start",
    )

    def __init__(self, instrumentation: Instrumentation, call: ToolExecutionInput, span: trace.Span | None) -> None:
        self.instrumentation = instrumentation
        self.call = call
        self.span = span
        self.start = time.perf_counter()
        self.settled_at: int | None = None
        self._aborts: list[tuple[int, object, int]] = []
        self._listener: ListenerHandle | None = None
        self._progress: deque[tuple[int, int, ProgressUpdate]] | None = None
        self._reported: itertools.count[int] | None = None
        if span is not None and span.is_recording():
            self._reported = itertools.count(1)  # the buffer is made by the first report
            self._listener = call.signal.add_listener(self._on_abort)

    def _on_abort(self, signal: AbortSignal) -> None:
        self._aborts.append((time.time_ns(), signal.reason, _CALLER if self.settled_at is None else _LATE))

    def aborted(self, signal: AbortSignal) -> None:
        if self._listener is not None:  # recording
            self._aborts.append((time.time_ns(), signal.reason, _BODY))

    def progress(self, update: ProgressUpdate) -> None:
        reported = self._reported
        if reported is None:  # not recording
            return
        entry = (next(reported), time.time_ns(), update)
        kept = self._progress
        if kept is None:
            # Two threads of one body reporting their very first updates at
            # once may each make a buffer: one of those updates is then not
            # kept as an event (the count still has it).
            kept = self._progress = deque(maxlen=MAX_PROGRESS_EVENTS)
        kept.append(entry)

    def enter(self) -> object:
        span = self.span
        if span is None:
            return None
        return otel_context.attach(trace.set_span_in_context(span))

    def exit(self, token: object) -> None:
        self.settled_at = time.time_ns()
        if token is not None:
            otel_context.detach(token)  # type: ignore[arg-type]

    def finished(self, result: ToolExecutionResult) -> None:
        listener = self._listener
        if listener is not None:
            listener.remove()
        duration = time.perf_counter() - self.start
        inst = self.instrumentation
        error_type: str | None = None
        if isinstance(result, ToolFailure):
            info = result.error.info
            error_type = (info.code or info.name) if info is not None else "_OTHER"
        histogram = inst._histogram
        if histogram is not None and inst._measuring():
            attributes = {GEN_AI_OPERATION_NAME: EXECUTE_TOOL, GEN_AI_TOOL_NAME: self.call.name}
            if error_type is not None:
                attributes[ERROR_TYPE] = error_type
            histogram.record(duration, attributes)
        span = self.span
        if span is None:
            return
        try:
            if listener is not None:
                self._describe(span, result, error_type)
        finally:
            self._listener = None
            span.end()

    def _abort_seen(self, result: ToolExecutionResult, error_type: str | None) -> tuple[int | None, object] | None:
        """The call's one abort event, ``(time_ns or None for now, reason)``.
        A dispatch signal aborts once, with the first reason that reached
        it, so when one aborted its reason is what the body saw (the first
        attempt's, timed when the caller's signal aborted with that reason,
        if it did, else when it was heard); else the first abort of the
        caller's signal before the dispatch settled (a wrapper waiting
        before ``next()``); else, for a cancellation result, its
        ``meta["reason"]`` when that aborted the caller's signal or when
        the dispatch settled. An abort that arrived only while a settled
        call waited for its model-order turn is not the call's
        (docs/contract.md#a1)."""
        aborts = self._aborts
        seen = [(at, reason) for at, reason, source in aborts if source == _BODY]
        if not seen and self.settled_at is not None:
            seen = [(at, reason) for at, reason, source in aborts if source == _CALLER]
        if seen:
            at, reason = min(seen, key=lambda a: a[0])
            at = min((a for a, r, source in aborts if r is reason and source != _LATE), default=at)
            settled = self.settled_at
            # A listener heard late still heard an abort from before the settle.
            return (at if settled is None else min(at, settled)), reason
        meta = result.meta
        if error_type is None or "reason" not in meta:
            return None
        reason = meta["reason"]
        return min((a for a, r, _ in aborts if r is reason), default=self.settled_at), reason

    def _describe(self, span: trace.Span, result: ToolExecutionResult, error_type: str | None) -> None:
        meta = result.meta
        span.set_attribute(BODY_INVOKED, result.body_invoked)
        killed = meta.get("killed") is True
        span.set_attribute(KILLED, killed)
        overrun = meta.get("overrun_s")
        if isinstance(overrun, float | int) and not isinstance(overrun, bool):
            span.set_attribute(OVERRUN_S, float(overrun))
        else:
            overrun = None
        attempts = meta.get("attempts")
        if isinstance(attempts, int) and not isinstance(attempts, bool):
            span.set_attribute(ATTEMPTS, attempts)
        # (time_ns or None for now, name, attributes), added in time order.
        events: list[tuple[int | None, str, dict[str, Any]]] = []
        kept = self._progress
        if kept:
            updates = sorted(kept)
            span.set_attribute(PROGRESS_COUNT, updates[-1][0])
            events.extend((at, PROGRESS_EVENT, _progress_attributes(update)) for _, at, update in updates)
        abort = self._abort_seen(result, error_type) if self._aborts or error_type is not None else None
        if abort is not None:
            reason = abort[1]
            events.append(
                (abort[0], ABORT_EVENT, {ABORT_REASON: safe_type_name(reason), ABORT_MESSAGE: _reason_text(reason)})
            )
        if killed:
            # The body stopped when its dispatch settled, maybe long before
            # its result's model-order turn.
            events.append((self.settled_at, FORCED_STOP_EVENT, {} if overrun is None else {OVERRUN_S: float(overrun)}))
        if len(events) > 1:
            now = time.time_ns()
            events.sort(key=lambda e: now if e[0] is None else e[0])
        for at, name, attributes in events:
            span.add_event(name, attributes, timestamp=at)
        if self.instrumentation.capture_content:
            span.set_attribute(GEN_AI_TOOL_CALL_RESULT, _bounded(_json(result.content)))
        if error_type is not None:
            span.set_attribute(ERROR_TYPE, error_type)
            span.set_status(Status(StatusCode.ERROR, error_type))


class Instrumentation:
    """What ``instrument`` installed on one registry. ``capture_content``:
    whether arguments and results are recorded. ``uninstrument()`` takes
    the observer off (idempotent; calls already started still end their
    spans)."""

    def __init__(
        self,
        registry: ToolRegistry,
        tracer: Tracer,
        histogram: Histogram,
        capture_content: bool,
    ) -> None:
        self.registry = registry
        self.capture_content = capture_content
        # Decided here, once, so that a call with no SDK costs a few
        # attribute reads: `_tracer` is a live tracer or None; `_proxy` the
        # global proxy tracer while no SDK provider is set (a provider set
        # later is picked up by the next call); `_histogram` is None for the
        # API's no-op, and `_histogram_proxy` says it is the global proxy,
        # live once a real meter provider is set.
        self._tracer: Tracer | None = None
        self._proxy: ProxyTracer | None = None
        if isinstance(tracer, ProxyTracer):
            self._proxy = tracer
        elif not isinstance(tracer, NoOpTracer):
            self._tracer = tracer
        self._histogram: Histogram | None = None if isinstance(histogram, NoOpHistogram) else histogram
        self._histogram_proxy = hasattr(histogram, "_real_instrument")
        self._installed = True

    def _measuring(self) -> bool:
        histogram = self._histogram
        if histogram is None:
            return False
        return not self._histogram_proxy or histogram._real_instrument is not None  # type: ignore[attr-defined]

    def started(self, call: ToolExecutionInput, definition: ToolDefinition | None) -> CallWatch | None:
        """The call observer: the call's span, started in the caller's
        context, or ``None`` when neither a span nor a measurement would be
        recorded (written out: with no SDK this is all a call pays)."""
        tracer = self._tracer
        if tracer is None:
            proxy = self._proxy
            if proxy is not None:
                real = proxy._tracer  # the SDK's tracer once a provider is set, else the API's no-op
                if type(real) is not NoOpTracer:
                    self._tracer = tracer = real
                    self._proxy = None
            if tracer is None:
                if not self._measuring():
                    return None
                return _Watch(self, call, None)
        attributes: dict[str, Any] = {
            GEN_AI_OPERATION_NAME: EXECUTE_TOOL,
            GEN_AI_TOOL_NAME: call.name,
            GEN_AI_TOOL_CALL_ID: call.call_id,
            GEN_AI_TOOL_TYPE: TOOL_TYPE_FUNCTION,
        }
        if definition is not None:
            if definition.description:
                attributes[GEN_AI_TOOL_DESCRIPTION] = definition.description
            backend = definition.backend or self.registry._backend
            attributes[BACKEND] = type(backend).__name__
        if self.capture_content:
            arguments = call.arguments
            text = str(arguments) if isinstance(arguments, InvalidCall) else _json(arguments)
            attributes[GEN_AI_TOOL_CALL_ARGUMENTS] = _bounded(text)
        # A call with no tool name (an invalid model call) is "execute_tool".
        name = f"{EXECUTE_TOOL} {call.name}" if call.name else EXECUTE_TOOL
        span = tracer.start_span(name, kind=SpanKind.INTERNAL, attributes=attributes)
        return _Watch(self, call, span)

    def uninstrument(self) -> None:
        """Take this instrumentation off its registry (idempotent)."""
        if not self._installed:
            return
        self._installed = False
        registry = self.registry
        with registry._lock:
            if registry._observer is self:
                registry._observer = None
        _carrying_changed(-1)


def instrument(
    registry: ToolRegistry,
    *,
    tracer_provider: TracerProvider | None = None,
    meter_provider: MeterProvider | None = None,
    capture_content: bool | None = None,
) -> Instrumentation:
    """Make every call of ``registry`` an ``execute_tool`` span and a
    ``gen_ai.execute_tool.duration`` measurement (seconds; attributes
    ``gen_ai.operation.name``, ``gen_ai.tool.name`` and, on failure,
    ``error.type``: the failure's code), per docs/contract.md#a30.

    ``tracer_provider``/``meter_provider``: default the global ones (the
    API's proxies: no-op until an SDK provider is set). ``capture_content``:
    record arguments and results (``gen_ai.tool.call.arguments``/
    ``.result``, each at most ``MAX_CONTENT_CHARS`` characters); ``None``
    reads ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` now.
    Raises ``TypeError`` for a non-registry, ``RuntimeError`` when the
    registry is instrumented already. Thread-safe; calls already started
    are not instrumented."""
    if not isinstance(registry, ToolRegistry):
        raise TypeError(f"instrument() takes a ToolRegistry, not {type(registry).__name__}")
    version = _scope_version()
    tracer = (tracer_provider or trace.get_tracer_provider()).get_tracer(_SCOPE, version)
    meter = (meter_provider or metrics.get_meter_provider()).get_meter(_SCOPE, version)
    histogram = meter.create_histogram(
        EXECUTE_TOOL_DURATION, unit="s", description="Duration of dshtools tool calls, to their published result."
    )
    capture = _capture_from_env() if capture_content is None else bool(capture_content)
    instrumentation = Instrumentation(registry, tracer, histogram, capture)
    with registry._lock:
        if registry._observer is not None:
            raise RuntimeError("this registry is instrumented already: uninstrument() the other first")
        registry._observer = instrumentation
    _carrying_changed(+1)
    return instrumentation
