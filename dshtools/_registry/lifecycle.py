"""A registry's bookkeeping off the call path: registration of its tools
and hooks, the backends it shares, ``close()``, the fork reset, and
``RegistryStatistics``.

Owns ``ToolRegistry``'s ``register``, ``add_*``, ``statistics`` and
``close`` (the methods keep their contract and call these): the tools'
and hooks' copy-on-write (``register_definition``, ``add_hook``), the
count of open registries using each backend (``adopt``/``release``: a
backend shared by several registries is closed when the last of them
closes, by ``close_registry``), and the fork handler that starts every
live registry over in a forked child (``track``). No call reads anything
here; this module never imports the registry (it knows one by ``Books``,
the ``run.RegistryState`` with the fields kept here).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any, Protocol

import attrs

from .._backends.base import Backend
from .._core.interrupts import after_fork_in_child, interrupt_slice
from .._journal import Journal
from .._signal import abort_owned
from .._types.hooks import ToolDefinition
from .run import Hooks, RegistryState, on_worker_of

__all__ = [
    "Books",
    "RegistryStatistics",
    "add_hook",
    "adopt",
    "attach_journal",
    "check_hook",
    "close_registry",
    "register_definition",
    "release",
    "statistics_of",
    "track",
    "with_hook",
    "without_hook",
]


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
    (a new ``Hooks``). ``fn`` is there: only ``add_hook``'s ``unregister()``
    calls this, at most once per occurrence it added."""
    current: tuple[object, ...] = getattr(hooks, kind)
    i = max(i for i, hook in enumerate(current) if hook is fn)
    changes: dict[str, Any] = {kind: current[:i] + current[i + 1 :]}
    return attrs.evolve(hooks, **changes)


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


# ----------------------------------------------------------- registration


class Books(RegistryState, Protocol):
    """What this module keeps of a registry besides what a run reads: its
    own thread backend, its tools and hooks (each replaced whole under
    ``_lock``, never mutated: a call reads them without the lock), every
    backend it closes, and those ``close()`` still has to close (``None``
    until a ``close()`` decided them)."""

    _definitions: dict[str, ToolDefinition]
    _hooks: Hooks
    _journal: Journal | None
    _backends: list[Backend]
    _closing: list[Backend] | None

    @property
    def _threads(self) -> Backend: ...


def attach_journal(registry: Books, journal: Journal) -> None:
    """Journal every later call of a registry made without a journal (the
    command line's ``replay --journal``; docs/contract.md#journal). Raises
    ``ValueError`` when it has a journal already or a body is in flight,
    ``RuntimeError`` after ``close()``."""
    with registry._lock:
        if registry._closed:
            raise RuntimeError("ToolRegistry is closed: a journal cannot be attached")
        if registry._journal is not None or registry._bodies:
            raise ValueError("a journal is attached to a registry that has none and runs nothing")
        registry._journal = journal


def register_definition(registry: Books, definition: ToolDefinition) -> Callable[[], None]:
    """``ToolRegistry.register``: add ``definition`` (adopting its own
    backend), return its idempotent ``unregister()``."""
    if not isinstance(definition, ToolDefinition):
        raise TypeError(f"register() takes a ToolDefinition, not {type(definition).__name__}")
    if registry._closed:
        raise RuntimeError("ToolRegistry is closed: register() after close() is not allowed")
    own = definition.backend
    (own or registry._backend).validate(definition.name, definition.execute)
    with registry._lock:
        if registry._closed:
            raise RuntimeError("ToolRegistry is closed: register() after close() is not allowed")
        if definition.name in registry._definitions:
            raise ValueError(f"a tool named {definition.name!r} is already registered")
        if own is not None and not any(b is own for b in registry._backends):
            adopt(own)
            registry._backends.append(own)
        # Copy-on-write: a call's definition lookup never sees a half-update.
        defs = dict(registry._definitions)
        defs[definition.name] = definition
        registry._definitions = defs

    def unregister() -> None:
        with registry._lock:
            if registry._definitions.get(definition.name) is definition:
                defs = dict(registry._definitions)
                del defs[definition.name]
                registry._definitions = defs

    return unregister


def add_hook(registry: Books, kind: str, fn: object) -> Callable[[], None]:
    """What every ``add_*`` method of ``ToolRegistry`` does: check ``fn``,
    add it to the ``kind`` hooks (copy-on-write) and return its idempotent
    ``unregister()``."""
    check_hook(kind, fn)
    with registry._lock:
        registry._hooks = with_hook(registry._hooks, kind, fn)
    removed = False

    def unregister() -> None:
        nonlocal removed
        with registry._lock:
            if not removed:
                removed = True
                registry._hooks = without_hook(registry._hooks, kind, fn)

    return unregister


def statistics_of(registry: Books) -> RegistryStatistics:
    """``ToolRegistry.statistics()``."""
    hooks = registry._hooks
    return RegistryStatistics(
        bodies_in_flight=len(registry._bodies),
        tools=len(registry._definitions),
        pre_execute_hooks=len(hooks.pre_execute),
        guards=len(hooks.guards),
        around_dispatch_hooks=len(hooks.around),
        post_execute_hooks=len(hooks.post_execute),
        result_observers=len(hooks.observers),
        backends=len(registry._backends),
        closed=registry._closed,
    )


# ------------------------------------------------------------------ close


def close_registry(registry: Books, abort: object = None) -> None:
    """``ToolRegistry.close(abort)``: refuse new calls, abort the bodies in
    flight with ``abort`` unless it is ``None``, wait for them, then close
    the backends this registry is the last to use."""
    if on_worker_of(registry):
        raise RuntimeError("ToolRegistry.close() called from a tool body would wait for that body forever")
    # Not "already closed" by the flag alone: a close() interrupted by
    # Ctrl-C while waiting left `_closed` set, and the next one must
    # still wait for the bodies and close the backends.
    with registry._lock:
        if abort is not None and registry._close_reason is None:
            registry._close_reason = abort  # before `_closed`: a call that sees one sees both
        registry._closed = True
        # A body registers in `_bodies` before it reads `_closed`: one not
        # in this snapshot sees `_closed` and is never dispatched.
        dispatched = [ctx.signal for ctx in registry._bodies] if abort is not None else []  # type: ignore[attr-defined]
    for signal in dispatched:
        # Outside the lock: the listeners run here, and a settling body
        # takes the lock to notify close().
        abort_owned(signal, abort)
    with registry._lock:
        while registry._bodies:
            registry._idle.wait(interrupt_slice())
        if registry._closing is None:
            # Decided once: the own thread backend is this registry's
            # alone; another backend is closed by the last registry that
            # uses it. A close() interrupted below is finished by the next.
            registry._closing = [b for b in registry._backends if b is registry._threads or release(b)]
        closing = registry._closing
    while closing:
        closing[0].close()  # idempotent
        closing.pop(0)


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
