"""Tool definitions and the value types hooks return (docs/contract.md §3).

Guarantees:

* ``ToolDefinition`` is frozen and checked at construction: a bad name,
  schema, callable or ``timeout`` raises ``TypeError``/``ValueError`` there,
  never later inside ``execute``. Its schemas are deep-frozen and compiled
  once (``jsonschema-rs``).
* Hook decisions (``Allow``, ``Deny``, ``Ask``, ``Accept``, ``Block``) and
  ``ApprovalRequest`` are frozen ``attrs`` classes with validators, so a
  malformed decision fails where it is built.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal, TypeAlias

import attrs

from ._backend import Backend
from ._freeze import FreezeError, freeze, thaw
from ._schema import CompiledSchema
from ._signal import AbortSignal
from ._types import (
    ContentBlock,
    ToolDispatchExecution,
    ToolExecution,
    ToolExecutionResult,
    ToolRunContext,
    _to_content,
    _to_contexts,
)

__all__ = [
    "Accept",
    "Allow",
    "ApprovalDecision",
    "ApprovalRequest",
    "Approver",
    "AroundDispatch",
    "Ask",
    "Block",
    "Deny",
    "Guard",
    "PostExecuteDecision",
    "PostExecuteHook",
    "PreExecuteDecision",
    "PreExecuteHook",
    "ResultObserver",
    "ToolBody",
    "ToolDefinition",
]

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


def _check_backend(_inst: object, _attr: attrs.Attribute[Any], value: object) -> None:
    if value is not None and not isinstance(value, Backend):
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
    backend: Backend | None = attrs.field(default=None, kw_only=True, validator=_check_backend)
    _parameters_validator: CompiledSchema = attrs.field(init=False, repr=False)
    _output_validator: CompiledSchema | None = attrs.field(init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(
            self, "_parameters_validator", CompiledSchema(self.parameters, f"parameters of {self.name!r}")
        )
        out = (
            None
            if self.output_schema is None
            else CompiledSchema(self.output_schema, f"output_schema of {self.name!r}")
        )
        object.__setattr__(self, "_output_validator", out)

    def schema(self) -> dict[str, Any]:
        """``{"name", "description", "parameters"}`` as plain, mutable data."""
        return {"name": self.name, "description": self.description, "parameters": thaw(self.parameters)}


# ------------------------------------------------------------ pre-execute


@attrs.frozen
class Allow:
    """Pre-execute decision: go on."""


@attrs.frozen
class Deny:
    """Pre-execute decision: refuse with ``reason`` (→ ``DENIED``)."""

    reason: str = attrs.field(validator=attrs.validators.instance_of(str))


@attrs.frozen
class Ask:
    """Pre-execute decision: ask the approver; ``reason`` is shown to it."""

    reason: str | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.instance_of(str))
    )


PreExecuteDecision: TypeAlias = Allow | Deny | Ask
ApprovalDecision = Literal["allowed-once", "rejected", "cancelled", "unavailable"]


@attrs.frozen(eq=False)
class ApprovalRequest:
    """What an approver is asked: the call (``execution``), the ``Ask``
    reason, and the call's ``signal`` (an approver that waits on a human
    should also wait on it and answer ``"cancelled"`` when it aborts)."""

    execution: ToolExecution
    reason: str | None
    signal: AbortSignal

    @property
    def name(self) -> str:
        return self.execution.name

    @property
    def arguments(self) -> Any:
        return self.execution.arguments

    @property
    def call_id(self) -> str:
        return self.execution.call_id


# ----------------------------------------------------------- post-execute


class _Unset:
    __slots__ = ()

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()


def _contexts_converter(value: Iterable[Mapping[str, Any]]) -> tuple[Mapping[str, Any], ...]:
    return _to_contexts(value)


def _opt_content(value: str | Iterable[ContentBlock] | None) -> tuple[ContentBlock, ...] | None:
    return None if value is None else _to_content(value)


@attrs.frozen
class Accept:
    """Post-execute decision: keep the result, optionally replacing its
    ``content`` **or** its ``value`` (validated against ``output_schema``;
    both → ``ValueError``), and appending ``additional_contexts``. On a
    failure only the contexts apply."""

    content: tuple[ContentBlock, ...] | None = attrs.field(default=None, kw_only=True, converter=_opt_content)
    value: Any = attrs.field(default=UNSET, kw_only=True)
    additional_contexts: tuple[Mapping[str, Any], ...] = attrs.field(
        default=(), kw_only=True, converter=_contexts_converter
    )

    def __attrs_post_init__(self) -> None:
        if self.content is not None and self.value is not UNSET:
            raise ValueError("Accept replaces content or value, never both")

    @property
    def has_value(self) -> bool:
        return self.value is not UNSET


@attrs.frozen
class Block:
    """Post-execute decision: replace the result by a failure whose content
    is ``feedback`` verbatim (a ``str`` is one text block). Discards the
    tool's deferred contexts; keeps ``additional_contexts``."""

    feedback: tuple[ContentBlock, ...] = attrs.field(converter=_to_content)
    additional_contexts: tuple[Mapping[str, Any], ...] = attrs.field(
        default=(), kw_only=True, converter=_contexts_converter
    )


PostExecuteDecision: TypeAlias = Accept | Block

PreExecuteHook = Callable[[ToolExecution, Callable[[], PreExecuteDecision]], PreExecuteDecision]
Guard = Callable[[ToolExecution], str | None]
Approver = Callable[[ApprovalRequest], ApprovalDecision]
AroundDispatch = Callable[[ToolDispatchExecution, Callable[[], ToolExecutionResult]], ToolExecutionResult]
PostExecuteHook = Callable[[ToolExecution, ToolExecutionResult, Callable[[], PostExecuteDecision]], PostExecuteDecision]
ResultObserver = Callable[[ToolExecution, ToolExecutionResult], None]
