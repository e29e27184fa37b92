"""What a forced stop of a ``ProcessBackend`` worker kills, and how it is
confirmed (docs/contract.md#forced-stop).

A worker runs in its own session (it is the session and process group
leader). ``dshtools.io.run_process`` puts each child in a session of its
own, so a worker's descendants may live in several sessions. ``stop_tree``:

1. records the worker's descendants (the parent-pid tree in ``/proc``) and
   the members of its session, each with its start time (the identity that
   survives pid reuse), and the sessions led by a descendant;
2. SIGKILLs the worker's process group and every recorded process (pinned
   with ``pidfd_open`` and re-checked by start time, so a reused pid is
   never signalled), and the process group of every recorded session whose
   leader is still the recorded process (through the leader's pidfd:
   ``procfs.killpg_same``);
3. re-scans until no live (non-zombie) process remains in the worker's
   session, in a recorded session whose leader is still the recorded
   process, or among the recorded processes, SIGKILLing whatever it finds;
   a scan that cannot be read (no descriptor left) confirms nothing;
4. only then lets the caller reap the worker.

Pid-reuse safety: the worker is reaped last, so while the sweep runs its
pid (its session id and process group id) cannot be handed to anyone else;
every other process is matched by pid *and* start time.

Limits: a descendant that started a session of its own after the record
was taken, or that left the tree before it (a double fork into a new
session), is not found; so is every descendant outside the worker's
session when ``/proc`` cannot be read at the record (logged as a warning).
Without ``/proc`` (not Linux) only the worker's process group is killed.

Threads: called from the backend's manager thread (or ``close()``); holds
no lock, keeps no state.
"""

from __future__ import annotations

import logging
import os
import signal as _os_signal
import time
from typing import Final

from . import procfs as _procfs

__all__ = ["left_behind", "session_alive", "stop_tree"]

_log = logging.getLogger("dshtools.process")

_POLL_MIN: Final = 0.001
_POLL_MAX: Final = 0.02
_SLOW_WARNING: Final = 5.0


def session_alive(sid: int) -> list[int]:
    """Pids of the live (non-zombie) members of session ``sid`` (none when
    ``/proc`` cannot be read)."""
    return sorted(_procfs.session_members(sid) or ())


def left_behind(workers_started: list[int], workers_alive: list[int]) -> list[int] | None:
    """Live processes that ProcessBackend workers started and left: the
    descendants of the live workers, and every live member of a session a
    worker led (a worker's session outlives it only through such members),
    the live workers themselves excepted. ``None`` when ``/proc`` cannot be
    read (not Linux, or no file descriptor left): unknown, never "none".
    Keepers of workers (``dshtools._os.keeper``) are left out."""
    procs = _procfs.try_scan()
    if procs is None:
        return None
    found = {p.pid for root in workers_alive for p in _procfs.descendants(procs, root) if p.alive}
    sids = set(workers_started)
    found |= {p.pid for p in procs.values() if p.sid in sids and p.alive}
    return sorted(pid for pid in found - set(workers_alive) if not _procfs.is_keeper(pid))


def _kill_same(pid: int, start: int) -> None:
    """SIGKILL ``pid`` only if it is still the process that started at
    ``start`` (``_procfs.signal_if``: pinned first where the kernel can)."""
    _procfs.signal_same(pid, start, _os_signal.SIGKILL)


def stop_tree(leader: int) -> int:
    """Kill ``leader`` (an unreaped child of this process that leads its own
    session) and everything it started, and return once none of it is
    alive; see the module docstring. The caller reaps ``leader`` afterwards.
    Returns how many processes other than ``leader`` were found."""
    if not _procfs.HAVE_PROC:
        _procfs.killpg(leader, _os_signal.SIGKILL)
        try:
            os.kill(leader, _os_signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        return 0
    procs = _procfs.try_scan()
    if procs is None:
        # /proc cannot be read now (no descriptor left): the descendants
        # cannot be recorded, and once the worker dies they can no longer
        # be found by ancestry. Say so rather than report them stopped.
        _log.warning(
            "forced stop of worker %d: /proc cannot be read; processes it started in other sessions may survive",
            leader,
        )
        procs = {}
    recorded: dict[int, int] = {}  # pid -> start time
    for p in _procfs.descendants(procs, leader):
        recorded[p.pid] = p.start
    for p in procs.values():
        if p.sid == leader and p.pid != leader:
            recorded[p.pid] = p.start
    # Sessions led by a recorded process (run_process children): leader pid.
    sessions = {pid for pid in recorded if procs[pid].sid == pid}
    _procfs.killpg(leader, _os_signal.SIGKILL)
    try:
        os.kill(leader, _os_signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for pid, start in recorded.items():
        _kill_same(pid, start)
    for sid in sessions:
        _procfs.killpg_same(sid, recorded[sid], _os_signal.SIGKILL)
    delay = _POLL_MIN
    began = time.monotonic()
    warned = False
    while True:
        # Confirmed only by a scan that could be read: "unknown" (no
        # descriptor left, say) is never "gone"; look again.
        now = _procfs.try_scan()
        live = []
        for p in (now or {}).values():
            if not p.alive or p.pid == leader:
                continue
            if p.sid == leader or recorded.get(p.pid) == p.start:
                live.append(p)
            elif p.sid in sessions:
                head = now.get(p.sid) if now is not None else None
                if head is not None and head.start == recorded[p.sid]:
                    live.append(p)
        if now is not None:
            # The leader is unreaped: listed until the caller reaps it, a
            # zombie once it died.
            leader_info = now.get(leader)
            if not live and (leader_info is None or not leader_info.alive):
                return len(recorded)
        for p in live:
            _kill_same(p.pid, p.start)
        if not warned and time.monotonic() - began > _SLOW_WARNING:
            warned = True
            _log.warning(
                "forced stop of worker %d: %s after SIGKILL; waiting",
                leader,
                f"processes {[p.pid for p in live]} still alive"
                if now is not None
                else "/proc cannot be read to confirm",
            )
        time.sleep(delay)
        delay = min(delay * 2, _POLL_MAX)
