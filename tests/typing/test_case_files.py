"""The typing contracts of the case files in tests/typing (every ``*.py``
here that is not a test module): ``signal_api.py`` for the cancellation
primitive (docs/contract.md#cancellation), ``registry_views.py`` for the registry
types (docs/contract.md#calls: a read-only ``signal`` cannot be assigned, the
dispatch view's ``signal`` cannot be set to ``None`` or deleted but can be
replaced by another signal, a ``ToolExecutionInput`` needs a ``signal``).

For each case file, mypy (strict, warn_unused_ignores, the plugin of
setup.cfg) passes, so a contract that loosens (an expected error
disappears, making its ``# type: ignore[...]`` unused) or tightens (a valid
line no longer type-checks) fails the suite; and, as a negative control,
with the ignores stripped mypy reports exactly the marked lines, each with
the marked code."""

from __future__ import annotations

import pathlib
import re

import pytest

from tests.helpers.processes import run_mypy

ROOT = pathlib.Path(__file__).resolve().parents[2]
TYPING_DIR = ROOT / "tests" / "typing"
CASE_FILES = sorted(p for p in TYPING_DIR.glob("*.py") if not p.name.startswith(("test_", "__")))
IGNORE = re.compile(r"\s*# type: ignore\[([a-z-]+)\]")
# The fewest marked errors each known case file holds: a case file whose
# cases were lost fails here, not silently.
FEWEST_ERRORS = {"signal_api.py": 20, "registry_views.py": 5, "typed_tools.py": 1, "exit_status.py": 1}
# The negative control runs on every case file that marks errors (a file
# of valid usage only, such as sdk_params.py, has nothing to strip).
MARKING_FILES = [p for p in CASE_FILES if IGNORE.search(p.read_text(encoding="utf-8"))]
# The case files of the provider SDKs (sdk_*.py) are checked in one mypy
# run: analysing the SDKs is most of a run's time, about 20 s each.
SDK_CASES = [p for p in CASE_FILES if p.name.startswith("sdk_")]
RUNS = [[p] for p in CASE_FILES if p not in SDK_CASES] + ([SDK_CASES] if SDK_CASES else [])


def test_the_known_case_files_are_checked() -> None:
    assert set(FEWEST_ERRORS) <= {p.name for p in MARKING_FILES}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("cases", RUNS, ids=["+".join(p.stem for p in run) for run in RUNS])
def test_the_case_file_passes_mypy_strict_with_every_expected_error_present(cases: list[pathlib.Path]) -> None:
    proc = run_mypy("--strict", "--warn-unused-ignores", *cases)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(rf"no issues found in {len(cases)} source files?$", proc.stdout, re.M), proc.stdout


@pytest.mark.timeout(300)
@pytest.mark.parametrize("cases", MARKING_FILES, ids=[p.stem for p in MARKING_FILES])
def test_each_ignored_line_of_the_case_file_is_a_real_error(cases: pathlib.Path, tmp_path: pathlib.Path) -> None:
    expected: set[tuple[int, str]] = set()
    stripped = []
    for lineno, line in enumerate(cases.read_text(encoding="utf-8").splitlines(), start=1):
        m = IGNORE.search(line)
        if m:
            expected.add((lineno, m.group(1)))
            line = line[: m.start()]
        stripped.append(line)
    assert len(expected) >= FEWEST_ERRORS.get(cases.name, 1)
    target = tmp_path / f"stripped_{cases.name}"
    target.write_text("\n".join(stripped) + "\n", encoding="utf-8")
    proc = run_mypy("--strict", "--warn-unused-ignores", target)
    found = {
        (int(m.group(1)), m.group(2))
        for m in re.finditer(rf"{re.escape(target.name)}:(\d+): error: .*\[([a-z-]+)\]$", proc.stdout, re.M)
    }
    assert found == expected, proc.stdout
