"""mypy enforces the registry's typing contract (docs/contract.md §2): it rejects
assigning a read-only ``signal``, assigning ``None`` to or deleting the
dispatch view's ``signal``, and a ``ToolExecutionInput`` without ``signal``;
it accepts replacing the dispatch view's ``signal`` with another signal."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
CASES = ROOT / "tests" / "typing" / "registry_views.py"


def run_mypy(*paths: str, cwd: pathlib.Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, MYPYPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "setup.cfg"), "--no-incremental", *paths],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.timeout(300)
def test_registry_typing_cases_pass_with_every_expected_error_present() -> None:
    proc = run_mypy(str(CASES))
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.timeout(300)
def test_each_ignored_line_is_a_real_error(tmp_path: pathlib.Path) -> None:
    """Negative control: strip the ignores; mypy must report exactly the
    marked lines, each with the marked code."""
    text = CASES.read_text(encoding="utf-8")
    expected: dict[int, str] = {}
    stripped = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        m = re.search(r"\s*# type: ignore\[([a-z-]+)\]", line)
        if m:
            expected[lineno] = m.group(1)
            line = line[: m.start()]
        stripped.append(line)
    assert len(expected) == 5
    target = tmp_path / "stripped_views.py"
    target.write_text("\n".join(stripped) + "\n", encoding="utf-8")
    proc = run_mypy(str(target))
    found: dict[int, str] = {}
    for out in proc.stdout.splitlines():
        m = re.match(r".*stripped_views\.py:(\d+): error: .*\[([a-z-]+)\]$", out)
        if m:
            found[int(m.group(1))] = m.group(2)
    assert found == expected, proc.stdout
