"""The process half of the command line's quiescence check (docs/contract.md §6):
every live descendant of this process, and the Linux child subreaper that
keeps orphaned grandchildren among them.

Guarantees:

* A descendant is every non-zombie process below this one in the parent
  tree, found with psutil when installed, else by walking ``/proc``; the
  check line says which, or says NOT CHECKED where neither exists.
* Under ``_subreaper()`` (Linux) a grandchild whose parent exited is
  re-parented to this process and still counts; the previous subreaper
  setting is restored on exit.
* Read-only: nothing here signals or reaps a process.
"""

from __future__ import annotations

import os
import sys
from typing import Any


def _proc_parents() -> dict[int, list[tuple[int, bytes]]] | None:
    """parent pid -> [(pid, state)] for every process in ``/proc``, or
    ``None`` where there is no ``/proc``."""
    if not os.path.isdir("/proc/self"):
        return None
    parents: dict[int, list[tuple[int, bytes]]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                data = f.read()
        except OSError:  # exited meanwhile
            continue
        # "pid (comm) state ppid ...": comm may contain spaces and ")".
        fields = data[data.rfind(b")") + 2 :].split()
        if len(fields) >= 2:
            parents.setdefault(int(fields[1]), []).append((int(name), fields[0]))
    return parents


def live_descendants() -> tuple[list[int], str]:
    """PIDs of every live (non-zombie) descendant of this process - children,
    their children, and so on - and how they were found: ``"psutil"`` when
    installed, else ``"/proc"`` (the parent-pid tree of every process,
    walked from this process), else ``"none"`` (no way to look: empty).

    A process whose parent exited is re-parented (to init, or to the
    nearest child subreaper) and so stops being a descendant; run under
    ``_subreaper()`` so such orphans are re-parented to this process and
    still count."""
    try:
        import psutil
    except ImportError:
        psutil = None
    if psutil is not None:
        alive = []
        for child in psutil.Process().children(recursive=True):
            try:
                if child.status() != psutil.STATUS_ZOMBIE:
                    alive.append(child.pid)
            except psutil.NoSuchProcess:
                pass
        return sorted(alive), "psutil"
    parents = _proc_parents()
    if parents is None:
        return [], "none"
    found: list[int] = []
    seen = {os.getpid()}
    todo = [os.getpid()]
    while todo:
        for pid, state in parents.get(todo.pop(), ()):
            if pid in seen:
                continue
            seen.add(pid)
            todo.append(pid)  # a zombie has no children, but walk it anyway
            if state not in (b"Z", b"X"):
                found.append(pid)
    return sorted(found), "/proc"


_PR_SET_CHILD_SUBREAPER = 36
_PR_GET_CHILD_SUBREAPER = 37


class _subreaper:
    """Make this process a Linux *child subreaper* (``prctl``) while the
    block runs, so a tool's orphaned grandchild (``cmd &`` in a shell that
    then exits) is re-parented here instead of to init, and the
    descendant check still sees it. The previous setting is restored on
    exit; re-parented processes stay this process's children (zombies
    after they exit, until this process exits). ``active`` says whether it
    took effect (``False`` off Linux or when ``prctl`` is unavailable)."""

    def __init__(self) -> None:
        self.active = False
        self._previous = 0
        self._prctl: Any = None

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
        return self

    def __exit__(self, *exc: object) -> None:
        if self.active and not self._previous:
            self._prctl(_PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
        self.active = False


def _descendant_check(reaper: _subreaper) -> tuple[str, bool]:
    """The quiescence line for processes: no live descendant of this
    process, saying exactly what was looked at."""
    alive, how = live_descendants()
    me = os.getpid()
    if how == "none":
        return (f"no live descendant process: NOT CHECKED (no psutil and no /proc; pid {me})", True)
    scope = f"every non-zombie process below pid {me} in the parent tree, via {how}; " + (
        "orphaned grandchildren are re-parented here (child subreaper) and count"
        if reaper.active
        else "not a child subreaper here, so a grandchild orphaned to init is not seen"
    )
    if alive:
        return (f"no live descendant process ({scope}; alive: {', '.join(map(str, alive))})", False)
    return (f"no live descendant process ({scope})", True)
