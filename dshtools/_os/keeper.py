"""What a call started dies with the process that owns the call
(docs/contract.md#crash-stops-what-the-call-started).

A *keeper* is one small helper process per owning process, started
(``start()``) right before the first session this process owns is spawned
(a ``ProcessBackend`` worker, a ``dshtools.io.run_process`` child), so it
runs before any child it keeps exists. The owner tells it, through a
pipe, which sessions it leads (``keep(pid)`` after the spawn,
``release(pid)`` once the session is empty and its leader reaped). When the
owner dies, by any signal (SIGKILL included) or by exiting, the keeper
sees it at once (a pidfd of the owner, and the end of file on the pipe)
and kills every session still kept, with its process tree, as a forced stop
does (``dshtools._os.tree.stop_tree``), then exits.

Guarantees:

* **Any death, any thread.** Nothing depends on the thread that started a
  child: no parent-death signal is used (it follows the spawning *thread*
  and would kill a worker started from a short-lived thread while the
  owner lives). A child started from a thread that has exited stays
  alive as long as the owner does.
* **Never in the owner's way.** ``keep``/``release`` are one ``write`` of a
  short line (atomic below ``PIPE_BUF``) from any thread; the keeper is
  started once per process (again in a forked child, which owns its own
  children), in a session of its own (a Ctrl-C to the owner's process group
  does not reach it), ignoring SIGINT and SIGHUP. Starting it may fail (no
  interpreter, no descriptor left): the spawn goes on, unguarded, and a
  warning is logged once.
* **A normal exit leaves no keeper.** At interpreter exit the owner
  closes the pipe and waits for its keeper, which stops whatever is still
  kept and exits first.
* **No stranger killed.** The keeper records a session leader's start time
  when it learns of it and stops that session only while the pid is unused
  or still that process; the members of a session whose leader has died
  keep its id in use, so it cannot name another session meanwhile.

Limits: a grandchild that calls ``setsid()`` itself after the owner's
death was noticed, or that left the tree before it (a double fork into a
new session), is not found; a child started in the microseconds between
its spawn and ``keep`` when the owner dies is not either. Without a pidfd
(not Linux) the owner's death is seen by the pipe's end of file or the
keeper's parent changing, checked every ``_PARENT_POLL`` seconds.

The keeper runs this file's ``_watch`` in ``python -I -S``, with this
folder loaded as a package of its own (standard library only: it never
imports ``dshtools``).
"""

from __future__ import annotations

import atexit
import logging
import os
import select
import signal as _os_signal
import subprocess
import sys
import threading
from typing import Final

from .procfs import KEEPER_MARKER

__all__ = ["keep", "keeper_pid", "release", "start"]

_log = logging.getLogger("dshtools.process")

_PARENT_POLL: Final = 0.2
_EXIT_WAIT: Final = 5.0

_BOOT: Final = (
    "import importlib.util as u, sys\n"
    "d = sys.argv[1]\n"
    "s = u.spec_from_file_location('_dshtools_keeper_os', d + '/__init__.py', submodule_search_locations=[d])\n"
    "m = u.module_from_spec(s); sys.modules[s.name] = m; s.loader.exec_module(m)\n"
    "import _dshtools_keeper_os.keeper as k\n"
    "k._watch(int(sys.argv[2]), int(sys.argv[3]))\n"
)


class _Keeper:
    """The owner's side: the keeper process and the pipe to it. ``owner``
    is the pid that started it (a forked child starts its own)."""

    __slots__ = ("fd", "owner", "proc")

    def __init__(self) -> None:
        read, write = os.pipe()  # not inherited by anything this process execs
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _BOOT, os.path.dirname(os.path.abspath(__file__)), str(read)]
                + [str(os.getpid()), KEEPER_MARKER],
                pass_fds=(read,),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                start_new_session=True,
            )
        except BaseException:
            os.close(write)
            raise
        finally:
            os.close(read)
        self.fd = write
        self.owner = os.getpid()
        atexit.register(self.close)

    def send(self, line: bytes) -> None:
        try:
            os.write(self.fd, line)
        except OSError:
            pass  # the keeper is gone (or closed at exit): nothing left to tell

    def close(self) -> None:
        """At interpreter exit: end of file for the keeper, which stops what
        is still kept (a backend left open) and exits; waited for (up to
        ``_EXIT_WAIT`` seconds), so that a process that exits normally
        leaves no keeper behind."""
        if self.owner != os.getpid() or self.fd < 0:
            return
        fd, self.fd = self.fd, -1
        os.close(fd)
        try:
            self.proc.wait(_EXIT_WAIT)
        except subprocess.TimeoutExpired:
            pass


_lock = threading.Lock()  # guards the start of _current; never held while writing
_current: _Keeper | None = None
_failed_in: int | None = None  # the pid in which starting a keeper failed (warned once)


def _keeper() -> _Keeper | None:
    global _current, _failed_in
    keeper = _current
    pid = os.getpid()
    if keeper is not None and keeper.owner == pid:
        return keeper
    with _lock:
        keeper = _current
        if keeper is not None and keeper.owner == pid:
            return keeper
        if _failed_in == pid:
            return None
        try:
            keeper = _current = _Keeper()
        except Exception as exc:
            _failed_in = pid
            _log.warning("no keeper process (%s): what calls start may outlive this process if it dies", exc)
            return None
        return keeper


def start() -> None:
    """Start this process's keeper unless it runs already (a forked child
    starts its own). Called right before a session is spawned: the keeper
    is then a process of its own (its ``Popen`` returned after its exec)
    before the child exists, so no one who looks at the child's family
    finds a keeper still showing its owner's command line, and an owner
    that dies while its first child starts leaves that child kept. Any
    thread; never raises (a failure is logged once, and the spawn goes on
    unguarded)."""
    _keeper()


def keep(pid: int) -> None:
    """Tell the keeper that this process leads session ``pid`` (a child just
    started with ``start_new_session=True``, not reaped yet): it is killed,
    with its process tree, if this process dies before ``release(pid)``.
    Any thread; never raises."""
    keeper = _keeper()
    if keeper is not None:
        keeper.send(b"+%d\n" % pid)


def release(pid: int) -> None:
    """Session ``pid`` is over (its leader reaped, no member left): the
    keeper forgets it. Any thread; never raises."""
    keeper = _current
    if keeper is not None and keeper.owner == os.getpid():
        keeper.send(b"-%d\n" % pid)


def keeper_pid() -> int | None:
    """The pid of this process's keeper, ``None`` before it started (a
    quiescence report leaves it out: it is no call's process)."""
    keeper = _current
    if keeper is None or keeper.owner != os.getpid():
        return None
    return keeper.proc.pid


# -- the keeper process -----------------------------------------------------


def _watch(fd: int, owner: int) -> None:  # pragma: no cover - runs in the keeper process
    """The keeper's loop: read ``+pid``/``-pid`` lines from ``fd`` until the
    owner dies, then stop every session still kept and exit."""
    from . import procfs as _procfs
    from .tree import stop_tree

    _os_signal.signal(_os_signal.SIGINT, _os_signal.SIG_IGN)
    _os_signal.signal(_os_signal.SIGHUP, _os_signal.SIG_IGN)
    kept: dict[int, int | None] = {}  # leader pid -> its start time (None: unknown)
    pidfd = -1
    try:
        pidfd = os.pidfd_open(owner)
    except (AttributeError, OSError):
        pidfd = -1
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    if pidfd >= 0:
        poller.register(pidfd, select.POLLIN)
    pending = b""

    def take(data: bytes) -> None:
        nonlocal pending
        pending += data
        *lines, pending = pending.split(b"\n")
        for line in lines:
            if line[:1] == b"+":
                pid = int(line[1:])
                info = _procfs.stat(pid)
                kept[pid] = None if info is None else info.start
            elif line[:1] == b"-":
                kept.pop(int(line[1:]), None)

    while os.getppid() == owner:
        events = poller.poll(None if pidfd >= 0 else int(_PARENT_POLL * 1000))
        if any(got == pidfd for got, _mask in events):
            break
        if events:
            data = os.read(fd, 65536)
            if not data:
                break
            take(data)
    # The owner is gone: what it wrote before it died still counts.
    os.set_blocking(fd, False)
    try:
        while data := os.read(fd, 65536):
            take(data)
    except OSError:
        pass
    # Still ours: the leader is gone (its members keep the group id in use)
    # or is the process recorded.
    ours = []
    for pid, start in kept.items():
        info = _procfs.stat(pid)
        if info is None or start is None:
            ours.append(pid)
            _procfs.killpg(pid, _os_signal.SIGKILL)
        elif info.start == start:
            ours.append(pid)
            _procfs.killpg_same(pid, start, _os_signal.SIGKILL)
    # Every kept group was killed at once above (a few system calls: most
    # trees are one group); now each tree thoroughly, confirmed gone.
    for pid in ours:
        stop_tree(pid)
    os._exit(0)
