"""What a typed tool costs (docs/contract.md#typed-tools): a no-op
``execute`` of a tool made from a typed function against the same tool
written by hand, same schema, same arguments, same registry, same run.

The typed call does what the hand-written one does, plus pydantic building
the typed arguments in step 1, the keyword call, and the return's JSON
conversion. Measured two ways:

* wall clock, paired rounds (``_timing.paired_samples``): ``typed_ratio``
  is the median over rounds of typed / hand-written;
* instructions (callgrind, as ``benchmarks/instructions.py`` counts them:
  two runs of ``SHORT`` and ``LONG`` calls, the difference per call):
  ``typed_instructions_ratio``, target 1.15. Skipped with a note when
  ``valgrind`` is not installed, or with ``--quick``.

Both land in the ``dispatch`` section of ``results.json``.
"""

from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Any

from dshtools import AbortController, ToolDefinition, ToolExecutionInput, ToolRegistry

from ._timing import median, paired_samples
from .dispatch import execute_case
from .instructions import EXECUTE_CALLS, per_call

__all__ = ["ARGUMENTS", "TARGET", "make_registry", "run"]

TARGET = 1.15
ARGUMENTS: dict[str, Any] = {"city": "Oslo", "days": 3}


def _schema() -> dict[str, Any]:
    # The schema ToolDefinition.from_function makes for `forecast`, written out.
    return {
        "type": "object",
        "properties": {
            "city": {"type": "string", "title": "City", "description": "Where."},
            "days": {"type": "integer", "minimum": 1, "title": "Days", "default": 1, "description": "How many."},
        },
        "required": ["city"],
        "additionalProperties": False,
    }


def _by_hand(args: Any, run: Any) -> None:
    return None


def make_registry(executor: ThreadPoolExecutor) -> ToolRegistry:
    """A registry with ``typed`` (from a typed function) and ``by_hand``
    (the same schema written out, a body ``(args, run)``), both no-ops."""
    from pydantic import Field

    def forecast(city: str, days: Annotated[int, Field(ge=1)] = 1) -> None:
        """The forecast.

        Args:
            city: Where.
            days: How many.
        """
        return None

    registry = ToolRegistry(executor=executor)
    typed = ToolDefinition.from_function(forecast, name="typed")
    by_hand = ToolDefinition("by_hand", "The forecast.", _schema(), _by_hand)
    # Like for like: the same schema, so only the typed machinery differs.
    assert dict(typed.parameters) == dict(by_hand.parameters), typed.parameters
    registry.register(typed)
    registry.register(by_hand)
    return registry


_CHILD = (
    r"""
import sys
from concurrent.futures import ThreadPoolExecutor
from dshtools import AbortController, ToolExecutionInput
from benchmarks.typed import ARGUMENTS, make_registry

name, n = sys.argv[1], int(sys.argv[2])
executor = ThreadPoolExecutor(max_workers=4)
registry = make_registry(executor)
call = ToolExecutionInput("call-1", name, ARGUMENTS, AbortController().signal)
"""
    + EXECUTE_CALLS
)


def instructions() -> dict[str, Any]:
    """Instructions per call of each tool, and their ratio."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        return {"typed_instructions_skipped": "valgrind is not installed: no instruction counts"}
    counted = {name: per_call(_CHILD, name, valgrind) for name in ("typed", "by_hand")}
    return {
        "typed_execute_instructions": counted["typed"],
        "by_hand_execute_instructions": counted["by_hand"],
        "typed_instructions_ratio": counted["typed"] / counted["by_hand"],
        "typed_instructions_target": TARGET,
    }


def wall_clock(*, quick: bool = False) -> dict[str, Any]:
    number, rounds = (200, 3) if quick else (250, 41)
    executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="bench-typed")
    registry = make_registry(executor)
    signal = AbortController().signal
    calls = {name: ToolExecutionInput("call-1", name, ARGUMENTS, signal) for name in ("typed", "by_hand")}

    try:
        for call in calls.values():
            assert not registry.execute(call).is_error
        typed, by_hand = paired_samples(
            [execute_case(registry, calls[name]) for name in ("typed", "by_hand")],
            number=number,
            rounds=rounds,
            warmup=1,
        )
    finally:
        registry.close()
        executor.shutdown(wait=True)
    return {
        "typed_execute_ns": median(typed),
        "by_hand_execute_ns": median(by_hand),
        "typed_ratio": median([t / h for t, h in zip(typed, by_hand, strict=False)]),
    }


def run(*, quick: bool = False, count_instructions: bool = True) -> dict[str, Any]:
    figures = wall_clock(quick=quick)
    if count_instructions and not quick:
        figures.update(instructions())
    return figures


if __name__ == "__main__":
    import json

    print(json.dumps(run(), indent=2))
