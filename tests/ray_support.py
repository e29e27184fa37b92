"""What the Ray tests share: one local cluster for the test session and a
named actor the remote bodies report to.

Bodies are pickled by reference to their test module, so Ray workers import
the test modules and this one: the cluster is started with this directory
on the workers' ``PYTHONPATH``. Imported only by Ray tests (``ray`` is in
the extra that ``.ci/run`` installs).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from typing import Any

import ray

__all__ = ["NAMESPACE", "Events", "EventsActor", "actor", "announce", "local_ray"]

NAMESPACE = "dshtools-tests"


class Events:
    """Named events with a value, and counters (a threaded actor): a body
    ``set``s an event when it reaches a point, the test ``wait``s for it,
    so no test sleeps to wait for an interleaving."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._values: dict[str, Any] = {}
        self._counts: dict[str, int] = {}

    def set(self, name: str, value: Any = True) -> None:
        with self._cond:
            self._values[name] = value
            self._cond.notify_all()

    def wait(self, name: str, timeout: float) -> Any:
        with self._cond:
            self._cond.wait_for(lambda: name in self._values, timeout)
            return self._values.get(name)

    def incr(self, name: str) -> None:
        with self._cond:
            self._counts[name] = self._counts.get(name, 0) + 1

    def count(self, name: str) -> int:
        with self._cond:
            return self._counts.get(name, 0)


EventsActor: Any = ray.remote(num_cpus=0, max_concurrency=64)(Events)  # type: ignore[call-overload]

_handles: dict[str, Any] = {}


def actor(name: str) -> Any:
    """The named ``Events`` actor, from a body or the test (cached per
    process)."""
    handle = _handles.get(name)
    if handle is None:
        handle = _handles[name] = ray.get_actor(name, namespace=NAMESPACE)
    return handle


def announce(name: str, tag: str, value: Any = True) -> None:
    """Set event ``tag`` on actor ``name`` from a body. ``.future().result()``,
    not ``ray.get()``: a body must not give up its CPU slot."""
    actor(name).set.remote(tag, value).future().result()


def local_ray() -> Iterator[None]:
    """A fresh local Ray with 2 CPUs (``address="local"``: never a cluster
    another run left behind), in a short temporary directory of its own
    (Ray's socket paths), removed after ``ray.shutdown()``. A generator for
    a session fixture."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the checkout: test modules import as tests.*
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = here if not old else here + os.pathsep + old
    temp_dir = tempfile.mkdtemp(prefix="dshray", dir="/tmp")
    try:
        ray.init(
            address="local",
            num_cpus=2,
            include_dashboard=False,
            log_to_driver=False,
            namespace=NAMESPACE,
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
