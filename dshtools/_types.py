"""Calls, views, results and codes: the data types of a tool call (docs/contract.md §2).

Guarantees:

* ``ToolExecutionInput.signal`` is required and must be an ``AbortSignal``:
  construction raises ``TypeError`` otherwise. Python has no compiler to
  enforce the annotation, so the check is made at runtime as well
  (a deliberate difference from a typed-only seam).
* Views are frozen ``attrs`` classes handed out by the registry; only the
  around-dispatch view's ``signal`` can be replaced (with another
  ``AbortSignal``; ``TypeError`` otherwise; deleting it raises
  ``AttributeError``).
* Results are frozen. The registry deep-freezes a result's ``value``,
  ``content`` and contexts before anyone outside the pipeline sees it
  (docs/contract.md §3 step 7); ``meta`` is a read-only mapping (not deep-frozen)
  from construction on.
* Every code constant of docs/contract.md §2 is defined here, once.
"""

from __future__ import annotations

import itertools
import types
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeAlias

import attrs

from ._deadline import timeout_of
from ._errors import AbortError, safe_str, safe_type_name
from ._freeze import FrozenDict, thaw
from ._signal import AbortSignal

if TYPE_CHECKING:
    from ._hooks import ToolDefinition

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
    "ContentBlock",
    "ErrorDetail",
    "ErrorInfo",
    "ExecutionToken",
    "ToolDispatchExecution",
    "ToolError",
    "ToolExecution",
    "ToolExecutionInput",
    "ToolExecutionResult",
    "ToolFailure",
    "ToolRunContext",
    "ToolSuccess",
    "aborted",
    "exception_failure",
    "failure",
    "text_content",
    "thaw",
]

# ---------------------------------------------------------------- codes (§2)

TOOL_ABORTED_BEFORE_DISPATCH: Final = "ABORTED_BEFORE_DISPATCH"
TOOL_ABORTED: Final = "ABORTED"
TOOL_TIMEOUT: Final = "TOOL_TIMEOUT"
UNKNOWN_TOOL: Final = "UNKNOWN_TOOL"
INVALID_ARGS: Final = "INVALID_ARGS"
INVALID_TOOL_OUTPUT: Final = "INVALID_TOOL_OUTPUT"
DENIED: Final = "DENIED"
TOOL_ERROR: Final = "TOOL_ERROR"
WORKER_LOST: Final = "WORKER_LOST"

ContentBlock = Mapping[str, Any]
"""A content block: a JSON object with a ``"type"``, e.g. ``{"type": "text", "text": "..."}``."""


# ------------------------------------------------------------------ token

_token_ids = itertools.count(1)


class ExecutionToken:
    """An opaque identity for one execution: compares equal only to itself,
    hashable. Nested calls carry their parent's token as ``parent``."""

    __slots__ = ("__weakref__", "_n")

    def __init__(self) -> None:
        self._n = next(_token_ids)

    def __repr__(self) -> str:
        return f"<ExecutionToken #{self._n}>"


# ------------------------------------------------------------------ the call


def _opt_str(name: str) -> Callable[[object, attrs.Attribute[Any], object], None]:
    def check(_inst: object, _attr: attrs.Attribute[Any], value: object) -> None:
        if value is not None and not isinstance(value, str):
            raise TypeError(f"{name} must be a str or None, not {type(value).__name__}")

    return check


def _req_str(name: str) -> Callable[[object, attrs.Attribute[Any], object], None]:
    def check(_inst: object, _attr: attrs.Attribute[Any], value: object) -> None:
        if not isinstance(value, str):
            raise TypeError(f"{name} must be a str, not {type(value).__name__}")

    return check


def _check_signal(_inst: object, _attr: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, AbortSignal):
        raise TypeError(
            f"signal must be an AbortSignal, not {type(value).__name__} "
            "(every call carries a caller-owned signal; there is no default)"
        )


def _check_parent(_inst: object, _attr: attrs.Attribute[Any], value: object) -> None:
    if value is not None and not isinstance(value, ExecutionToken):
        raise TypeError(f"parent must be an ExecutionToken or None, not {type(value).__name__}")


@attrs.frozen(eq=False)
class ToolExecutionInput:
    """One tool call as the model asked for it.

    ``ToolExecutionInput(call_id, name, arguments, signal, agent=None,
    parent=None, root_call_id=None)``. ``signal`` is required: a
    non-``AbortSignal`` raises ``TypeError`` here (docs/contract.md §2). ``call_id``
    and ``name`` must be ``str`` (``TypeError``); ``arguments`` is anything
    and is checked by the registry (``INVALID_ARGS``). Frozen, so
    ``attrs.evolve(call, signal=...)`` derives a variant. Equality is
    identity.
    """

    call_id: str = attrs.field(validator=_req_str("call_id"))
    name: str = attrs.field(validator=_req_str("name"))
    arguments: object
    signal: AbortSignal = attrs.field(validator=_check_signal)
    agent: str | None = attrs.field(default=None, validator=_opt_str("agent"))
    parent: ExecutionToken | None = attrs.field(default=None, validator=_check_parent)
    root_call_id: str | None = attrs.field(default=None, validator=_opt_str("root_call_id"))


# ------------------------------------------------------------------- results


@attrs.frozen
class ErrorInfo:
    """``name``: the error class name (e.g. ``"AbortError"``); ``code``: one
    of the code constants, a tool's own code, or ``None``."""

    name: str = attrs.field(validator=_req_str("name"))
    code: str | None = attrs.field(validator=_opt_str("code"))


@attrs.frozen
class ErrorDetail:
    """What went wrong: ``message`` (the model text without ``Error: ``) and
    the classification ``info``."""

    message: str = attrs.field(validator=_req_str("message"))
    info: ErrorInfo | None = attrs.field(validator=attrs.validators.optional(attrs.validators.instance_of(ErrorInfo)))


def text_content(text: str) -> tuple[ContentBlock, ...]:
    """``(FrozenDict(type="text", text=text),)``."""
    return (FrozenDict(type="text", text=text),)


def _to_content(value: str | Iterable[ContentBlock]) -> tuple[ContentBlock, ...]:
    if isinstance(value, str):
        return text_content(value)
    if isinstance(value, tuple):
        return value
    if isinstance(value, (Mapping, bytes)) or not isinstance(value, Iterable):
        raise TypeError(f"content must be a str or a sequence of content blocks, not {type(value).__name__}")
    return tuple(value)


def _to_meta(value: Mapping[str, object] | None) -> Mapping[str, object] | None:
    if value is None or isinstance(value, types.MappingProxyType):
        return value
    if not isinstance(value, Mapping):
        raise TypeError(f"meta must be a mapping or None, not {type(value).__name__}")
    return types.MappingProxyType(dict(value))


def _to_contexts(value: Iterable[Mapping[str, Any]]) -> tuple[Mapping[str, Any], ...]:
    if isinstance(value, tuple):
        return value
    if isinstance(value, (Mapping, str, bytes)) or not isinstance(value, Iterable):
        raise TypeError(f"additional_contexts must be a sequence of JSON objects, not {type(value).__name__}")
    return tuple(value)


@attrs.frozen
class ToolSuccess:
    """A successful call: ``value`` (a JSON value, deep-frozen by the
    registry), ``content`` (content blocks for the model; a ``str`` becomes
    one text block), ``meta`` (read-only mapping or ``None``),
    ``additional_contexts`` (JSON objects). ``is_error`` is ``False``,
    ``code`` is ``None``. Source: docs/contract.md §2."""

    value: Any
    content: tuple[ContentBlock, ...] = attrs.field(converter=_to_content)
    meta: Mapping[str, object] | None = attrs.field(default=None, converter=_to_meta)
    additional_contexts: tuple[Mapping[str, Any], ...] = attrs.field(default=(), converter=_to_contexts)

    @property
    def is_error(self) -> bool:
        return False

    @property
    def code(self) -> str | None:
        return None


@attrs.frozen
class ToolFailure:
    """A failed call: ``error`` (``ErrorDetail``), ``content`` (exactly one
    text block ``Error: <message>``, except a post-execute ``Block``),
    ``meta``, ``additional_contexts``. ``is_error`` is ``True``; ``code`` is
    ``error.info.code`` or ``None``. Source: docs/contract.md §2."""

    error: ErrorDetail = attrs.field(validator=attrs.validators.instance_of(ErrorDetail))
    content: tuple[ContentBlock, ...] = attrs.field(converter=_to_content)
    meta: Mapping[str, object] | None = attrs.field(default=None, converter=_to_meta)
    additional_contexts: tuple[Mapping[str, Any], ...] = attrs.field(default=(), converter=_to_contexts)

    @property
    def is_error(self) -> bool:
        return True

    @property
    def code(self) -> str | None:
        info = self.error.info
        return None if info is None else info.code


ToolExecutionResult: TypeAlias = ToolSuccess | ToolFailure


class ToolError(Exception):
    """Raised by a tool body for a structured failure: ``ToolError(message,
    code=None)`` becomes ``ToolFailure`` with ``info.name == "ToolError"``
    and ``info.code == code`` (the code is kept even when the call was
    cancelled meanwhile, docs/contract.md §7)."""

    def __init__(self, message: str, code: str | None = None) -> None:
        if not isinstance(message, str):
            raise TypeError(f"message must be a str, not {type(message).__name__}")
        if code is not None and not isinstance(code, str):
            raise TypeError(f"code must be a str or None, not {type(code).__name__}")
        super().__init__(message, code)
        self.message = message
        self.code = code

    def __str__(self) -> str:
        return self.message


def failure(
    message: str,
    *,
    name: str,
    code: str | None,
    meta: Mapping[str, object] | None = None,
    additional_contexts: Iterable[Mapping[str, Any]] = (),
) -> ToolFailure:
    """A ``ToolFailure`` with the canonical content ``Error: <message>``
    (for policies; docs/contract.md §2)."""
    return ToolFailure(
        ErrorDetail(message, ErrorInfo(name, code)),
        text_content("Error: " + message),
        meta,
        tuple(additional_contexts),
    )


def exception_failure(exc: BaseException) -> ToolFailure:
    """A raised exception as a failure (docs/contract.md §8 A2): a
    ``ToolError`` keeps its code (``TOOL_ERROR`` when it has none); an
    exception carrying a timeout (``timeout_of(exc)``, e.g. the
    ``AbortError`` of ``run_process(timeout=...)``) gets that reason's code;
    any other exception ``TOOL_ERROR``. ``info.name`` is the exception's
    class name; an unprintable message is replaced by a stand-in."""
    if isinstance(exc, ToolError):
        return failure(safe_str(exc), name=safe_type_name(exc), code=exc.code or TOOL_ERROR)
    timeout = timeout_of(exc)
    return failure(safe_str(exc), name=safe_type_name(exc), code=TOOL_ERROR if timeout is None else timeout.code)


def aborted(reason: object, *, invoked: bool, additional_contexts: Iterable[Mapping[str, Any]] = ()) -> ToolFailure:
    """``ABORTED`` (the body was invoked) or ``ABORTED_BEFORE_DISPATCH``;
    ``meta["reason"]`` is the abort reason object (B28)."""
    if invoked:
        return failure(
            "tool call aborted",
            name=AbortError.__name__,
            code=TOOL_ABORTED,
            meta={"reason": reason},
            additional_contexts=additional_contexts,
        )
    return failure(
        "tool call aborted before dispatch",
        name=AbortError.__name__,
        code=TOOL_ABORTED_BEFORE_DISPATCH,
        meta={"reason": reason},
        additional_contexts=additional_contexts,
    )


# --------------------------------------------------------------------- views


class _RunLike(Protocol):
    """What a view needs from the registry's private run object."""

    def defer_context(self, context: object) -> None: ...

    def dispatch(
        self, name: str, arguments: object, call_id: str | None, signal: AbortSignal, parent: ExecutionToken
    ) -> ToolExecutionResult: ...


@attrs.frozen(eq=False, kw_only=True)
class _ViewBase:
    token: ExecutionToken
    call_id: str
    root_call_id: str
    name: str
    arguments: Any
    agent: str | None
    parent: ExecutionToken | None
    definition: ToolDefinition | None


@attrs.frozen(eq=False, kw_only=True)
class ToolExecution(_ViewBase):
    """The read-only view of a call given to pre-execute hooks, guards,
    post-execute hooks and result observers (docs/contract.md §2).

    ``signal`` is the caller's signal; every attribute is read-only
    (``attrs.exceptions.FrozenInstanceError``, an ``AttributeError``).
    ``arguments`` is the deep-frozen snapshot (``thaw()`` for plain data);
    ``definition`` is the registered ``ToolDefinition`` or ``None`` for an
    unknown name."""

    signal: AbortSignal


class _SignalSlot:
    __slots__ = ("signal",)

    def __init__(self, signal: AbortSignal) -> None:
        self.signal = signal


@attrs.frozen(eq=False, kw_only=True)
class ToolDispatchExecution(_ViewBase):
    """The view given to around-dispatch wrappers (docs/contract.md §2, §3 step 4).

    Like ``ToolExecution`` except ``signal`` is replaceable: a wrapper may
    assign another ``AbortSignal`` (anything else: ``TypeError``) and must
    restore the previous one before returning; ``del view.signal`` raises
    ``AttributeError``. The registry fuses the caller's signal with
    whatever signal is here when the innermost ``next()`` dispatches, and
    restores the caller's signal once the whole waterfall settled."""

    _slot: _SignalSlot = attrs.field(alias="slot", repr=False)

    @property
    def signal(self) -> AbortSignal:
        return self._slot.signal

    @signal.setter
    def signal(self, value: AbortSignal) -> None:
        if not isinstance(value, AbortSignal):
            raise TypeError(f"signal must be an AbortSignal, not {type(value).__name__}")
        self._slot.signal = value


def _dispatch_setattr(self: ToolDispatchExecution, name: str, value: object) -> None:
    if name == "signal":
        object.__setattr__(self, name, value)  # the property setter
        return
    raise attrs.exceptions.FrozenInstanceError()


def _dispatch_delattr(self: ToolDispatchExecution, name: str) -> None:
    if name == "signal":
        raise AttributeError("the dispatch view's signal cannot be deleted; assign another AbortSignal")
    raise attrs.exceptions.FrozenInstanceError()


ToolDispatchExecution.__setattr__ = _dispatch_setattr  # type: ignore[method-assign,assignment]
ToolDispatchExecution.__delattr__ = _dispatch_delattr  # type: ignore[method-assign,assignment]


@attrs.frozen(eq=False, kw_only=True)
class ToolRunContext(_ViewBase):
    """The view a tool body receives as ``run`` (docs/contract.md §2).

    ``signal`` (read-only) is the dispatch-scoped signal: the caller's
    signal fused with any wrapper's replacement; a cooperative body checks
    or waits on it. ``defer_context(ctx)`` attaches a JSON object to the
    result (first, exactly once); ``dispatch(name, arguments, *,
    call_id=None)`` runs a nested call through the same registry with
    ``parent=run.token`` and ``run.signal`` (inline on this worker, so a
    full pool cannot deadlock). Both may be called from the body's thread
    or threads it joins before returning."""

    signal: AbortSignal
    _run: _RunLike = attrs.field(alias="run", repr=False)

    def defer_context(self, context: Mapping[str, Any]) -> None:
        """Attach ``context`` (a JSON object, deep-frozen now) to this call's
        result. Raises ``TypeError``/``ValueError`` for a non-object or
        non-JSON value, ``RuntimeError`` after the body settled."""
        self._run.defer_context(context)

    def dispatch(self, name: str, arguments: object, *, call_id: str | None = None) -> ToolExecutionResult:
        """Run a nested tool call and return its result (blocks). The child
        inherits ``agent`` and ``root_call_id``, gets ``parent=self.token``,
        ``signal=self.signal`` and ``call_id`` (default
        ``"<call_id>:<n>"``). Never raises for tool/policy faults."""
        return self._run.dispatch(name, arguments, call_id, self.signal, self.token)


# ----------------------------------------------------- trusted constructors
#
# The registry builds a context and usually a success on every call. attrs'
# generated __init__ runs converters and a bound setattr per field (for
# ToolRunContext ~17k machine instructions of a ~90k call, measured with
# callgrind). These build the same frozen instances from values the registry
# produced itself, so there is nothing to convert or check. Not public:
# users build results with the classes.

_new: Final = object.__new__
_set: Final = object.__setattr__


def _run_context(
    token: ExecutionToken,
    call_id: str,
    root_call_id: str,
    name: str,
    arguments: Any,
    agent: str | None,
    parent: ExecutionToken | None,
    definition: ToolDefinition | None,
    signal: AbortSignal,
    run: _RunLike,
) -> ToolRunContext:
    ctx: ToolRunContext = _new(ToolRunContext)
    _set(ctx, "token", token)
    _set(ctx, "call_id", call_id)
    _set(ctx, "root_call_id", root_call_id)
    _set(ctx, "name", name)
    _set(ctx, "arguments", arguments)
    _set(ctx, "agent", agent)
    _set(ctx, "parent", parent)
    _set(ctx, "definition", definition)
    _set(ctx, "signal", signal)
    _set(ctx, "_run", run)
    return ctx


def _success(value: Any, content: tuple[ContentBlock, ...]) -> ToolSuccess:
    """``ToolSuccess(value, content)`` for a frozen ``value`` and frozen
    content blocks; no meta, no contexts."""
    result: ToolSuccess = _new(ToolSuccess)
    _set(result, "value", value)
    _set(result, "content", content)
    _set(result, "meta", None)
    _set(result, "additional_contexts", ())
    return result
