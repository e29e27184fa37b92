"""The gate's mypy run (``test_gate.py``) starts when collection ends, beside
the tests that run before it, instead of in turn: it is the longest step of
the test command on a fresh checkout (the standard library, the SDKs and the
three trees analysed once), and the suite leaves a core idle most of the
time. It runs at a lower priority, so timing-bound tests keep the CPU they
had, and with a cache directory of its own (``.cache/mypy``, kept between
runs on one checkout), so no other mypy run of the suite shares its cache
while both run. The test waits for it with the same bound as before and
reads its report; a run that ends before the test is reached is killed.
"""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

_RUN = pytest.StashKey["subprocess.Popen[str]"]()


def _gate_mypy_selected(session: pytest.Session) -> bool:
    from tests.project import test_gate

    wanted = test_gate.test_mypy_strict_passes_on_the_package_the_tests_and_the_benchmarks
    return any(getattr(item, "function", None) is wanted for item in session.items)


def pytest_collection_finish(session: pytest.Session) -> None:
    if session.config.option.collectonly or not _gate_mypy_selected(session):
        return
    from tests.project import test_gate

    nice = shutil.which("nice")
    prefix = [nice, "-n", "10"] if nice else []
    session.config.stash[_RUN] = subprocess.Popen(
        [*prefix, sys.executable, "-m", *test_gate.MYPY],
        cwd=test_gate.ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def pytest_sessionfinish(session: pytest.Session) -> None:
    run = session.config.stash.get(_RUN, None)
    if run is not None and run.poll() is None:
        run.kill()
        run.communicate()


@pytest.fixture
def gate_mypy(request: pytest.FixtureRequest) -> subprocess.Popen[str]:
    """The gate's mypy run, started when collection ended."""
    return request.config.stash[_RUN]
