"""Runs mypy (strict, warn_unused_ignores) over every file in tests/typing,
so a typing contract that loosens (an expected error disappears, making its
``# type: ignore[...]`` unused) or tightens (a valid line no longer
type-checks) fails the suite. Plus a negative control for the signal API
cases: with the ignores stripped, mypy reports exactly the marked lines,
each with the marked code."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
TYPING_DIR = ROOT / "tests" / "typing"
SIGNAL_CASES = TYPING_DIR / "signal_api.py"
IGNORE = re.compile(r"\s*# type: ignore\[([a-z-]+)\]")


def run_mypy(*paths: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            str(ROOT / "setup.cfg"),
            "--strict",
            "--warn-unused-ignores",
            "--no-incremental",
            *paths,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.timeout(300)
def test_every_typing_case_file_passes_mypy_strict_with_every_expected_error_present() -> None:
    files = sorted(TYPING_DIR.glob("*.py"))
    assert SIGNAL_CASES in files
    proc = run_mypy(str(TYPING_DIR))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    checked = re.search(r"no issues found in (\d+) source files?", proc.stdout)
    assert checked is not None, proc.stdout
    assert int(checked.group(1)) >= len(files)


@pytest.mark.timeout(300)
def test_each_ignored_line_of_the_signal_cases_is_a_real_error(tmp_path: pathlib.Path) -> None:
    expected: set[tuple[int, str]] = set()
    stripped = []
    for lineno, line in enumerate(SIGNAL_CASES.read_text(encoding="utf-8").splitlines(), start=1):
        m = IGNORE.search(line)
        if m:
            expected.add((lineno, m.group(1)))
            line = line[: m.start()]
        stripped.append(line)
    assert len(expected) >= 20
    target = tmp_path / "stripped_signal_api.py"
    target.write_text("\n".join(stripped) + "\n", encoding="utf-8")
    proc = run_mypy(str(target))
    found = {
        (int(m.group(1)), m.group(2))
        for m in re.finditer(r"stripped_signal_api\.py:(\d+): error: .*\[([a-z-]+)\]$", proc.stdout, re.M)
    }
    assert found == expected, proc.stdout
