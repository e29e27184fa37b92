"""``--trace`` of ``python -m dshtools demo`` and ``replay``
(docs/observability.md#the-command-line): the run's OpenTelemetry spans,
printed as a tree at the end or written to a file as OTLP JSON.

Guarantees:

* The SDK is imported when ``--trace`` is given and only then; without it
  (or without the API), ``_Tracing.start`` raises ``UsageError`` naming
  ``pip install 'dshtools[otel]' opentelemetry-sdk`` before anything runs.
* The spans come from ``dshtools.otel.instrument`` on a tracer provider of
  the run's own (the global provider is never set) whose processor hands
  each span, as it ends, to the SDK's in-memory exporter. The run has one
  span, current on the main thread while the batches run, so every call's
  ``execute_tool`` span is its child and a batch's calls are siblings.
* ``finish()`` uninstruments the registry and shuts the provider down; the
  tree or the file is made from the spans that ended by then.

Threads: everything here runs on the main thread; spans end on whichever
thread publishes a call's result, and the exporter is thread-safe.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import IO, TYPE_CHECKING, Any

from .. import __version__
from .inputs import UsageError

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan

    from .._registry.registry import ToolRegistry

__all__ = ["INSTALL_HINT", "otlp_json", "span_tree", "tracing"]

INSTALL_HINT = "pip install 'dshtools[otel]' opentelemetry-sdk"

# The OTLP enums, by their protobuf numbers (the OTLP/JSON encoding writes
# enums as integers).
_KIND = {"INTERNAL": 1, "SERVER": 2, "CLIENT": 3, "PRODUCER": 4, "CONSUMER": 5}
_STATUS = {"UNSET": 0, "OK": 1, "ERROR": 2}


class _Tracing:
    """One run's tracing: ``start(registry, name)``, then ``span()`` around
    the batches, then ``finish()``. ``target`` is ``""`` to print the tree,
    else the path of the OTLP JSON file."""

    def __init__(self, target: str) -> None:
        self.target = target
        if target:
            # Fail before the run, not after it, when the file cannot be written.
            try:
                with open(target, "w", encoding="utf-8"):
                    pass
            except OSError as exc:
                raise UsageError(f"--trace: cannot write {target}: {exc}") from None
        try:
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import SimpleSpanProcessor
            from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

            from .. import otel
        except ImportError as exc:
            raise UsageError(f"--trace needs the OpenTelemetry SDK: {INSTALL_HINT} ({exc})") from None
        self._otel = otel
        self._exporter = InMemorySpanExporter()
        self._provider = TracerProvider(
            resource=Resource.create({"service.name": "dshtools", "service.version": __version__})
        )
        self._provider.add_span_processor(SimpleSpanProcessor(self._exporter))
        self._instrumentation: Any = None
        self._name = "dshtools"

    def start(self, registry: ToolRegistry, name: str) -> None:
        """Instrument ``registry``; ``name`` is the run span's name. Raises
        ``UsageError`` when the registry is instrumented already."""
        self._name = name
        try:
            self._instrumentation = self._otel.instrument(registry, tracer_provider=self._provider)
        except RuntimeError as exc:
            raise UsageError(f"--trace: {exc}") from None

    @contextmanager
    def span(self) -> Iterator[None]:
        """The run's span, current on this thread while the block runs."""
        tracer = self._provider.get_tracer("dshtools.cli", __version__)
        with tracer.start_as_current_span(self._name):
            yield

    def finish(self) -> list[ReadableSpan]:
        """Uninstrument, shut the provider down; the spans that ended."""
        if self._instrumentation is not None:
            self._instrumentation.uninstrument()
            self._instrumentation = None
        spans = list(self._exporter.get_finished_spans())
        self._provider.shutdown()
        return spans

    def report(self, out: IO[str]) -> None:
        """``finish()``, then print the tree on ``out``, or write the file
        and say so on ``out``. Raises ``UsageError`` when the file cannot
        be written."""
        spans = self.finish()
        if not self.target:
            traces = sorted({f"{span.context.trace_id:032x}" for span in spans if span.context is not None})
            print(f"trace {', '.join(traces) or '-'}: {len(spans)} spans; times in ms from the run's start", file=out)
            for line in span_tree(spans):
                print(line, file=out)
            return
        try:
            with open(self.target, "w", encoding="utf-8") as f:
                # One line: a JSON document, and a JSON-lines file of one
                # request, as the Collector's otlpjsonfile receiver reads.
                json.dump(otlp_json(spans), f, separators=(",", ":"))
                f.write("\n")
        except OSError as exc:
            raise UsageError(f"--trace: cannot write {self.target}: {exc}") from None
        print(f"trace: {len(spans)} spans written to {os.path.abspath(self.target)} (OTLP JSON)", file=out)


class _NoTracing:
    """What runs without ``--trace``: nothing."""

    def start(self, registry: ToolRegistry, name: str) -> None:
        pass

    @contextmanager
    def span(self) -> Iterator[None]:
        yield

    def report(self, out: IO[str]) -> None:
        pass


def tracing(target: str | None) -> _Tracing | _NoTracing:
    """The run's tracing for ``--trace`` (``None``: not given; ``""``: print
    the tree; else the OTLP JSON file's path). Raises ``UsageError``
    without the SDK or when the file cannot be written."""
    return _NoTracing() if target is None else _Tracing(target)


# ---------------------------------------------------------------------------
# The printed tree


def _ms(ns: int) -> str:
    return f"{ns / 1e6:.1f} ms"


def _yes(value: object) -> str:
    return "yes" if value is True else "no"


def _children(spans: Sequence[ReadableSpan]) -> tuple[list[ReadableSpan], dict[int, list[ReadableSpan]]]:
    """Roots (no parent among ``spans``) and each span's children, both in
    start order."""
    ids = {span.context.span_id for span in spans if span.context is not None}
    roots: list[ReadableSpan] = []
    children: dict[int, list[ReadableSpan]] = {}
    for span in sorted(spans, key=lambda s: s.start_time or 0):
        parent = span.parent.span_id if span.parent is not None else None
        if parent is None or parent not in ids:
            roots.append(span)
        else:
            children.setdefault(parent, []).append(span)
    return roots, children


def _cells(span: ReadableSpan, origin: int) -> list[str]:
    """name, call id, outcome, start, duration, flags: one row's cells."""
    attributes: Mapping[str, Any] = span.attributes or {}
    start = (span.start_time or origin) - origin
    duration = (span.end_time or span.start_time or 0) - (span.start_time or 0)
    if attributes.get("gen_ai.operation.name") != "execute_tool":
        status = span.status.status_code.name
        return [span.name, "", "" if status == "UNSET" else status, f"+{_ms(start)}", _ms(duration), ""]
    outcome = str(attributes.get("error.type", "SUCCESS"))
    flags = [f"body_invoked={_yes(attributes.get('dshtools.body_invoked'))}"]
    flags.append(f"killed={_yes(attributes.get('dshtools.killed'))}")
    overrun = attributes.get("dshtools.overrun_s")
    if isinstance(overrun, float | int):
        flags.append(f"overrun_s={overrun:.2f}")
    return [
        span.name,
        str(attributes.get("gen_ai.tool.call.id", "")),
        outcome,
        f"+{_ms(start)}",
        _ms(duration),
        "  ".join(flags),
    ]


def _event_detail(attributes: Mapping[str, Any]) -> str:
    """`` (reason: <the reason's text>)`` for an abort (its class when the
    span has no text), `` (progress: 3/10 message)`` for a progress
    update, else nothing."""
    reason = attributes.get("dshtools.abort.message") or attributes.get("dshtools.abort.reason")
    if reason:
        return f" (reason: {reason})"
    value = attributes.get("dshtools.progress.value")
    if value is None:
        return ""
    total = attributes.get("dshtools.progress.total")
    message = attributes.get("dshtools.progress.message")
    return (
        f" (progress: {value:g}" + ("" if total is None else f"/{total:g}") + (f" {message}" if message else "") + ")"
    )


def span_tree(spans: Sequence[ReadableSpan]) -> list[str]:
    """The spans as an indented tree, children in start order, one line per
    span: name, call id, outcome (``SUCCESS`` or ``error.type``) for an
    ``execute_tool`` span (its status otherwise), start relative to the
    first root (ms), duration (ms), ``body_invoked``, ``killed`` and
    ``overrun_s`` when reported; then a line per event (``dshtools.abort``
    with its reason's text, ``dshtools.forced_stop``, ``dshtools.progress``
    with its value) at its time relative to the same origin."""
    roots, children = _children(spans)
    if not roots:
        return []
    origin = min(span.start_time or 0 for span in roots)
    rows: list[tuple[int, list[str] | str]] = []

    def walk(span: ReadableSpan, depth: int) -> None:
        rows.append((depth, _cells(span, origin)))
        for event in span.events:
            text = f"· {event.name} at +{_ms(event.timestamp - origin)}" + _event_detail(event.attributes or {})
            rows.append((depth + 2, text))
        for child in children.get(span.context.span_id if span.context is not None else 0, []):
            walk(child, depth + 1)

    for root in roots:
        walk(root, 0)
    tables = [(depth, cells) for depth, cells in rows if isinstance(cells, list)]
    first = max(2 * depth + len(cells[0]) for depth, cells in tables)
    widths = [max(len(cells[i]) for _, cells in tables) for i in range(1, 5)]
    lines: list[str] = []
    for depth, cells in rows:
        indent = "  " * depth
        if isinstance(cells, str):
            lines.append(indent + cells)
            continue
        name = (indent + cells[0]).ljust(first)
        middle = [cells[1].ljust(widths[0]), cells[2].ljust(widths[1])]
        middle += [cells[3].rjust(widths[2]), cells[4].rjust(widths[3])]
        lines.append("  ".join([name, *middle, cells[5]]).rstrip())
    return lines


# ---------------------------------------------------------------------------
# OTLP JSON


def _any_value(value: object) -> dict[str, Any]:
    """An OTLP ``AnyValue``: 64-bit integers as decimal strings, as the
    OTLP/JSON encoding requires."""
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, str):
        return {"stringValue": value}
    if isinstance(value, Sequence):
        return {"arrayValue": {"values": [_any_value(v) for v in value]}}
    return {"stringValue": str(value)}


def _attributes(attributes: Mapping[str, object] | None) -> list[dict[str, Any]]:
    return [{"key": key, "value": _any_value(value)} for key, value in (attributes or {}).items()]


def _span_json(span: ReadableSpan) -> dict[str, Any]:
    context = span.context
    assert context is not None  # an SDK span always has one
    out: dict[str, Any] = {
        "traceId": f"{context.trace_id:032x}",
        "spanId": f"{context.span_id:016x}",
        "name": span.name,
        "kind": _KIND.get(span.kind.name, 0),
        "startTimeUnixNano": str(span.start_time or 0),
        "endTimeUnixNano": str(span.end_time or 0),
        "attributes": _attributes(span.attributes),
        "events": [
            {"timeUnixNano": str(event.timestamp), "name": event.name, "attributes": _attributes(event.attributes)}
            for event in span.events
        ],
        "status": {"code": _STATUS[span.status.status_code.name]},
    }
    if span.parent is not None:
        out["parentSpanId"] = f"{span.parent.span_id:016x}"
    if span.status.description:
        out["status"]["message"] = span.status.description
    return out


def otlp_json(spans: Sequence[ReadableSpan]) -> dict[str, Any]:
    """The spans in the OTLP/JSON encoding of an
    ``ExportTraceServiceRequest``: ``{"resourceSpans": [{"resource",
    "scopeSpans": [{"scope", "spans"}]}]}``, one resource span per
    resource and one scope span per instrumentation scope; ids in lower
    hex, times in nanoseconds since the epoch as decimal strings, enums as
    integers."""
    by_resource: dict[int, tuple[Any, dict[tuple[str, str], list[dict[str, Any]]]]] = {}
    for span in sorted(spans, key=lambda s: s.start_time or 0):
        resource = span.resource
        _, scopes = by_resource.setdefault(id(resource), (resource, {}))
        scope = span.instrumentation_scope
        key = (scope.name, scope.version or "") if scope is not None else ("", "")
        scopes.setdefault(key, []).append(_span_json(span))
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": _attributes(resource.attributes if resource is not None else None)},
                "scopeSpans": [
                    {"scope": {"name": name, "version": version}, "spans": items}
                    for (name, version), items in scopes.items()
                ],
            }
            for resource, scopes in by_resource.values()
        ]
    }
