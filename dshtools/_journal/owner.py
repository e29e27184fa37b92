"""Who holds a journal claim, and whether that holder is still alive
(docs/contract.md#journal-owner).

An owner is the text ``"<host>/<pid>/<start>/<token>"``: the machine, the
process id, the process's start time (clock ticks since boot, from
``/proc``; ``0`` where there is no ``/proc``), and a random token per
journal object. Guarantees:

* On the owner's own machine its death is seen at once: a pid that is
  gone, a zombie, or a pid reused by a process with another start time.
  A process that is alive is never taken for dead (``alive`` answers
  ``True`` whenever it cannot tell).
* On another machine the answer is ``None`` (unknown): the store decides
  by its lease (SQLite) or a lock held by the owner's connection
  (PostgreSQL).
* A forked child computes its own owner (the pid differs).
"""

from __future__ import annotations

import os
import re
import secrets
import socket
from typing import Final

from .._os import procfs
from .records import JournalError

__all__ = ["Owner", "alive"]

_OWNER: Final = re.compile(r"([^/]{1,255})/([0-9]{1,10})/([0-9]{1,20})/([0-9a-f]{16})")
_HOST: Final = socket.gethostname().replace("/", "_")[:255] or "localhost"


def _start_of(pid: int) -> int:
    proc = procfs.stat(pid) if procfs.HAVE_PROC else None
    return 0 if proc is None else proc.start


class Owner:
    """The owner text of one journal object in the current process
    (recomputed after a fork). Thread-safe: ``text`` is a pure read, and a
    race after a fork computes the same text twice."""

    __slots__ = ("_pid", "_text", "_token")

    def __init__(self) -> None:
        self._token = secrets.token_hex(8)
        self._pid = -1
        self._text = ""

    @property
    def text(self) -> str:
        pid = os.getpid()
        if pid != self._pid:
            self._text = f"{_HOST}/{pid}/{_start_of(pid)}/{self._token}"
            self._pid = pid
        return self._text


def alive(owner: str) -> bool | None:
    """Whether the process named by ``owner`` is alive: ``True``/``False``
    on this machine, ``None`` for another machine's owner. Raises
    ``JournalError`` for text that is not an owner."""
    match = _OWNER.fullmatch(owner)
    if match is None:
        raise JournalError(f"the journal names an owner that is not one: {owner[:80]!r}")
    host, pid_text, start_text, _token = match.groups()
    if host != _HOST:
        return None
    pid, start = int(pid_text), int(start_text)
    if procfs.HAVE_PROC:
        proc = procfs.stat(pid)
        if proc is None or not proc.alive:
            return False
        return start in (0, proc.start)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, OSError):
        return True
    return True
