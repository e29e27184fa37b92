"""Messages one side of ``ProcessBackend`` cannot rebuild
(docs/contract.md#a28): each is a coded failure of that one call with the
reason, never a hung call or a dead reader thread, and the backend goes on
serving calls. Typed tools whose pydantic models live in ``__main__`` work
(field case N18)."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
import types
from collections.abc import Iterator
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import pydantic
import pytest

from dshtools import (
    INVALID_TOOL_OUTPUT,
    TOOL_ABORTED_BEFORE_DISPATCH,
    WORKER_LOST,
    ProcessBackend,
    ToolRegistry,
    ToolRunContext,
)
from tests.helpers.calls import call, error_of, tool, value_of
from tests.helpers.workers import returns_worker_only_instance

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process trees are read from /proc")

N18_SCRIPT = textwrap.dedent(
    """\
    from pydantic import BaseModel

    from dshtools import AbortController, ProcessBackend, ToolExecutionInput, ToolRegistry, ToolRunContext, ToolSuccess


    class Order(BaseModel):
        sku: str
        qty: int


    registry = ToolRegistry()


    @registry.tool(backend=ProcessBackend(max_workers=1))
    def price(order: Order, run: ToolRunContext) -> float:
        \"\"\"The price of an order.\"\"\"
        return order.qty * 2.5


    if __name__ == "__main__":
        with registry:
            result = registry.execute(
                ToolExecutionInput("c1", "price", {"order": {"sku": "tea", "qty": 3}}, AbortController().signal)
            )
            print(result.value if isinstance(result, ToolSuccess) else result)
    """
)


@pytest.mark.timeout(30)
def test_a_typed_tool_whose_model_is_in_main_returns_its_value_on_a_process_backend(tmp_path: Path) -> None:
    """N18: the script's ``Order`` lives in ``__main__``, which a worker's
    ``__main__`` is not; the call returns its value within 10 s."""
    script = tmp_path / "n18.py"
    script.write_text(N18_SCRIPT, encoding="utf-8")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=10)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "7.5", (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr


def pid_of_worker(args: Any, run: ToolRunContext) -> int:
    return os.getpid()


def sends_a_garbage_frame(args: Any, run: ToolRunContext) -> int:
    """A body for a worker: writes a frame the caller cannot decode on the
    worker's own connection, then returns."""
    (conn,) = [o for o in gc.get_objects() if isinstance(o, Connection) and not o.closed]
    conn.send_bytes(b"\x80\x05not a pickle")
    return os.getpid()


@pytest.fixture(scope="module")
def one_worker() -> Iterator[ToolRegistry]:
    with ProcessBackend(1, kill_after=1.0) as backend, ToolRegistry(backend=backend) as registry:
        registry.register(tool("worker_only", returns_worker_only_instance))
        registry.register(tool("pid", pid_of_worker))
        registry.register(tool("garbage", sends_a_garbage_frame))
        yield registry


@pytest.mark.timeout(30)
def test_a_result_whose_class_exists_only_in_the_worker_is_a_coded_failure_naming_the_class(
    one_worker: ToolRegistry,
) -> None:
    """N18's second half: the value does not unpickle in the caller. The
    call fails with ``INVALID_TOOL_OUTPUT`` naming the class and why; the
    same worker serves the next call."""
    before = value_of(one_worker.execute(call("pid", call_id="p1")))
    result = one_worker.execute(call("worker_only", {"module": "dshtools_worker_only_result"}, call_id="w1"))
    assert result.code == INVALID_TOOL_OUTPUT, result
    message = error_of(result).message
    assert "dshtools_worker_only_result.Receipt" in message, message
    assert "No module named 'dshtools_worker_only_result'" in message, message
    assert value_of(one_worker.execute(call("pid", call_id="p2"))) == before


class Elsewhere(pydantic.BaseModel):
    """A model of a module the caller has and the worker cannot import."""

    name: str


Elsewhere.__module__ = "dshtools_caller_only_module"


@pytest.mark.timeout(30)
@pytest.mark.parametrize("ahead", [False, True])
def test_a_call_the_worker_cannot_rebuild_fails_before_its_body_runs(ahead: bool) -> None:
    """A typed tool whose model pickles here by reference to a module only
    this process has: the worker cannot load the call (loaded at the call,
    or ahead by ``start()``), so the body never starts
    (``ABORTED_BEFORE_DISPATCH``, ``body_invoked`` false, the reason in
    ``meta["reason"]``) and the same worker serves the next call."""
    caller_only = types.ModuleType("dshtools_caller_only_module")
    caller_only.Elsewhere = Elsewhere  # type: ignore[attr-defined]
    sys.modules[caller_only.__name__] = caller_only
    try:
        with ProcessBackend(1) as backend, ToolRegistry(backend=backend) as registry:

            @registry.tool
            def greet(who: Elsewhere) -> str:
                """Greets."""
                return who.name

            registry.register(tool("pid", pid_of_worker))
            if ahead:
                backend.start()
            before = value_of(registry.execute(call("pid", call_id="p1")))
            result = registry.execute(call("greet", {"who": {"name": "x"}}, call_id="e1"))
            after = value_of(registry.execute(call("pid", call_id="p2")))
    finally:
        del sys.modules[caller_only.__name__]
    assert result.code == TOOL_ABORTED_BEFORE_DISPATCH, result
    assert not result.body_invoked
    reason = str(result.meta["reason"])
    assert "could not rebuild the call" in reason and "dshtools_caller_only_module" in reason, reason
    assert after == before


@pytest.mark.timeout(30)
def test_a_frame_the_caller_cannot_decode_fails_its_call_and_a_fresh_worker_serves_the_next(
    one_worker: ToolRegistry,
) -> None:
    """A frame from a worker that does not decode at all means its
    connection cannot be trusted: the call is ``WORKER_LOST`` with the
    reason, the worker is stopped, and the next call runs on a new one."""
    result = one_worker.execute(call("garbage", call_id="g1"))
    assert result.code == WORKER_LOST, result
    assert "could not be decoded" in error_of(result).message
    after = value_of(one_worker.execute(call("pid", call_id="p3")))
    assert isinstance(after, int)
