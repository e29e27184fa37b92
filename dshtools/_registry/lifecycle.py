"""A registry's bookkeeping off the call path: what registration, sharing,
forking and ``close()`` keep track of, and ``RegistryStatistics``.

Owns the hook tuples' copy-on-write (``check_hook``, ``with_hook``,
``without_hook``, for ``ToolRegistry``'s ``add_*`` methods), the count of
open registries using each backend (``adopt``/``release``: a backend shared
by several registries is closed when the last of them closes), and the
fork handler that starts every live registry over in a forked child
(``track``). No call reads anything here; this module never imports the
registry (it knows one by ``run.RegistryState``).
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

import attrs

from .._backends.base import Backend
from .._core.interrupts import after_fork_in_child
from .run import Hooks, RegistryState

__all__ = ["RegistryStatistics", "adopt", "check_hook", "release", "track", "with_hook", "without_hook"]


@attrs.frozen(kw_only=True)
class RegistryStatistics:
    """``ToolRegistry.statistics()``: ``bodies_in_flight`` (dispatch attempts
    submitted and not yet joined), ``tools``, the number of hooks of each
    kind, ``backends`` (the backends the registry will close) and
    ``closed``."""

    bodies_in_flight: int
    tools: int
    pre_execute_hooks: int
    guards: int
    around_dispatch_hooks: int
    post_execute_hooks: int
    result_observers: int
    backends: int
    closed: bool


# ------------------------------------------------------------------ hooks


def check_hook(kind: str, fn: object) -> None:
    """Raise ``TypeError`` unless ``fn`` can be registered as a ``kind`` hook."""
    if not callable(fn):
        raise TypeError(f"{kind} hook must be callable, not {type(fn).__name__}")
    if isinstance(fn, type) and any("__call__" in vars(k) for k in fn.__mro__[:-1]):
        # Its instances are the hooks (TimeoutPolicy, say): registered
        # as it is, every call would construct one instead of running.
        raise TypeError(f"{kind} hook {fn.__name__} is a class whose instances are hooks: pass {fn.__name__}(...)")


def with_hook(hooks: Hooks, kind: str, fn: object) -> Hooks:
    """``hooks`` with ``fn`` appended to its ``kind`` tuple (a new ``Hooks``)."""
    added: dict[str, Any] = {kind: getattr(hooks, kind) + (fn,)}
    return attrs.evolve(hooks, **added)


def without_hook(hooks: Hooks, kind: str, fn: object) -> Hooks:
    """``hooks`` without the last occurrence of ``fn`` in its ``kind`` tuple
    (a new ``Hooks``), or ``hooks`` itself when ``fn`` is not there."""
    current: tuple[object, ...] = getattr(hooks, kind)
    for i in range(len(current) - 1, -1, -1):
        if current[i] is fn:
            changes: dict[str, Any] = {kind: current[:i] + current[i + 1 :]}
            return attrs.evolve(hooks, **changes)
    return hooks


# --------------------------------------------------------------- backends

# How many open registries use each backend (by identity): a backend shared
# by several registries is closed when the last of them closes.
# Must be held while reading or mutating _backend_users.
_users_lock = threading.Lock()
_backend_users: dict[int, tuple[Backend, int]] = {}


def adopt(backend: Backend) -> None:
    """Count one more open registry using ``backend``."""
    with _users_lock:
        _, count = _backend_users.get(id(backend), (backend, 0))
        _backend_users[id(backend)] = (backend, count + 1)


def release(backend: Backend) -> bool:
    """Drop one registry's use; True when it was the last one."""
    with _users_lock:
        _, count = _backend_users.get(id(backend), (backend, 1))
        if count <= 1:
            _backend_users.pop(id(backend), None)
            return True
        _backend_users[id(backend)] = (backend, count - 1)
        return False


# ------------------------------------------------------------------- fork

# Registries alive in this process, for the fork handler below.
_registries: weakref.WeakSet[RegistryState] = weakref.WeakSet()


def track(registry: RegistryState) -> None:
    """Have the fork handler start ``registry`` over in a forked child."""
    _registries.add(registry)


def _after_fork_in_child() -> None:
    # Only the forking thread exists in the child: the calls other threads
    # were running (and any lock they held) belong to the parent. Start each
    # registry over with fresh locks and no call in flight; its thread
    # backend makes fresh workers on the next call (docs/contract.md#a10).
    for registry in list(_registries):
        registry._idle = threading.Condition(threading.Lock())
        registry._lock = registry._idle._lock  # type: ignore[attr-defined]
        registry._bodies = set()


after_fork_in_child(_after_fork_in_child)
