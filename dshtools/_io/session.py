"""The child's POSIX session, as ``dshtools.io.run_process`` sees it
(docs/contract.md#io): who is in it (read from
``/proc``), whether anyone in it is still alive, and how to signal its
members without hitting a stranger.

Guarantees:

* **Read-only inspection.** Membership and liveness come from
  ``/proc/<pid>/stat`` (session id, process group, state); zombies never
  count as alive, so an orphan's zombie that init never reaps cannot make
  a caller wait forever.
* **No stranger signalled.** A member is signalled only if its session id,
  re-read right before, is still the one asked for; with ``pidfd_open``
  the process is pinned before that re-read (``_kill_member`` writes the
  interleaving down). The group is signalled through the leader's pidfd
  while the supervisor holds one (``_procfs.killpg_pinned``), so it is the
  group the leader made even after the leader was reaped. Errors of a
  member that died meanwhile are ignored.
* **Any thread, no state.** Nothing here holds a lock or caches a pid;
  ``run_process`` calls it from its own thread, ``dshtools._cli.demo`` uses
  ``_group_alive`` for its quiescence check.

Without ``/proc`` (not Linux) only the process group is covered.
"""

from __future__ import annotations

import os

from .._os import procfs as _procfs


def _session_members(sid: int) -> list[int] | None:
    """Pids of the live (not zombie) processes whose session id is ``sid``;
    ``None`` when ``/proc`` cannot be scanned (``_procfs.session_members``)."""
    return _procfs.session_members(sid)


def _kill_member(pid: int, sid: int, sig: int) -> None:
    """Send ``sig`` to ``pid`` only if its session id, read right before, is
    still ``sid`` (the pid may have been reused by a stranger since the
    scan that found it). With ``pidfd_open`` the process is pinned before
    that read, so no window is left (``_procfs.signal_if``)."""
    _procfs.signal_if(pid, sig, lambda info: info.sid == sid)


def _group_alive(pgid: int) -> bool:
    """Whether process group ``pgid`` has a member that is not a zombie.

    Zombies are excluded because they are dead: an orphaned grandchild's
    zombie waits for PID 1 to reap it, which in some containers never
    happens, and must not make us wait forever. Without ``/proc`` (not
    Linux) any member counts. ``run_process`` itself watches the whole
    session (``_Session``) and uses this only when ``/proc`` cannot be
    scanned; ``dshtools._cli.demo`` uses it for its quiescence check.
    """
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    procs = _procfs.try_scan()
    if procs is None:
        return True
    return any(p.pgrp == pgid and p.alive for p in procs.values())


class _Session:
    """The child's session: every process whose session id is the child's
    pid (it ran ``setsid()``, so its session id, its process group id and
    its pid are equal).

    Signals go to the process group (one atomic ``killpg``) and to every
    session member found in ``/proc``. The session also covers descendants
    that moved to another process group (GNU ``timeout``, ``set -m`` job
    control, ``setpgid``) and members reparented to init after their parent
    died. Only a descendant that calls ``setsid()`` itself leaves the
    session and is not found. Without ``/proc`` (not Linux) only the
    process group is covered.
    """

    __slots__ = ("pidfd", "sid")

    def __init__(self, sid: int) -> None:
        self.sid = sid
        # A pidfd of the leader while the supervisor holds one: the group is
        # then signalled through it (``_procfs.killpg_pinned``).
        self.pidfd: int | None = None

    def members(self) -> list[int] | None:
        """Live members (see ``_session_members``); ``None``: unknown."""
        return _session_members(self.sid)

    def alive(self, members: list[int] | None) -> bool:
        """Whether a live member remains, given a fresh ``members()``."""
        return bool(members) if members is not None else _group_alive(self.sid)

    def send(self, sig: int, members: list[int] | None) -> None:
        """Signal the group and each of ``members`` (re-checked, see
        ``_kill_member``)."""
        _procfs.killpg_pinned(self.pidfd, self.sid, sig)
        for pid in members or ():
            _kill_member(pid, self.sid, sig)
