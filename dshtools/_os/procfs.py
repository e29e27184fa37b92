"""Processes as ``/proc`` shows them (Linux), and signals that reach only
the process that was read (docs/contract.md §5 and §9: what a forced stop
kills, and that it never signals a stranger).

One reader for every caller: ``run_process``'s session
(``dshtools._io.session``), the ``ProcessBackend``'s forced stop
(``dshtools._os.tree``), the Ray backend's reaper
(``dshtools._backends.ray.reap``) and the command line's descendant check
(``dshtools._os.descendants``).

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

Without ``/proc`` (not Linux), ``HAVE_PROC`` is false, ``stat`` returns
``None``, ``try_scan`` ``None`` and ``scan`` an empty dict. Any thread; holds no lock, keeps no
state.
"""

from __future__ import annotations

import os
import signal as _os_signal
from collections.abc import Callable
from typing import Final, NamedTuple

__all__ = ["HAVE_PROC", "ProcStat", "killpg", "scan", "signal_if", "signal_same", "stat", "try_scan"]

HAVE_PROC: Final = os.path.isdir("/proc/self")

_CAN_PIN: Final = hasattr(os, "pidfd_open") and hasattr(_os_signal, "pidfd_send_signal")


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
    """``os.killpg``, ignoring a group that is gone or not ours."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
