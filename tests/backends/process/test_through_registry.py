"""ProcessBackend through the registry (docs/contract.md#backends): forced stop
→ ``ABORTED``/``TOOL_TIMEOUT`` with ``meta["killed"]``, withdrawal →
``ABORTED_BEFORE_DISPATCH``, ``WORKER_LOST``, ``INVALID_TOOL_OUTPUT``,
refusal at ``register()``, Ctrl-C, batches and observers, and the thread
backend's invariants over 200 calls with random aborts.

Bodies announce that they started through a FIFO the test reads (a
blocking read, not a sleep), and block on another FIFO where they must.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from dshtools import (
    INVALID_TOOL_OUTPUT,
    TOOL_ABORTED,
    TOOL_ABORTED_BEFORE_DISPATCH,
    TOOL_TIMEOUT,
    WORKER_LOST,
    AbortController,
    ProcessBackend,
    ToolDefinition,
    ToolExecution,
    ToolExecutionResult,
    ToolRegistry,
    ToolSuccess,
    execute_batch,
)
from dshtools._os.tree import session_alive
from tests.helpers.calls import OBJECT, call, registry_serving, tool
from tests.helpers.workers import (
    assert_worker_only_errors_keep_name_message_and_code,
    blocked_until_released,
    raises_worker_only,
    write_line,
)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process trees are read from /proc")


def gone(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


def read_line(path: str) -> str:
    with open(path, encoding="ascii") as f:  # blocks until the body opens the FIFO
        return f.readline().strip() or "0"


def unblock(path: str) -> None:
    """Release a reader of ``path`` still waiting for a body that never
    started (it then reads pid 0), so a failing test fails instead of
    hanging."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:
        pass  # no reader waiting


@pytest.fixture
def fifo(tmp_path: Path) -> str:
    path = str(tmp_path / "started")
    os.mkfifo(path)
    return path


@pytest.fixture(scope="module")
def registry(backend: ProcessBackend) -> Iterator[ToolRegistry]:
    # Module-wide, like its backend: closing the last registry that uses a
    # backend closes the backend.
    yield from registry_serving(ToolRegistry(backend=backend), DEFINITIONS)


# -------------------------------------------------------------- bodies


def stubborn(args: Any, run: Any) -> object:
    write_line(args["started"], str(os.getpid()))
    time.sleep(60)
    return "unreachable"


def cooperative(args: Any, run: Any) -> object:
    write_line(args["started"], str(os.getpid()))
    run.signal.wait()
    return "stopped when asked"


def quick(args: Any, run: Any) -> object:
    return {"pid": os.getpid(), "n": args.get("n", 0)}


def crash(args: Any, run: Any) -> object:
    os._exit(3)


def returns_lock(args: Any, run: Any) -> object:
    return threading.Lock()


def counted(args: Any, run: Any) -> object:
    with open(args["log"], "a", encoding="ascii") as f:
        f.write(args["id"] + "\n")
    if args.get("wait"):
        run.signal.wait(args["wait"])
    return args["id"]


DEFINITIONS = [
    ToolDefinition("stubborn", "ignores its signal", OBJECT, stubborn),
    ToolDefinition("stubborn_timed", "ignores its signal", OBJECT, stubborn, timeout=0.3),
    ToolDefinition("cooperative", "waits for its signal", OBJECT, cooperative),
    ToolDefinition("quick", "returns at once", OBJECT, quick),
    ToolDefinition("crash", "exits its process", OBJECT, crash),
    ToolDefinition("returns_lock", "returns what cannot be pickled", OBJECT, returns_lock),
    ToolDefinition("counted", "logs its invocation", OBJECT, counted, is_concurrency_safe=lambda args: True),
]


def execute_aborted_once_started(registry: ToolRegistry, name: str, fifo: str) -> tuple[ToolExecutionResult, int]:
    """Execute tool ``name`` (its body announces its worker's pid on
    ``fifo``) and abort the call's signal once the body announced itself.
    Returns the result and the worker's pid."""
    controller = AbortController()
    worker: list[int] = []

    def abort_when_started() -> None:
        worker.append(int(read_line(fifo)))
        controller.abort("user pressed stop")

    thread = threading.Thread(target=abort_when_started)
    thread.start()
    result = registry.execute(call(name, {"started": fifo}, signal=controller.signal))
    thread.join()
    return result, worker[0]


# --------------------------------------------------------------- tests


@pytest.mark.timeout(30)
def test_a_sleeping_body_is_killed_after_kill_after_with_nothing_left(registry: ToolRegistry, fifo: str) -> None:
    result, worker = execute_aborted_once_started(registry, "stubborn", fifo)
    assert result.code == TOOL_ABORTED
    assert result.meta is not None and result.meta["killed"] is True
    overrun = result.meta["overrun_s"]
    assert isinstance(overrun, float) and overrun >= 0.5
    assert gone(worker) and session_alive(worker) == []


@pytest.mark.timeout(30)
def test_a_timeout_policy_abort_then_a_kill_is_tool_timeout_with_killed(registry: ToolRegistry, fifo: str) -> None:
    assert not registry.execute(call("quick")).is_error  # a warm worker is idle: the body starts at once
    worker: list[int] = []
    reader = threading.Thread(target=lambda: worker.append(int(read_line(fifo))))
    reader.start()
    t0 = time.monotonic()
    result = registry.execute(call("stubborn_timed", {"started": fifo}))
    elapsed = time.monotonic() - t0
    unblock(fifo)
    reader.join()
    assert result.code == TOOL_TIMEOUT
    assert result.meta is not None and result.meta["killed"] is True
    assert elapsed >= 0.3 + 0.5
    assert gone(worker[0]) and session_alive(worker[0]) == []


@pytest.mark.timeout(30)
def test_a_cooperative_body_returns_on_its_signal_and_is_not_killed(
    registry: ToolRegistry, backend: ProcessBackend, fifo: str
) -> None:
    kills = backend.kills
    result, worker = execute_aborted_once_started(registry, "cooperative", fifo)
    assert result.code == TOOL_ABORTED
    assert not (result.meta or {}).get("killed")
    assert backend.kills == kills
    assert worker in backend.worker_pids  # the worker lives on, reused


@pytest.mark.timeout(30)
def test_a_worker_that_exits_is_worker_lost_and_the_next_call_succeeds(registry: ToolRegistry) -> None:
    lost = registry.execute(call("crash"))
    assert lost.code == WORKER_LOST
    assert lost.error.info is not None and lost.error.info.name == "WorkerLost"  # type: ignore[union-attr]
    after = registry.execute(call("quick", {"n": 5}))
    assert not after.is_error and after.value["n"] == 5


@pytest.mark.timeout(30)
def test_a_return_value_that_does_not_pickle_is_invalid_tool_output(registry: ToolRegistry) -> None:
    result = registry.execute(call("returns_lock"))
    assert result.code == INVALID_TOOL_OUTPUT
    assert "could not be sent back from the worker process" in result.content[0]["text"]


@pytest.mark.timeout(30)
def test_an_unpicklable_body_is_refused_at_register_naming_the_tool(backend: ProcessBackend) -> None:
    lock = threading.Lock()
    with ToolRegistry(backend=backend) as r, pytest.raises(ValueError, match="'holds_lock'"):
        r.register(ToolDefinition("holds_lock", "", OBJECT, lambda args, run: lock.locked()))
    # Per tool, on a thread registry: the same refusal.
    with ToolRegistry() as r, pytest.raises(ValueError, match="'holds_lock'"):
        r.register(ToolDefinition("holds_lock", "", OBJECT, lambda args, run: lock.locked(), backend=backend))


@pytest.mark.timeout(30)
def test_a_per_tool_backend_runs_only_that_tool_in_a_worker(backend: ProcessBackend) -> None:
    with ToolRegistry() as r:
        r.register(ToolDefinition("isolated", "", OBJECT, quick, backend=backend))
        r.register(ToolDefinition("local", "", OBJECT, lambda args, run: {"pid": os.getpid()}))
        isolated = r.execute(call("isolated"))
        local = r.execute(call("local"))
    assert isolated.value["pid"] != os.getpid()  # type: ignore[union-attr]
    assert local.value["pid"] == os.getpid()  # type: ignore[union-attr]
    assert backend.worker_pids  # a shared backend stays open for its other users


@pytest.mark.timeout(30)
def test_queued_calls_behind_a_full_pool_are_withdrawn_and_never_run(tmp_path: Path, fifo: str) -> None:
    release = str(tmp_path / "release")
    os.mkfifo(release)
    log = tmp_path / "log"
    log.write_text("")
    backend = ProcessBackend(1, kill_after=0.5)
    with ToolRegistry(backend=backend) as r:
        r.register(ToolDefinition("blocker", "", OBJECT, blocked_until_released))
        r.register(DEFINITIONS[-1])  # counted
        results: dict[str, ToolExecutionResult] = {}
        first = threading.Thread(
            target=lambda: results.setdefault(
                "first", r.execute(call("blocker", {"started": fifo, "release": release}))
            )
        )
        first.start()
        read_line(fifo)  # the only worker is busy now
        controller = AbortController()
        calls = [
            call("counted", {"log": str(log), "id": f"q{i}"}, signal=controller.signal, call_id=f"q{i}")
            for i in range(4)
        ]
        queued = threading.Thread(
            target=lambda: results.update(
                zip(["q0", "q1", "q2", "q3"], execute_batch(r, calls, signal=AbortController().signal), strict=True)
            )
        )
        queued.start()
        deadline = time.monotonic() + 10
        while backend.calls_queued < 4:  # a condition, polled: not an ordering by sleep
            assert time.monotonic() < deadline, "the batch's calls never queued"
            time.sleep(0.001)
        controller.abort("withdrawn")
        queued.join()
        with open(release, "w", encoding="ascii") as f:
            f.write("go\n")
        first.join()
    assert results["first"].value == "released"  # type: ignore[union-attr]
    assert [results[f"q{i}"].code for i in range(4)] == [TOOL_ABORTED_BEFORE_DISPATCH] * 4
    assert log.read_text() == ""


@pytest.mark.timeout(60)
def test_200_calls_with_random_aborts_keep_every_invariant(tmp_path: Path) -> None:
    log = tmp_path / "log"
    log.write_text("")
    rng = random.Random(12)
    published: dict[str, list[ToolExecutionResult]] = {}
    lock = threading.Lock()

    def observe(execution: ToolExecution, result: ToolExecutionResult) -> None:
        with lock:
            published.setdefault(execution.call_id, []).append(result)

    backend = ProcessBackend(2, kill_after=0.5)
    returned: dict[str, ToolExecutionResult] = {}
    with ToolRegistry(backend=backend) as r:
        r.register(DEFINITIONS[-1])
        r.add_result_observer(observe)
        n = 0
        for _batch in range(20):
            controllers = []
            calls = []
            for _ in range(10):
                n += 1
                c = AbortController()
                if rng.random() < 0.15:
                    c.abort("before")
                wait = rng.choice([0, 0, 0.01, 0.05])
                calls.append(
                    call("counted", {"log": str(log), "id": f"r{n}", "wait": wait}, signal=c.signal, call_id=f"r{n}")
                )
                controllers.append(c)
            timers = [
                threading.Timer(rng.uniform(0, 0.03), c.abort, ("during",)) for c in controllers if rng.random() < 0.4
            ]
            for t in timers:
                t.start()
            results = execute_batch(r, calls, signal=AbortController().signal, max_parallel=4)
            for t in timers:
                t.join()
            returned.update({c.call_id: res for c, res in zip(calls, results, strict=True)})
            assert backend.bodies_running == 0  # the batch joined every body
    ran = log.read_text().split()
    assert len(ran) == len(set(ran))  # no body ran twice
    assert len(returned) == 200
    for call_id, result in returned.items():
        assert published[call_id] == [result]  # exactly one result, the one returned
        if result.code == TOOL_ABORTED_BEFORE_DISPATCH:
            assert call_id not in ran
        else:
            assert call_id in ran
            assert result.code in (None, TOOL_ABORTED)
            assert not (result.meta or {}).get("killed")  # every body here cooperates
    assert backend.worker_pids == []  # closed with its registry
    codes = {res.code for res in returned.values()}
    assert None in codes and TOOL_ABORTED_BEFORE_DISPATCH in codes


SCRIPT = textwrap.dedent(
    """
    import os, signal, sys, time
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from dshtools import AbortController, ProcessBackend, ToolDefinition, ToolExecutionInput, ToolRegistry, execute_batch

    def stubborn(args, run):
        os.write(1, f"started {os.getpid()}\\n".encode())  # one write: the two workers share the pipe
        time.sleep(60)

    def polite(args, run):
        os.write(1, f"started {os.getpid()}\\n".encode())  # one write: the two workers share the pipe
        run.signal.wait()
        return "stopped"

    backend = ProcessBackend(2, kill_after=0.5)
    registry = ToolRegistry(backend=backend)
    for name, body in (("stubborn", stubborn), ("polite", polite)):
        registry.register(ToolDefinition(name, "", {"type": "object"}, body, is_concurrency_safe=lambda a: True))
    registry.add_result_observer(lambda e, r: print(f"result {e.call_id} {r.code} killed={(r.meta or {}).get('killed', False)}", flush=True))
    calls = [ToolExecutionInput(n, n, {}, AbortController().signal) for n in ("stubborn", "polite")]
    try:
        execute_batch(registry, calls, signal=AbortController().signal)
    except KeyboardInterrupt:
        print(f"running={backend.bodies_running}", flush=True)
        registry.close()
        print(f"workers={backend.worker_pids}", flush=True)
        sys.exit(130)
    print("batch returned normally", flush=True)
    """
)


@pytest.mark.timeout(40)
def test_ctrl_c_during_a_process_backed_batch_exits_130_with_nothing_left() -> None:
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        workers = [int(proc.stdout.readline().split()[1]) for _ in range(2)]
        os.kill(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, (out, err)
    lines = out.strip().splitlines()
    assert sorted(lines[:2]) == ["result polite ABORTED killed=False", "result stubborn ABORTED killed=True"], out
    assert lines[2:] == ["running=0", "workers=[]"], out
    for pid in workers:
        assert gone(pid) and session_alive(pid) == []


@pytest.mark.timeout(60)
def test_an_exception_from_a_module_only_the_worker_imports_keeps_its_class_name_message_and_code(
    tmp_path: Path,
) -> None:
    """N14 on ProcessBackend: the worker's import path differs from the
    caller's (a module only the worker imports); the exception does not
    unpickle here and reaches the caller with its class name, message and
    ``ToolError`` code, not as ``ModuleNotFoundError``."""
    with ProcessBackend(1) as backend, ToolRegistry(backend=backend) as registry:
        registry.register(tool("worker_only", raises_worker_only))
        assert_worker_only_errors_keep_name_message_and_code(registry, str(tmp_path), "dshtools_n14_process_only")


def _slow_announced(args: Any, run: Any) -> object:
    """Announces it started (a FIFO the crash waits on), then takes 1.5 s,
    cooperatively."""
    from dshtools import io as dio

    if args.get("fifo"):
        write_line(args["fifo"], str(os.getpid()))
    dio.sleep(1.5, run.signal)
    return {"slow": "done", "pid": os.getpid()}


def _always(_args: Any) -> bool:
    return True


def _crash_after_slow_started(args: Any, run: Any) -> object:
    """Waits until ``slow`` announced itself, then SIGKILLs its own worker."""
    read_line(args["fifo"])
    os.kill(os.getpid(), signal.SIGKILL)
    return "unreachable"


@pytest.mark.timeout(60)
def test_b48_a_worker_killed_mid_batch_fails_only_its_call_and_the_pool_recovers(fifo: str) -> None:
    """B48: ``ProcessBackend(max_workers=2, kill_after=2)``; in one
    ``execute_batch``, ``slow`` (1.5 s, cooperative) and ``crash`` (SIGKILLs
    its own worker once ``slow`` started). The batch returns with ``slow`` a
    success and ``crash`` ``WORKER_LOST``; three later ``slow`` calls all
    succeed: the lost worker is replaced, nothing stays broken."""
    with ProcessBackend(2, kill_after=2) as backend, ToolRegistry(backend=backend) as registry:
        registry.register(ToolDefinition("slow", "slow", OBJECT, _slow_announced, is_concurrency_safe=_always))
        registry.register(
            ToolDefinition("crash", "crash", OBJECT, _crash_after_slow_started, is_concurrency_safe=_always)
        )
        signal_ = AbortController().signal
        t0 = time.monotonic()
        try:
            slow, crashed = execute_batch(
                registry,
                [
                    call("slow", {"fifo": fifo}, signal=signal_, call_id="b48-slow"),
                    call("crash", {"fifo": fifo}, signal=signal_, call_id="b48-crash"),
                ],
                signal=signal_,
            )
        finally:
            unblock(fifo)
        assert time.monotonic() - t0 < 30
        later = [registry.execute(call("slow", signal=signal_, call_id=f"b48-{i}")) for i in range(3)]
    assert isinstance(slow, ToolSuccess), slow
    assert crashed.code == WORKER_LOST, crashed
    assert all(isinstance(r, ToolSuccess) for r in later), later
