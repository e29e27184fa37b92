"""Smoke test of the benchmark package: every case runs, with a handful of
operations, and produces the figures and keys the results file promises.
No timing is asserted here: speed lives only in ``python -m benchmarks``."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest

from benchmarks import __main__ as bench_main
from benchmarks import _timing, floors, latency, leaks, peers, report, signals, threads

pytestmark = pytest.mark.timeout(120)

REQUIRED_KEYS = [
    "dispatch.ratio",
    "dispatch.with_hooks_ratio",
    "dispatch.overhead_us",
    "dispatch.typed_ratio",
    "latency.wait_p99_ms",
    "latency.execute_p99_ms",
    "leaks.listener_count_after",
    "leaks.rss_growth_mb",
    "leaks.threads_with_10k_timeouts",
    "batch.ratio_to_ideal",
]


# Written by a full run only (callgrind counts are left out of --quick).
FULL_RUN_KEYS = ["dispatch.typed_instructions_ratio"]


def _lookup(results: dict[str, object], dotted: str) -> object:
    node: object = results
    for part in dotted.split("."):
        assert isinstance(node, dict) and part in node, f"missing {dotted}"
        node = node[part]
    return node


def test_every_signal_case_and_its_baseline_run_a_few_operations() -> None:
    for name, case in signals.OURS.items():
        base, label = signals.BASELINE[name]
        ours_ns, base_ns = _timing.paired([case, base], number=3, rounds=1, warmup=0)
        assert ours_ns > 0 and base_ns > 0 and label


def test_every_installed_peer_case_runs_a_few_operations() -> None:
    ran = 0
    for module, factory in peers.PEERS.values():
        try:
            importlib.import_module(module)
        except ImportError:
            continue
        for op, case in factory().items():
            assert op in signals.OURS, f"peer operation {op} has no dshtools counterpart"
            _timing.paired([signals.OURS[op], case], number=2, rounds=1, warmup=0)
            ran += 1
    if not ran:
        pytest.skip("no peer library installed (optional bench extra)")


def test_the_abort_floor_calls_every_callback_once_with_the_signal_despite_a_raising_one() -> None:
    controller = floors.FloorController()
    seen: list[object] = []

    def boom(_signal: object) -> None:
        raise ValueError("contained")

    controller.signal.callbacks.extend([seen.append, boom, seen.append])
    controller.abort()
    assert controller.signal.aborted
    assert seen == [controller.signal, controller.signal]


def test_the_add_remove_floor_stores_each_handle_until_it_is_removed() -> None:
    signal = floors.FloorSignal()
    first, second = signal.add_listener(signals.cb), signal.add_listener(signals.cb)
    assert list(signal.handles) == [first, second]
    first.remove()
    assert list(signal.handles) == [second]


def test_every_floor_runs_beside_dshtools_and_its_comparison() -> None:
    assert set(floors.FLOOR) <= set(signals.OURS)
    for case in floors.FLOOR.values():
        case(3)()
    figures = floors.run(quick=True)
    assert figures["add_remove_listener"]["against"] == "baseline"
    for op, entry in figures.items():
        assert entry["floor_ns_per_op"] > 0 and entry["dshtools_ns_per_op"] > 0, op
        if entry["against"] is not None:
            assert entry["floor_ratio"] > 0 and entry["against_ns_per_op"] > 0, op


def test_latency_cases_wake_every_waiter_and_abort_every_execute() -> None:
    assert len(latency.wait_latency(5)) == 5
    samples, aborted = latency.execute_latency(5)
    assert len(samples) == 5
    assert aborted == 5


def test_threads_group_reports_execute_from_1_2_and_4_callers_against_bare_submit() -> None:
    figures = threads.run(quick=True)
    assert set(figures["callers"]) == {str(n) for n in threads.CALLERS}
    for row in figures["callers"].values():
        assert row["execute_calls_per_s"] > 0 and row["bare_calls_per_s"] > 0 and row["ratio"] > 0
    table = report.render({"threads": figures})
    assert "Caller threads" in table and table.count("\n| ") >= 1 + len(threads.CALLERS)


def test_dispatch_leak_case_leaves_no_listener_on_the_shared_signal() -> None:
    figures = leaks.dispatch_leak(200)
    assert figures["listener_count_after"] == 0
    assert figures["errors"] == 0


def test_quick_run_writes_every_required_key_and_renders_a_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "results.json"
    assert bench_main.main(["--quick", "--out", str(out)]) == 0
    results = json.loads(out.read_text())
    for key in REQUIRED_KEYS:
        assert isinstance(_lookup(results, key), (int, float)), key
    for name in signals.OURS:
        entry = results["signals"][name]
        assert {"ns_per_op", "ratio"} <= entry.keys()
    for lib, entry in results["peers"].items():
        for op, figures in entry.items():
            assert {"ns_per_op", "ratio"} <= figures.keys(), (lib, op)
    assert set(results["peers"]) | set(results["meta"]["peers_skipped"]) == {"cantok", "cancelscope", "autogen-core"}
    assert results["signal_scaling"]["linearity"] > 0
    assert set(results["floors"]) == set(floors.FLOOR)
    printed = capsys.readouterr().out
    assert "Dispatch overhead" in printed and "Batch throughput" in printed and "Floors" in printed


def test_committed_results_file_has_every_required_key() -> None:
    path = Path(bench_main.DEFAULT_OUT)
    if not path.exists():
        pytest.skip("benchmarks/results.json not generated yet")
    results = json.loads(path.read_text())
    for key in [*REQUIRED_KEYS, *FULL_RUN_KEYS]:
        _lookup(results, key)
    assert results["meta"]["quick"] is False


def test_docs_table_is_replaced_between_the_markers_only() -> None:
    page = f"intro\n{report.START}\nold table\n{report.END}\noutro\n"
    new = report.replace_between_markers(page, "| new |\n")
    assert new == f"intro\n{report.START}\n| new |\n{report.END}\noutro\n"
