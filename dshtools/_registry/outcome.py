"""Checking and building results (docs/contract.md#calls, docs/contract.md#step-classify
to docs/contract.md#step-finish).

Every result that leaves the pipeline passes through here: a success's
``value`` is deep-frozen and validated against ``output_schema``, content
blocks and additional contexts are frozen and checked, post-execute
decisions are applied. A problem never raises: it becomes an
``INVALID_TOOL_OUTPUT`` failure naming what is wrong. Pure functions, no
threads, no locks.
"""

from __future__ import annotations

from typing import Any, Final

import attrs

from .._core.freeze import FreezeError, FrozenDict, dumps, freeze_with_height
from .._types.calls import (
    DENIED,
    INVALID_TOOL_OUTPUT,
    UNKNOWN_TOOL,
    ContentBlock,
    ErrorDetail,
    ErrorInfo,
    ToolExecutionResult,
    ToolFailure,
    ToolSuccess,
    exception_failure,
    failure,
    text_content,
)
from .._types.hooks import Accept, Block, ToolDefinition
from .._types.tools import ToolExecution, output_problems
from .trusted import trusted_success

__all__ = [
    "NULL_SUCCESS",
    "apply_post_decision",
    "check_result",
    "check_success",
    "content_blocks",
    "contexts_of",
    "denied",
    "finalize",
    "invalid_output",
    "unknown_tool",
]


def denied(message: str) -> ToolFailure:
    """A ``DENIED`` failure (info name ``ToolDeniedError``)."""
    return failure(message, name="ToolDeniedError", code=DENIED)


def unknown_tool(name: str) -> ToolFailure:
    """``Error: unknown tool "<name>"`` (code ``UNKNOWN_TOOL``)."""
    return failure(f'unknown tool "{name}"', name="UnknownToolError", code=UNKNOWN_TOOL)


def invalid_output(name: str, problem: str) -> ToolFailure:
    """``Error: tool "<name>" returned invalid output: <problem>``."""
    return failure(
        f'tool "{name}" returned invalid output: {problem}', name="InvalidToolOutputError", code=INVALID_TOOL_OUTPUT
    )


def _frozen_object(value: Any, what: str) -> FrozenDict | str:
    """``value`` (not yet a ``FrozenDict``) frozen, or a problem string
    naming it as ``what``: a non-dict, or one that does not freeze."""
    if not isinstance(value, dict):
        return f"{what} must be a JSON object, not {type(value).__name__}"
    frozen: FrozenDict
    try:
        frozen, _ = freeze_with_height(value)
    except FreezeError as exc:
        return f"{what}: {exc}"
    return frozen


def content_blocks(content: Any) -> tuple[ContentBlock, ...] | str:
    """Normalise content to a tuple of frozen blocks, or a problem string."""
    if isinstance(content, str):
        return text_content(content)
    if not isinstance(content, (list, tuple)):
        return f"content must be a str or a sequence of content blocks, not {type(content).__name__}"
    out: list[ContentBlock] = []
    for i, block in enumerate(content):
        if type(block) is not FrozenDict:
            block = _frozen_object(block, f"content block {i}")
            if type(block) is str:
                return block
        kind = block.get("type")
        if not isinstance(kind, str):
            return f'content block {i} has no string "type"'
        if kind == "text" and not isinstance(block.get("text"), str):
            return f'text content block {i} has no string "text"'
        out.append(block)
    return tuple(out)


def contexts_of(contexts: Any) -> tuple[Any, ...] | str:
    """Freeze additional contexts (JSON objects), or a problem string."""
    if not contexts:
        return ()
    out = []
    for i, ctx in enumerate(contexts):
        if type(ctx) is not FrozenDict:
            ctx = _frozen_object(ctx, f"additional context {i}")
            if type(ctx) is str:
                return ctx
        out.append(ctx)
    return tuple(out)


_NULL_CONTENT: Final = text_content(dumps(None))
NULL_SUCCESS: Final = trusted_success(None, _NULL_CONTENT)
"""The success of a body that returned ``None`` with no output schema and no
renderer (frozen, shared: it never varies)."""


def check_success(
    name: str, definition: ToolDefinition | None, value: Any, content: Any, base: ToolSuccess | None = None
) -> ToolExecutionResult:
    """Freeze and validate a success's ``value``; render content when
    ``content`` is None. INVALID_TOOL_OUTPUT on any problem."""
    if (
        value is None
        and content is None
        and base is None
        and (definition is None or (definition.output_schema is None and definition.render is None))
    ):
        # The common "done, nothing to say" body: its content never varies.
        return NULL_SUCCESS
    try:
        frozen, height = freeze_with_height(value)
    except FreezeError as exc:
        return invalid_output(name, str(exc))
    if definition is not None:
        problems = output_problems(definition, frozen, height)
        if problems:
            return invalid_output(name, "; ".join(problems))
    if content is None:
        try:
            if definition is not None and definition.render is not None:
                content = definition.render(frozen)
            else:
                content = frozen if isinstance(frozen, str) else dumps(frozen)
        except Exception as exc:
            return exception_failure(exc)
    blocks = content_blocks(content)
    if isinstance(blocks, str):
        return invalid_output(name, blocks)
    if base is None:
        return trusted_success(frozen, blocks)
    return ToolSuccess(frozen, blocks, base.meta, base.additional_contexts, body_invoked=base.body_invoked)


def check_result(name: str, definition: ToolDefinition | None, result: ToolExecutionResult) -> ToolExecutionResult:
    """Validate a result built outside the registry (a wrapper's)."""
    contexts = contexts_of(result.additional_contexts)
    if isinstance(contexts, str):
        return invalid_output(name, contexts)
    if isinstance(result, ToolSuccess):
        blocks = content_blocks(result.content)
        if isinstance(blocks, str):
            return invalid_output(name, blocks)
        base = ToolSuccess(None, (), result.meta, contexts)
        return check_success(name, definition, result.value, blocks, base)
    blocks = content_blocks(result.content)
    if isinstance(blocks, str):
        return invalid_output(name, blocks)
    if blocks is result.content and contexts is result.additional_contexts:
        return result
    return ToolFailure(result.error, blocks, result.meta, contexts)


def apply_post_decision(
    name: str, definition: ToolDefinition | None, result: ToolExecutionResult, decision: Accept | Block
) -> tuple[ToolExecutionResult, bool]:
    """Apply the post-execute waterfall's decision (step 6). Returns the new
    result and whether the tool's deferred contexts are dropped (``Block``).
    ``Accept`` on a failure only appends contexts; ``Accept(value=...)`` is
    validated like a body's value; ``Accept(meta=...)`` is merged over the
    result's ``meta`` and ``Accept(failure_content=...)`` replaces a
    failure's content."""
    extra = contexts_of(decision.additional_contexts)
    if isinstance(extra, str):
        return attrs.evolve(invalid_output(name, extra), additional_contexts=result.additional_contexts), False
    contexts = result.additional_contexts + extra
    if isinstance(decision, Block):
        blocks = content_blocks(decision.feedback)
        if isinstance(blocks, str):
            return attrs.evolve(invalid_output(name, blocks), additional_contexts=result.additional_contexts), False
        text = "\n".join(b["text"] for b in blocks if b.get("type") == "text" and isinstance(b.get("text"), str))
        return ToolFailure(
            ErrorDetail(text or "blocked by post-execute", ErrorInfo("ToolBlockedError", None)),
            blocks,
            decision.meta,
            contexts,
        ), True
    if decision.meta:
        result = attrs.evolve(result, meta={**result.meta, **decision.meta})
    if isinstance(result, ToolFailure):
        if decision.failure_content is not None:
            blocks = content_blocks(decision.failure_content)
            if isinstance(blocks, str):
                return attrs.evolve(invalid_output(name, blocks), additional_contexts=result.additional_contexts), False
            return attrs.evolve(result, content=blocks, additional_contexts=contexts), False
        return attrs.evolve(result, additional_contexts=contexts) if extra else result, False
    if decision.has_value:
        base = ToolSuccess(None, (), result.meta, contexts)
        return check_success(name, definition, decision.value, None, base), False
    if decision.content is not None:
        blocks = content_blocks(decision.content)
        if isinstance(blocks, str):
            return attrs.evolve(invalid_output(name, blocks), additional_contexts=contexts), False
        return attrs.evolve(result, content=blocks, additional_contexts=contexts), False
    return attrs.evolve(result, additional_contexts=contexts) if extra else result, False


def finalize(definition: ToolDefinition, view: ToolExecution, result: ToolSuccess) -> ToolExecutionResult:
    """Step 7: ``finalize_content(view, result)`` replaces a success's
    content; a raise or a malformed return becomes a failure."""
    fn = definition.finalize_content
    assert fn is not None
    try:
        content = fn(view, result)
    except Exception as exc:
        return attrs.evolve(exception_failure(exc), additional_contexts=result.additional_contexts)
    blocks = content_blocks(content)
    if isinstance(blocks, str):
        return attrs.evolve(
            invalid_output(definition.name, f"finalize_content: {blocks}"),
            additional_contexts=result.additional_contexts,
        )
    return attrs.evolve(result, content=blocks)
