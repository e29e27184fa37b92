"""Child processes: starting them, finding them, signalling them.

``wait_for_descendant``, ``alive``, ``signal_and_collect``, ``run_cli``,
``run_mypy``, ``run_python`` and ``fork_while_held`` (a script that forks
while a lock is held). psutil is imported inside the functions that need
it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def wait_for_descendant(root: int, argv: list[str], timeout: float, *, matching_only: bool = False) -> list[int]:
    """Poll (every 10 ms, up to ``timeout`` seconds) until a live descendant
    of ``root`` runs exactly ``argv``; return the pids of every descendant
    seen then, or with ``matching_only`` of those running ``argv`` (for a
    ``root`` such as the test process itself, whose other descendants
    belong to other tests). A keeper process (``dshtools._os.keeper``) is
    never counted: it belongs to its owner, not to a call, and exits by
    itself once its owner is gone. Raises ``AssertionError`` when none
    appears in time."""
    import psutil

    from dshtools._os.procfs import is_keeper

    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            family = psutil.Process(root).children(recursive=True)
        except psutil.NoSuchProcess:
            break
        matching = []
        for proc in family:
            try:
                if proc.cmdline() == argv:
                    matching.append(proc.pid)
            except psutil.Error:
                pass
        if matching:
            return matching if matching_only else [p.pid for p in family if not is_keeper(p.pid)]
        time.sleep(0.01)
    raise AssertionError(f"no descendant of {root} ran {argv} within {timeout}s")


def alive(pids: list[int]) -> list[int]:
    """The pids among ``pids`` that are still running: not zombies, and not
    keepers. A keeper belongs to its owner and exits once the owner is gone;
    ``wait_for_descendant`` leaves keepers out, but one caught between its
    fork and its exec still showed its parent's command line then, so it is
    told apart again here, when it has long been a keeper."""
    import psutil

    from dshtools._os.procfs import is_keeper

    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE and not is_keeper(pid):
                out.append(pid)
        except psutil.NoSuchProcess:
            pass
    return out


def signal_and_collect(
    proc: subprocess.Popen[str], signum: int, timeout: float, when_ready: Callable[[], T]
) -> tuple[T, str, str, float]:
    """Call ``when_ready()`` (it returns once ``proc`` reached the point to
    interrupt, or raises), send ``signum`` to ``proc`` and wait up to
    ``timeout`` seconds for it to exit. Returns what ``when_ready``
    returned, ``proc``'s stdout and stderr, and the seconds from the signal
    to the exit. ``proc`` is killed and reaped if it is still running when
    this returns or raises (``subprocess.TimeoutExpired`` on a hang)."""
    try:
        ready = when_ready()
        sent = time.monotonic()
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=timeout)
        return ready, out, err, time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def run_cli(
    folder: str | os.PathLike[str], *args: str, timeout: float = 60, **kw: Any
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m dshtools *args`` in ``folder``, with ``folder`` first
    on ``PYTHONPATH`` (where a test writes its tools module), capturing its
    output as text; ``timeout`` seconds bound a hang. Keywords go to
    ``subprocess.run``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(folder), env.get("PYTHONPATH", "")) if p)
    return subprocess.run(
        [sys.executable, "-m", "dshtools", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=folder,
        timeout=timeout,
        **kw,
    )


def run_mypy(*args: str | os.PathLike[str]) -> subprocess.CompletedProcess[str]:
    """Run mypy with the checkout's setup.cfg (its plugin and strictness)
    and its incremental cache (``.mypy_cache``; the gate's run keeps its
    own: the standard library, the SDKs and ``dshtools`` are analysed
    once per checkout, not once per call; a file mypy reports errors in is
    checked again every run), from the checkout (so ``dshtools`` is this
    one), on ``args`` (paths and extra flags); 300 s at most. The caller
    reads the return code and the report. Not safe to run twice at once on
    one checkout: the cache is shared."""
    checkout = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", os.path.join(checkout, "setup.cfg")]
        + [os.fspath(a) for a in args],
        cwd=checkout,
        env=dict(os.environ, MYPYPATH=checkout),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def run_python(code: str, timeout: float = 50) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter (deprecation warnings off: a
    fork in a threaded process warns) and assert it exits 0, showing its
    stderr; ``timeout`` seconds bound a hang."""
    proc = subprocess.run(
        [sys.executable, "-W", "ignore::DeprecationWarning", "-c", code],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stderr
    return proc


_FORK_WHILE_HELD = """\
held, release = threading.Event(), threading.Event()

def hold():
    with {lock}:
        held.set()
        release.wait(10)

holder = threading.Thread(target=hold)
holder.start()
assert held.wait(5)
pid = os.fork()
if pid == 0:
    code = 1
    try:
{child}
    finally:
        os._exit(code)
release.set()
holder.join(5)
_, status = os.waitpid(pid, 0)
"""


def fork_while_held(lock: str, child: str, *, setup: str = "", after: str = "") -> str:
    """The source of a script for ``run_python``: after ``setup`` (imports
    and any state), a helper thread holds ``lock`` (an expression naming a
    lock) while the main thread forks. The child runs ``child``, which sets
    ``code`` (0 for success), and exits with it; the parent releases the
    lock, reaps the child, runs ``after`` and exits with the child's status.
    A child that deadlocks on the lock hangs until ``run_python``'s timeout."""
    body = textwrap.indent(textwrap.dedent(child).strip("\n"), " " * 8)
    return (
        "import os, sys, threading\n"
        + textwrap.dedent(setup).strip("\n")
        + "\n\n"
        + _FORK_WHILE_HELD.format(lock=lock, child=body)
        + textwrap.dedent(after).strip("\n")
        + "\nsys.exit(os.waitstatus_to_exitcode(status))\n"
    )
