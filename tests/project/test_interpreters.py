"""What pyproject.toml says about interpreters is what ``.ci/run`` tests
(docs/contract.md#interpreters): the classifiers name exactly the versions of
the matrix, ``requires-python`` starts at the oldest of them, and the
free-threaded classifier is there because CI runs the free-threaded build."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def test_the_classifiers_name_exactly_the_interpreters_ci_runs() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text()
    run = (ROOT / ".ci" / "run").read_text()
    matrix = re.search(r"^SUPPORTED_VERSIONS=\(([^)]*)\)", run, re.MULTILINE)
    assert matrix is not None, ".ci/run names its matrix in SUPPORTED_VERSIONS"
    supported = matrix.group(1).split()
    classified = re.findall(r'"Programming Language :: Python :: (3\.\d+)"', pyproject)
    assert sorted(classified, key=_version) == sorted(supported, key=_version)
    assert f'requires-python = ">={min(supported, key=_version)}"' in pyproject
    assert '"Programming Language :: Python :: Free Threading :: ' in pyproject
    assert ".ci/build-python313t" in run and "assert_gil_off.py" in run
