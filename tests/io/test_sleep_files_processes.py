"""dshtools.io: sleep, wait_future, read_file, run_process; argument checks of
http_request (its behaviour is in test_http.py). docs/contract.md#io.

Aborts "from another thread at time t" are scheduled on the shared timer
thread (a listener on ``AbortSignal.timeout(t)`` that aborts the caller's
controller and records when it did), so every bound is measured from the
real moment of the abort, not from a guess.
"""

from __future__ import annotations

import concurrent.futures
import os
import selectors
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dshtools import AbortController, AbortError, AbortSignal, TimeoutReason, timeout_of
from dshtools import io as dio
from dshtools._io import session as _process_session
from tests.helpers.waiting import AbortLater

# Prompt-return bound after an abort for the in-process waits: the contract's
# "about a millisecond" (docs/contract.md#cancellation, wait; measured by
# benchmarks/latency.py) with slack for a loaded 2-core box under coverage.
PROMPT = 0.5


class Reason(Exception):
    """A recognisable abort reason."""


def _alive(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


def _members(of: Callable[[int], int], key: int) -> list[int]:
    """Live (non-zombie) processes whose ``of(pid)`` is ``key``: with
    ``os.getpgid`` a process group, with ``os.getsid`` a session."""
    members = []
    for p in psutil.process_iter(["pid", "status"]):
        try:
            if of(p.pid) == key and p.info["status"] != psutil.STATUS_ZOMBIE:
                members.append(p.pid)
        except (ProcessLookupError, PermissionError, psutil.NoSuchProcess):
            pass
    return members


def _group_members(pgid: int) -> list[int]:
    return _members(os.getpgid, pgid)


# --------------------------------------------------------------------- sleep


@pytest.mark.timeout(10)
def test_sleep_returns_after_full_duration_without_abort() -> None:
    c = AbortController()
    t0 = time.monotonic()
    dio.sleep(0.05, c.signal)
    assert time.monotonic() - t0 >= 0.05
    assert c.signal.listener_count == 0


@pytest.mark.timeout(10)
def test_sleep_raises_abort_error_with_reason_promptly_after_abort() -> None:
    c = AbortController()
    reason = Reason("stop")
    later = AbortLater(c, 0.05, reason)
    with pytest.raises(AbortError) as info:
        dio.sleep(30, c.signal)
    assert later.at is not None and time.monotonic() - later.at < PROMPT
    assert info.value.reason is reason
    assert c.signal.listener_count == 0


def test_sleep_on_already_aborted_signal_raises_at_once() -> None:
    sig = AbortSignal.already_aborted("why")
    t0 = time.monotonic()
    with pytest.raises(AbortError) as info:
        dio.sleep(30, sig)
    assert time.monotonic() - t0 < PROMPT
    assert info.value.reason == "why"


def test_sleep_validates_arguments() -> None:
    sig = AbortController().signal
    with pytest.raises(ValueError):
        dio.sleep(-1, sig)
    with pytest.raises(ValueError):
        dio.sleep(float("nan"), sig)
    with pytest.raises(TypeError):
        dio.sleep(True, sig)
    with pytest.raises(TypeError):
        dio.sleep(1, None)  # type: ignore[arg-type]


# --------------------------------------------------------------- wait_future


def test_wait_future_returns_the_result() -> None:
    c = AbortController()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        assert dio.wait_future(pool.submit(lambda: 42), c.signal) == 42
    assert c.signal.listener_count == 0


def test_wait_future_reraises_the_futures_own_exception() -> None:
    c = AbortController()
    boom = KeyError("boom")
    fut: concurrent.futures.Future[int] = concurrent.futures.Future()
    fut.set_exception(boom)
    with pytest.raises(KeyError) as info:
        dio.wait_future(fut, c.signal)
    assert info.value is boom
    assert c.signal.listener_count == 0


@pytest.mark.timeout(10)
def test_wait_future_abort_ends_the_wait_but_leaves_a_running_future_to_its_owner() -> None:
    c = AbortController()
    started, release = threading.Event(), threading.Event()

    def work() -> str:
        started.set()
        release.wait()
        return "done"

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        fut = pool.submit(work)
        started.wait()
        later = AbortLater(c, 0.05, "user")
        with pytest.raises(AbortError) as info:
            dio.wait_future(fut, c.signal)
        assert later.at is not None and time.monotonic() - later.at < PROMPT
        assert info.value.reason == "user"
        # A running future cannot be cancelled: its owner must stop it.
        assert fut.running() and not fut.cancelled()
        assert c.signal.listener_count == 0
        release.set()
        assert fut.result() == "done"


@pytest.mark.timeout(10)
def test_wait_future_abort_cancels_a_still_queued_future() -> None:
    c = AbortController()
    started, release = threading.Event(), threading.Event()
    ran = threading.Event()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:

        def block() -> None:
            started.set()
            release.wait()

        blocker = pool.submit(block)
        started.wait()
        queued = pool.submit(ran.set)
        AbortLater(c, 0.02, "user")
        with pytest.raises(AbortError):
            dio.wait_future(queued, c.signal)
        assert queued.cancelled()
        release.set()
        blocker.result()
    assert not ran.is_set()
    assert c.signal.listener_count == 0


def test_wait_future_on_aborted_signal_cancels_queued_future_and_raises() -> None:
    fut: concurrent.futures.Future[int] = concurrent.futures.Future()
    with pytest.raises(AbortError) as info:
        dio.wait_future(fut, AbortSignal.already_aborted("r"))
    assert info.value.reason == "r"
    assert fut.cancelled()


def test_wait_future_rejects_non_futures() -> None:
    with pytest.raises(TypeError):
        dio.wait_future(object(), AbortController().signal)  # type: ignore[arg-type]


# ----------------------------------------------------------------- read_file


def test_read_file_returns_the_whole_content_across_chunks(tmp_path: Path) -> None:
    data = os.urandom(3 * 1024 * 1024 + 12345)
    path = tmp_path / "f.bin"
    path.write_bytes(data)
    c = AbortController()
    assert dio.read_file(path, c.signal) == data
    assert dio.read_file(str(path), c.signal, chunk_size=100_000) == data
    assert c.signal.listener_count == 0


@settings(max_examples=40, deadline=None)
@given(data=st.binary(max_size=5000), chunk_size=st.integers(1, 7000))
def test_read_file_equals_file_bytes_for_any_chunk_size(tmp_path_factory: Any, data: bytes, chunk_size: int) -> None:
    path = tmp_path_factory.mktemp("rf") / "f"
    path.write_bytes(data)
    assert dio.read_file(path, AbortController().signal, chunk_size=chunk_size) == data


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def test_read_file_checks_signal_per_chunk_and_closes_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "big.bin"
    path.write_bytes(b"x" * 10_000)
    c = AbortController()
    reason = Reason("enough")
    reads: list[int] = []
    real_read = os.read

    def counting_read(fd: int, n: int) -> bytes:
        reads.append(fd)
        if len(reads) == 3:
            c.abort(reason)  # aborts while the third chunk is being read
        return real_read(fd, n)

    monkeypatch.setattr(os, "read", counting_read)
    before = _open_fds()
    with pytest.raises(AbortError) as info:
        dio.read_file(path, c.signal, chunk_size=100)
    monkeypatch.undo()
    assert info.value.reason is reason
    assert len(reads) == 3  # no further chunk after the abort
    assert _open_fds() == before  # the file was closed
    assert c.signal.listener_count == 0


def test_read_file_on_aborted_signal_raises_without_opening(tmp_path: Path) -> None:
    with pytest.raises(AbortError) as info:
        dio.read_file(tmp_path / "does-not-exist", AbortSignal.already_aborted("x"))
    assert info.value.reason == "x"


def test_read_file_propagates_os_errors_and_validates_chunk_size(tmp_path: Path) -> None:
    sig = AbortController().signal
    with pytest.raises(FileNotFoundError):
        dio.read_file(tmp_path / "missing", sig)
    with pytest.raises(ValueError):
        dio.read_file(tmp_path, sig, chunk_size=0)
    with pytest.raises(TypeError):
        dio.read_file(tmp_path, sig, chunk_size=1.5)  # type: ignore[arg-type]
    assert sig.listener_count == 0


# --------------------------------------------------------------- run_process

PY = sys.executable


def test_run_process_returns_completed_process_and_nonzero_exit_is_not_an_error() -> None:
    c = AbortController()
    r = dio.run_process(["sh", "-c", "echo out; echo err >&2; exit 3"], c.signal)
    assert isinstance(r, subprocess.CompletedProcess)
    assert (r.args, r.returncode, r.stdout, r.stderr) == (
        ["sh", "-c", "echo out; echo err >&2; exit 3"],
        3,
        b"out\n",
        b"err\n",
    )
    assert c.signal.listener_count == 0


def test_run_process_passes_cwd_env_and_gives_devnull_stdin(tmp_path: Path) -> None:
    r = dio.run_process(
        ["sh", "-c", 'pwd; echo "$DSH_X"; cat'],
        AbortController().signal,
        cwd=tmp_path,
        env={"DSH_X": "y", "PATH": os.environ["PATH"]},
    )
    assert r.stdout == f"{os.path.realpath(tmp_path)}\ny\n".encode()


@pytest.mark.timeout(30)
def test_run_process_captures_one_megabyte_on_stdout_and_stderr_without_deadlock() -> None:
    code = "import sys; sys.stdout.buffer.write(b'o' * 2**20); sys.stderr.buffer.write(b'e' * 2**20)"
    r = dio.run_process([PY, "-c", code], AbortController().signal)
    assert r.stdout == b"o" * 2**20 and r.stderr == b"e" * 2**20


@pytest.mark.timeout(30)
def test_run_process_feeds_large_input_while_reading_large_output() -> None:
    data = os.urandom(2**20)
    r = dio.run_process(["cat"], AbortController().signal, input=data)
    assert r.stdout == data and r.returncode == 0


def _spawn_and_wait_for_pids(
    fifo: Path, script: str, **kwargs: Any
) -> tuple[
    concurrent.futures.Future[subprocess.CompletedProcess[bytes]],
    concurrent.futures.ThreadPoolExecutor,
    list[int],
    AbortController,
]:
    """Start ``run_process(sh -c script)`` in a worker; the script writes
    the pids it wants watched (shell first) into ``fifo``, which this thread
    reads: a handshake, no sleeping."""
    c = AbortController()
    pool = concurrent.futures.ThreadPoolExecutor(1)
    fut = pool.submit(dio.run_process, ["sh", "-c", script, "sh", str(fifo)], c.signal, **kwargs)
    with open(fifo) as f:  # blocks until the script opens it for writing
        pids = [int(p) for p in f.read().split()]
    return fut, pool, pids, c


# Two background grandchildren, then the shell waits for them.
FAMILY = 'sleep 1000 & a=$!; sleep 1000 & b=$!; echo "$$ $a $b" > "$1"; wait'


@pytest.mark.timeout(30)
def test_run_process_abort_kills_the_whole_group_and_leaves_no_orphan(fifo: Path) -> None:
    fut, pool, pids, c = _spawn_and_wait_for_pids(fifo, FAMILY, grace=30.0)
    with pool:
        assert all(_alive(p) for p in pids)
        reason = Reason("user cancel")
        t0 = time.monotonic()
        c.abort(reason)
        with pytest.raises(AbortError) as info:
            fut.result()
        # The group died on SIGTERM: the 30 s grace was not waited out.
        assert time.monotonic() - t0 < 0.5
    assert info.value.reason is reason and info.value.__cause__ is reason
    assert [p for p in pids if _alive(p)] == []
    assert _group_members(pids[0]) == []
    assert c.signal.listener_count == 0


@pytest.mark.timeout(30)
def test_run_process_sigkills_a_group_that_ignores_sigterm_after_grace(fifo: Path) -> None:
    # Ignored signals are inherited: both grandchildren ignore SIGTERM too.
    fut, pool, pids, c = _spawn_and_wait_for_pids(fifo, "trap '' TERM; " + FAMILY, grace=0.3)
    with pool:
        t0 = time.monotonic()
        c.abort("stop")
        with pytest.raises(AbortError) as info:
            fut.result()
        elapsed = time.monotonic() - t0
    assert 0.3 <= elapsed < 1.0
    assert info.value.reason == "stop"
    assert [p for p in pids if _alive(p)] == []
    assert _group_members(pids[0]) == []
    assert c.signal.listener_count == 0


@pytest.mark.timeout(30)
def test_run_process_own_timeout_raises_timeout_reason_and_kills_the_group(tmp_path: Path) -> None:
    c = AbortController()
    t0 = time.monotonic()
    with pytest.raises(AbortError) as info:
        dio.run_process(["sh", "-c", "sleep 1000 & sleep 1000 & wait"], c.signal, timeout=0.2)
    elapsed = time.monotonic() - t0
    assert 0.2 <= elapsed < 0.7
    reason = info.value.reason
    assert isinstance(reason, TimeoutReason)
    assert (reason.code, reason.seconds) == (dio.PROCESS_TIMEOUT, 0.2)
    assert timeout_of(info.value, dio.PROCESS_TIMEOUT) is reason
    assert not c.signal.aborted  # the timeout is the helper's, not the caller's
    assert c.signal.listener_count == 0


@pytest.mark.timeout(30)
def test_run_process_caller_abort_before_timeout_keeps_callers_reason(fifo: Path) -> None:
    fut, pool, pids, c = _spawn_and_wait_for_pids(fifo, FAMILY, timeout=60.0)
    with pool:
        c.abort("mine")
        with pytest.raises(AbortError) as info:
            fut.result()
    assert info.value.reason == "mine"
    assert [p for p in pids if _alive(p)] == []


def test_run_process_on_aborted_signal_does_not_spawn(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    with pytest.raises(AbortError) as info:
        dio.run_process(["touch", str(marker)], AbortSignal.already_aborted("early"))
    assert info.value.reason == "early"
    assert not marker.exists()


@pytest.mark.timeout(30)
def test_run_process_normal_exit_terminates_background_jobs_left_in_the_group() -> None:
    # One leftover holds stdout (would block a plain communicate()); one
    # redirected away (found only by scanning the group).
    script = "sleep 1000 & echo $!; sleep 1000 >/dev/null 2>&1 & echo $!; echo $$"
    t0 = time.monotonic()
    r = dio.run_process(["sh", "-c", script], AbortController().signal, grace=30.0)
    assert time.monotonic() - t0 < 1.0
    held, away, shell = (int(x) for x in r.stdout.split())
    assert r.returncode == 0
    assert not _alive(held) and not _alive(away)
    assert _group_members(shell) == []


@pytest.mark.timeout(30)
def test_run_process_normal_exit_sigkills_leftovers_ignoring_sigterm_after_grace() -> None:
    script = "trap '' TERM; sleep 1000 >/dev/null 2>&1 & echo $!"
    t0 = time.monotonic()
    r = dio.run_process(["sh", "-c", script], AbortController().signal, grace=0.2)
    assert 0.2 <= time.monotonic() - t0 < 1.0
    assert r.returncode == 0 and not _alive(int(r.stdout))


def test_run_process_spawn_error_propagates_and_removes_listener() -> None:
    c = AbortController()
    with pytest.raises(FileNotFoundError):
        dio.run_process(["/nonexistent/dshtools-no-such-binary"], c.signal, timeout=5)
    assert c.signal.listener_count == 0


def test_run_process_validates_arguments() -> None:
    sig = AbortController().signal
    with pytest.raises(TypeError):
        dio.run_process("echo hi", sig)
    with pytest.raises(ValueError):
        dio.run_process([], sig)
    with pytest.raises(ValueError):
        dio.run_process(["true"], sig, grace=-1)
    with pytest.raises(TypeError):
        dio.run_process(["cat"], sig, input="text")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        dio.run_process(["true"], "not a signal")  # type: ignore[arg-type]


@pytest.mark.timeout(30)
def test_run_process_keyboard_interrupt_in_the_loop_kills_and_reaps_the_group(
    fifo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Simulate Ctrl-C arriving while the caller thread sits in select().
    pids: list[int] = []
    got_pids = threading.Event()

    def reader() -> None:
        with open(fifo) as f:
            pids.extend(int(p) for p in f.read().split())
        got_pids.set()

    t = threading.Thread(target=reader)
    t.start()
    real_select = selectors.DefaultSelector.select

    def select(self: Any, timeout: float | None = None) -> Any:
        if got_pids.is_set():
            raise KeyboardInterrupt
        # Bounded, so the wrapper gets to look at got_pids again.
        return real_select(self, 0.01 if timeout is None else min(timeout, 0.01))

    monkeypatch.setattr(selectors.DefaultSelector, "select", select)
    c = AbortController()
    with pytest.raises(KeyboardInterrupt):
        dio.run_process(["sh", "-c", FAMILY, "sh", str(fifo)], c.signal)
    t.join()
    assert len(pids) == 3 and [p for p in pids if _alive(p)] == []
    assert c.signal.listener_count == 0


# ------------------------------------------- run_process: the whole session


def _session_members(sid: int) -> list[int]:
    return _members(os.getsid, sid)


# GNU timeout calls setpgid(0, 0) before forking, so it and its child leave
# the shell's process group (but not its session). The innermost shell
# reports "shell timeout grandchild" pids, then becomes `sleep`.
ESCAPE = 'export OUTER=$$; timeout 30 sh -c \'echo "$OUTER $PPID $$" > "$1"; exec sleep 30\' sh "$1" & '


@pytest.mark.timeout(30)
def test_run_process_abort_kills_descendants_that_left_the_process_group(fifo: Path) -> None:
    fut, pool, pids, c = _spawn_and_wait_for_pids(fifo, ESCAPE + "wait", grace=30.0)
    with pool:
        shell, tmo, grandchild = pids
        # The case this pins: both escaped the group killpg reaches.
        assert os.getpgid(tmo) != shell and os.getpgid(grandchild) != shell
        assert os.getsid(tmo) == shell
        t0 = time.monotonic()
        c.abort("stop")
        with pytest.raises(AbortError) as info:
            fut.result()
        # All died on SIGTERM: the 30 s grace was not waited out.
        assert time.monotonic() - t0 < 1.0
    assert info.value.reason == "stop"
    assert [p for p in pids if _alive(p)] == []
    assert _session_members(shell) == []
    assert c.signal.listener_count == 0


@pytest.mark.timeout(30)
def test_run_process_normal_exit_kills_orphans_that_left_the_process_group(fifo: Path) -> None:
    # The shell exits right after the handshake: timeout is reparented to
    # init, in its own group, and still holds stdout.
    script = ESCAPE + 'read -r line < "$1"; echo "$line"'
    t0 = time.monotonic()
    r = dio.run_process(["sh", "-c", script, "sh", str(fifo)], AbortController().signal, grace=30.0)
    assert time.monotonic() - t0 < 2.0
    assert r.returncode == 0
    pids = [int(x) for x in r.stdout.split()]
    assert len(pids) == 3
    assert [p for p in pids if _alive(p)] == []
    assert _session_members(pids[0]) == []


@pytest.mark.timeout(30)
def test_run_process_sigkills_a_grandchild_in_its_own_group_that_ignores_sigterm(fifo: Path) -> None:
    child = (
        "import os, signal, sys\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "os.setpgid(0, 0)\n"
        "with open(sys.argv[1], 'w') as f: f.write(f'{os.getppid()} {os.getpid()}')\n"
        "signal.pause()\n"
    )
    script = '"$0" -c "$2" "$1" & wait'
    c = AbortController()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        fut = pool.submit(dio.run_process, ["sh", "-c", script, PY, str(fifo), child], c.signal, grace=0.3)
        with open(fifo) as f:
            shell, grandchild = (int(p) for p in f.read().split())
        assert os.getpgid(grandchild) == grandchild != shell
        t0 = time.monotonic()
        c.abort("stop")
        with pytest.raises(AbortError):
            fut.result()
        elapsed = time.monotonic() - t0
    assert 0.3 <= elapsed < 1.5  # it took SIGKILL after the grace period
    assert not _alive(grandchild) and not _alive(shell)
    assert _session_members(shell) == []


@pytest.mark.timeout(10)
def test_a_group_that_cannot_be_scanned_or_may_not_be_signalled_counts_as_alive(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from dshtools._os import procfs

    child = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        with monkeypatch.context() as patched:
            patched.setattr(procfs, "try_scan", lambda: None)  # no /proc (not Linux): any member counts
            assert _process_session._group_alive(child.pid)
    finally:
        child.kill()
        child.wait()
    assert not _process_session._group_alive(child.pid)  # reaped: the group is gone
    with monkeypatch.context() as patched:
        patched.setattr(procfs, "try_scan", lambda: None)
        assert not _process_session._group_alive(child.pid)  # gone, /proc or not

    def not_ours(pgid: int, sig: int) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "killpg", not_ours)  # another user's group: it exists
    assert _process_session._group_alive(child.pid)


@pytest.mark.timeout(30)
def test_run_process_member_signal_is_rechecked_against_the_session_id() -> None:
    # Pid-reuse guard: a pid whose session id is not the one asked for (a
    # stranger that took a dead member's pid) is not signalled.
    stranger = subprocess.Popen(["sleep", "1000"], start_new_session=True)
    try:
        assert os.getsid(stranger.pid) == stranger.pid
        _process_session._kill_member(stranger.pid, os.getsid(0), 9)
        assert _alive(stranger.pid)
        _process_session._kill_member(stranger.pid, stranger.pid, 9)
        assert stranger.wait(timeout=10) == -9
    finally:
        if stranger.poll() is None:
            stranger.kill()
            stranger.wait()


def test_run_process_type_errors_name_the_parameter() -> None:
    sig = AbortController().signal
    with pytest.raises(TypeError, match=r"^timeout must be a number"):
        dio.run_process(["true"], sig, timeout="1")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^grace must be a number"):
        dio.run_process(["true"], sig, grace="1")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^timeout must be finite"):
        dio.run_process(["true"], sig, timeout=float("nan"))
    assert sig.listener_count == 0


def test_http_request_rejects_a_non_str_url_with_a_type_error() -> None:
    sig = AbortController().signal
    with pytest.raises(TypeError, match=r"^url must be a str, not NoneType"):
        dio.http_request("GET", None, sig)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^url must be a str, not bytes"):
        dio.http_request("GET", b"http://127.0.0.1/", sig)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^timeout must be a number"):
        dio.http_request("GET", "http://127.0.0.1/", sig, timeout="1")  # type: ignore[arg-type]
    assert sig.listener_count == 0


_NEVER_READS = [sys.executable, "-c", "import time; time.sleep(30)"]


@pytest.mark.timeout(60)
def test_b50_a_large_input_to_a_child_that_never_reads_cannot_outlast_the_timeout_or_the_abort() -> None:
    """B50: an 8 MiB ``input`` to a child that never reads its stdin. (a)
    with ``timeout=0.5, grace=0.5``: ``AbortError`` within 5 s, with its
    timeout reason; (b) no timeout, the caller aborts at 0.3 s with "user
    stop": ``AbortError`` within 5 s carrying that reason and no timeout.
    The write never blocks the caller before the timeout is armed."""
    data = b"x" * (8 * 2**20)
    t0 = time.monotonic()
    with pytest.raises(AbortError) as timed:
        dio.run_process(_NEVER_READS, AbortController().signal, input=data, timeout=0.5, grace=0.5)
    assert time.monotonic() - t0 < 5.0
    reason = timeout_of(timed.value)
    assert reason is not None and reason.code == dio.PROCESS_TIMEOUT

    c = AbortController()
    later = AbortLater(c, 0.3, "user stop")
    t0 = time.monotonic()
    with pytest.raises(AbortError) as stopped:
        dio.run_process(_NEVER_READS, c.signal, input=data, grace=0.5)
    assert time.monotonic() - t0 < 5.0 and later.at is not None
    assert stopped.value.reason == "user stop"
    assert timeout_of(stopped.value) is None


@pytest.mark.timeout(60)
def test_b50_a_child_that_writes_a_lot_before_reading_a_large_input_does_not_deadlock() -> None:
    """B50 (c): a child writes 1 MiB to stdout before it reads a 4 MiB
    stdin, then prints the byte count: both pipes are served at once, so
    it completes with the whole 1 MiB followed by ``|4194304``."""
    code = (
        "import sys\n"
        "sys.stdout.buffer.write(b'o' * 2**20)\n"
        "sys.stdout.buffer.flush()\n"
        "n = len(sys.stdin.buffer.read())\n"
        "sys.stdout.buffer.write(b'|%d' % n)\n"
    )
    r = dio.run_process([sys.executable, "-c", code], AbortController().signal, input=b"i" * (4 * 2**20))
    assert r.returncode == 0
    assert r.stdout == b"o" * 2**20 + b"|4194304"
