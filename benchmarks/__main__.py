"""``python -m benchmarks [--quick] [--only SECTION ...] [--no-instructions] [--ray] [--out PATH] [--update-docs]``

Runs every section, prints a Markdown table and writes the figures to
``benchmarks/results.json``. The wall-clock sections take about a minute on
2 cores, plus one to two for ``scale`` (10 000 calls in flight); the
instruction counts (callgrind, when ``valgrind`` is installed) add a few
minutes and are merged into ``dispatch``, with the OpenTelemetry
overhead under ``otel`` (``--quick`` and ``--no-instructions`` leave them
out).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import aio as aio_bench
from . import (
    batch,
    dispatch,
    floors,
    instructions,
    journal,
    latency,
    leaks,
    peers,
    policies,
    process,
    report,
    scale,
    signals,
    typed,
)
from . import progress as progress_bench
from . import threads as threads_bench

SECTIONS: dict[str, Callable[..., dict[str, Any]]] = {
    "dispatch": dispatch.run,
    "signals": signals.run,
    "peers": peers.run,
    "floors": floors.run,
    "latency": latency.run,
    "leaks": leaks.run,
    "batch": batch.run,
    "process": process.run,
    "policies": policies.run,
    "progress": progress_bench.run,
    "aio": aio_bench.run,
    "journal": journal.run,
    "threads": threads_bench.run,
    "scale": scale.run,
}

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "results.json"
DOCS_PAGE = HERE.parent / "docs" / "benchmarks.md"


def run_all(
    *,
    quick: bool,
    only: list[str] | None = None,
    progress: bool = True,
    count_instructions: bool = True,
    ray: bool = False,
) -> dict[str, Any]:
    results: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    t0 = time.monotonic()
    for name, fn in SECTIONS.items():
        if only and name not in only:
            continue
        if progress:
            print(f"[benchmarks] {name} ...", file=sys.stderr, flush=True)
        s0 = time.monotonic()
        figures = fn(quick=quick)
        if name == "signals":
            results["signal_scaling"] = figures.pop("_scaling")
        if name == "peers":
            extra["peer_versions"] = figures["versions"]
            extra["peers_skipped"] = figures["skipped"]
            figures = figures["results"]
        if name == "dispatch" and count_instructions and not quick:
            if progress:
                print("[benchmarks] dispatch instructions (callgrind) ...", file=sys.stderr, flush=True)
            figures.update(instructions.run())
        if name == "dispatch":
            if progress:
                print("[benchmarks] typed tools ...", file=sys.stderr, flush=True)
            figures.update(typed.run(quick=quick, count_instructions=count_instructions))
        results[name] = figures
        if progress:
            print(f"[benchmarks] {name} done in {time.monotonic() - s0:.1f} s", file=sys.stderr, flush=True)
    if count_instructions and not quick and (not only or "dispatch" in only):
        from . import otel as otel_bench

        if progress:
            print("[benchmarks] otel instructions (callgrind) ...", file=sys.stderr, flush=True)
        results["otel"] = otel_bench.run()
    if ray:
        from . import ray as ray_bench

        if progress:
            print("[benchmarks] ray ...", file=sys.stderr, flush=True)
        results["ray"] = ray_bench.run(quick=quick)
    results["meta"] = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": f"{platform.system()} {platform.machine()}",
        "cpus": os.cpu_count(),
        "quick": quick,
        "seconds": time.monotonic() - t0,
        "command": "python -m benchmarks" + (" --quick" if quick else ""),
        **extra,
    }
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="few rounds of everything (smoke use; rough figures)")
    parser.add_argument("--only", nargs="+", choices=list(SECTIONS), help="run only these sections")
    parser.add_argument(
        "--no-instructions", action="store_true", help="skip the callgrind instruction counts (minutes)"
    )
    parser.add_argument(
        "--ray",
        action="store_true",
        help="also run the Ray backend section (needs the 'ray' extra; starts a local Ray)",
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"results file (default: {DEFAULT_OUT})")
    parser.add_argument("--no-write", action="store_true", help="print only; do not write the results file")
    parser.add_argument("--update-docs", action="store_true", help=f"also rewrite the table in {DOCS_PAGE}")
    args = parser.parse_args(argv)
    results = run_all(quick=args.quick, only=args.only, count_instructions=not args.no_instructions, ray=args.ray)
    table = report.render(results)
    if "ray" in results:
        from . import ray as ray_bench

        table += "\n\n" + ray_bench.render(results["ray"])
    print(table)
    if not args.no_write:
        args.out.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        print(f"wrote {args.out}", file=sys.stderr)
    if args.update_docs:
        page = DOCS_PAGE.read_text(encoding="utf-8")
        DOCS_PAGE.write_text(report.replace_between_markers(page, table), encoding="utf-8")
        print(f"updated {DOCS_PAGE}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
