"""Ray: the events the remote bodies report to.

``Events`` (a named actor the remote bodies report to), ``start_events``,
``events_handle``, ``announce``, in ``RAY_NAMESPACE``. ``ray`` is imported
only when one of these runs: it is an optional extra.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

RAY_NAMESPACE = "dshtools-tests"


class Events:
    """Named events with a value, and counters (run as a threaded Ray
    actor): a body ``set``s an event when it reaches a point, the test
    ``wait``s for it, so no test sleeps to wait for an interleaving."""

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


@functools.cache
def _events_actor_class() -> Any:
    import ray

    return ray.remote(num_cpus=0, max_concurrency=64)(Events)  # type: ignore[call-overload]


def start_events(name: str) -> Any:
    """Start the ``Events`` actor ``name`` on the running Ray and return its
    handle once it answers (the caller ``ray.kill``s it)."""
    import ray

    handle = _events_actor_class().options(name=name).remote()
    ray.get(handle.count.remote("warm-up"))
    return handle


_handles: dict[str, Any] = {}


def events_handle(name: str) -> Any:
    """The handle of the ``Events`` actor ``name``, from a body or the test
    (cached per process)."""
    import ray

    handle = _handles.get(name)
    if handle is None:
        handle = _handles[name] = ray.get_actor(name, namespace=RAY_NAMESPACE)
    return handle


def announce(name: str, tag: str, value: Any = True) -> None:
    """Set event ``tag`` on actor ``name`` from a body. ``.future().result()``,
    not ``ray.get()``: a body must not give up its CPU slot."""
    events_handle(name).set.remote(tag, value).future().result()
