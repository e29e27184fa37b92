"""The child's POSIX session, as ``dshtools.io.run_process`` sees it
(docs/contract.md §5): who is in it (read from ``/proc``), whether anyone in it is
still alive, and how to signal its members without hitting a stranger.

Guarantees:

* **Read-only inspection.** Membership and liveness come from
  ``/proc/<pid>/stat`` (session id, process group, state); zombies never
  count as alive, so an orphan's zombie that init never reaps cannot make
  a caller wait forever.
* **No stranger signalled.** A member is signalled only if its session id,
  re-read right before, is still the one asked for; with ``pidfd_open``
  the process is pinned before that re-read (``_kill_member`` writes the
  interleaving down). Errors of a member that died meanwhile are ignored.
* **Any thread, no state.** Nothing here holds a lock or caches a pid;
  ``run_process`` calls it from its own thread, ``dshtools._demo`` uses
  ``_group_alive`` for its quiescence check.

Without ``/proc`` (not Linux) only the process group is covered.
"""

from __future__ import annotations

import os
import signal as _os_signal
from typing import Final


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


_HAVE_PROC: Final = os.path.isdir("/proc/self")


def _stat_session(pid: int) -> tuple[int, bool] | None:
    """``(session id, is_dead)`` of ``pid`` read from ``/proc/<pid>/stat``,
    ``None`` when it cannot be read (the process is gone). ``is_dead`` is
    true for a zombie (``Z``) or a dying (``X``) process."""
    # os.open/os.read rather than open(): about three times faster, and a
    # scan reads every process's stat. One read returns the whole line.
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        data = os.read(fd, 4096)
    except OSError:
        return None
    finally:
        os.close(fd)
    # "pid (comm) state ppid pgrp session ...": comm may contain spaces and
    # parentheses, so split after the *last* ')'.
    fields = data[data.rfind(b")") + 2 :].split()
    if len(fields) < 4:
        return None
    try:
        sid = int(fields[3])
    except ValueError:
        return None
    return sid, fields[0] in (b"Z", b"X")


def _session_members(sid: int) -> list[int] | None:
    """Pids of the live (not zombie) processes whose session id is ``sid``;
    ``None`` when ``/proc`` cannot be scanned (not Linux).

    Zombies are excluded because they are dead: an orphaned grandchild's
    zombie waits for PID 1 to reap it, which in some containers never
    happens, and must not make us wait forever.
    """
    if not _HAVE_PROC:
        return None
    try:
        entries = os.scandir("/proc")
    except OSError:
        return None
    members: list[int] = []
    with entries:
        for entry in entries:
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            info = _stat_session(pid)
            if info is not None and info[0] == sid and not info[1]:
                members.append(pid)
    return members


def _kill_member(pid: int, sid: int, sig: int) -> None:
    """Send ``sig`` to ``pid`` only if its session id, read right before, is
    still ``sid`` (the pid may have been reused by a stranger since the
    scan that found it).

    With ``pidfd_open`` the process is pinned *before* the re-read, so the
    signal reaches exactly the process whose session was checked (or nobody,
    if it died meanwhile): no window. Without it (old kernels), a window of
    a few microseconds is left between the re-read and ``kill``: the member
    would have to die, be reaped, and its pid be handed to a new process in
    between.
    """
    pidfd = -1
    if hasattr(os, "pidfd_open") and hasattr(_os_signal, "pidfd_send_signal"):
        try:
            pidfd = os.pidfd_open(pid)
        except ProcessLookupError:
            return
        except OSError:
            pidfd = -1  # e.g. ENOSYS, EMFILE: fall back to kill()
    try:
        info = _stat_session(pid)
        if info is None or info[0] != sid:
            return
        if pidfd >= 0:
            _os_signal.pidfd_send_signal(pidfd, sig)
        else:
            os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
    finally:
        if pidfd >= 0:
            os.close(pidfd)


def _group_alive(pgid: int) -> bool:
    """Whether process group ``pgid`` has a member that is not a zombie.

    Zombies are excluded because they are dead: an orphaned grandchild's
    zombie waits for PID 1 to reap it, which in some containers never
    happens, and must not make us wait forever. Without ``/proc`` (not
    Linux) any member counts. ``run_process`` itself watches the whole
    session (``_Session``) and uses this only when ``/proc`` cannot be
    scanned; ``dshtools._demo`` uses it for its quiescence check.
    """
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    if not _HAVE_PROC:
        return True
    try:
        entries = os.scandir("/proc")
    except OSError:
        return True
    with entries:
        for entry in entries:
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as f:
                    data = f.read()
            except OSError:
                continue  # exited meanwhile
            # "pid (comm) state ppid pgrp ...": comm may contain anything,
            # so split after the last ')'.
            fields = data[data.rfind(b")") + 2 :].split()
            if len(fields) < 3:
                continue
            try:
                pgrp = int(fields[2])
            except ValueError:
                continue
            if pgrp == pgid and fields[0] not in (b"Z", b"X"):
                return True
    return False


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

    __slots__ = ("sid",)

    def __init__(self, sid: int) -> None:
        self.sid = sid

    def members(self) -> list[int] | None:
        """Live members (see ``_session_members``); ``None``: unknown."""
        return _session_members(self.sid)

    def alive(self, members: list[int] | None) -> bool:
        """Whether a live member remains, given a fresh ``members()``."""
        return bool(members) if members is not None else _group_alive(self.sid)

    def send(self, sig: int, members: list[int] | None) -> None:
        """Signal the group and each of ``members`` (re-checked, see
        ``_kill_member``)."""
        _killpg(self.sid, sig)
        for pid in members or ():
            _kill_member(pid, self.sid, sig)
