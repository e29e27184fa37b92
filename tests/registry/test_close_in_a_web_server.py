"""The shutdown recipe of docs/async.md#shutdown under a real uvicorn
(docs/contract.md#a31): a client that disconnects gets its call aborted
(Starlette does not cancel the handler), and SIGTERM with
``--timeout-graceful-shutdown 1`` ends with no process the tool started
left running. The tool's child ignores SIGTERM, so only a joined abort
(the kill after its grace) stops it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.processes import alive, wait_for_descendant

pytest.importorskip("uvicorn")
pytest.importorskip("starlette")
pytest.importorskip("psutil")

import psutil

from tests.registry.web_shutdown_app import CHILD

ROOT = Path(__file__).resolve().parents[2]


class Server:
    """uvicorn serving ``web_shutdown_app`` on a socket bound here."""

    def __init__(self, *options: str) -> None:
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen()  # a connection waits in the backlog until uvicorn accepts
        self.port = self.listener.getsockname()[1]
        fd = self.listener.fileno()
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "tests.registry.web_shutdown_app:app",
                "--fd",
                str(fd),
                "--log-level",
                "warning",
                *options,
            ],
            cwd=ROOT,
            pass_fds=(fd,),
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )

    def post(self) -> socket.socket:
        """Send ``POST /run``; the connection stays open."""
        client = socket.create_connection(("127.0.0.1", self.port), timeout=20)
        client.sendall(b"POST /run HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n")
        return client

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(10)
        self.listener.close()


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[Server]:
    serving = Server(*getattr(request, "param", ()))
    yield serving
    serving.close()


def _until_gone(pids: list[int], timeout: float) -> list[int]:
    """Wait for ``pids`` to end, ``timeout`` seconds at most; those still alive."""
    end = time.monotonic() + timeout
    while alive(pids) and time.monotonic() < end:
        psutil.wait_procs([psutil.Process(p) for p in alive(pids)], timeout=0.1)
    return alive(pids)


@pytest.mark.timeout(60)
def test_a_client_that_disconnects_has_its_call_aborted_and_joined(server: Server) -> None:
    client = server.post()
    family = wait_for_descendant(server.process.pid, CHILD, 20)
    client.close()
    # The handler is not cancelled; the recipe's disconnect watch aborts the
    # call, and the child that ignores SIGTERM is killed after its grace.
    assert _until_gone(family, 10) == []
    assert server.process.poll() is None  # the server serves on


@pytest.mark.timeout(60)
@pytest.mark.parametrize("server", [("--timeout-graceful-shutdown", "1")], indirect=True)
def test_sigterm_with_a_graceful_timeout_leaves_nothing_running(server: Server) -> None:
    client = server.post()
    family = wait_for_descendant(server.process.pid, CHILD, 20)
    server.process.send_signal(signal.SIGTERM)
    server.process.wait(20)
    # The lifespan hook's close(abort=...) joined the call before exit.
    assert alive(family) == []
    client.close()
