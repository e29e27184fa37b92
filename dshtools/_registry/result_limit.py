"""``ResultLimit``: what the model sees of a result, cut to a size
(docs/policies.md#resultlimit).

A post-execute hook. It cuts the text of the content the model would see —
a success's content, a failure's ``Error: ...`` text, an inner hook's
``Accept(content=...)`` or ``Block`` feedback — and leaves everything else
whole.

Guarantees:

* Content whose text blocks hold at most the limit (characters) is passed
  on unchanged, and the decision of the hooks inside is returned as is.
* A cut keeps the first and/or last characters (``keep``), drops the rest,
  and puts one text marker where they were: ``[... N of M characters left
  out ...]``. Non-text blocks (images) are kept, in order.
* ``value``, ``error.message`` and what observers read there stay whole;
  ``meta["truncated"]`` holds the sizes: ``{"total_chars": M,
  "kept_chars": K, "omitted_chars": N}``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final, Literal

from .._types.calls import ContentBlock, ToolExecutionResult, ToolSuccess
from .._types.hooks import Accept, Block, PostExecuteDecision
from .._types.tools import ToolExecution

__all__ = ["ResultLimit", "cut_content"]

Keep = Literal["head_tail", "head", "tail"]
_KEEPS: Final = ("head_tail", "head", "tail")


def _is_text(block: ContentBlock) -> bool:
    return block.get("type") == "text" and isinstance(block.get("text"), str)


def cut_content(
    blocks: Sequence[ContentBlock], max_chars: int, keep: Keep = "head_tail"
) -> tuple[tuple[ContentBlock, ...], dict[str, int]] | None:
    """``blocks`` with their text cut to ``max_chars`` characters plus a
    marker, and the sizes for ``meta["truncated"]``; ``None`` when the text
    fits."""
    total = 0
    for block in blocks:
        if _is_text(block):
            total += len(block["text"])
    if total <= max_chars:
        return None
    head = max_chars if keep == "head" else 0 if keep == "tail" else max_chars - max_chars // 2
    tail_from = total - (max_chars - head)  # text at or after this global position is kept
    omitted = total - max_chars
    marker = f"[... {omitted} of {total} characters left out ...]"
    if keep != "tail":
        marker = "\n" + marker
    if keep != "head":
        marker += "\n"
    out: list[ContentBlock] = []
    placed = False
    start = 0
    for block in blocks:
        if not _is_text(block):
            out.append(block)
            continue
        text: str = block["text"]
        end = start + len(text)
        head_part = text[: max(0, min(len(text), head - start))]
        tail_part = text[max(0, tail_from - start) :] if end > tail_from else ""
        middle = ""
        if not placed and end > head:
            middle, placed = marker, True
        start = end
        kept = head_part + middle + tail_part
        if kept:
            out.append({**block, "text": kept})
    return tuple(out), {"total_chars": total, "kept_chars": max_chars, "omitted_chars": omitted}


class ResultLimit:
    """Post-execute hook: the model sees at most ``max_chars`` characters
    (an ``int`` ≥ 1; default 20 000) of each result's text, or the tool's
    own ``ToolDefinition.max_output_chars`` when it has one, cut as
    ``keep`` says: ``"head_tail"`` (the first and last halves), ``"head"``
    or ``"tail"``, with a marker saying how much was left out.

    Register it **first** among the post-execute hooks, so it cuts what the
    hooks inside it decided; ``finalize_content`` (step 7) runs after every
    hook and is not cut, and neither is an inner hook's ``Accept(value=...)``
    (its content is rendered after the hooks). A cut success keeps its ``value``, a cut failure its
    ``error.message``; both get ``meta["truncated"]``. Runs in the calling
    thread. Raises ``TypeError``/``ValueError`` for bad arguments where it
    is made.
    """

    __slots__ = ("_keep", "_max_chars")

    def __init__(self, max_chars: int = 20_000, keep: Keep = "head_tail") -> None:
        if isinstance(max_chars, bool) or not isinstance(max_chars, int):
            raise TypeError(f"max_chars must be an int, not {type(max_chars).__name__}")
        if max_chars < 1:
            raise ValueError(f"max_chars must be positive, got {max_chars}")
        if keep not in _KEEPS:
            raise ValueError(f"keep must be one of {', '.join(_KEEPS)}, got {keep!r}")
        self._max_chars = max_chars
        self._keep: Keep = keep

    def __call__(
        self,
        execution: ToolExecution,
        result: ToolExecutionResult,
        next: Callable[[], PostExecuteDecision],
    ) -> PostExecuteDecision:
        decision = next()
        definition = execution.definition
        limit = self._max_chars
        if definition is not None and definition.max_output_chars is not None:
            limit = definition.max_output_chars
        keep = self._keep
        if isinstance(decision, Block):
            cut = cut_content(decision.feedback, limit, keep)
            if cut is None:
                return decision
            return Block(
                cut[0],
                additional_contexts=decision.additional_contexts,
                meta={**decision.meta, "truncated": cut[1]},
            )
        extra: dict[str, Any] = {}
        if isinstance(result, ToolSuccess):
            if decision.has_value:
                return decision  # rendered after the hooks: not cut
            cut = cut_content(decision.content if decision.content is not None else result.content, limit, keep)
            if cut is None:
                return decision
            extra["content"] = cut[0]
        else:
            content = decision.failure_content if decision.failure_content is not None else result.content
            cut = cut_content(content, limit, keep)
            if cut is None:
                return decision
            extra["failure_content"] = cut[0]
        return Accept(
            additional_contexts=decision.additional_contexts,
            meta={**decision.meta, "truncated": cut[1]},
            **extra,
        )

    def __repr__(self) -> str:
        return f"ResultLimit(max_chars={self._max_chars}, keep={self._keep!r})"
