"""What each policy of docs/contract.md#policies adds to a call: machine
instructions per call, counted with callgrind as in
``benchmarks/instructions.py`` (two runs of
``SHORT`` and ``LONG`` calls after the same warm-up; the difference divided
by ``LONG - SHORT``; every thread counted).

Cases, each a registry on a 4-worker ``ThreadPoolExecutor`` with one tool
and one policy (``none``: no policy):

* ``passthrough``: ``lambda execution, next: next()``, what any
  around-dispatch wrapper costs before it does anything;
* ``retry``: ``RetryPolicy()`` around a body that succeeds (the common
  case: one attempt, ``meta["attempts"]`` recorded);
* ``result_limit``: ``ResultLimit()`` over a short text result (nothing to
  cut); ``result_limit_cut``: over a 30 000-character result cut to 20 000;
* ``concurrency``: ``ConcurrencyLimit(4)`` with a free slot;
* ``rate``: ``RateLimit("1000000/second")`` under its rate;
* ``retry_tenacity`` (only when ``tenacity`` imports): the same retry
  written with tenacity's ``Retrying`` and a signal-aware ``sleep``, for
  docs/decisions/0061-retries-and-rate-windows-without-a-library.md.

Keys (``policies.*`` in results.json): ``<case>_instructions_per_call``
(the policy's own cost: the case less ``none``) and
``none_instructions_per_call``; skipped with a note when ``valgrind`` is not
installed.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from .instructions import EXECUTE_CALLS, per_call, valgrind_or_skip

__all__ = ["CASES", "run"]

CASES = ("none", "passthrough", "retry", "result_limit", "result_limit_cut", "concurrency", "rate")
SHORT, LONG = 100, 600

_CHILD = (
    r"""
import sys
from concurrent.futures import ThreadPoolExecutor

from dshtools import (
    AbortController, ConcurrencyLimit, RateLimit, ResultLimit, RetryPolicy, ToolDefinition,
    ToolExecutionInput, ToolRegistry,
)

case, n = sys.argv[1], int(sys.argv[2])
executor = ThreadPoolExecutor(max_workers=4)
registry = ToolRegistry(executor=executor)
text = "x" * (30_000 if case == "result_limit_cut" else 10)
registry.register(ToolDefinition("t", "t", {"type": "object"}, lambda args, run: text))
if case == "passthrough":
    registry.add_around_dispatch(lambda execution, next: next())
elif case == "retry":
    registry.add_around_dispatch(RetryPolicy())
elif case in ("result_limit", "result_limit_cut"):
    registry.add_post_execute(ResultLimit())
elif case == "concurrency":
    registry.add_around_dispatch(ConcurrencyLimit(4))
elif case == "rate":
    registry.add_around_dispatch(RateLimit("1000000/second"))
elif case == "retry_tenacity":
    from tenacity import Retrying, retry_if_result, stop_after_attempt, wait_exponential

    codes = {"TOOL_ERROR", "WORKER_LOST"}

    def tenacity_retry(execution, next):
        signal = execution.signal
        retrying = Retrying(
            stop=stop_after_attempt(3),
            wait=wait_exponential(multiplier=0.5, max=8),
            retry=retry_if_result(lambda r: r.is_error and r.code in codes and not signal.aborted),
            sleep=signal.wait,
            retry_error_callback=lambda state: state.outcome.result(),
        )
        return retrying(next)

    registry.add_around_dispatch(tenacity_retry)
call = ToolExecutionInput("call-1", "t", {}, AbortController().signal)
"""
    + EXECUTE_CALLS
)


def _count(case: str, valgrind: str) -> float:
    return per_call(_CHILD, case, valgrind, short=SHORT, long=LONG)


def run(*, quick: bool = False) -> dict[str, Any]:
    valgrind = valgrind_or_skip(quick=quick)
    if isinstance(valgrind, dict):
        return valgrind
    cases = list(CASES)
    if importlib.util.find_spec("tenacity") is not None:
        cases.append("retry_tenacity")
    counted = {case: _count(case, valgrind) for case in cases}
    none = counted.pop("none")
    figures: dict[str, Any] = {"none_instructions_per_call": none, "calls_counted": LONG - SHORT}
    for case, value in counted.items():
        figures[f"{case}_instructions_per_call"] = value - none
    return figures


if __name__ == "__main__":
    import json

    print(json.dumps(run(), indent=2))
