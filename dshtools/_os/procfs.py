"""Processes as ``/proc`` shows them (Linux), and signals that reach only
the process that was read (docs/contract.md#io and
docs/contract.md#forced-stop: what a forced stop
kills, and that it never signals a stranger).

One reader for every caller: ``run_process``'s session
(``dshtools._io.session``), the ``ProcessBackend``'s forced stop
(``dshtools._os.tree``), the Ray backend's reaper
(``dshtools._backends.ray.reap``) and the command line's descendant check
(``dshtools._os.descendants``), and the one test of whether a process is
a keeper (``dshtools._os.keeper``), which every process walk leaves out.

Guarantees:

* ``stat(pid)`` reads ``/proc/<pid>/stat`` in one ``read``; it returns
  ``None`` for a process that is gone, or a line that does not parse,
  never raises. A zombie (``Z``) or dying (``X``) process is not
  ``alive``.
* ``signal_if(pid, sig, same)`` sends ``sig`` only if ``same(stat)`` holds
  for the process read right before. With ``pidfd_open`` the process is
  pinned *before* that read, so the signal reaches exactly the process that
  was checked, or nobody if it died meanwhile. Without it (old kernels) a
  window of microseconds remains between the read and ``kill``, in which
  the process would have to die, be reaped and its pid be handed on.
  A process that is gone, or not ours to signal, is ignored.
* ``descendants(procs, root)`` is the one walk of the parent tree.
* A process group is signalled by number (``killpg``) only where its id
  cannot be handed on meanwhile (this process's own group, or one led by
  an unreaped child); any other group only through a pidfd of its leader
  (``killpg_same``, ``killpg_pinned``), which on Linux 6.9+ names the group
  the leader made, never a later group that reuses its number.

Without ``/proc`` (not Linux), ``HAVE_PROC`` is false, ``stat`` returns
``None``, ``try_scan`` and ``session_members`` ``None`` and ``scan`` an
empty dict. Any thread; holds no lock; keeps no state but one flag (the
kernel refused the pidfd group signal once: the fallback is used after).
"""

from __future__ import annotations

import os
import signal as _os_signal
from collections.abc import Callable
from typing import Final, NamedTuple

__all__ = [
    "HAVE_PROC",
    "KEEPER_MARKER",
    "ProcStat",
    "descendants",
    "is_keeper",
    "killpg",
    "killpg_pinned",
    "killpg_same",
    "scan",
    "session_members",
    "signal_if",
    "signal_same",
    "stat",
    "try_scan",
]

HAVE_PROC: Final = os.path.isdir("/proc/self")

KEEPER_MARKER: Final = "dshtools-keeper"
"""A keeper's last command-line argument (``dshtools._os.keeper``): how a
process list tells it apart from the processes calls started."""

_KEEPER_ARG: Final = KEEPER_MARKER.encode() + b"\0"

_CAN_PIN: Final = hasattr(os, "pidfd_open") and hasattr(_os_signal, "pidfd_send_signal")

_PIDFD_SIGNAL_PROCESS_GROUP: Final = 4
"""``pidfd_send_signal`` flag (Linux 6.9+): signal the process group of the
pidfd's process, the group as the kernel knows it through that process's
``struct pid``, so a group id handed on to another process is never hit."""

_group_flag_refused = False  # the kernel said EINVAL to the flag once: use killpg


class ProcStat(NamedTuple):
    """One process's line of ``/proc/<pid>/stat``: its state letter, parent,
    process group, session and start time (clock ticks since boot, the
    identity that survives pid reuse)."""

    pid: int
    state: bytes
    ppid: int
    pgrp: int
    sid: int
    start: int

    @property
    def alive(self) -> bool:
        """Not a zombie and not dying."""
        return self.state not in (b"Z", b"X")


def stat(pid: int) -> ProcStat | None:
    """``pid``'s stat line, or ``None`` when it is gone or unreadable."""
    # os.open/os.read rather than open(): several times faster, and a scan
    # reads every process's line. One read returns the whole line.
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
    # "pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt
    # majflt cmajflt utime stime cutime cstime priority nice threads
    # itrealvalue starttime ...": comm may hold anything, spaces and
    # parentheses included, so split after the last ')'. Here index 0 is
    # the state and index 19 the start time (field 22).
    fields = data[data.rfind(b")") + 2 :].split()
    if len(fields) < 20:
        return None
    try:
        return ProcStat(pid, fields[0], int(fields[1]), int(fields[2]), int(fields[3]), int(fields[19]))
    except ValueError:
        return None


def try_scan() -> dict[int, ProcStat] | None:
    """Every process in ``/proc`` by pid; ``None`` when ``/proc`` cannot be
    read (not Linux, or no file descriptor left), so that a caller can tell
    "nobody" from "unknown". Not a snapshot of one instant: processes come
    and go while it reads."""
    if not HAVE_PROC:
        return None
    try:
        entries = os.scandir("/proc")
    except OSError:
        return None
    out: dict[int, ProcStat] = {}
    with entries:
        for entry in entries:
            if entry.name.isdigit():
                info = stat(int(entry.name))
                if info is not None:
                    out[info.pid] = info
    return out


def scan() -> dict[int, ProcStat]:
    """``try_scan()``, with "unknown" read as empty."""
    return try_scan() or {}


def descendants(procs: dict[int, ProcStat], root: int) -> list[ProcStat]:
    """Every process below ``root`` in the parent tree of ``procs`` (one
    ``try_scan``): children, their children, and so on, zombies included
    (filter on ``alive``); never ``root`` itself. A process whose parent
    exited was re-parented and is no longer found here. The one descendants
    walk of the package: the forced stops of both remote backends and the
    command line's quiescence check use it."""
    children: dict[int, list[ProcStat]] = {}
    for p in procs.values():
        children.setdefault(p.ppid, []).append(p)
    found: list[ProcStat] = []
    seen = {root}
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child.pid not in seen:
                seen.add(child.pid)
                found.append(child)
                todo.append(child.pid)
    return found


def is_keeper(pid: int) -> bool:
    """Whether ``pid`` is a keeper (of this process or of any other):
    quiescence reports leave keepers out (a keeper exits by itself once its
    owner is gone). ``False`` when ``/proc`` cannot tell."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().endswith(_KEEPER_ARG)
    except OSError:
        return False


def session_members(sid: int) -> list[int] | None:
    """Pids of the live (non-zombie) processes of session ``sid``; ``None``
    when ``/proc`` cannot be read ("unknown", never "nobody"). A zombie is
    dead: an orphan's zombie that init never reaps (some containers) must
    not count as a member forever."""
    procs = try_scan()
    if procs is None:
        return None
    return [p.pid for p in procs.values() if p.sid == sid and p.alive]


def signal_if(pid: int, sig: int, same: Callable[[ProcStat], bool]) -> None:
    """Send ``sig`` to ``pid`` only if ``same`` accepts its stat line, read
    after the process was pinned (module docstring)."""
    pidfd = -1
    if _CAN_PIN:
        try:
            pidfd = os.pidfd_open(pid)
        except ProcessLookupError:
            return
        except OSError:
            pidfd = -1  # e.g. ENOSYS, EMFILE: fall back to kill()
    try:
        info = stat(pid)
        if info is None or not same(info):
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


def signal_same(pid: int, start: int, sig: int) -> None:
    """Send ``sig`` to ``pid`` only if it is still the process that started
    at ``start`` (clock ticks since boot; ``signal_if``)."""
    signal_if(pid, sig, lambda info: info.start == start)


def killpg(pgid: int, sig: int) -> None:
    """``os.killpg``, ignoring a group that is gone or not ours. Safe only
    for a group whose id cannot be handed on meanwhile: this process's own
    (``0``), or one led by an unreaped child of this process; every other
    group goes through ``killpg_same`` or ``killpg_pinned``."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def killpg_pinned(pidfd: int | None, pgid: int, sig: int) -> None:
    """Send ``sig`` to process group ``pgid`` through ``pidfd``, a pidfd of
    the process that made the group (its leader, reaped or not).

    Where the kernel has ``PIDFD_SIGNAL_PROCESS_GROUP`` (Linux 6.9+) the
    signal reaches exactly the members of the group that leader made, even
    after the leader was reaped and its pid reused: the pidfd keeps the
    kernel's identity of the group, not its number. Elsewhere (or with
    ``pidfd`` ``None``) it is ``os.killpg(pgid)``: a group id is not handed
    out again while any process still has it as its pid, group or session
    id, so the window left is the last member dying, its pid being reused
    and the new process making itself a group leader, all between the
    caller's last look and this call. A group that is gone, or not ours,
    is ignored."""
    global _group_flag_refused
    if pidfd is not None and _CAN_PIN and not _group_flag_refused:
        try:
            _os_signal.pidfd_send_signal(pidfd, sig, None, _PIDFD_SIGNAL_PROCESS_GROUP)
            return
        except (ProcessLookupError, PermissionError):
            return
        except OSError:
            _group_flag_refused = True  # EINVAL: a kernel before 6.9
    killpg(pgid, sig)


def killpg_same(pgid: int, start: int, sig: int) -> None:
    """Send ``sig`` to the process group ``pgid`` only while its leader is
    still the process that started at ``start`` (clock ticks since boot)
    and still leads it: the leader is pinned with ``pidfd_open`` before its
    stat line is read, and the group is signalled through that pidfd
    (``killpg_pinned``). A leader that is gone (or unreadable) means no
    signal: its members are the caller's to find one by one."""
    pidfd = -1
    if _CAN_PIN:
        try:
            pidfd = os.pidfd_open(pgid)
        except ProcessLookupError:
            return
        except OSError:
            pidfd = -1
    try:
        info = stat(pgid)
        if info is None or info.start != start or info.pgrp != pgid:
            return
        killpg_pinned(pidfd if pidfd >= 0 else None, pgid, sig)
    finally:
        if pidfd >= 0:
            os.close(pidfd)
