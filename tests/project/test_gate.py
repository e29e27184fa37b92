"""The mechanical gate, run as part of the test command: ``ruff check``,
``ruff format --check`` and ``mypy --strict`` (configured in ``setup.cfg``)
over the package, the tests and the benchmarks. Style and types never drift
silently: a lint error, an unformatted file or a type error fails the
suite like a broken behaviour does."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
TREES = ("dshtools", "tests", "benchmarks")
# started by this folder's conftest.py when collection ends
MYPY = ("mypy", "--config-file", "setup.cfg", "--strict", "--cache-dir", ".cache/mypy", *TREES)


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *argv], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
    )


@pytest.mark.timeout(300)
def test_ruff_check_finds_nothing() -> None:
    proc = run("ruff", "check", "--no-cache", *TREES)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.timeout(300)
def test_ruff_format_leaves_every_file_unchanged() -> None:
    proc = run("ruff", "format", "--check", "--no-cache", *TREES)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.timeout(300)
def test_mypy_strict_passes_on_the_package_the_tests_and_the_benchmarks(gate_mypy: subprocess.Popen[str]) -> None:
    try:
        stdout, stderr = gate_mypy.communicate(timeout=300)
    finally:
        if gate_mypy.poll() is None:
            gate_mypy.kill()
            gate_mypy.communicate()
    assert gate_mypy.returncode == 0, stdout + stderr
    assert "no issues found" in stdout, stdout


@pytest.mark.timeout(300)
def test_import_linter_keeps_the_layering_contract() -> None:
    """The layers of docs/architecture.md, declared in pyproject.toml's
    ``[tool.importlinter]``: a module that imports upward fails the suite."""
    exe = pathlib.Path(sys.executable).with_name("lint-imports")
    proc = subprocess.run([str(exe), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert " 0 broken" in proc.stdout, proc.stdout
