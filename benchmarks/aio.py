"""What awaiting a call costs (docs/async.md): ``await registry.aexecute``
of a no-op tool against ``registry.execute`` of the same tool, same
registry, in instructions per call (callgrind, as
``benchmarks/instructions.py`` counts them: two runs of ``SHORT`` and
``LONG`` calls after the same warm-up, the difference per call; every
thread counted, the loop's and the worker's).

``execute`` hands the body to a pool worker and blocks; ``aexecute`` hands
the whole call to a pool worker (the body inline there) and the worker
wakes the loop, so the difference is the loop's side: the private signal,
the event, the wake-up and one turn of the loop. Cases: ``execute``,
``asyncio`` and ``trio`` (``aexecute`` awaited one after the other in one
coroutine under each), and ``to_thread``: the naive way,
``await anyio.to_thread.run_sync(registry.execute, call)`` under asyncio
(two threads per call, and a native ``task.cancel()`` abandons the body).
Keys: ``aexecute_asyncio_instructions_ratio`` and
``aexecute_trio_instructions_ratio`` (aexecute / execute),
``aexecute_vs_to_thread_instructions_ratio`` (aexecute under asyncio /
the naive way), recorded under ``aio`` in ``benchmarks/results.json`` by
``python -m benchmarks``; skipped with a note when ``valgrind`` is not
installed and in ``--quick`` runs.

``python -m benchmarks.aio`` prints the figures as JSON.
"""

from __future__ import annotations

from typing import Any

from .instructions import per_call, valgrind_or_skip

__all__ = ["CASES", "run"]

CASES = ("execute", "asyncio", "trio", "to_thread")

_CHILD = r"""
import sys

from dshtools import AbortController, ToolDefinition, ToolExecutionInput, ToolRegistry

case, n = sys.argv[1], int(sys.argv[2])
registry = ToolRegistry(max_workers=4)
registry.register(ToolDefinition("noop", "A no-op.", {"type": "object"}, lambda args, run: None))
call = ToolExecutionInput("call-1", "noop", {}, AbortController().signal)

if case == "execute":
    execute = registry.execute
    for _ in range(200):
        assert not execute(call).is_error
    for _ in range(n):
        execute(call)
elif case == "to_thread":
    import anyio

    async def naive() -> None:
        run_sync = anyio.to_thread.run_sync
        execute = registry.execute
        for _ in range(200):
            assert not (await run_sync(execute, call)).is_error
        for _ in range(n):
            await run_sync(execute, call)

    anyio.run(naive, backend="asyncio")
else:
    import anyio

    async def main() -> None:
        aexecute = registry.aexecute
        for _ in range(200):
            assert not (await aexecute(call)).is_error
        for _ in range(n):
            await aexecute(call)

    anyio.run(main, backend=case)
registry.close()
"""


def run(*, quick: bool = False) -> dict[str, Any]:
    valgrind = valgrind_or_skip(quick=quick)
    if isinstance(valgrind, dict):
        return valgrind
    short, long = 200, 1200
    counted = {case: per_call(_CHILD, case, valgrind, short=short, long=long) for case in CASES}
    execute = counted["execute"]
    return {
        "execute_instructions": execute,
        "aexecute_asyncio_instructions": counted["asyncio"],
        "aexecute_trio_instructions": counted["trio"],
        "aexecute_asyncio_instructions_ratio": counted["asyncio"] / execute,
        "aexecute_trio_instructions_ratio": counted["trio"] / execute,
        "to_thread_execute_instructions": counted["to_thread"],
        "aexecute_vs_to_thread_instructions_ratio": counted["asyncio"] / counted["to_thread"],
        "calls_counted": long - short,
    }


if __name__ == "__main__":
    import json
    import sys

    print(json.dumps(run(quick="--quick" in sys.argv), indent=2))
