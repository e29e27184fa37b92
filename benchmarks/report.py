"""Render a results dict (see ``__main__``) as a Markdown table.

The same text is printed by ``python -m benchmarks`` and, with
``--update-docs``, written into ``docs/benchmarks.md`` between the
``<!-- bench:start -->`` and ``<!-- bench:end -->`` markers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
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


def _head(title: str, columns: Sequence[str]) -> list[str]:
    """A table's opening: its bold title, a blank line, the column names
    and the alignment row. A column is marked as in that row: ``"name:"``
    right-aligned, ``":name:"`` centred, ``"name"`` left."""
    names = [c.strip(":") for c in columns]
    aligns = [(":" if c.startswith(":") else "") + "---" + (":" if c.endswith(":") else "") for c in columns]
    return [title, "", _row(*names), _row(*aligns)]


# The two dispatch rows of each dispatch table: label, the infix of their
# keys (``execute_{infix}ns``, ``{infix}ratio``, ``execute_{infix}instructions``,
# ``{infix}instructions_ratio``), the wall-clock and the instruction target.
_EXECUTE_ROWS = (
    ("`registry.execute`, no hooks", "", 1.25, 1.8),
    ("`registry.execute`, TimeoutPolicy + pre + post + observer", "with_hooks_", 1.6, 3.5),
)

# The latency rows: path, the key prefix (``{prefix}_p50_ms``, ``{prefix}_p99_ms``), the p99 target in ms.
_LATENCY_ROWS = (
    ("`abort()` → `signal.wait()` resumes", "wait", 1.0),
    ("`abort()` → `execute` returns `ABORTED`", "execute", 2.0),
)


Figures = dict[str, Any]


def _run_line(meta: Figures) -> list[str]:
    if not meta:
        return []
    return [
        f"Run: {meta.get('date', '?')}, Python {meta.get('python', '?')}, {meta.get('platform', '?')}, "
        f"{meta.get('cpus', '?')} CPUs, {meta.get('seconds', 0):.0f} s"
        + (" (--quick: few rounds, figures are rough)" if meta.get("quick") else "")
        + ". Medians over rounds; ratio = dshtools / baseline (below 1: dshtools is faster).",
        "",
    ]


def _dispatch(d: Figures, _results: Figures) -> list[str]:
    lines = _head(
        "**Dispatch overhead** (no-op tool; baseline: `executor.submit(f).result()` on the same executor)",
        ("measure", "median:", "ratio to baseline:", "target:", ":met:"),
    )
    lines += [
        _row("direct call (floor)", _ns(d["direct_call_ns"]), "", "", ""),
        _row("`executor.submit(f).result()` (baseline)", _ns(d["bare_submit_ns"]), "1.00", "", ""),
    ]
    for label, infix, limit, _ in _EXECUTE_ROWS:
        ratio = d[f"{infix}ratio"]
        lines.append(_row(label, _ns(d[f"execute_{infix}ns"]), f"{ratio:.2f}", f"≤ {limit:g}", _ok(ratio, limit)))
    lines += [
        _row("overhead per call, no hooks", f"{d['overhead_us']:.1f} µs", "", "", ""),
        _row("overhead per call, with hooks", f"{d['with_hooks_overhead_us']:.1f} µs", "", "", ""),
        "",
    ]
    if "instructions_ratio" in d:
        lines += _head(
            "**Dispatch cost in instructions** (callgrind, every thread counted; the same on a busy machine)",
            ("measure", "instructions per call:", "ratio to baseline:", "target:", ":met:"),
        )
        lines.append(
            _row("`executor.submit(f).result()` (baseline)", f"{d['bare_submit_instructions']:,.0f}", "1.00", "", "")
        )
        for label, infix, _, limit in _EXECUTE_ROWS:
            count, ratio = d[f"execute_{infix}instructions"], d[f"{infix}instructions_ratio"]
            lines.append(_row(label, f"{count:,.0f}", f"{ratio:.2f}", f"≤ {limit:g}", _ok(ratio, limit)))
        lines.append("")
    elif "skipped" in d:
        lines += [f"Instruction counts skipped: {d['skipped']}.", ""]
    if "typed_ratio" in d:
        lines += _head(
            "**Typed tools** (a no-op tool made from a typed function against the same tool with its schema "
            "written by hand: same schema, same arguments, same run)",
            ("measure", "typed:", "hand-written:", "ratio:", "target:", ":met:"),
        )
        lines.append(
            _row(
                "`registry.execute`, wall clock",
                _ns(d["typed_execute_ns"]),
                _ns(d["by_hand_execute_ns"]),
                f"{d['typed_ratio']:.2f}",
                "",
                "",
            )
        )
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
    return lines


def _signals(s: Figures, results: Figures) -> list[str]:
    lines = _head(
        "**Signal operations** (baseline: `threading.Event`, or an Event plus a plain callback list)",
        ("operation", "dshtools:", "baseline", "baseline median:", "ratio:"),
    )
    lines += [
        _row(f"`{name}`", _ns(e["ns_per_op"]), e["baseline"], _ns(e["baseline_ns_per_op"]), f"{e['ratio']:.2f}")
        for name, e in s.items()
    ]
    sc = results.get("signal_scaling")
    if sc:
        per = ", ".join(f"N={k.split('_')[1]}: {_ns(v)}" for k, v in sc["ns_per_listener"].items())
        lines += [
            "",
            f"Abort with N listeners, cost per listener: {per}; linearity (largest N vs N=1000, 1.0 = linear): {sc['linearity']:.2f}.",
        ]
    return [*lines, ""]


def _peers(p: Figures, results: Figures) -> list[str]:
    meta = results.get("meta", {})
    versions = meta.get("peer_versions", {})
    lines = _head(
        "**Peers** (same operation, same run; ratio = dshtools / peer)",
        ("library", "operation", "peer:", "dshtools:", "ratio:", ":dshtools faster:"),
    )
    lines += [_row(lib, "skipped", note, "", "", "") for lib, note in meta.get("peers_skipped", {}).items()]
    for lib, entry in p.items():
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
    return [*lines, ""]


def _floors(fl: Figures, _results: Figures) -> list[str]:
    lines = _head(
        "**Floors** (the least each operation can cost in pure Python with the contract's shape;"
        " benchmarks/floors.py, docs/decisions/0048; floor ratio above 1: no implementation reaches the comparison)",
        ("operation", "floor:", "dshtools:", "dshtools / floor:", "compared with", "its median:", "floor ratio:"),
    )
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
    return [*lines, ""]


def _latency(lat: Figures, _results: Figures) -> list[str]:
    lines = _head(f"**Cancellation latency** ({lat['tries']} tries)", ("path", "p50:", "p99:", "target p99:", ":met:"))
    for path, prefix, limit in _LATENCY_ROWS:
        p50, p99 = lat[f"{prefix}_p50_ms"], lat[f"{prefix}_p99_ms"]
        lines.append(_row(path, f"{p50:.3f} ms", f"{p99:.3f} ms", f"≤ {limit:g} ms", _ok(p99, limit)))
    return [*lines, ""]


def _leaks(lk: Figures, _results: Figures) -> list[str]:
    return [
        *_head("**Leaks**", ("measure", "value:", "target:", ":met:")),
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


def _batch(b: Figures, _results: Figures) -> list[str]:
    return [
        *_head(
            f"**Batch throughput** ({b['calls']} parallel-safe {b['body_ms']:.0f} ms calls, `max_parallel={b['max_parallel']}`)",
            ("measure", "median:", "ratio:", "target:", ":met:"),
        ),
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


def _process(pr: Figures, _results: Figures) -> list[str]:
    return [
        *_head(
            "**Process backend** (`ProcessBackend`; baseline: a bare `ProcessPoolExecutor` with the same start method, spawn)",
            ("measure", "median / p99:", "ratio:", "target:", ":met:"),
        ),
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


def _threads(th: Figures, _results: Figures) -> list[str]:
    free = not th.get("gil", True)
    target = th["targets"]["ratio_2_and_4_free_threaded"]
    lines = _head(
        "**Caller threads** (no-op tool, each thread its own call; baseline: the same threads each making "
        "`executor.submit(f).result()` round trips on the same executor, same round; "
        + ("free-threaded build, GIL off)" if free else "GIL build)"),
        ("caller threads:", "execute calls/s:", "bare calls/s:", "ratio (bare ÷ execute throughput):", "target:"),
    )
    for threads, row in th["callers"].items():
        limit = f"≤ {target}" if free and threads != "1" else ""
        met = f" {_ok(row['ratio'], target)}" if limit else ""
        lines.append(
            _row(
                threads,
                f"{row['execute_calls_per_s']:,.0f}",
                f"{row['bare_calls_per_s']:,.0f}",
                f"{row['ratio']:.2f}",
                limit + met,
            )
        )
    return [*lines, ""]


def _scale(sc: Figures, _results: Figures) -> list[str]:
    bare, batch, callers = sc["bare"], sc["batch"], sc["callers"]
    bare_callers: Figures = sc.get("bare_callers") or bare
    shared, bare_shared = sc["shared"], sc["bare_shared"]
    n, m = bare["n"], shared["n"]
    return [
        *_head(
            f"**Calls in flight** ({n:,} bodies waiting on their signals; baseline: {n:,} bare threads "
            "on one `threading.Event`, same run)",
            ("measure", "dshtools:", "bare threads:", "ratio:", "target:", ":met:"),
        ),
        _row(
            f"one abort of {n:,} `execute_batch` calls → the batch returned, all joined"
            f" (median of {sc.get('rounds', 1)} rounds)",
            f"{batch['drain_s']:.2f} s",
            f"{bare['drain_s']:.2f} s",
            f"{sc['batch_drain_ratio']:.2f}",
            "≤ 2",
            _ok(sc["batch_drain_ratio"], 2.0),
        ),
        _row(
            f"one abort of {n:,} caller threads in `execute` → all returned, joined"
            f" (median of {sc.get('rounds', 1)} rounds)",
            f"{callers['drain_s']:.2f} s",
            f"{bare_callers['drain_s']:.2f} s",
            f"{sc['callers_drain_ratio']:.2f}",
            "≤ 2",
            _ok(sc["callers_drain_ratio"], 2.0),
        ),
        _row(
            f"shared abort of {m:,} caller threads: p50 / p99 return (median of {sc.get('shared_rounds', 1)} rounds)",
            f"{shared['p50_ms']:.0f} / {shared['p99_ms']:.0f} ms",
            f"{bare_shared['p50_ms']:.0f} / {bare_shared['p99_ms']:.0f} ms",
            f"{sc['shared_p99_ratio']:.2f} (p99)",
            "≤ 2",
            _ok(sc["shared_p99_ratio"], 2.0),
        ),
        _row(
            "CPU while they all wait (batch / callers)",
            f"{batch['idle_cpu'] * 100:.1f} % / {callers['idle_cpu'] * 100:.1f} %",
            "",
            "",
            "idle",
            _ok(max(batch["idle_cpu"], callers["idle_cpu"]), 0.05),
        ),
        _row(
            "RSS per waiting call (batch / callers) vs per bare thread",
            f"{batch['rss_kb']:.1f} / {callers['rss_kb']:.1f} KB",
            f"{bare['rss_kb']:.1f} KB",
            "",
            "",
            "",
        ),
        _row(
            f"time until all {n:,} wait (batch / callers)",
            f"{batch['reach_s']:.1f} / {callers['reach_s']:.1f} s",
            "",
            "",
            "",
            "",
        ),
        "",
    ]


_SECTIONS: dict[str, Callable[[Figures, Figures], list[str]]] = {
    "dispatch": _dispatch,
    "signals": _signals,
    "peers": _peers,
    "floors": _floors,
    "latency": _latency,
    "leaks": _leaks,
    "batch": _batch,
    "process": _process,
    "threads": _threads,
    "scale": _scale,
}
"""Each results section's table, in the report's order: ``section(figures,
results)`` gives its lines. A section runs when it has figures, or when the
run's ``meta`` notes ``{name}_skipped`` entries (its table says why)."""


def render(results: Figures) -> str:
    meta = results.get("meta", {})
    lines = _run_line(meta)
    for name, section in _SECTIONS.items():
        figures = results.get(name) or {}
        if figures or meta.get(f"{name}_skipped"):
            lines += section(figures, results)
    return "\n".join(lines).rstrip() + "\n"


def replace_between_markers(text: str, table: str) -> str:
    start = text.index(START) + len(START)
    end = text.index(END)
    return text[:start] + "\n" + table + text[end:]
