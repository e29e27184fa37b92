"""The process half of the command line's quiescence check (docs/contract.md#demo):
every live descendant of this process, and the Linux child subreaper that
keeps orphaned grandchildren among them.

Guarantees:

* A descendant is every non-zombie process below this one in the parent
  tree, found with psutil when installed, else by walking ``/proc``; the
  check line says which, or says NOT CHECKED where neither exists.
* Under ``_subreaper()`` (Linux) a grandchild whose parent exited is
  re-parented to this process and still counts; the previous subreaper
  setting is restored on exit.
* Nothing here signals a process. The only processes reaped are those the
  subreaper adopted, as they exit (see ``_subreaper``).
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Mapping
from typing import Any

from . import procfs as _procfs


def live_descendants() -> tuple[list[int], str]:
    """PIDs of every live (non-zombie) descendant of this process - children,
    their children, and so on - and how they were found: ``"psutil"`` when
    installed, else ``"/proc"`` (the parent-pid tree of every process,
    walked from this process), else ``"none"`` (no way to look: empty).

    A process whose parent exited is re-parented (to init, or to the
    nearest child subreaper) and so stops being a descendant; run under
    ``_subreaper()`` so such orphans are re-parented to this process and
    still count. Keepers (``dshtools._os.keeper``) are left out."""
    try:
        import psutil
    except ImportError:
        psutil = None
    if psutil is not None:
        alive = []
        for child in psutil.Process().children(recursive=True):
            try:
                if child.status() != psutil.STATUS_ZOMBIE and not _procfs.is_keeper(child.pid):
                    alive.append(child.pid)
            except psutil.NoSuchProcess:
                pass
        return sorted(alive), "psutil"
    procs = _procfs.try_scan()
    if procs is None:
        return [], "none"
    found = [p.pid for p in _procfs.descendants(procs, os.getpid()) if p.alive and not _procfs.is_keeper(p.pid)]
    return sorted(found), "/proc"


_PR_SET_CHILD_SUBREAPER = 36
_PR_GET_CHILD_SUBREAPER = 37


def _start_time(pid: int) -> int | None:
    info = _procfs.stat(pid)
    return None if info is None else info.start


def _children(pid: int) -> list[int] | None:
    """Direct children of ``pid`` from ``/proc/<pid>/task/*/children``, or
    ``None`` where the kernel does not provide those files."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    found: list[int] = []
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                found.extend(int(x) for x in f.read().split())
        except FileNotFoundError:
            if not os.path.exists(f"/proc/{pid}/task/{tid}"):
                continue  # the thread ended meanwhile
            return None
        except OSError:
            continue
    return found


# How often the reaper looks for adopted processes that exited (seconds).
_REAP_EVERY = 0.05


_active: _subreaper | None = None  # the active subreaper, if any (for tests)


class _subreaper:
    """Make this process a Linux *child subreaper* (``prctl``) while the
    block runs, so a tool's orphaned grandchild (``cmd &`` in a shell that
    then exits) is re-parented here instead of to init, and the
    descendant check still sees it. The previous setting is restored on
    exit. ``active`` says whether it took effect (``False`` off Linux or
    when ``prctl`` is unavailable).

    **Adopted processes are reaped as they exit** (docs/contract.md#a13),
    by a thread this class starts and joins, every _REAP_EVERY seconds: an
    adopted process that exits would otherwise stay a zombie of this
    process until it ends. Only processes that were certainly *adopted*
    are reaped, never one this process forked itself (its owner, a
    ``subprocess.Popen``, reaps it and must get its exit status). A direct
    child is adopted when

    * its session id is neither this process's nor its own pid: a child
      forked here inherits this session and can only leave it by
      ``setsid()``, which makes its session id its own pid; so this one was
      forked by a descendant in another session (every ``run_process``
      child's family), or
    * it was seen earlier as a deeper descendant (same pid and start time).

    Limit: a grandchild in this very session whose parent exits before the
    reaper ever saw it (within one period) is not recognised, and stays a
    zombie after it exits until this process ends (as it would without a
    reaper). Without ``/proc/<pid>/task/*/children`` (a kernel without
    ``CONFIG_PROC_CHILDREN``) no reaper runs.
    """

    def __init__(self) -> None:
        self.active = False
        self._previous = 0
        self._prctl: Any = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.reaped: list[int] = []  # pids reaped, in order
        # (pid, start time) of every process seen below a direct child; a
        # new set is assigned each period (readers never see it mutate).
        self.deeper: frozenset[tuple[int, int]] | set[tuple[int, int]] = frozenset()

    def __enter__(self) -> _subreaper:
        if not sys.platform.startswith("linux"):
            return self
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            prctl = libc.prctl
            current = ctypes.c_int(0)
            if prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(current), 0, 0, 0) != 0:
                return self
            if prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
                return self
        except (OSError, AttributeError):
            return self
        self._prctl = prctl
        self._previous = current.value
        self.active = True
        global _active
        _active = self
        if _children(os.getpid()) is not None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._reap_loop, name="dshtools-reaper", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
        if self.active and not self._previous:
            self._prctl(_PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
        global _active
        if _active is self:
            _active = None
        self.active = False

    def _reap_loop(self) -> None:
        me = os.getpid()
        own_sid = os.getsid(0)
        while True:
            stop = self._stop.wait(_REAP_EVERY)
            try:
                self._reap_once(me, own_sid)
            except Exception:  # /proc read mid-change; next period retries
                pass
            if stop:
                return

    def _reap_once(self, me: int, own_sid: int) -> None:
        """One period: reap the adopted zombies among this process's
        children, and record (pid, start time) of every deeper descendant."""
        seen: set[tuple[int, int]] = set()
        for pid in _children(me) or ():
            info = _procfs.stat(pid)
            if info is None:
                continue
            adopted = info.sid not in (own_sid, pid) or (pid, info.start) in self.deeper
            if info.state == b"Z" and adopted:
                # Nobody else waits for an adopted process, so its pid
                # cannot be reaped and reused between the read and here.
                try:
                    if os.waitpid(pid, os.WNOHANG)[0] == pid:
                        self.reaped.append(pid)
                except ChildProcessError:
                    pass
                continue
            todo = list(_children(pid) or ())
            while todo:
                below = todo.pop()
                below_info = _procfs.stat(below)
                if below_info is not None:
                    seen.add((below, below_info.start))
                    todo.extend(_children(below) or ())
        # Forget what is gone, so a reused pid is never taken for it.
        self.deeper = seen | {key for key in self.deeper if _start_time(key[0]) == key[1]}


def descendants_now() -> dict[int, int | None]:
    """Every live descendant now, by pid, with its start time (``None``
    where ``/proc`` does not say): what ``_descendant_check(before=...)``
    leaves out."""
    return {pid: _start_time(pid) for pid in live_descendants()[0]}


def _descendant_check(reaper: _subreaper, before: Mapping[int, int | None] | None = None) -> tuple[str, bool]:
    """The quiescence line for processes: no live descendant of this
    process, saying exactly what was looked at. ``before``
    (``descendants_now()`` taken before the run): a process alive then,
    the same pid with the same start time, is named but not counted."""
    alive, how = live_descendants()
    earlier = [pid for pid in alive if before is not None and pid in before and before[pid] == _start_time(pid)]
    alive = [pid for pid in alive if pid not in earlier]
    me = os.getpid()
    if how == "none":
        return (f"no live descendant process: NOT CHECKED (no psutil and no /proc; pid {me})", True)
    scope = f"every non-zombie process below pid {me} in the parent tree, via {how}; " + (
        "orphaned grandchildren are re-parented here (child subreaper) and count"
        if reaper.active
        else "not a child subreaper here, so a grandchild orphaned to init is not seen"
    )
    if earlier:
        scope += f"; not counted, alive since before the run: {', '.join(map(str, earlier))}"
    if alive:
        return (f"no live descendant process ({scope}; alive: {', '.join(map(str, alive))})", False)
    return (f"no live descendant process ({scope})", True)


def _left_behind_check(left: list[int] | None) -> tuple[str, bool]:
    """The quiescence line for the processes ``ProcessBackend`` workers
    started, given ``ProcessBackend.left_behind()``: ``None`` (``/proc``
    unreadable) is NOT CHECKED, never a pass that looked at nothing."""
    if left is None:
        return ("no process a worker started is alive: NOT CHECKED (/proc cannot be read)", True)
    return (f"no process a worker started is alive (alive: {', '.join(map(str, left)) or 'none'})", not left)
