"""``MCPClient`` against the SDK's own client, on dshtools' own server
(docs/mcp.md#the-client cites the numbers).

    python -m benchmarks.mcp_client [--calls N] [--aborts N]

* ``mcp_client.noop_*``: seconds per no-op remote call (p50), through a
  ``ToolRegistry`` and ``MCPClient``, and through the SDK's
  ``ClientSession.call_tool`` over its ``stdio_client``, each against its
  own ``python -m dshtools mcp --tools benchmarks.mcp_client:registry``,
  alternating call by call in the same run; ``noop_ratio`` is ours over
  the SDK's (target ≤ 1.2).
* ``mcp_client.abort_to_server_*``: seconds from ``controller.abort()`` in
  this process to the server-side body's signal listener (``time.time()``
  on both sides, one machine), p50 and p99 (target p99 ≤ 0.05).
* ``mcp_client.leaks``: threads, open fds and child processes of this
  process before and after ``--calls`` remote calls (growth must be 0).

Wall-clock, not instruction counts: the cost is a round trip between two
processes. Not part of ``python -m benchmarks``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from dshtools import AbortController, AbortSignal, ToolDefinition, ToolExecutionInput, ToolRegistry, ToolRunContext

ROOT = Path(__file__).resolve().parents[1]
RECORDS = Path(os.environ.get("DSHTOOLS_BENCH_DIR", "."))


def _noop(_args: Any, _run: ToolRunContext) -> None:
    return None


def _wait(args: Any, run: ToolRunContext) -> str:
    tag = str(args["tag"])
    noted = threading.Event()

    def seen(_signal: AbortSignal) -> None:
        at = time.time()
        partial = RECORDS / f"{tag}.abort.partial"
        partial.write_text(json.dumps(at))
        os.replace(partial, RECORDS / f"{tag}.abort")  # whole, or not there
        noted.set()

    # Returns once the listener ran (not merely once the signal aborted: a
    # listener taken off first would never write its record).
    with run.signal.add_listener(seen):
        (RECORDS / f"{tag}.started").write_text("1")
        noted.wait(60)
    return "done"


def _parallel(_args: object) -> bool:
    return True


TAGGED = {"type": "object", "properties": {"tag": {"type": "string"}}, "required": ["tag"]}
"""The arguments of ``wait``: the tag that names its records."""

registry = ToolRegistry()
for name, description, parameters, body in (
    ("noop", "Do nothing.", {"type": "object"}, _noop),
    ("wait", "Wait for the call's abort.", TAGGED, _wait),
):
    # Both parallel-safe: the benchmark's calls and aborts overlap on one server.
    registry.register(ToolDefinition(name, description, parameters, body, is_concurrency_safe=_parallel))

SERVER = [sys.executable, "-m", "dshtools", "mcp", "--tools", "benchmarks.mcp_client:registry"]


def _env(records: Path) -> dict[str, str]:
    return {"PYTHONPATH": str(ROOT), "DSHTOOLS_BENCH_DIR": str(records)}


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def noop_pair(calls: int, records: Path) -> tuple[list[float], list[float]]:
    """Seconds per no-op call, ours and the SDK's, alternating call by call
    (each client on its own fresh server, both connected throughout)."""
    import anyio
    import anyio.to_thread
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    from dshtools.mcp import MCPClient

    ours: list[float] = []
    sdk: list[float] = []

    async def main() -> None:
        params = StdioServerParameters(command=SERVER[0], args=SERVER[1:], env=_env(records))
        with MCPClient.stdio(SERVER, env=_env(records)) as client, ToolRegistry() as local:
            client.register_tools(local)
            signal = AbortController().signal

            def one(i: int) -> float:
                started = time.perf_counter()
                result = local.execute(ToolExecutionInput(f"c{i}", "noop", {}, signal))
                elapsed = time.perf_counter() - started
                assert not result.is_error, result
                return elapsed

            async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                await session.list_tools()
                for i in range(20):
                    await session.call_tool("noop", {})
                    await anyio.to_thread.run_sync(one, i)
                for i in range(calls):
                    started = time.perf_counter()
                    answer = await session.call_tool("noop", {})
                    sdk.append(time.perf_counter() - started)
                    assert not answer.is_error, answer
                    ours.append(await anyio.to_thread.run_sync(one, i))

    anyio.run(main)
    return ours, sdk


def abort_latency(aborts: int, records: Path) -> list[float]:
    from dshtools.mcp import MCPClient

    out = []
    with MCPClient.stdio(SERVER, env=_env(records), cancel_grace=0.0) as client, ToolRegistry() as local:
        client.register_tools(local)
        for i in range(aborts):
            tag = f"a{i}"
            controller = AbortController()
            worker = threading.Thread(
                target=local.execute, args=(ToolExecutionInput(tag, "wait", {"tag": tag}, controller.signal),)
            )
            worker.start()
            started = records / f"{tag}.started"
            pause = threading.Event()
            while not started.exists():  # another process's fact: polled
                pause.wait(0.002)
            aborted_at = time.time()
            controller.abort("benchmark")
            worker.join()
            seen = records / f"{tag}.abort"
            while not seen.exists():
                pause.wait(0.002)
            out.append(json.loads(seen.read_text()) - aborted_at)
    return out


def _census() -> dict[str, int]:
    import psutil

    me = psutil.Process()
    return {"threads": threading.active_count(), "fds": me.num_fds(), "children": len(me.children(recursive=True))}


def leaks(calls: int, records: Path) -> dict[str, dict[str, int]]:
    from dshtools.mcp import MCPClient

    before = _census()
    with MCPClient.stdio(SERVER, env=_env(records)) as client, ToolRegistry() as local:
        client.register_tools(local)
        signal = AbortController().signal
        for i in range(calls):
            local.execute(ToolExecutionInput(f"l{i}", "noop", {}, signal))
        during = _census()
    after = _census()
    return {"before": before, "during": during, "after": after}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--aborts", type=int, default=100)
    options = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        records = Path(tmp)
        ours, sdk = noop_pair(options.calls, records)
        aborts = abort_latency(options.aborts, records)
        census = leaks(options.calls, records)
    ours_p50, sdk_p50 = statistics.median(ours), statistics.median(sdk)
    print(
        json.dumps(
            {
                "mcp_client.noop_ours_p50_s": round(ours_p50, 6),
                "mcp_client.noop_sdk_p50_s": round(sdk_p50, 6),
                "mcp_client.noop_ratio": round(ours_p50 / sdk_p50, 3),
                "mcp_client.abort_to_server_p50_s": round(_p(aborts, 0.5), 6),
                "mcp_client.abort_to_server_p99_s": round(_p(aborts, 0.99), 6),
                "mcp_client.leaks": census,
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
