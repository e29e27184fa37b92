"""Process-tree helpers for the Ray backend's forced stop (docs/contract.md#backends).

A forced stop kills the Ray worker that runs a body and everything that
body started, including children that moved to a session of their own
(``run_process`` starts its child with ``start_new_session=True``). Ray's
own ``ray.cancel(force=True)`` ends the worker process; these helpers
record the worker's descendants *before* that (an orphan is reparented and
can no longer be found by its ancestry), kill them, and wait until every
recorded process is gone.

Linux only (``/proc``); elsewhere ``snapshot`` records nothing and the
forced stop is Ray's alone. Each process is identified by its pid *and* its
start time, so a pid reused by an unrelated process is never signalled nor
waited for. Waiting uses ``pidfd_open`` (no polling) where the kernel has
it, else a 20 ms poll.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import time

from ..._os import procfs as _procfs

__all__ = ["ProcessId", "alive", "kill_tree", "snapshot", "wait_gone"]

_log = logging.getLogger("dshtools.ray")

ProcessId = tuple[int, int, int]
"""``(pid, start time in clock ticks, process group id)``."""


def identity(pid: int) -> ProcessId | None:
    """``(pid, start time, pgid)`` of a live process, or ``None``."""
    info = _procfs.stat(pid)
    if info is None or not info.alive:
        return None
    return (pid, info.start, info.pgrp)


def alive(proc: ProcessId) -> bool:
    """Whether the process recorded as ``proc`` still runs (a zombie does not)."""
    info = _procfs.stat(proc[0])
    return info is not None and info.start == proc[1] and info.alive


def snapshot(root: int) -> list[ProcessId]:
    """Every live descendant of ``root`` (not ``root`` itself), by ancestry, now."""
    procs = _procfs.try_scan()
    if procs is None:
        if _procfs.HAVE_PROC:
            # Unreadable now (no descriptor left), not "no descendants".
            _log.warning("forced stop of Ray worker %d: /proc cannot be read; what it started may survive", root)
        return []
    return [(p.pid, p.start, p.pgrp) for p in _procfs.descendants(procs, root) if p.alive]


def kill_tree(worker: ProcessId | None, descendants: list[ProcessId]) -> None:
    """SIGKILL the recorded ``descendants``: a descendant that leads its own
    process group (a new session, say) is killed with its whole group; the
    worker's own group is killed only while its leader is still ``worker``.
    Never signals the calling process's group."""
    own_group = os.getpgrp()
    groups: set[tuple[int, int]] = set()  # (leader pid = pgid, its start time)
    for proc in descendants:
        pid, start, pgid = proc
        if not alive(proc):
            continue
        if pgid == pid and pgid != own_group:
            groups.add((pgid, start))
        else:
            # Pinned and re-checked by start time: a reused pid is never hit.
            _procfs.signal_same(pid, start, signal.SIGKILL)
    if worker is not None and worker[2] == worker[0] and worker[2] != own_group:
        groups.add((worker[0], worker[1]))
    for pgid, start in groups:
        # Only while the recorded leader still leads it (pinned by pidfd).
        _procfs.killpg_same(pgid, start, signal.SIGKILL)


def wait_gone(procs: list[ProcessId], timeout: float) -> bool:
    """Block up to ``timeout`` seconds until none of ``procs`` runs; ``True`` if so."""
    deadline = time.monotonic() + timeout
    for proc in procs:
        while not _gone(proc):
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            _wait_exit(proc[0], min(left, 0.5))
    return True


def _gone(proc: ProcessId) -> bool:
    """Whether ``proc`` is confirmed not running. A stat line that cannot
    be read is "unknown", not "gone", while ``/proc/<pid>`` is still listed
    (looked up without a file descriptor, which is what may have run out)."""
    info = _procfs.stat(proc[0])
    if info is not None:
        return info.start != proc[1] or not info.alive
    return not os.path.exists(f"/proc/{proc[0]}")


def _wait_exit(pid: int, timeout: float) -> None:
    pidfd_open = getattr(os, "pidfd_open", None)
    if pidfd_open is not None:
        try:
            fd = pidfd_open(pid)
        except OSError:
            return  # gone already (or not permitted: the caller re-checks)
        try:
            select.select([fd], [], [], timeout)
        finally:
            os.close(fd)
        return
    time.sleep(min(timeout, 0.02))
