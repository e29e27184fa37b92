"""The ``run`` services of a body that runs outside the caller's process
(docs/contract.md#backends): a ``ProcessBackend`` worker or a Ray worker.

* ``run.signal`` is the signal of ``call_controller``: aborted by the
  caller's abort message; when the caller's dispatch signal had a timer
  (a tool ``timeout``, a caller's ``AbortSignal.timeout``), it also reports
  that budget as ``deadline``/``time_left()``, re-based on this process's
  clock at receipt (docs/contract.md#a9).
* ``run.defer_context(ctx)`` works: the JSON object is deep-frozen at once
  (a non-object or non-JSON value raises ``TypeError``/``ValueError`` in the
  body, as in a thread) and kept in ``contexts`` for the trip back; after the
  body settled it raises ``RuntimeError``.
* ``run.dispatch(...)`` raises ``RuntimeError``: nested calls need the
  registry, which lives in the caller's process (the thread backend).
* ``run.report_progress(...)`` hands an update whose values are numbers
  (and a ``str`` or ``None`` message) to the backend's ``ProgressSink``,
  which carries it to the caller's registry; without a sink, or after the
  body settled, it does nothing. It never blocks and never raises
  (docs/policies.md#progress).
* An exception a body raised travels with its description
  (``describe_error``: class name, message, code, timeout reason, the
  worker's traceback). Where the caller cannot unpickle it (its class
  comes from a module only the workers can import), ``rebuilt_error``
  stands in an exception with the same class *name* and message, a
  ``ToolError`` with the same code or an ``AbortError`` with the same
  timeout reason when the original was one, so the registry reports and
  classifies it as it would have the original.

* A tracing context crosses with the call when a carrier is installed
  (``set_context_carrier``, by ``dshtools.otel``): ``outgoing_context()``
  in the dispatching thread gives ``(module, data)``; the worker runs the
  body inside ``incoming_context`` of it, which imports ``module`` there
  and enters its ``carried_context(data)``. Without a carrier nothing
  crosses; a worker that cannot import the module runs the body without.

Threads: the body's thread, or threads it joins before returning.
"""

from __future__ import annotations

import contextlib
import importlib
import traceback
from collections.abc import Callable, Iterator, Mapping
from typing import Any, ClassVar, Final

from .._core.errors import AbortError, TimeoutReason, safe_str
from .._core.freeze import thaw
from .._signal import AbortController, AbortSignal, budget_controller
from .._signal.deadline import timeout_of
from .._types.calls import ExecutionToken, ToolError, ToolExecutionResult
from .._types.tools import ToolRunContext, frozen_deferred_context

__all__ = [
    "ErrorDetail",
    "ProgressSink",
    "RemoteRun",
    "RemoteTraceback",
    "call_controller",
    "class_name",
    "describe_error",
    "incoming_context",
    "outgoing_context",
    "rebuilt_error",
    "set_context_carrier",
]

ProgressSink = Callable[[float, float | None, str | None], None]
"""Where a remote body's progress goes: ``sink(progress, total, message)``,
called in the body's thread; it must not block (it stores the update for a
thread of the backend to send)."""

Carried = tuple[str, Any]
"""``(module name, picklable data)``: a tracing context on its way to a worker."""

_carrier: Callable[[], Carried | None] | None = None
_NUMBER: Final = (int, float)


def set_context_carrier(carrier: Callable[[], Carried | None] | None) -> None:
    """Install the process-wide carrier (``None`` removes it): called in
    the dispatching thread of every call sent to a worker."""
    global _carrier
    _carrier = carrier


def outgoing_context() -> Carried | None:
    """What crosses with a call sent now from this thread: the carrier's
    ``(module, data)``, or ``None`` (no carrier, nothing to carry, or a
    carrier fault)."""
    carrier = _carrier
    if carrier is None:
        return None
    try:
        return carrier()
    except Exception:
        return None


@contextlib.contextmanager
def incoming_context(carried: Carried | None) -> Iterator[None]:
    """In a worker: run the body inside the context that crossed with its
    call (``module.carried_context(data)``, a context manager); without one,
    or when the module does not import here, nothing is entered."""
    manager: Any = None
    if carried is not None:
        try:
            manager = importlib.import_module(carried[0]).carried_context(carried[1])
        except Exception:
            manager = None
    if manager is None:
        yield
        return
    with manager:
        yield


ErrorDetail = tuple[str, str, bool, "str | None", "tuple[str, float] | None", str]
"""``(class name, message, is AbortError, ToolError code, (timeout code,
seconds) or None, formatted traceback)`` of an exception a body raised."""


def class_name(value: object) -> str:
    """``value``'s class as ``module.qualname`` (only ``qualname`` for a
    builtin), sent beside a value from a worker: the caller names the class
    when the value does not unpickle there (a class only the worker has)."""
    kind = type(value)
    qualname = str(getattr(kind, "__qualname__", None) or kind.__name__)
    module = getattr(kind, "__module__", None)
    return qualname if module in (None, "builtins") else f"{module}.{qualname}"


def describe_error(exc: BaseException) -> ErrorDetail:
    """What is needed to stand in for ``exc`` where it cannot be unpickled
    (``ErrorDetail``). Never raises: a hostile ``__str__`` or traceback is
    described, not propagated."""
    tool_code = exc.code if isinstance(exc, ToolError) else None
    reason = timeout_of(exc)
    timeout = None if reason is None else (reason.code, reason.seconds)
    try:
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    except Exception:
        text = f"{type(exc).__name__}: <traceback unavailable>"
    return (type(exc).__name__, safe_str(exc), isinstance(exc, AbortError), tool_code, timeout, text)


class RemoteTraceback(Exception):
    """The traceback of an exception raised in a worker process, set as
    its ``__cause__`` (its text is the formatted traceback)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class _RemoteText:
    """Mixin of stand-ins: ``str()`` is the original's message."""

    _remote_text: str

    def __str__(self) -> str:
        return self._remote_text


_stand_ins: dict[tuple[str, type[BaseException]], type[BaseException]] = {}


def _stand_in(detail: ErrorDetail) -> BaseException:
    """An exception with the remote class name and message."""
    name, message, is_abort, tool_code, timeout, _tb = detail
    base: type[BaseException]
    if tool_code is not None:
        base = ToolError
    elif is_abort or timeout is not None:
        base = AbortError
    else:
        base = Exception
    cls = _stand_ins.get((name, base))
    if cls is None:
        cls = _stand_ins[(name, base)] = type(str(name), (_RemoteText, base), {"__module__": "dshtools.remote"})
    if base is ToolError:
        exc = cls(message, tool_code)
    elif base is AbortError:
        exc = cls(TimeoutReason(timeout[0], timeout[1]) if timeout is not None else None)
    else:
        exc = cls(message)
    exc._remote_text = message  # type: ignore[attr-defined]
    return exc


def rebuilt_error(
    payload: bytes | None,
    detail: ErrorDetail,
    load: Callable[[bytes], object],
    contained: type[BaseException] | tuple[type[BaseException], ...],
) -> BaseException:
    """The exception a worker sent: ``load(payload)``, or, when there is no
    payload or it does not load here (what ``load`` raises of
    ``contained``: foreign code runs in it), a stand-in built from
    ``detail``. The worker's traceback (and, for a stand-in, why the
    original did not load) becomes ``__cause__`` unless the exception has a
    cause of its own. Runs on the caller's side, in the
    thread that settles the call."""
    exc: object = None
    problem = None
    if payload is not None:
        try:
            exc = load(payload)
        except contained as bad:
            problem = bad
    text = detail[5]
    if not isinstance(exc, BaseException):
        exc = _stand_in(detail)
        if problem is not None:
            text += f"\n(this is a stand-in: the original cannot be deserialized here: {safe_str(problem)})"
    if exc.__cause__ is None:
        exc.__cause__ = RemoteTraceback(text)
    return exc


def call_controller(left: float | None, received: float) -> AbortController:
    """The controller whose signal a remote body gets as ``run.signal``.
    ``left``: the seconds the caller's dispatch signal had left when the
    call was sent (its ``time_left()``), or ``None`` when no timer could
    abort it; ``received``: this process's ``time.monotonic()`` when the
    call arrived. With a budget the signal reports ``deadline ==
    received + left``: the clocks of two processes (two machines, on Ray)
    are never compared, only a duration crosses. It never aborts by itself:
    the caller's timer does, through the abort message."""
    if left is None:
        return AbortController()
    return budget_controller(received + left)


class RemoteRun:
    """What ``ToolRunContext`` needs from its run, out of process.
    ``where`` names the place in the ``run.dispatch`` refusal;
    ``thaw_contexts`` keeps contexts as plain ``dict`` (for a wire that
    pickles with the standard library) instead of frozen mappings;
    ``progress`` receives the body's progress reports (``None``: dropped)."""

    __slots__ = ("_progress", "_thaw", "_where", "contexts", "settled")

    # Not ``None``: the body's ``run.report_progress`` then hands every
    # update to this run's ``report_progress`` at the cost of one attribute
    # read (a registry's run has ``watch``, ``None`` unless a call observer
    # watches it: docs/policies.md#progress).
    watch: ClassVar[bool] = False

    def __init__(self, where: str, *, thaw_contexts: bool, progress: ProgressSink | None = None) -> None:
        self._where = where
        self._thaw = thaw_contexts
        self._progress = progress
        self.contexts: list[Mapping[str, Any]] = []
        self.settled = False

    def context(
        self, call_id: str, root_call_id: str, name: str, agent: str | None, args: Any, signal: AbortSignal
    ) -> ToolRunContext:
        """The body's ``run``: a top-level call (no parent, no definition:
        both stay in the caller's process) served by this run."""
        return ToolRunContext(
            token=ExecutionToken(),
            call_id=call_id,
            root_call_id=root_call_id,
            name=name,
            arguments=args,
            agent=agent,
            parent=None,
            definition=None,
            signal=signal,
            run=self,
        )

    def defer_context(self, context: object) -> None:
        frozen = frozen_deferred_context(context, self.settled)
        self.contexts.append(thaw(frozen) if self._thaw else frozen)

    def report_progress(self, progress: object, total: object, message: object) -> None:
        # Only plain numbers cross: the caller's registry checks them again
        # (NaN, say) and drops what it refuses, as for a body in a thread.
        sink = self._progress
        if (
            sink is None
            or self.settled
            or type(progress) not in _NUMBER
            or (total is not None and type(total) not in _NUMBER)
            or (message is not None and type(message) is not str)
        ):
            return
        sink(progress, total, message)  # type: ignore[arg-type]

    def dispatch(
        self, name: str, arguments: object, call_id: str | None, signal: AbortSignal, parent: ExecutionToken
    ) -> ToolExecutionResult:
        raise RuntimeError(
            f"run.dispatch() is not available in a tool running on {self._where}: "
            "nested calls need the thread backend (docs/contract.md#backends)"
        )
