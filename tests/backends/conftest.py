"""Fixtures of the backend tests.

* ``ray_cluster``: one fresh local Ray with 2 CPUs for every Ray test of
  the session (``address="local"``: never a cluster another run left
  behind), in a short temporary directory of its own (Ray's socket paths),
  shut down and removed at session end. Bodies are pickled by reference to
  their test module, so Ray workers import the test modules: the cluster
  starts with the checkout on the workers' ``PYTHONPATH``. ``ray`` is
  imported only when a test asks for it (it is an optional extra).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.ray_events import RAY_NAMESPACE

CHECKOUT = str(Path(__file__).resolve().parents[2])  # test modules import as tests.*


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[None]:
    import ray

    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = CHECKOUT if not old else CHECKOUT + os.pathsep + old
    temp_dir = tempfile.mkdtemp(prefix="dshray", dir="/tmp")
    try:
        ray.init(
            address="local",
            num_cpus=2,
            include_dashboard=False,
            log_to_driver=False,
            namespace=RAY_NAMESPACE,
            _temp_dir=temp_dir,
        )
    finally:
        if old is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = old
    try:
        yield
    finally:
        ray.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)
