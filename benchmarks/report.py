"""Render a results dict (see ``__main__``) as a Markdown table.

The same text is printed by ``python -m benchmarks`` and, with
``--update-docs``, written into ``docs/benchmarks.md`` between the
``<!-- bench:start -->`` and ``<!-- bench:end -->`` markers.
"""

from __future__ import annotations

from typing import Any

__all__ = ["END", "START", "render", "replace_between_markers"]

START = "<!-- bench:start -->"
END = "<!-- bench:end -->"


def _ns(value: float) -> str:
    if value >= 1e6:
        return f"{value / 1e6:.2f} ms"
    if value >= 1e3:
        return f"{value / 1e3:.2f} µs"
    return f"{value:.0f} ns"


def _ok(value: float, limit: float) -> str:
    return "yes" if value <= limit else "**no**"


def _row(*cells: object) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def render(results: dict[str, Any]) -> str:
    lines: list[str] = []
    meta = results.get("meta", {})
    if meta:
        lines.append(
            f"Run: {meta.get('date', '?')}, Python {meta.get('python', '?')}, {meta.get('platform', '?')}, "
            f"{meta.get('cpus', '?')} CPUs, {meta.get('seconds', 0):.0f} s"
            + (" (--quick: few rounds, figures are rough)" if meta.get("quick") else "")
            + ". Medians over rounds; ratio = dshtools / baseline (below 1: dshtools is faster)."
        )
        lines.append("")
    d = results.get("dispatch")
    if d:
        lines += [
            "**Dispatch overhead** (no-op tool; baseline: `executor.submit(f).result()` on the same executor)",
            "",
            _row("measure", "median", "ratio to baseline", "target", "met"),
            _row("---", "---:", "---:", "---:", ":---:"),
            _row("direct call (floor)", _ns(d["direct_call_ns"]), "", "", ""),
            _row("`executor.submit(f).result()` (baseline)", _ns(d["bare_submit_ns"]), "1.00", "", ""),
            _row(
                "`registry.execute`, no hooks",
                _ns(d["execute_ns"]),
                f"{d['ratio']:.2f}",
                "≤ 1.25",
                _ok(d["ratio"], 1.25),
            ),
            _row(
                "`registry.execute`, TimeoutPolicy + pre + post + observer",
                _ns(d["execute_with_hooks_ns"]),
                f"{d['with_hooks_ratio']:.2f}",
                "≤ 1.6",
                _ok(d["with_hooks_ratio"], 1.6),
            ),
            _row("overhead per call, no hooks", f"{d['overhead_us']:.1f} µs", "", "", ""),
            _row("overhead per call, with hooks", f"{d['with_hooks_overhead_us']:.1f} µs", "", "", ""),
            "",
        ]
        if "instructions_ratio" in d:
            lines += [
                "**Dispatch cost in instructions** (callgrind, every thread counted; the same on a busy machine)",
                "",
                _row("measure", "instructions per call", "ratio to baseline", "target", "met"),
                _row("---", "---:", "---:", "---:", ":---:"),
                _row(
                    "`executor.submit(f).result()` (baseline)", f"{d['bare_submit_instructions']:,.0f}", "1.00", "", ""
                ),
                _row(
                    "`registry.execute`, no hooks",
                    f"{d['execute_instructions']:,.0f}",
                    f"{d['instructions_ratio']:.2f}",
                    "≤ 1.8",
                    _ok(d["instructions_ratio"], 1.8),
                ),
                _row(
                    "`registry.execute`, TimeoutPolicy + pre + post + observer",
                    f"{d['execute_with_hooks_instructions']:,.0f}",
                    f"{d['with_hooks_instructions_ratio']:.2f}",
                    "≤ 3.5",
                    _ok(d["with_hooks_instructions_ratio"], 3.5),
                ),
                "",
            ]
        elif "skipped" in d:
            lines += [f"Instruction counts skipped: {d['skipped']}.", ""]
        if "typed_ratio" in d:
            lines += [
                "**Typed tools** (a no-op tool made from a typed function against the same tool with its schema "
                "written by hand: same schema, same arguments, same run)",
                "",
                _row("measure", "typed", "hand-written", "ratio", "target", "met"),
                _row("---", "---:", "---:", "---:", "---:", ":---:"),
                _row(
                    "`registry.execute`, wall clock",
                    _ns(d["typed_execute_ns"]),
                    _ns(d["by_hand_execute_ns"]),
                    f"{d['typed_ratio']:.2f}",
                    "",
                    "",
                ),
            ]
            if "typed_instructions_ratio" in d:
                lines.append(
                    _row(
                        "`registry.execute`, instructions",
                        f"{d['typed_execute_instructions']:,.0f}",
                        f"{d['by_hand_execute_instructions']:,.0f}",
                        f"{d['typed_instructions_ratio']:.2f}",
                        "≤ 1.15",
                        _ok(d["typed_instructions_ratio"], 1.15),
                    )
                )
            lines.append("")
    s = results.get("signals")
    if s:
        lines += [
            "**Signal operations** (baseline: `threading.Event`, or an Event plus a plain callback list)",
            "",
            _row("operation", "dshtools", "baseline", "baseline median", "ratio"),
            _row("---", "---:", "---", "---:", "---:"),
        ]
        for name, e in s.items():
            lines.append(
                _row(f"`{name}`", _ns(e["ns_per_op"]), e["baseline"], _ns(e["baseline_ns_per_op"]), f"{e['ratio']:.2f}")
            )
        sc = results.get("signal_scaling")
        if sc:
            per = ", ".join(f"N={k.split('_')[1]}: {_ns(v)}" for k, v in sc["ns_per_listener"].items())
            lines += [
                "",
                f"Abort with N listeners, cost per listener: {per}; linearity (largest N vs N=1000, 1.0 = linear): {sc['linearity']:.2f}.",
            ]
        lines.append("")
    p = results.get("peers")
    skipped = meta.get("peers_skipped", {})
    versions = meta.get("peer_versions", {})
    if p or skipped:
        lines += [
            "**Peers** (same operation, same run; ratio = dshtools / peer)",
            "",
            _row("library", "operation", "peer", "dshtools", "ratio", "dshtools faster"),
            _row("---", "---", "---:", "---:", "---:", ":---:"),
        ]
        for lib, note in skipped.items():
            lines.append(_row(lib, "skipped", note, "", "", ""))
        for lib, entry in (p or {}).items():
            for op, e in entry.items():
                lines.append(
                    _row(
                        f"{lib} {versions.get(lib) or ''}".strip(),
                        f"`{op}`",
                        _ns(e["ns_per_op"]),
                        _ns(e["dshtools_ns_per_op"]),
                        f"{e['ratio']:.2f}",
                        "yes" if e["ratio"] < 1 else "**no**",
                    )
                )
        lines.append("")
    fl = results.get("floors")
    if fl:
        lines += [
            "**Floors** (the least each operation can cost in pure Python with the contract's shape;"
            " benchmarks/floors.py, docs/decisions/0048; floor ratio above 1: no implementation reaches the comparison)",
            "",
            _row("operation", "floor", "dshtools", "dshtools / floor", "compared with", "its median", "floor ratio"),
            _row("---", "---:", "---:", "---:", "---", "---:", "---:"),
        ]
        for op, e in fl.items():
            against = e.get("against")
            lines.append(
                _row(
                    f"`{op}`",
                    _ns(e["floor_ns_per_op"]),
                    _ns(e["dshtools_ns_per_op"]),
                    f"{e['dshtools_over_floor']:.2f}",
                    against or "not installed",
                    _ns(e["against_ns_per_op"]) if against else "",
                    f"{e['floor_ratio']:.2f}" if against else "",
                )
            )
        lines.append("")
    lat = results.get("latency")
    if lat:
        lines += [
            f"**Cancellation latency** ({lat['tries']} tries)",
            "",
            _row("path", "p50", "p99", "target p99", "met"),
            _row("---", "---:", "---:", "---:", ":---:"),
            _row(
                "`abort()` → `signal.wait()` resumes",
                f"{lat['wait_p50_ms']:.3f} ms",
                f"{lat['wait_p99_ms']:.3f} ms",
                "≤ 1 ms",
                _ok(lat["wait_p99_ms"], 1.0),
            ),
            _row(
                "`abort()` → `execute` returns `ABORTED`",
                f"{lat['execute_p50_ms']:.3f} ms",
                f"{lat['execute_p99_ms']:.3f} ms",
                "≤ 2 ms",
                _ok(lat["execute_p99_ms"], 2.0),
            ),
            "",
        ]
    lk = results.get("leaks")
    if lk:
        lines += [
            "**Leaks**",
            "",
            _row("measure", "value", "target", "met"),
            _row("---", "---:", "---:", ":---:"),
            _row(
                f"caller signal `listener_count` after {lk['dispatches']:,} dispatches",
                lk["listener_count_after"],
                "0",
                _ok(lk["listener_count_after"], 0),
            ),
            _row(
                "RSS growth over those dispatches",
                f"{lk['rss_growth_mb']:.2f} MB",
                "< 5 MB",
                _ok(lk["rss_growth_mb"], 4.999),
            ),
            _row(
                f"threads alive with {lk['pending_timeouts']:,} pending timeouts",
                f"{lk['threads_with_10k_timeouts']} (before: {lk['threads_before']}; "
                f"timer threads: {lk.get('timer_threads', '?')})",
                "one timer thread",
                _ok(lk["threads_with_10k_timeouts"] - lk["threads_before"], 1)
                if lk.get("timer_threads", 1) == 1
                else "**no**",
            ),
            "",
        ]
    b = results.get("batch")
    if b:
        lines += [
            f"**Batch throughput** ({b['calls']} parallel-safe {b['body_ms']:.0f} ms calls, `max_parallel={b['max_parallel']}`)",
            "",
            _row("measure", "median", "ratio", "target", "met"),
            _row("---", "---:", "---:", "---:", ":---:"),
            _row(
                "`execute_batch` vs the ideal",
                f"{b['wall_ms']:.1f} ms",
                f"{b['ratio_to_ideal']:.2f}",
                "≤ 1.2",
                _ok(b["ratio_to_ideal"], 1.2),
            ),
            _row(
                "`ThreadPoolExecutor.map` of `time.sleep` (baseline)",
                f"{b['executor_map_ms']:.1f} ms",
                f"{b['ratio_to_executor_map']:.2f}",
                "",
                "",
            ),
            "",
        ]
    pr = results.get("process")
    if pr:
        lines += _process_rows(pr)
    return "\n".join(lines).rstrip() + "\n"


def _process_rows(pr: dict[str, Any]) -> list[str]:
    return [
        "**Process backend** (`ProcessBackend`; baseline: a bare `ProcessPoolExecutor` with the same start method, spawn)",
        "",
        _row("measure", "median / p99", "ratio", "target", "met"),
        _row("---", "---:", "---:", "---:", ":---:"),
        _row(
            "`registry.execute` of a no-op tool vs `pool.submit(f).result()`",
            f"{pr['per_call_us']:.0f} µs vs {pr['bare_pool_us']:.0f} µs",
            f"{pr['ratio']:.2f}",
            "≤ 1.5",
            _ok(pr["ratio"], 1.5),
        ),
        _row(
            "abort → the worker's `run.signal` aborted",
            f"{pr['signal_p50_ms']:.2f} ms / {pr['signal_p99_ms']:.2f} ms",
            "",
            "p99 ≤ 10 ms",
            _ok(pr["signal_p99_ms"], 10.0),
        ),
        _row(
            f"abort → `execute` returns, body ignores its signal, `kill_after={pr['kill_after_s']:g}`",
            f"{pr['kill_p50_s'] * 1e3:.0f} ms / {pr['kill_p99_s'] * 1e3:.0f} ms",
            "",
            f"p99 ≤ {(pr['kill_after_s'] + 0.05) * 1e3:.0f} ms",
            _ok(pr["kill_p99_s"], pr["kill_after_s"] + 0.05),
        ),
        _row(
            f"growth after {pr['growth_calls']:,} calls: processes / threads / fds",
            f"{pr['process_growth']} / {pr['thread_growth']} / {pr['fd_growth']}",
            "",
            "0 / 0 / 0",
            _ok(abs(pr["process_growth"]) + abs(pr["thread_growth"]) + abs(pr["fd_growth"]), 0),
        ),
        "",
    ]


def replace_between_markers(text: str, table: str) -> str:
    start = text.index(START) + len(START)
    end = text.index(END)
    return text[:start] + "\n" + table + text[end:]
