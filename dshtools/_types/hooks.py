"""The value types hooks return and the hooks' signatures (docs/contract.md
§3). ``ToolDefinition`` is defined with the other data types in
``_types.py`` and re-exported here.

Guarantees:

* Hook decisions (``Allow``, ``Deny``, ``Ask``, ``Accept``, ``Block``) and
  ``ApprovalRequest`` are frozen ``attrs`` classes with validators, so a
  malformed decision fails where it is built.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal, TypeAlias

import attrs

from .._signal import AbortSignal
from .calls import ContentBlock, ToolExecutionResult, to_content, to_contexts
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
    "ResultObserver",
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
    return to_contexts(value)


def _opt_content(value: str | Iterable[ContentBlock] | None) -> tuple[ContentBlock, ...] | None:
    return None if value is None else to_content(value)


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

    feedback: tuple[ContentBlock, ...] = attrs.field(converter=to_content)
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
