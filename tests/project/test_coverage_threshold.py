"""The coverage threshold of the test command fails a run of the whole suite
under it, and leaves a run of chosen paths or of a selection alone
(``tests/coverage_gate.py``; docs/decisions/0057).

Each case runs pytest in a child process on a tiny project of its own: one
module with two branches, two tests that between them cover one, and a
threshold of 100 %. The child gets the same plugins (``-p tests.coverage_gate
--cov``) and none of this run's coverage variables, so it measures only
itself. Plugins are not auto-loaded in the child (only pytest-cov and the
gate are named): the case needs no other, and the installed ones (the
SDKs', Hypothesis', anyio's) cost each child run seconds of start-up."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SETUP_CFG = """\
[tool:pytest]
testpaths = checks
addopts = -p tests.coverage_gate --cov --cov-report=term

[coverage:run]
branch = true
source_pkgs = half

[coverage:report]
fail_under = 100
"""

MODULE = """\
def sign(x):
    if x < 0:
        return -1
    return 1
"""

CHECKS = """\
from half import sign

def test_one():
    assert sign(1) == 1

def test_two():
    assert sign(2) == 1
"""


def run_pytest(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COVERAGE_")}
    env["PYTHONPATH"] = os.pathsep.join([str(project), str(ROOT)])
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "pytest_cov.plugin", *args],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "setup.cfg").write_text(SETUP_CFG)
    (tmp_path / "half.py").write_text(MODULE)
    (tmp_path / "checks").mkdir()
    (tmp_path / "checks" / "test_half.py").write_text(textwrap.dedent(CHECKS))
    return tmp_path


@pytest.mark.timeout(150)
def test_a_run_of_the_whole_suite_under_the_threshold_fails(project: Path) -> None:
    proc = run_pytest(project)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "2 passed" in proc.stdout, proc.stdout
    assert "Coverage failure" in proc.stdout, proc.stdout
    assert "not checked" not in proc.stdout, proc.stdout


@pytest.mark.timeout(150)
def test_a_run_of_chosen_paths_reports_coverage_but_is_not_gated(project: Path) -> None:
    proc = run_pytest(project, "checks/test_half.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "half.py" in proc.stdout, proc.stdout  # the table is still printed
    assert "coverage threshold (100 %) not checked" in proc.stdout, proc.stdout
    assert "Coverage failure" not in proc.stdout, proc.stdout


@pytest.mark.timeout(150)
def test_a_selection_of_the_whole_suite_is_not_gated(project: Path) -> None:
    proc = run_pytest(project, "-k", "one")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed, 1 deselected" in proc.stdout, proc.stdout
    assert "not checked" in proc.stdout, proc.stdout


@pytest.mark.timeout(150)
def test_a_failing_test_still_fails_a_partial_run(project: Path) -> None:
    (project / "checks" / "test_broken.py").write_text("def test_broken():\n    assert False\n")
    proc = run_pytest(project, "checks/test_broken.py")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "1 failed" in proc.stdout, proc.stdout
