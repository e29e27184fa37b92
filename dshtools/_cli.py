"""The command line: ``python -m dshtools demo`` and ``python -m dshtools
replay`` (DESIGN.md §6).

Guarantees:

* Every assistant message's ``tool_calls`` run as one ``execute_batch``, in
  transcript order, with one caller-owned ``AbortController`` for the whole
  run. ``--cancel-after S`` arms ``AbortSignal.timeout(S)`` whose listener
  (on the shared timer thread) aborts that controller mid-turn.
* Exactly one row per call: results are collected by a result observer, so
  a run interrupted by Ctrl-C still prints every call that was published
  (``execute_batch`` publishes every result before it re-raises
  ``KeyboardInterrupt``). Batches after an interruption still run, with the
  controller already aborted, so their calls are reported as
  ``ABORTED_BEFORE_DISPATCH``.
* Before exiting, quiescence is checked and printed: no live descendant
  process (every non-zombie process below this one in the parent tree,
  via psutil or ``/proc``; on Linux the run is a child subreaper, so a
  grandchild whose parent exited is re-parented here and still counts),
  no dispatch (demo: no tool body) in flight, and no listener left on the
  caller's signal. A failed check exits 1.
* BODY (was the tool body invoked) is observed, not guessed: the demo's
  tools count themselves; ``replay`` installs its meter as the innermost
  around-dispatch wrapper (``_Meter.body_invoked`` states the rule).
* ``replay`` warns (one line on stderr) when a tool declares ``timeout``
  but the registry has no ``TimeoutPolicy``. Transcript errors name the
  message as ``message #N``, counting every message from 1.
* Progress (calls in flight and for how long) goes to stderr only while
  stderr is a terminal; the ticker thread is stopped and joined before the
  table is printed.

Command line::

    dshtools [demo] [--cancel-after S | --no-cancel] [--max-parallel N] [--json]
    dshtools replay TRANSCRIPT.json|- --tools MODULE:ATTRIBUTE
                    [--cancel-after S] [--max-parallel N] [--json]

``--tools`` names a ``ToolRegistry`` or a zero-argument callable returning
one (``MODULE`` is imported with the current directory on ``sys.path``;
``ATTRIBUTE`` may be dotted; a closed registry is a usage error). ``-``
as the transcript reads it from standard input. The table (stdout; stderr under ``--json``,
where stdout carries the ``role: "tool"`` messages as one JSON list) has
one row per call: batch, call id, tool, outcome (``SUCCESS``, the code, or
``ERROR(<exception name>)`` for a failure without a code), whether the body
was invoked, the dispatch duration, and the start of the model text.

Exit codes: 0 success (tool failures, timeouts and a ``--cancel-after``
cancellation are outcomes, not errors); 1 a quiescence check failed, or
stdout was closed early; 2 usage error (one line on stderr); 130
interrupted by Ctrl-C (SIGINT).
"""

from __future__ import annotations

import argparse
import builtins
import importlib
import itertools
import json
import math
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from importlib import resources
from typing import IO, Any, NoReturn

import attrs

from . import openai as dopenai
from ._batch import execute_batch
from ._policies import TimeoutPolicy
from ._registry import ToolRegistry
from ._signal import AbortController, AbortSignal
from ._types import (
    TOOL_ABORTED,
    TOOL_ABORTED_BEFORE_DISPATCH,
    ExecutionToken,
    ToolDispatchExecution,
    ToolExecution,
    ToolExecutionInput,
    ToolExecutionResult,
    ToolFailure,
)

__all__ = ["main", "UsageError", "load_transcript", "load_registry"]

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

DEFAULT_CANCEL_AFTER = 1.5
_TICK = 0.25  # progress refresh period (seconds), TTY only


class UsageError(Exception):
    """A user error reported as one line on stderr with exit status 2."""


# ---------------------------------------------------------------------------
# Transcript


STDIN = "-"


def _read_json(path: str) -> Any:
    """The parsed JSON of ``path``, or of standard input when ``path`` is
    ``"-"``. Raises ``UsageError`` for a missing or unreadable file and for
    text that is not JSON."""
    name = "<stdin>" if path == STDIN else path
    try:
        if path == STDIN:
            text = sys.stdin.buffer.read().decode("utf-8")
        else:
            with open(path, encoding="utf-8") as f:
                text = f.read()
    except FileNotFoundError:
        raise UsageError(f"transcript not found: {path}") from None
    except IsADirectoryError:
        raise UsageError(f"transcript is a directory, not a file: {path}") from None
    except (OSError, UnicodeDecodeError, ValueError, AttributeError) as exc:  # closed or missing stdin
        raise UsageError(f"cannot read transcript {name}: {exc}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"transcript {name} is not valid JSON: {exc}") from None


def _numbered_batches(data: object, source: str) -> list[tuple[int, list[Any]]]:
    """``(message number, tool_calls)`` for every assistant message with
    tool calls. Messages are numbered from 1 in the order of the
    transcript's message list (every role counts); every transcript error
    names a message this way (``message #N``)."""
    if isinstance(data, dict) and "messages" in data:
        messages = data["messages"]
        if not isinstance(messages, list):
            raise UsageError(f'{source}: "messages" must be a list of messages')
    elif isinstance(data, dict):
        messages = [data]
    elif isinstance(data, list):
        messages = data
    else:
        raise UsageError(
            f"{source}: expected a message list, a {{\"messages\": [...]}} object or an assistant message, "
            f"not a JSON {type(data).__name__}"
        )
    batches: list[tuple[int, list[Any]]] = []
    for number, message in enumerate(messages, 1):
        if not isinstance(message, dict):
            raise UsageError(f"{source}: message #{number} is not a JSON object")
        if message.get("role", "assistant") != "assistant":
            continue
        calls = message.get("tool_calls")
        if calls is None or calls == []:
            continue
        if not isinstance(calls, list):
            raise UsageError(f'{source}: message #{number}: "tool_calls" must be a list')
        batches.append((number, calls))
    if not batches:
        raise UsageError(f"{source}: no assistant message with tool_calls")
    return batches


def transcript_batches(data: object, source: str = "transcript") -> list[list[Any]]:
    """The ``tool_calls`` lists of ``data``'s assistant messages, in order.

    ``data`` is an OpenAI Chat Completions message list, a ``{"messages":
    [...]}`` object, or one assistant message. Messages of other roles
    (including earlier ``role: "tool"`` answers) are ignored. Raises
    ``UsageError`` when the shape is none of these or no assistant message
    has a non-empty ``tool_calls`` list; errors name the offending message
    as ``message #N``, counting every message from 1."""
    return [calls for _, calls in _numbered_batches(data, source)]


def load_transcript(path: str) -> list[tuple[int, list[Any]]]:
    """Read ``path`` (``"-"``: standard input) and return its batches, each
    with the number of the message it came from (see ``transcript_batches``)."""
    return _numbered_batches(_read_json(path), "<stdin>" if path == STDIN else path)


def _to_inputs(batches: list[tuple[int, list[Any]]], signal: AbortSignal, source: str) -> list[list[ToolExecutionInput]]:
    converted: list[list[ToolExecutionInput]] = []
    for number, calls in batches:
        try:
            converted.append(dopenai.calls_from_message({"role": "assistant", "tool_calls": calls}, signal=signal))
        except (TypeError, ValueError, KeyError) as exc:
            raise UsageError(f"{source}: message #{number}: bad tool_calls: {exc}") from None
    return converted


# ---------------------------------------------------------------------------
# --tools MODULE:ATTRIBUTE


def load_registry(spec: str) -> ToolRegistry:
    """Resolve ``MODULE:ATTRIBUTE`` (the attribute may be dotted) to a
    ``ToolRegistry``: the attribute itself, or the result of calling it with
    no arguments. The current directory is importable (as with ``python
    -m``). Raises ``UsageError`` for a malformed spec, a module that cannot
    be imported (or raises while importing), a missing attribute, a factory
    that raises, anything that is not a ``ToolRegistry``, or a registry
    that is already closed."""
    module_name, sep, attr_path = spec.partition(":")
    if not sep or not module_name or not attr_path:
        raise UsageError(f"--tools must look like MODULE:ATTRIBUTE, got {spec!r}")
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise UsageError(f"--tools: cannot import module {module_name!r}: {exc}") from None
    except Exception as exc:
        raise UsageError(f"--tools: importing {module_name!r} failed: {type(exc).__name__}: {exc}") from None
    target: object = module
    for part in attr_path.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise UsageError(f"--tools: module {module_name!r} has no attribute {attr_path!r}") from None
    if isinstance(target, ToolRegistry):
        return _open(target, spec)
    if callable(target):
        try:
            made = target()
        except Exception as exc:
            raise UsageError(f"--tools: calling {spec}() failed: {type(exc).__name__}: {exc}") from None
        if isinstance(made, ToolRegistry):
            return _open(made, f"{spec}()")
        raise UsageError(f"--tools: {spec}() returned {type(made).__name__}, not a ToolRegistry")
    raise UsageError(f"--tools: {spec} is {type(target).__name__}, not a ToolRegistry or a factory returning one")


def _open(registry: ToolRegistry, what: str) -> ToolRegistry:
    if registry._closed:
        raise UsageError(f"--tools: {what} is a ToolRegistry that is already closed (close() was called)")
    return registry


# ---------------------------------------------------------------------------
# Instrumentation: dispatch meter, result collector, progress ticker


@attrs.define
class _Row:
    batch: int
    call_id: str
    name: str
    result: ToolExecutionResult | None = None
    token: ExecutionToken | None = None
    started: float | None = None
    ended: float | None = None


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

    def __call__(self, execution: ToolDispatchExecution, next: Callable[[], ToolExecutionResult]) -> ToolExecutionResult:
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
        return "no"


class _Collector:
    """A result observer that keeps every published result, in publication
    order (model order within a batch; DESIGN.md §4)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.published: list[tuple[str, ExecutionToken, ToolExecutionResult]] = []

    def __call__(self, execution: ToolExecution, result: ToolExecutionResult) -> None:
        with self._lock:
            self.published.append((execution.call_id, execution.token, result))

    def take(self) -> list[tuple[str, ExecutionToken, ToolExecutionResult]]:
        with self._lock:
            out, self.published = self.published, []
            return out


class _Ticker:
    """Writes the calls in flight to ``stream`` every _TICK seconds while
    ``stream`` is a terminal; ``stop()`` joins the thread and clears the
    line. Never started when ``stream`` is not a TTY."""

    def __init__(self, meter: _Meter, stream: IO[str]) -> None:
        self._meter = meter
        self._stream = stream
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        isatty = getattr(stream, "isatty", None)
        if isatty is not None and isatty():
            self._thread = threading.Thread(target=self._run, name="dshtools-progress", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(_TICK):
            now = time.monotonic()
            items = self._meter.in_flight()
            text = ", ".join(f"{cid} {name} {now - t0:.1f}s" for cid, name, t0 in items) or "-"
            self._stream.write(f"\r\x1b[K  in flight: {text}"[:200])
            self._stream.flush()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
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
    tool_messages: list[dict[str, Any]]


def _run_batches(
    registry: ToolRegistry,
    batches: list[tuple[int, list[Any]]],
    *,
    source: str,
    cancel_after: float | None,
    max_parallel: int,
    meter: _Meter,
) -> _Replay:
    """Run every batch through ``execute_batch`` on this (the main) thread."""
    controller = AbortController()
    inputs = _to_inputs(batches, controller.signal, source)
    collector = _Collector()
    cancelled_at: list[float] = []
    interrupted = False
    t0 = time.monotonic()
    with ExitStack() as stack:
        stack.callback(registry.add_around_dispatch(meter))
        stack.callback(registry.add_result_observer(collector))
        if cancel_after is not None:
            timer = AbortSignal.timeout(cancel_after)
            stack.callback(timer.close)

            def cancel(_signal: AbortSignal) -> None:
                cancelled_at.append(time.monotonic() - t0)
                controller.abort(f"--cancel-after {cancel_after:g}s elapsed")

            stack.callback(timer.add_listener(cancel).remove)
        ticker = _Ticker(meter, sys.stderr)
        stack.callback(ticker.stop)
        for calls in inputs:
            try:
                try:
                    execute_batch(registry, calls, signal=controller.signal, max_parallel=max_parallel)
                except KeyboardInterrupt:
                    # execute_batch published every result before re-raising.
                    interrupted = True
                    controller.abort(KeyboardInterrupt("interrupted (Ctrl-C)"))
            except KeyboardInterrupt:  # a second Ctrl-C, or one between batches
                interrupted = True
                controller.abort(KeyboardInterrupt("interrupted (Ctrl-C)"))
    # Rows are built once everything ran, so a Ctrl-C between batches
    # cannot lose one. Observers also see nested calls (run.dispatch), and
    # ids may repeat across turns: each call takes the first unused result
    # published under its id (publication follows model order).
    published = collector.take()
    rows: list[_Row] = []
    tool_messages: list[dict[str, Any]] = []
    for number, calls in enumerate(inputs, 1):
        for call in calls:
            row = _Row(number, call.call_id, call.name)
            for index, (call_id, token, result) in enumerate(published):
                if call_id == call.call_id:
                    row.result = result
                    row.token = token
                    del published[index]
                    # The dispatch view and the observer's view of one
                    # execution carry the same token.
                    span = meter.spans.get(token)
                    if span is not None:
                        row.started, row.ended = span[0] - t0, span[1] - t0
                    break
            rows.append(row)
            if row.result is not None:
                tool_messages.append(dopenai.tool_message(call.call_id, row.result))
    elapsed = time.monotonic() - t0
    return _Replay(
        rows=rows,
        interrupted=interrupted,
        cancelled_at=cancelled_at[0] if cancelled_at else None,
        elapsed=elapsed,
        listener_count=controller.signal.listener_count,
        tool_messages=tool_messages,
    )


# ---------------------------------------------------------------------------
# Output


def outcome_of(result: ToolExecutionResult | None) -> str:
    """``SUCCESS``, the failure's code, ``ERROR(<info name>)`` for a failure
    without a code, or ``NO RESULT``."""
    if result is None:
        return "NO RESULT"
    if not result.is_error:
        return "SUCCESS"
    code = result.code
    if code is not None:
        return code
    info = result.error.info  # type: ignore[union-attr]
    return f"ERROR({info.name if info is not None else '?'})"


def _detail(result: ToolExecutionResult | None) -> str:
    if result is None:
        return ""
    texts = [str(block.get("text", "")) for block in result.content if block.get("type") == "text"]
    text = " ".join(" ".join(texts).split())
    return text if len(text) <= 60 else text[:57] + "..."


def print_table(rows: Sequence[_Row], invoked: Callable[[_Row], str], out: IO[str]) -> None:
    header = ("BATCH", "CALL ID", "TOOL", "OUTCOME", "BODY", "DURATION", "DETAIL")
    lines: list[tuple[str, ...]] = [header]
    for row in rows:
        if row.started is not None and row.ended is not None:
            duration = f"{row.ended - row.started:.3f}s"
        else:
            duration = "-"
        lines.append(
            (str(row.batch), row.call_id, row.name, outcome_of(row.result), invoked(row), duration, _detail(row.result))
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header) - 1)]
    for line in lines:
        cells = [cell.ljust(widths[i]) if i != 5 else cell.rjust(widths[i]) for i, cell in enumerate(line[:-1])]
        print("  ".join(cells + [line[-1]]).rstrip(), file=out)


def _proc_parents() -> dict[int, list[tuple[int, bytes]]] | None:
    """parent pid -> [(pid, state)] for every process in ``/proc``, or
    ``None`` where there is no ``/proc``."""
    if not os.path.isdir("/proc/self"):
        return None
    parents: dict[int, list[tuple[int, bytes]]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                data = f.read()
        except OSError:  # exited meanwhile
            continue
        # "pid (comm) state ppid ...": comm may contain spaces and ")".
        fields = data[data.rfind(b")") + 2 :].split()
        if len(fields) >= 2:
            parents.setdefault(int(fields[1]), []).append((int(name), fields[0]))
    return parents


def live_descendants() -> tuple[list[int], str]:
    """PIDs of every live (non-zombie) descendant of this process - children,
    their children, and so on - and how they were found: ``"psutil"`` when
    installed, else ``"/proc"`` (the parent-pid tree of every process,
    walked from this process), else ``"none"`` (no way to look: empty).

    A process whose parent exited is re-parented (to init, or to the
    nearest child subreaper) and so stops being a descendant; run under
    ``_subreaper()`` so such orphans are re-parented to this process and
    still count."""
    try:
        import psutil
    except ImportError:
        psutil = None
    if psutil is not None:
        alive = []
        for child in psutil.Process().children(recursive=True):
            try:
                if child.status() != psutil.STATUS_ZOMBIE:
                    alive.append(child.pid)
            except psutil.NoSuchProcess:
                pass
        return sorted(alive), "psutil"
    parents = _proc_parents()
    if parents is None:
        return [], "none"
    found: list[int] = []
    seen = {os.getpid()}
    todo = [os.getpid()]
    while todo:
        for pid, state in parents.get(todo.pop(), ()):
            if pid in seen:
                continue
            seen.add(pid)
            todo.append(pid)  # a zombie has no children, but walk it anyway
            if state not in (b"Z", b"X"):
                found.append(pid)
    return sorted(found), "/proc"


_PR_SET_CHILD_SUBREAPER = 36
_PR_GET_CHILD_SUBREAPER = 37


class _subreaper:
    """Make this process a Linux *child subreaper* (``prctl``) while the
    block runs, so a tool's orphaned grandchild (``cmd &`` in a shell that
    then exits) is re-parented here instead of to init, and the
    descendant check still sees it. The previous setting is restored on
    exit; re-parented processes stay this process's children (zombies
    after they exit, until this process exits). ``active`` says whether it
    took effect (``False`` off Linux or when ``prctl`` is unavailable)."""

    def __init__(self) -> None:
        self.active = False
        self._previous = 0
        self._prctl: Any = None

    def __enter__(self) -> _subreaper:
        if not sys.platform.startswith("linux"):
            return self
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            prctl = libc.prctl
            current = ctypes.c_int(0)
            if prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(current), 0, 0, 0) != 0:
                return self
            if prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
                return self
        except (OSError, AttributeError):
            return self
        self._prctl = prctl
        self._previous = current.value
        self.active = True
        return self

    def __exit__(self, *exc: object) -> None:
        if self.active and not self._previous:
            self._prctl(_PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
        self.active = False


# ---------------------------------------------------------------------------
# Commands


def _finite_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds >= 0, got {text!r}")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _report(run: _Replay, invoked: Callable[[_Row], str], extra_checks: list[tuple[str, bool]], json_out: bool) -> int:
    """Print the table (stdout, or stderr under --json) and the quiescence
    lines; return the exit status."""
    out = sys.stderr if json_out else sys.stdout
    if json_out:
        json.dump(run.tool_messages, sys.stdout, indent=2)
        sys.stdout.write("\n")
        sys.stdout.flush()
    print_table(run.rows, invoked, out)
    if run.interrupted:
        print("interrupted (Ctrl-C): running calls were cancelled and joined", file=out)
    elif run.cancelled_at is not None:
        print(f"cancelled mid-run at {run.cancelled_at:.2f}s", file=out)
    print(f"finished in {run.elapsed:.2f}s", file=out)
    print("quiescence:", file=out)
    ok = True
    checks = extra_checks + [("caller signal listener_count == 0", run.listener_count == 0)]
    for label, passed in checks:
        ok = ok and passed
        print(f"  {'ok  ' if passed else 'FAIL'} {label}", file=out)
    out.flush()
    if run.interrupted:
        return EXIT_INTERRUPTED
    return EXIT_OK if ok else EXIT_FAILURE


def _descendant_check(reaper: _subreaper) -> tuple[str, bool]:
    """The quiescence line for processes: no live descendant of this
    process, saying exactly what was looked at."""
    alive, how = live_descendants()
    me = os.getpid()
    if how == "none":
        return (f"no live descendant process: NOT CHECKED (no psutil and no /proc; pid {me})", True)
    scope = (
        f"every non-zombie process below pid {me} in the parent tree, via {how}; "
        + (
            "orphaned grandchildren are re-parented here (child subreaper) and count"
            if reaper.active
            else "not a child subreaper here, so a grandchild orphaned to init is not seen"
        )
    )
    if alive:
        return (f"no live descendant process ({scope}; alive: {', '.join(map(str, alive))})", False)
    return (f"no live descendant process ({scope})", True)


def cmd_demo(ns: argparse.Namespace) -> int:
    from ._demo import (
        HTTP_TIMEOUT,
        READ_TIMEOUT,
        SHELL_TIMEOUT,
        SLEEP_TIMEOUT,
        DemoServer,
        DemoTools,
        group_alive,
    )

    cancel_after: float | None = None if ns.no_cancel else ns.cancel_after
    source = "demo_transcript.json"
    data = json.loads(resources.files("dshtools").joinpath("data").joinpath("demo_transcript.json").read_text("utf-8"))
    batches = _numbered_batches(data, source)
    meter = _Meter()
    with ExitStack() as stack:
        reaper = stack.enter_context(_subreaper())
        workdir = stack.enter_context(tempfile.TemporaryDirectory(prefix="dshtools-demo-"))
        with open(os.path.join(workdir, "notes.txt"), "w", encoding="utf-8") as f:
            f.write("TODO: ship the cancellable registry\n")
        server = stack.enter_context(DemoServer())
        tools = stack.enter_context(DemoTools(server.base_url, workdir))
        out = sys.stderr if ns.json else sys.stdout
        ncalls = sum(len(calls) for _, calls in batches)
        print(
            f"dshtools demo: {ncalls} calls in {len(batches)} batches from {source}; "
            f"local server {server.base_url}; "
            + ("no cancellation" if cancel_after is None else f"cancel after {cancel_after:g}s"),
            file=out,
        )
        print(
            f"tools: shell (exclusive unless read_only, timeout {SHELL_TIMEOUT:g}s), "
            f"http_get (parallel, timeout {HTTP_TIMEOUT:g}s), read_file (parallel, timeout {READ_TIMEOUT:g}s), "
            f"sleep (parallel, timeout {SLEEP_TIMEOUT:g}s); TimeoutPolicy installed",
            file=out,
            flush=True,
        )
        run = _run_batches(
            tools.registry,
            batches,
            source=source,
            cancel_after=cancel_after,
            max_parallel=ns.max_parallel,
            meter=meter,
        )
        # Quiescence is checked right after the batches returned, before the
        # registry is closed: execute_batch itself must have joined every body.
        pgids = tools.process_groups
        alive = [pgid for pgid in pgids if group_alive(pgid)]
        listed = ", ".join(map(str, pgids)) or "none"
        checks = [
            (
                f"no process left in the {len(pgids)} process groups the shell tool created "
                f"(pgids: {listed}; alive: {', '.join(map(str, alive)) or 'none'})",
                not alive,
            ),
            _descendant_check(reaper),
            (f"no tool body running (bodies in flight: {tools.bodies_in_flight})", tools.bodies_in_flight == 0),
        ]
        return _report(run, lambda row: "yes" if tools.body_invoked(row.call_id) else "no", checks, ns.json)
    raise AssertionError("unreachable")  # pragma: no cover


def timeout_warning(registry: ToolRegistry) -> str | None:
    """One line when a registered tool declares ``timeout`` but no
    ``TimeoutPolicy`` is installed on ``registry`` (the timeout is then not
    enforced: DESIGN.md §4 makes the policy opt-in); else ``None``. Reads
    the registry's private tables (a copy-on-write snapshot, safe without
    its lock)."""
    timed = sorted(name for name, d in registry._definitions.items() if d.timeout is not None)
    if not timed or any(isinstance(fn, TimeoutPolicy) for fn in registry._hooks.around):
        return None
    listed = ", ".join(timed[:5]) + (f" and {len(timed) - 5} more" if len(timed) > 5 else "")
    return (
        f"dshtools: warning: {listed} declare{'s' if len(timed) == 1 else ''} timeout= but the registry has no "
        "TimeoutPolicy, so no timeout is enforced (add registry.add_around_dispatch(TimeoutPolicy()))"
    )


def cmd_replay(ns: argparse.Namespace) -> int:
    source = "<stdin>" if ns.transcript == STDIN else ns.transcript
    batches = load_transcript(ns.transcript)
    registry = load_registry(ns.tools)
    try:
        warning = timeout_warning(registry)
        if warning is not None:
            print(warning, file=sys.stderr, flush=True)
        # Registered after the module's own hooks: the meter is the
        # innermost around-dispatch wrapper, as body_invoked requires.
        meter = _Meter()
        with _subreaper() as reaper:
            run = _run_batches(
                registry,
                batches,
                source=source,
                cancel_after=ns.cancel_after,
                max_parallel=ns.max_parallel,
                meter=meter,
            )
            in_flight = len(meter.in_flight())
            checks = [
                _descendant_check(reaper),
                (f"no dispatch in flight (in flight: {in_flight})", in_flight == 0),
            ]
        return _report(run, lambda row: meter.body_invoked(row.token, row.result), checks, ns.json)
    finally:
        registry.close()


class _Parser(argparse.ArgumentParser):
    """argparse with a one-line usage error (DESIGN.md §6: one line on
    stderr, exit 2); ``--help`` still prints the full usage."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="dshtools",
        description="Run LLM tool calls with cancellation, timeouts and joined, never abandoned, bodies.",
        epilog="Exit status: 0 success, 1 a quiescence check failed (or stdout closed early), 2 usage error, "
        "130 interrupted (Ctrl-C). "
        "Without a command, runs the demo.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def common(p: argparse.ArgumentParser, cancel_default: float | None) -> None:
        p.add_argument(
            "--cancel-after",
            type=_finite_seconds,
            default=cancel_default,
            metavar="S",
            help="abort the run's caller signal after S seconds (mid-turn cancellation)"
            + (f"; default {cancel_default:g}" if cancel_default is not None else "; default: never"),
        )
        p.add_argument(
            "--max-parallel",
            type=_positive_int,
            default=10,
            metavar="N",
            help="how many parallel-safe calls may overlap (default 10)",
        )
        p.add_argument(
            "--json",
            action="store_true",
            help='print the role "tool" messages as a JSON list on stdout (the table goes to stderr)',
        )

    demo = sub.add_parser(
        "demo",
        help="replay the bundled transcript against real blocking tools and a local HTTP server",
        description="Replay the bundled transcript (shell, http_get, read_file, sleep against a local "
        "server) with TimeoutPolicy and a mid-run cancellation, then prove quiescence.",
    )
    common(demo, DEFAULT_CANCEL_AFTER)
    demo.add_argument(
        "--no-cancel",
        action="store_true",
        help="do not cancel; every call runs to its end or its timeout (not with --cancel-after)",
    )
    demo.set_defaults(func=cmd_demo, subparser=demo)

    replay = sub.add_parser(
        "replay",
        help="replay a transcript's tool calls against your own registry",
        description="Replay TRANSCRIPT.json (an OpenAI Chat Completions message list, a {\"messages\": [...]} "
        "object, or one assistant message; each assistant message's tool_calls run as one batch, in order) "
        "against the registry named by --tools. Hooks already on that registry apply; no policy is added "
        "(install TimeoutPolicy yourself for per-tool timeouts; a one-line warning on stderr says when a tool "
        "declares timeout= and no TimeoutPolicy is installed). The registry is closed at the end. "
        "BODY in the table says whether the tool body was invoked, as observed by an innermost around-dispatch "
        "wrapper the replay installs ('?' only when no result was published). "
        "Ctrl-C cancels cooperatively, waits for running bodies (a second Ctrl-C does not stop that wait; "
        "Ctrl-\\ or SIGKILL does), prints the results and exits 130.",
    )
    replay.add_argument(
        "transcript",
        metavar="TRANSCRIPT.json",
        help="the transcript file; '-' reads it from standard input",
    )
    replay.add_argument(
        "--tools",
        required=True,
        metavar="MODULE:ATTRIBUTE",
        help="a ToolRegistry, or a zero-argument callable returning one (the current directory is importable)",
    )
    common(replay, None)
    replay.set_defaults(func=cmd_replay, subparser=replay)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m dshtools`` and the ``dshtools`` script.
    Returns the exit status (see the module docstring)."""
    parser = build_parser()
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or (args[0].startswith("-") and args[0] not in ("-h", "--help")):
        args = ["demo", *args]  # the demo is the default command
    try:
        ns = parser.parse_args(args)
        if ns.command == "demo" and ns.no_cancel and any(a.split("=", 1)[0] == "--cancel-after" for a in args):
            ns.subparser.error("--no-cancel and --cancel-after exclude each other")
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2)
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    try:
        status: int = ns.func(ns)
        return status
    except UsageError as exc:
        text = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
        print(f"dshtools: error: {text}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:
        # stdout closed early (``| head``): the run itself finished cleanly;
        # silence the interpreter's final flush and exit like other tools.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        # Ctrl-C outside a batch (e.g. while loading): nothing was running.
        print("dshtools: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
