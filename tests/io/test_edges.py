"""I/O edges of dshtools.io (docs/contract.md#a14): the evidence a stopped
process leaves (field case B47) and files that would block outside every
cancellation point (field case N3)."""

from __future__ import annotations

import concurrent.futures
import os
import pickle
import socket
import sys
import time
from pathlib import Path

import pytest

import dshtools
from dshtools import AbortController, AbortError, AbortSignal, timeout_of
from dshtools import io as dio
from tests.helpers.faults import FirstCallSkipped
from tests.helpers.waiting import AbortLater

# B47's child, verbatim, except that the caller-abort variant first tells
# the test (by opening a FIFO) that both lines are written.
STUCK = (
    "import os, sys, time\n"
    "print('step 1 done', flush=True)\n"
    "print('fatal: stuck', file=sys.stderr, flush=True)\n"
    "if len(sys.argv) > 1: os.close(os.open(sys.argv[1], os.O_WRONLY))\n"
    "time.sleep(30)\n"
)


def test_process_abort_error_is_exported_and_is_an_abort_error() -> None:
    assert dshtools.ProcessAbortError is dio.ProcessAbortError
    assert issubclass(dio.ProcessAbortError, AbortError)
    err = dio.ProcessAbortError("why", stdout=b"o", stderr=b"e", returncode=-15)
    copy = pickle.loads(pickle.dumps(err))
    assert (copy.reason, copy.stdout, copy.stderr, copy.returncode) == ("why", b"o", b"e", -15)


@pytest.mark.timeout(30)
def test_b47_timeout_keeps_the_output_written_before_the_stop() -> None:
    signal = AbortController().signal
    t0 = time.monotonic()
    with pytest.raises(dio.ProcessAbortError) as info:
        dio.run_process([sys.executable, "-c", STUCK], signal, timeout=0.5)
    assert time.monotonic() - t0 < 5
    err = info.value
    assert b"step 1 done" in err.stdout
    assert b"fatal: stuck" in err.stderr
    assert err.returncode == -15  # python dies on the session's SIGTERM
    reason = timeout_of(err)
    assert reason is not None and (reason.code, reason.seconds) == (dio.PROCESS_TIMEOUT, 0.5)
    assert signal.listener_count == 0


@pytest.mark.timeout(30)
def test_b47_caller_abort_keeps_the_output_written_before_the_stop(fifo: Path) -> None:
    controller = AbortController()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        future = pool.submit(dio.run_process, [sys.executable, "-c", STUCK, str(fifo)], controller.signal)
        with open(fifo, "rb"):  # returns once the child wrote both lines
            pass
        t0 = time.monotonic()
        controller.abort("user stop")
        with pytest.raises(dio.ProcessAbortError) as info:
            future.result(timeout=10)
    assert time.monotonic() - t0 < 5
    err = info.value
    assert (err.reason, timeout_of(err)) == ("user stop", None)
    assert b"step 1 done" in err.stdout
    assert b"fatal: stuck" in err.stderr
    assert err.returncode == -15


def test_run_process_on_an_aborted_signal_raises_process_abort_error_without_output() -> None:
    with pytest.raises(dio.ProcessAbortError) as info:
        dio.run_process(["true"], AbortSignal.already_aborted("early"))
    assert (info.value.reason, info.value.stdout, info.value.stderr, info.value.returncode) == ("early", b"", b"", None)


# ----------------------------------------------------------------- read_file


@pytest.mark.timeout(30)
def test_n3_fifo_without_writer_is_refused_at_once(fifo: Path) -> None:
    controller = AbortController()
    later = AbortLater(controller, 0.5, "stop")
    t0 = time.monotonic()
    try:
        with pytest.raises(ValueError, match="is not a regular file \\(a FIFO\\)"):
            dio.read_file(fifo, controller.signal)
    finally:
        later.cancel()
    assert time.monotonic() - t0 < 3
    assert controller.signal.listener_count == 0


@pytest.mark.timeout(30)
def test_read_file_refuses_devices_and_sockets_and_a_link_to_them(tmp_path: Path, fifo: Path) -> None:
    signal = AbortController().signal
    with pytest.raises(ValueError, match="character device"):
        dio.read_file("/dev/null", signal)
    sock_path = tmp_path / "sock"
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(sock_path))
        with pytest.raises(ValueError, match="a socket"):
            dio.read_file(sock_path, signal)
    link = tmp_path / "link"
    link.symlink_to(fifo)
    with pytest.raises(ValueError, match="a FIFO"):
        dio.read_file(link, signal)
    with pytest.raises(IsADirectoryError):
        dio.read_file(tmp_path, signal)
    regular = tmp_path / "file"
    regular.write_bytes(b"data")
    (tmp_path / "to-file").symlink_to(regular)
    assert dio.read_file(tmp_path / "to-file", signal) == b"data"


@pytest.mark.timeout(30)
def test_read_file_refuses_a_path_swapped_for_a_fifo_after_the_first_check(
    fifo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The first (path) check is made to pass, as if the path were still a
    # regular file when it ran: the non-blocking open returns at once and
    # the check on the opened descriptor refuses the FIFO.
    checks = FirstCallSkipped(monkeypatch, dio, "_check_regular")
    fds = len(os.listdir("/proc/self/fd"))
    with pytest.raises(ValueError, match="a FIFO"):
        dio.read_file(fifo, AbortController().signal)
    assert len(checks.calls) == 2
    assert len(os.listdir("/proc/self/fd")) == fds  # the descriptor was closed
