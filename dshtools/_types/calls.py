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
* ``ToolDefinition`` is frozen and checked at construction: a bad name,
  schema, callable or ``timeout`` raises ``TypeError``/``ValueError`` there,
  never later inside ``execute``. Its schemas are deep-frozen and compiled
  once (``jsonschema-rs``).
"""

from __future__ import annotations

import itertools
import math
import types
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final, Literal, Protocol, TypeAlias, runtime_checkable

import attrs

from .._core.errors import AbortError, safe_str, safe_type_name
from .._core.freeze import FreezeError, FrozenDict, freeze, thaw
from .._core.schema import CompiledSchema
from .._signal import AbortSignal
from .._signal.deadline import timeout_of

__all__ = [
    "ANY_OBJECT",
    "DENIED",
    "INVALID_ARGS",
    "INVALID_CALL",
    "INVALID_TOOL_OUTPUT",
    "TOOL_ABORTED",
    "TOOL_ABORTED_BEFORE_DISPATCH",
    "TOOL_ERROR",
    "TOOL_TIMEOUT",
    "UNKNOWN_TOOL",
    "WORKER_LOST",
    "BackendLike",
    "ContentBlock",
    "ErrorDetail",
    "ErrorInfo",
    "ExecutionToken",
    "InvalidCall",
    "ToolBody",
    "ToolDefinition",
    "ToolDispatchExecution",
    "ToolError",
    "ToolExecution",
    "ToolExecutionInput",
    "ToolExecutionResult",
    "ToolFailure",
    "ToolRunContext",
    "ToolSuccess",
    "aborted",
    "argument_problems",
    "exception_failure",
    "failure",
    "output_problems",
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
INVALID_CALL: Final = "INVALID_CALL"
"""The code of a model tool call that cannot be run as written: an empty or
repeated call id, an unsupported call type, no tool name (docs/contract.md
§8 A11). Same precedence as ``INVALID_ARGS`` (docs/contract.md §7)."""


ANY_OBJECT: Final = freeze({"type": "object"})
"""The ``parameters`` of every ``ToolDefinition`` whose schema is exactly
``{"type": "object"}`` (any JSON object): one shared frozen instance."""

ContentBlock = Mapping[str, Any]
"""A content block: a JSON object with a ``"type"``, e.g. ``{"type": "text", "text": "..."}``."""


@attrs.frozen
class InvalidCall:
    """The ``arguments`` of a model tool call that cannot run as written
    (an empty or repeated call id, an unsupported call type, no tool name).
    The registry answers such a call with an ``INVALID_CALL`` failure whose
    text is ``Error: invalid call: <problem>``, before any hook runs
    (docs/contract.md §8 A11). ``arguments`` keeps what the model sent, for
    display."""

    problem: str
    arguments: object = None

    def __str__(self) -> str:
        return f"invalid call: {self.problem}"


# ------------------------------------------------------------------ token

_token_ids = itertools.count(1)


class ExecutionToken:
    """An opaque identity for one execution: compares equal only to itself,
    hashable. Nested calls carry their parent's token as ``parent``."""

    __slots__ = ("__weakref__", "_n")
    _n: int

    # No __init__: a token is made on every call, and its number is only
    # needed for repr, so it is drawn on the first repr (still unique).

    def __repr__(self) -> str:
        try:
            n = self._n
        except AttributeError:
            n = self._n = next(_token_ids)
        return f"<ExecutionToken #{n}>"


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


def to_content(value: str | Iterable[ContentBlock]) -> tuple[ContentBlock, ...]:
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


def to_contexts(value: Iterable[Mapping[str, Any]]) -> tuple[Mapping[str, Any], ...]:
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
    content: tuple[ContentBlock, ...] = attrs.field(converter=to_content)
    meta: Mapping[str, object] | None = attrs.field(default=None, converter=_to_meta)
    additional_contexts: tuple[Mapping[str, Any], ...] = attrs.field(default=(), converter=to_contexts)

    @property
    def is_error(self) -> Literal[False]:
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
    content: tuple[ContentBlock, ...] = attrs.field(converter=to_content)
    meta: Mapping[str, object] | None = attrs.field(default=None, converter=_to_meta)
    additional_contexts: tuple[Mapping[str, Any], ...] = attrs.field(default=(), converter=to_contexts)

    @property
    def is_error(self) -> Literal[True]:
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


def frozen_deferred_context(context: object, settled: bool) -> Any:
    """``context`` deep-frozen for ``run.defer_context`` (docs/contract.md
    §2): ``RuntimeError`` once the body ``settled``, ``TypeError`` for a
    non-object, ``TypeError``/``ValueError`` for a non-JSON value.
    Package-internal (every kind of run)."""
    if settled:
        raise RuntimeError("defer_context() after the tool body settled")
    if not isinstance(context, dict):
        raise TypeError(f"a deferred context must be a JSON object (dict), not {type(context).__name__}")
    return freeze(context)


class RunLike(Protocol):
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


class SignalSlot:
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

    _slot: SignalSlot = attrs.field(alias="slot", repr=False)

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
        _set_dispatch_signal(self, value)  # the property's setter, called directly
        return
    raise attrs.exceptions.FrozenInstanceError()


def _dispatch_delattr(self: ToolDispatchExecution, name: str) -> None:
    if name == "signal":
        raise AttributeError("the dispatch view's signal cannot be deleted; assign another AbortSignal")
    raise attrs.exceptions.FrozenInstanceError()


_set_dispatch_signal: Final[Callable[[ToolDispatchExecution, object], None]] = vars(ToolDispatchExecution)[
    "signal"
].fset
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
    _run: RunLike = attrs.field(alias="run", repr=False)

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


# --------------------------------------------------------------- definition

ToolBody = Callable[[Any, ToolRunContext], object]
"""``execute(args, run) -> JSON value``: ``args`` is the frozen arguments."""


def _check_callable(what: str, optional: bool) -> Callable[[object, attrs.Attribute[Any], object], None]:
    def check(_inst: object, _attr: attrs.Attribute[Any], value: object) -> None:
        if value is None and optional:
            return
        if not callable(value):
            raise TypeError(f"{what} must be callable{' or None' if optional else ''}, not {type(value).__name__}")

    return check


def _check_name(_inst: object, _attr: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str):
        raise TypeError(f"name must be a str, not {type(value).__name__}")
    if not value or value != value.strip() or any(c.isspace() for c in value):
        raise ValueError(f"name must be a non-empty string without whitespace, got {value!r}")


def _check_description(_inst: object, _attr: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str):
        raise TypeError(f"description must be a str, not {type(value).__name__}")


def _check_timeout(_inst: object, _attr: attrs.Attribute[Any], value: object) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"timeout must be a number of seconds or None, not {type(value).__name__}")
    if math.isnan(value) or math.isinf(value) or value <= 0:
        raise ValueError(f"timeout must be positive and finite (seconds), got {value!r}")


@runtime_checkable
class BackendLike(Protocol):
    """The shape of a backend as a ``ToolDefinition`` holds it; the full,
    documented protocol is ``dshtools.Backend`` (docs/backends.md). Kept
    loose here so the data types do not depend on the backend module."""

    def validate(self, name: str, body: Any) -> None: ...

    def submit(self, body: Any, args: object, run: Any) -> Any: ...

    def close(self) -> None: ...


def _check_backend(_inst: object, _attr: attrs.Attribute[Any], value: object) -> None:
    if value is not None and not isinstance(value, BackendLike):
        raise TypeError(f"backend must implement the Backend protocol or be None, not {type(value).__name__}")


def _freeze_schema(value: object, what: str) -> Any:
    if not isinstance(value, Mapping):
        raise TypeError(f"{what} must be a JSON Schema object (dict), not {type(value).__name__}")
    try:
        return freeze(dict(value))
    except FreezeError as exc:
        raise ValueError(f"{what} is not JSON: {exc}") from None


def _schema_converter(value: object) -> Any:
    return _freeze_schema(value, "parameters")


def _opt_schema_converter(value: object) -> Any:
    return None if value is None else _freeze_schema(value, "output_schema")


@attrs.frozen(eq=False)
class ToolDefinition:
    """One tool: ``ToolDefinition(name, description, parameters, execute, *,
    output_schema=None, render=None, timeout=None, is_concurrency_safe=None,
    finalize_content=None, backend=None)`` (docs/contract.md §3, §9).

    * ``parameters`` / ``output_schema``: JSON Schema (2020-12) objects,
      deep-frozen and compiled here; invalid → ``ValueError``.
    * ``execute(args, run) -> JSON value`` runs on a registry worker thread;
      ``args`` is the frozen arguments, ``run`` a ``ToolRunContext``.
    * ``render(value) -> str | sequence of content blocks``: the content of
      a success (default: the string itself, or compact JSON).
    * ``timeout``: seconds, positive and finite (``ValueError``), read by
      ``TimeoutPolicy``.
    * ``is_concurrency_safe(args) -> bool``: only exactly ``True`` lets a
      batch overlap the call.
    * ``finalize_content(exec, result) -> str | sequence of blocks``:
      replaces the content of a *success* last (step 7); failures keep the
      canonical ``Error: ...`` text.
    * ``backend``: where this tool's body runs (docs/backends.md); ``None``
      uses the registry's. ``register()`` asks it to ``validate`` the body.
    * ``strict``: ``parameters`` follows OpenAI's strict-mode rules (every
      property required, ``additionalProperties: false``);
      ``dshtools.openai.tools_param`` then marks the tool ``"strict": true``.
    * ``prepare_arguments(args) -> body args``: called in the calling thread
      after ``args`` passed ``parameters`` and before any hook (step 1); its
      return is what ``execute`` receives as ``args`` (hooks and ``run``
      keep the frozen JSON arguments). A ``ValueError`` makes the call
      ``INVALID_ARGS`` with its message, the body not invoked. Typed tools
      (``from_function``) use it to build their typed values.

    ``ToolDefinition.from_function(fn, ...)`` builds one from a typed
    function (docs/contract.md#typed-tools).
    """

    name: str = attrs.field(validator=_check_name)
    description: str = attrs.field(validator=_check_description)
    parameters: Mapping[str, Any] = attrs.field(converter=_schema_converter)
    execute: ToolBody = attrs.field(validator=_check_callable("execute", False))
    output_schema: Mapping[str, Any] | None = attrs.field(default=None, kw_only=True, converter=_opt_schema_converter)
    render: Callable[[Any], str | Sequence[ContentBlock]] | None = attrs.field(
        default=None, kw_only=True, validator=_check_callable("render", True)
    )
    timeout: float | None = attrs.field(default=None, kw_only=True, validator=_check_timeout)
    is_concurrency_safe: Callable[[Any], bool] | None = attrs.field(
        default=None, kw_only=True, validator=_check_callable("is_concurrency_safe", True)
    )
    finalize_content: Callable[[ToolExecution, ToolExecutionResult], str | Sequence[ContentBlock]] | None = attrs.field(
        default=None, kw_only=True, validator=_check_callable("finalize_content", True)
    )
    backend: BackendLike | None = attrs.field(default=None, kw_only=True, validator=_check_backend)
    strict: bool = attrs.field(default=False, kw_only=True, validator=attrs.validators.instance_of(bool))
    prepare_arguments: Callable[[Any], object] | None = attrs.field(
        default=None, kw_only=True, validator=_check_callable("prepare_arguments", True)
    )
    _parameters_validator: CompiledSchema = attrs.field(init=False, repr=False)
    _output_validator: CompiledSchema | None = attrs.field(init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        if dict(self.parameters) == {"type": "object"}:
            # One shared instance, so the registry recognises "any object"
            # by identity (``parameters is ANY_OBJECT``) and skips the
            # validator for a frozen JSON object.
            object.__setattr__(self, "parameters", ANY_OBJECT)
        object.__setattr__(
            self, "_parameters_validator", CompiledSchema(self.parameters, f"parameters of {self.name!r}")
        )
        out = (
            None
            if self.output_schema is None
            else CompiledSchema(self.output_schema, f"output_schema of {self.name!r}")
        )
        object.__setattr__(self, "_output_validator", out)

    @classmethod
    def from_function(
        cls,
        fn: Callable[..., object],
        *,
        name: str | None = None,
        description: str | None = None,
        timeout: float | None = None,
        concurrency_safe: bool = False,
        backend: BackendLike | None = None,
        strict: bool = False,
        output_schema: bool = False,
        render: Callable[[Any], str | Sequence[ContentBlock]] | None = None,
        finalize_content: Callable[[ToolExecution, ToolExecutionResult], str | Sequence[ContentBlock]] | None = None,
    ) -> ToolDefinition:
        """A tool from a typed function (docs/contract.md#typed-tools).

        ``name`` defaults to ``fn.__name__``, ``description`` to the
        docstring's summary line; ``parameters`` is pydantic's JSON Schema
        of the signature, with each parameter's description from the
        docstring (Google, NumPy or reST). A parameter annotated
        ``ToolRunContext`` receives ``run`` and is not in the schema. The
        body is called with keyword arguments built by pydantic from the
        validated arguments (a coercion error is ``INVALID_ARGS``, the body
        not invoked); a ``str`` it returns is the text content, anything
        else goes through pydantic's JSON mode. ``concurrency_safe=True``
        lets a batch overlap every call of the tool; ``strict=True`` makes
        ``parameters`` OpenAI-strict (a parameter with a default accepts
        ``null`` for "use the default"); ``output_schema=True`` makes the
        return annotation the output schema. ``timeout`` (seconds),
        ``backend``, ``render`` and ``finalize_content`` are as in the
        constructor. Raises ``TypeError`` for ``*args``, ``**kwargs``,
        positional-only parameters, ``async def``, generators and types
        pydantic cannot express, saying what to write instead. Imports
        pydantic and docstring-parser on first use."""
        from .functions import definition_from_function

        return definition_from_function(
            fn,
            name=name,
            description=description,
            timeout=timeout,
            concurrency_safe=concurrency_safe,
            backend=backend,
            strict=strict,
            output_schema=output_schema,
            render=render,
            finalize_content=finalize_content,
        )

    def schema(self) -> dict[str, Any]:
        """``{"name", "description", "parameters"}`` as plain, mutable data."""
        return {"name": self.name, "description": self.description, "parameters": thaw(self.parameters)}


def argument_problems(definition: ToolDefinition, arguments: Any, height: int) -> Sequence[str]:
    """What is wrong with the frozen ``arguments`` (nesting depth ``height``)
    against ``definition.parameters``: empty when they are valid
    (docs/contract.md §3 step 1, §8 A6). Package-internal."""
    return definition._parameters_validator.problems(arguments, height)


def output_problems(definition: ToolDefinition, value: Any, height: int) -> Sequence[str]:
    """What is wrong with a body's frozen return ``value`` against
    ``definition.output_schema`` (empty without one). Package-internal."""
    validator = definition._output_validator
    return () if validator is None else validator.problems(value, height)
