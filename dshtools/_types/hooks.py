"""The value types hooks return and the hooks' signatures
(docs/contract.md#hooks). ``ToolDefinition`` is defined with the views in
``_types.tools`` and re-exported here.

Guarantees:

* Hook decisions (``Allow``, ``Deny``, ``Ask``, ``Accept``, ``Block``) and
  ``ApprovalRequest`` are frozen ``attrs`` classes with validators, so a
  malformed decision fails where it is built.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal, TypeAlias

import attrs

from .._signal import AbortSignal
from .calls import EMPTY_META, ContentBlock, ToolExecutionResult, to_content, to_contexts
from .tools import ToolBody, ToolDefinition, ToolDispatchExecution, ToolExecution

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
    "ProgressObserver",
    "ProgressUpdate",
    "ResultObserver",
    "ResumeDecision",
    "ToolBody",
    "ToolDefinition",
]

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
ApprovalDecision = Literal["allowed-once", "rejected", "cancelled", "unavailable", "deferred"]
"""An approver's answer. ``"deferred"`` decides later: the call returns at
once ``APPROVAL_PENDING`` with ``meta["ticket"]``, and ``registry.resume``
runs it with a ``ResumeDecision`` (docs/policies.md#deferred-approval)."""
ResumeDecision = Literal["allowed-once", "rejected"]
"""The decision ``registry.resume`` applies to a deferred call."""


@attrs.frozen(eq=False)
class ApprovalRequest:
    """What an approver is asked: the call (``execution``), the ``Ask``
    reason, and the call's ``signal`` (an approver that waits on a human
    should also wait on it and answer ``"cancelled"`` when it aborts, or
    answer ``"deferred"`` and not wait at all,
    docs/policies.md#deferred-approval)."""

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
    return to_contexts(value)


def _opt_content(value: str | Iterable[ContentBlock] | None) -> tuple[ContentBlock, ...] | None:
    return None if value is None else to_content(value)


def _meta_converter(value: Mapping[str, object] | None) -> Mapping[str, object]:
    if value is None:
        return EMPTY_META
    if not isinstance(value, Mapping):
        raise TypeError(f"meta must be a mapping or None, not {type(value).__name__}")
    for key in value:
        if not isinstance(key, str):
            raise TypeError(f"meta keys are str, not {type(key).__name__}")
    return types.MappingProxyType(dict(value)) if value else EMPTY_META


@attrs.frozen
class Accept:
    """Post-execute decision: keep the result, optionally replacing its
    ``content`` **or** its ``value`` (validated against ``output_schema``;
    both → ``ValueError``), and appending ``additional_contexts``. On a
    failure ``content`` and ``value`` do not apply; ``failure_content``
    replaces a failure's content instead (its ``error`` keeps the whole
    message; ignored on a success). ``meta`` (a mapping with ``str`` keys)
    is merged over the result's ``meta``, on a success or a failure
    (docs/policies.md#post-execute-hooks-and-observers)."""

    content: tuple[ContentBlock, ...] | None = attrs.field(default=None, kw_only=True, converter=_opt_content)
    value: Any = attrs.field(default=UNSET, kw_only=True)
    additional_contexts: tuple[Mapping[str, Any], ...] = attrs.field(
        default=(), kw_only=True, converter=_contexts_converter
    )
    failure_content: tuple[ContentBlock, ...] | None = attrs.field(default=None, kw_only=True, converter=_opt_content)
    meta: Mapping[str, object] = attrs.field(default=None, kw_only=True, converter=_meta_converter)

    def __attrs_post_init__(self) -> None:
        if self.content is not None and self.value is not UNSET:
            raise ValueError("Accept replaces content or value, never both")

    @property
    def has_value(self) -> bool:
        return self.value is not UNSET


@attrs.frozen
class Block:
    """Post-execute decision: replace the result by a failure whose content
    is ``feedback`` verbatim (a ``str`` is one text block) and whose
    ``meta`` is ``meta`` (a mapping with ``str`` keys). Discards the tool's
    deferred contexts; keeps ``additional_contexts``."""

    feedback: tuple[ContentBlock, ...] = attrs.field(converter=to_content)
    additional_contexts: tuple[Mapping[str, Any], ...] = attrs.field(
        default=(), kw_only=True, converter=_contexts_converter
    )
    meta: Mapping[str, object] = attrs.field(default=None, kw_only=True, converter=_meta_converter)


PostExecuteDecision: TypeAlias = Accept | Block


# --------------------------------------------------------------- progress


@attrs.frozen
class ProgressUpdate:
    """What a body reported with ``run.report_progress``: ``progress`` (a
    number, in whatever unit ``total`` is in), ``total`` (a number or
    ``None``: unknown) and ``message`` (a ``str`` or ``None``)."""

    progress: float
    total: float | None = None
    message: str | None = None


PreExecuteHook = Callable[[ToolExecution, Callable[[], PreExecuteDecision]], PreExecuteDecision]
Guard = Callable[[ToolExecution], str | None]
Approver = Callable[[ApprovalRequest], ApprovalDecision]
AroundDispatch = Callable[[ToolDispatchExecution, Callable[[], ToolExecutionResult]], ToolExecutionResult]
PostExecuteHook = Callable[[ToolExecution, ToolExecutionResult, Callable[[], PostExecuteDecision]], PostExecuteDecision]
ResultObserver = Callable[[ToolExecution, ToolExecutionResult], None]
ProgressObserver = Callable[[ToolExecution, ProgressUpdate], None]
