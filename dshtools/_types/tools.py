"""What a tool is and what it sees: ``ToolDefinition`` (its name,
description, schemas, body and options; docs/contract.md#registry and
[typed tools](docs/contract.md#typed-tools)) and the read-only views the
registry hands to hooks, wrappers and the body (docs/contract.md#calls). The
two are one module because each names the other: a view carries its call's
definition, and a definition's body and finalizer receive views.

Guarantees:

* Views are frozen ``attrs`` classes handed out by the registry; only the
  around-dispatch view's ``signal`` can be replaced (with another
  ``AbortSignal``; ``TypeError`` otherwise; deleting it raises
  ``AttributeError``).
* ``ToolDefinition`` is frozen and checked at construction: a bad name,
  schema, callable or ``timeout`` raises ``TypeError``/``ValueError`` there,
  never later inside ``execute``. Its schemas are deep-frozen and compiled
  once (``jsonschema-rs``); ``argument_problems``/``output_problems``
  validate against them with the bounded validator of ``_core.schema``
  (docs/contract.md#a6).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Final, Protocol, runtime_checkable

import attrs

from .._core.freeze import FreezeError, freeze, thaw
from .._core.schema import CompiledSchema
from .._signal import AbortSignal
from .calls import ANY_OBJECT, ContentBlock, ExecutionToken, ToolExecutionInput, ToolExecutionResult

__all__ = [
    "BackendLike",
    "ProgressRun",
    "RunLike",
    "SignalSlot",
    "ToolBody",
    "ToolDefinition",
    "ToolDispatchExecution",
    "ToolExecution",
    "ToolRunContext",
    "argument_problems",
    "body_invoked_so_far",
    "frozen_deferred_context",
    "output_problems",
]


# --------------------------------------------------------------------- views


def frozen_deferred_context(context: object, settled: bool) -> Any:
    """``context`` deep-frozen for ``run.defer_context`` (each context is a
    JSON object; docs/contract.md#outputs): ``RuntimeError`` once the body
    ``settled``, ``TypeError`` for a non-object, ``TypeError``/``ValueError``
    for a non-JSON value.
    Package-internal (every kind of run)."""
    if settled:
        raise RuntimeError("defer_context() after the tool body settled")
    if not isinstance(context, dict):
        raise TypeError(f"a deferred context must be a JSON object (dict), not {type(context).__name__}")
    return freeze(context)


class RunLike(Protocol):
    """What a view needs from the registry's private run object. A
    registry's run is also a ``ProgressRun``, whose fields
    ``report_progress``'s inline path reads; any other run answers
    ``report_progress`` itself."""

    def defer_context(self, context: object) -> None: ...

    def report_progress(self, progress: object, total: object, message: object) -> None: ...

    def dispatch(
        self, name: str, arguments: object, call_id: str | None, signal: AbortSignal, parent: ExecutionToken
    ) -> ToolExecutionResult: ...


class ProgressRun(RunLike, Protocol):
    """A registry's run as ``report_progress``'s inline path and the
    progress delivery read it (docs/policies.md#progress): the call, its
    call observer's ``watch`` (``None`` without one), the progress
    observers snapshotted at its start (``hooks.progress``), its latest
    update, whether it is queued for delivery, the update last delivered,
    and the view the observers receive."""

    call: ToolExecutionInput
    watch: Any
    hooks: Any
    progress_latest: Any
    progress_queued: bool
    progress_sent: Any

    @property
    def view(self) -> ToolExecution: ...

    def queue_progress(self) -> None: ...


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
    post-execute hooks and result observers (docs/contract.md#calls).

    ``signal`` is the caller's signal; every attribute is read-only
    (``attrs.exceptions.FrozenInstanceError``, an ``AttributeError``).
    ``arguments`` is the deep-frozen snapshot (``thaw()`` for plain data);
    ``definition`` is the registered ``ToolDefinition`` or ``None`` for an
    unknown name."""

    signal: AbortSignal


class SignalSlot:
    """The replaceable signal of one call's around-dispatch views, and the
    registry's record of that call (``record.body_invoked``: whether the
    registry has invoked the body in any attempt so far), or ``None``."""

    __slots__ = ("record", "signal")

    def __init__(self, signal: AbortSignal, record: _InvokedRecord | None = None) -> None:
        self.signal = signal
        self.record = record


class _InvokedRecord(Protocol):
    body_invoked: bool


def body_invoked_so_far(view: ToolDispatchExecution) -> bool | None:
    """Whether the registry has invoked the body of the call ``view``
    belongs to, in any attempt so far: the record every result's
    ``body_invoked`` is corrected to (docs/contract.md#a16); ``None`` for a
    view no registry made. Package-internal (``TimeoutPolicy``'s text)."""
    record = view._slot.record
    return None if record is None else record.body_invoked


_set: Final = object.__setattr__


@attrs.define(eq=False, kw_only=True, init=False)
class ToolDispatchExecution(_ViewBase):
    """The view given to around-dispatch wrappers (docs/contract.md#calls,
    docs/contract.md#step-dispatch).

    Like ``ToolExecution`` except ``signal`` is replaceable: a wrapper may
    assign another ``AbortSignal`` (anything else: ``TypeError``) and must
    restore the previous one before returning; ``del view.signal`` raises
    ``AttributeError``; every other attribute is read-only
    (``attrs.exceptions.FrozenInstanceError``). The registry fuses the
    caller's signal with whatever signal is here when the innermost
    ``next()`` dispatches, and restores the caller's signal once the whole
    waterfall settled."""

    _slot: SignalSlot = attrs.field(alias="slot", repr=False)

    def __init__(
        self,
        *,
        token: ExecutionToken,
        call_id: str,
        root_call_id: str,
        name: str,
        arguments: Any,
        agent: str | None,
        parent: ExecutionToken | None,
        definition: ToolDefinition | None,
        slot: SignalSlot,
    ) -> None:
        _set(self, "token", token)
        _set(self, "call_id", call_id)
        _set(self, "root_call_id", root_call_id)
        _set(self, "name", name)
        _set(self, "arguments", arguments)
        _set(self, "agent", agent)
        _set(self, "parent", parent)
        _set(self, "definition", definition)
        _set(self, "_slot", slot)

    @property
    def signal(self) -> AbortSignal:
        return self._slot.signal

    @signal.setter
    def signal(self, value: AbortSignal) -> None:
        # Reached only through ``object.__setattr__``: an assignment goes to
        # ``__setattr__``, which holds the check.
        ToolDispatchExecution.__setattr__(self, "signal", value)

    def __setattr__(self, name: str, value: object) -> None:
        # ``signal`` is the one assignable field: a wrapper replaces the
        # dispatch signal for the rest of the waterfall (and puts it back).
        if name != "signal":
            raise attrs.exceptions.FrozenInstanceError()
        if not isinstance(value, AbortSignal):
            raise TypeError(f"signal must be an AbortSignal, not {type(value).__name__}")
        self._slot.signal = value

    def __delattr__(self, name: str) -> None:
        if name == "signal":
            raise AttributeError("the dispatch view's signal cannot be deleted; assign another AbortSignal")
        raise attrs.exceptions.FrozenInstanceError()


@attrs.frozen(eq=False, kw_only=True)
class ToolRunContext(_ViewBase):
    """The view a tool body receives as ``run`` (docs/contract.md#calls).

    ``signal`` (read-only) is the dispatch-scoped signal: the caller's
    signal fused with any wrapper's replacement; a cooperative body checks
    or waits on it. ``defer_context(ctx)`` attaches a JSON object to the
    result (first, exactly once); ``dispatch(name, arguments, *,
    call_id=None)`` runs a nested call through the same registry with
    ``parent=run.token`` and ``run.signal`` (inline on this worker, so a
    full pool cannot deadlock). Both may be called from the body's thread
    or threads it joins before returning."""

    # A typed tool's parameter annotated with this class receives ``run``
    # (``_types.functions.RUN_CONTEXT_MARK``).
    __dshtools_run_context__: ClassVar[bool] = True

    signal: AbortSignal
    _run: RunLike = attrs.field(alias="run", repr=False)

    def defer_context(self, context: Mapping[str, Any]) -> None:
        """Attach ``context`` (a JSON object, deep-frozen now) to this call's
        result. Raises ``TypeError``/``ValueError`` for a non-object or
        non-JSON value, ``RuntimeError`` after the body settled."""
        self._run.defer_context(context)

    def report_progress(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        """Tell the registry's progress observers how far the body got
        (``progress`` of ``total``, both numbers; ``total`` ``None`` when
        unknown; an optional ``message``). Never blocks and never raises:
        the observers run on the ``dshtools-progress`` thread, a slow one
        sees only the latest update of a call, and an update that is not a
        number is dropped. From a process or Ray worker the updates cross
        to the caller's registry, coalesced, the last one always
        (docs/policies.md#progress)."""
        run: Any = self._run
        try:
            # The common case inline, one frame from the body to the store:
            # a registry's run (``ProgressRun``) that no call observer
            # watches (``watch`` is None; a worker's run has ``watch =
            # False``; a run without one raises, caught below, and ``try``
            # costs nothing until it raises), with exact int/float/str
            # values (``x == x`` is False only for NaN). It does what the
            # run's own ``report_progress`` does for them.
            if run.watch is None:
                if not run.hooks.progress:
                    return
                if (
                    (progress.__class__ is int or (progress.__class__ is float and progress == progress))  # noqa: PLR0124
                    and (total is None or total.__class__ is int or (total.__class__ is float and total == total))  # noqa: PLR0124
                    and (message is None or message.__class__ is str)
                ):
                    run.progress_latest = (progress, total, message)
                    if not run.progress_queued:
                        run.queue_progress()  # a delivery is due once per update taken
                    return
        except Exception:
            pass  # another kind of run, or a value whose ``__class__`` raised
        run.report_progress(progress, total, message)  # the full check

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


def _check_max_output_chars(_inst: object, _attr: attrs.Attribute[Any], value: object) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"max_output_chars must be an int or None, not {type(value).__name__}")
    if value <= 0:
        raise ValueError(f"max_output_chars must be positive, got {value!r}")


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
    finalize_content=None, backend=None, strict=False, prepare_arguments=None,
    idempotent=False, max_output_chars=None)`` (docs/contract.md#registry,
    docs/contract.md#backends).

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
    * ``idempotent``: running the body twice with the same arguments does
      no harm, so ``RetryPolicy`` may retry an attempt whose body ran
      (docs/policies.md).
    * ``max_output_chars``: a positive ``int``; ``ResultLimit`` cuts what the
      model sees of this tool's results to it (docs/policies.md).

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
    idempotent: bool = attrs.field(default=False, kw_only=True, validator=attrs.validators.instance_of(bool))
    max_output_chars: int | None = attrs.field(default=None, kw_only=True, validator=_check_max_output_chars)
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
        idempotent: bool = False,
        max_output_chars: int | None = None,
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
        ``backend``, ``render``, ``finalize_content``, ``idempotent`` and
        ``max_output_chars`` are as in the constructor. Raises ``TypeError`` for ``*args``, ``**kwargs``,
        positional-only parameters, ``async def``, generators and types
        pydantic cannot express, saying what to write instead. Imports
        pydantic and docstring-parser on first use."""
        from .functions import typed_fields

        fields = typed_fields(
            fn,
            name=name,
            description=description,
            concurrency_safe=concurrency_safe,
            strict=strict,
            output_schema=output_schema,
        )
        return cls(
            **fields,
            timeout=timeout,
            backend=backend,
            render=render,
            finalize_content=finalize_content,
            idempotent=idempotent,
            max_output_chars=max_output_chars,
        )

    def schema(self) -> dict[str, Any]:
        """``{"name", "description", "parameters"}`` as plain, mutable data."""
        return {"name": self.name, "description": self.description, "parameters": thaw(self.parameters)}


def argument_problems(definition: ToolDefinition, arguments: Any, height: int) -> Sequence[str]:
    """What is wrong with the frozen ``arguments`` (nesting depth ``height``)
    against ``definition.parameters``: empty when they are valid
    (docs/contract.md#step-validate, docs/contract.md#a6). Package-internal."""
    return definition._parameters_validator.problems(arguments, height)


def output_problems(definition: ToolDefinition, value: Any, height: int) -> Sequence[str]:
    """What is wrong with a body's frozen return ``value`` against
    ``definition.output_schema`` (empty without one). Package-internal."""
    validator = definition._output_validator
    return () if validator is None else validator.problems(value, height)
