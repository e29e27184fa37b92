"""ProcessBackend against the Backend protocol itself (submit / wait /
report / close), without a registry: the claim, the signal crossing, the
forced stop and what it kills, lost workers, serialization, fork.
(docs/contract.md#backends; the registry-level behaviour is in
tests/backends/process/test_through_registry.py.)

Synchronization across processes uses FIFOs: a body announces it started
by writing to one (the test's blocking read returns), and blocks reading
another until the test writes. No sleep orders anything here.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from dshtools import AbortController, AbortError, AbortSignal, ProcessBackend, TimeoutReason, ToolError
from dshtools._backends.base import Body, BodyReport, Dispatch, Error, NotInvoked, Value
from dshtools._os.tree import session_alive
from dshtools._types.calls import ExecutionToken, ToolExecutionResult
from dshtools._types.tools import ToolRunContext
from tests.helpers.waiting import threads_but_abort_runners
from tests.helpers.workers import blocked_until_released, write_line

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process trees are read from /proc")


class _CallerRun:
    """The caller-side run a registry would pass (only its fields matter)."""

    def defer_context(self, context: object) -> None:  # pragma: no cover - never called caller-side
        raise AssertionError("contexts of a process body come back in the report")

    def report_progress(self, progress: object, total: object, message: object) -> None:
        pass  # caller-side progress is the registry's; these bodies report none

    def dispatch(
        self, name: str, arguments: object, call_id: str | None, signal: AbortSignal, parent: ExecutionToken
    ) -> ToolExecutionResult:  # pragma: no cover
        raise AssertionError("not called caller-side")


def ctx(signal: AbortSignal, name: str = "tool", call_id: str = "c1") -> ToolRunContext:
    return ToolRunContext(
        token=ExecutionToken(),
        call_id=call_id,
        root_call_id="root-1",
        name=name,
        arguments={},
        agent="agent-a",
        parent=None,
        definition=None,
        signal=signal,
        run=_CallerRun(),
    )


def settle(dispatch: Any, limit: float = 20.0) -> BodyReport:
    end = time.monotonic() + limit
    while not dispatch.wait(0.25):
        assert time.monotonic() < end, "the dispatch did not settle"
    report = dispatch.report()
    assert isinstance(report, BodyReport)
    return report


def gone(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


class Fifos:
    """``started``: the body writes a line when it runs; ``release``: the
    body blocks reading it until the test writes."""

    def __init__(self, tmp: Path) -> None:
        self.started = str(tmp / "started")
        self.release = str(tmp / "release")
        os.mkfifo(self.started)
        os.mkfifo(self.release)

    def wait_started(self) -> str:
        with open(self.started, encoding="ascii") as f:  # blocks until a body opens it
            return f.readline().strip()

    def start(self, backend: ProcessBackend, body: Body) -> tuple[AbortController, Dispatch, str]:
        """Submit ``body`` (its arguments ``{"started": self.started}``) to
        ``backend`` on a fresh controller's signal and return once it runs:
        ``(controller, dispatch, the line the body wrote)``."""
        controller = AbortController()
        dispatch = backend.submit(body, {"started": self.started}, ctx(controller.signal))
        return controller, dispatch, self.wait_started()

    def let_go(self) -> None:
        with open(self.release, "w", encoding="ascii") as f:
            f.write("go\n")


@pytest.fixture
def fifos(tmp_path: Path) -> Fifos:
    return Fifos(tmp_path)


# ------------------------------------------------------------- bodies


def echo_body(args: Any, run: ToolRunContext) -> object:
    run.defer_context({"seen": run.call_id})
    return {
        "args": dict(args),
        "pid": os.getpid(),
        "call_id": run.call_id,
        "root": run.root_call_id,
        "name": run.name,
        "agent": run.agent,
        "parent": run.parent,
        "definition": run.definition,
        "token_is_fresh": isinstance(run.token, ExecutionToken),
    }


def cooperative_body(args: Any, run: ToolRunContext) -> object:
    write_line(args["started"], str(os.getpid()))
    run.signal.wait()
    return {"reason": run.signal.reason, "aborted": run.signal.aborted}


def stubborn_body(args: Any, run: ToolRunContext) -> object:
    write_line(args["started"], str(os.getpid()))
    time.sleep(60)
    return "unreachable"


def spawning_body(args: Any, run: ToolRunContext) -> object:
    # Two grandchildren in sessions of their own (as run_process makes
    # them), one in the worker's own process group, one orphaned early
    # (its parent shell exits): all must go with the forced stop.
    own_a = subprocess.Popen(["sleep", "60"], start_new_session=True)
    own_b = subprocess.Popen(["/bin/sh", "-c", "sleep 60 & sleep 60; wait"], start_new_session=True)
    same = subprocess.Popen(["sleep", "60"])
    orphan = subprocess.Popen(["/bin/sh", "-c", "sleep 60 & echo $!"], stdout=subprocess.PIPE, text=True)
    assert orphan.stdout is not None
    orphaned = int(orphan.stdout.readline())
    orphan.wait()
    pids = [own_a.pid, own_b.pid, same.pid, orphaned]
    write_line(args["started"], " ".join(map(str, [os.getpid(), *pids])))
    time.sleep(60)
    return "unreachable"


def exit_body(args: Any, run: ToolRunContext) -> object:
    os._exit(3)


def dispatch_body(args: Any, run: ToolRunContext) -> object:
    return run.dispatch("other", {})


class Unpicklable(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.lock = threading.Lock()


def raising_body(args: Any, run: ToolRunContext) -> object:
    raise Unpicklable("the lock stays here")


def lock_returning_body(args: Any, run: ToolRunContext) -> object:
    return threading.Lock()


def io_sleep_body(args: Any, run: ToolRunContext) -> object:
    from dshtools import io as dio

    write_line(args["started"], "1")
    dio.sleep(60, run.signal)
    return "slept"


# -------------------------------------------------------------- tests


@pytest.mark.timeout(30)
def test_a_body_runs_in_a_worker_with_a_fresh_token_no_parent_and_its_contexts_come_back(
    backend: ProcessBackend,
) -> None:
    report = settle(backend.submit(echo_body, {"x": 1}, ctx(AbortController().signal, "echo", "c7")))
    assert isinstance(report.outcome, Value)
    value = report.outcome.value
    assert isinstance(value, dict)
    assert value["pid"] != os.getpid() and value["pid"] in backend.worker_pids
    assert value["args"] == {"x": 1}
    assert (value["call_id"], value["root"], value["name"], value["agent"]) == ("c7", "root-1", "echo", "agent-a")
    assert value["parent"] is None and value["definition"] is None and value["token_is_fresh"]
    assert report.contexts == ({"seen": "c7"},)
    assert report.killed is False and report.overrun_s is None


@pytest.mark.timeout(30)
def test_workers_are_reused_across_calls(backend: ProcessBackend) -> None:
    pids = set()
    for _ in range(6):
        report = settle(backend.submit(echo_body, {}, ctx(AbortController().signal)))
        assert isinstance(report.outcome, Value)
        pids.add(report.outcome.value["pid"])  # type: ignore[index]
    # One call at a time: no worker is ever started beyond the pool.
    assert pids <= set(backend.worker_pids) and len(backend.worker_pids) <= 2


@pytest.mark.timeout(30)
def test_a_cooperative_body_sees_the_same_reason_and_returns_without_being_killed(
    backend: ProcessBackend, fifos: Fifos
) -> None:
    reason = TimeoutReason("TOOL_TIMEOUT", 0.25)
    kills = backend.kills
    controller, dispatch, _ = fifos.start(backend, cooperative_body)
    controller.abort(reason)
    report = settle(dispatch)
    assert isinstance(report.outcome, Value)
    seen = report.outcome.value
    assert isinstance(seen, dict) and seen["aborted"] is True
    assert isinstance(seen["reason"], TimeoutReason)
    assert (seen["reason"].code, seen["reason"].seconds) == ("TOOL_TIMEOUT", 0.25)
    assert report.killed is False
    assert report.overrun_s is not None and report.overrun_s < 0.5
    assert backend.kills == kills


@pytest.mark.timeout(30)
def test_a_reason_that_does_not_pickle_arrives_as_an_abort_error_with_its_text(
    backend: ProcessBackend, fifos: Fifos
) -> None:
    controller, dispatch, _ = fifos.start(backend, cooperative_body)

    class Holder:
        def __init__(self) -> None:
            self.lock = threading.Lock()  # no pickler can send a lock

        def __repr__(self) -> str:
            return "<the user's reason>"

    controller.abort(Holder())
    report = settle(dispatch)
    assert isinstance(report.outcome, Value)
    reason = report.outcome.value["reason"]  # type: ignore[index]
    assert isinstance(reason, AbortError) and "<the user's reason>" in str(reason)


@pytest.mark.timeout(30)
def test_a_body_ignoring_its_signal_is_killed_after_kill_after_with_nothing_left(
    backend: ProcessBackend, fifos: Fifos
) -> None:
    kills = backend.kills
    controller, dispatch, line = fifos.start(backend, stubborn_body)
    worker = int(line)
    t0 = time.monotonic()
    controller.abort("stop")
    report = settle(dispatch)
    elapsed = time.monotonic() - t0
    assert report.killed is True
    assert isinstance(report.outcome, Error) and isinstance(report.outcome.error, AbortError)
    assert report.overrun_s is not None and report.overrun_s >= 0.5
    assert elapsed >= 0.5
    assert not psutil.pid_exists(worker) or gone(worker)
    assert session_alive(worker) == []
    assert worker not in backend.worker_pids and backend.kills == kills + 1
    # Replaced lazily: the next call gets a fresh worker and works.
    again = settle(backend.submit(echo_body, {}, ctx(AbortController().signal)))
    assert isinstance(again.outcome, Value) and again.outcome.value["pid"] != worker  # type: ignore[index]


@pytest.mark.timeout(30)
def test_a_forced_stop_takes_every_process_the_body_started_in_any_session(
    backend: ProcessBackend, fifos: Fifos
) -> None:
    controller, dispatch, line = fifos.start(backend, spawning_body)
    worker, *started = map(int, line.split())
    assert all(psutil.pid_exists(p) and not gone(p) for p in started)
    controller.abort("stop")
    report = settle(dispatch)
    assert report.killed is True
    for pid in [worker, *started]:
        assert gone(pid), f"pid {pid} survived the forced stop"
    for sid in [worker, started[0], started[1]]:
        assert session_alive(sid) == []


@pytest.mark.timeout(30)
def test_kill_after_none_never_kills_and_keeps_joining(fifos: Fifos) -> None:
    with ProcessBackend(1, kill_after=None) as b:
        controller = AbortController()
        dispatch = b.submit(io_sleep_body, {"started": fifos.started}, ctx(controller.signal))
        fifos.wait_started()
        controller.abort("stop")
        report = settle(dispatch)
        # dshtools.io works in the worker: its sleep honoured the signal.
        assert isinstance(report.outcome, Error) and isinstance(report.outcome.error, AbortError)
        assert report.killed is False and b.kills == 0


def counting_body(args: Any, run: ToolRunContext) -> object:
    with open(args["counter"], "a", encoding="ascii") as f:
        f.write("x")
    return None


@pytest.mark.timeout(30)
def test_calls_queued_behind_a_full_pool_are_withdrawn_and_never_run(tmp_path: Path, fifos: Fifos) -> None:
    counter = tmp_path / "counter"
    counter.write_text("")
    with ProcessBackend(1, kill_after=0.5) as b:
        first = b.submit(
            blocked_until_released, {"started": fifos.started, "release": fifos.release}, ctx(AbortController().signal)
        )
        fifos.wait_started()  # the only worker is busy
        controllers = [AbortController() for _ in range(5)]
        queued = [b.submit(counting_body, {"counter": str(counter)}, ctx(c.signal)) for c in controllers]
        for c in controllers:
            c.abort("withdraw")
        for d in queued:
            report = settle(d)
            assert report.outcome == NotInvoked(None)
        fifos.let_go()
        assert settle(first).outcome == Value("released")
        # The worker is idle again and takes new work; none of the
        # withdrawn bodies ever ran.
        assert isinstance(settle(b.submit(echo_body, {}, ctx(AbortController().signal))).outcome, Value)
    assert counter.read_text() == ""


@pytest.mark.timeout(30)
def test_a_worker_that_exits_on_its_own_is_reported_lost_and_replaced(backend: ProcessBackend) -> None:
    from dshtools._backends.base import WorkerLost

    report = settle(backend.submit(exit_body, {}, ctx(AbortController().signal, "crasher")))
    assert isinstance(report.outcome, Error) and isinstance(report.outcome.error, WorkerLost)
    assert "crasher" in str(report.outcome.error) and "status 3" in str(report.outcome.error)
    assert report.killed is False
    after = settle(backend.submit(echo_body, {}, ctx(AbortController().signal)))
    assert isinstance(after.outcome, Value)


@pytest.mark.timeout(30)
def test_run_dispatch_in_a_worker_raises_runtime_error(backend: ProcessBackend) -> None:
    report = settle(backend.submit(dispatch_body, {}, ctx(AbortController().signal)))
    assert isinstance(report.outcome, Error) and isinstance(report.outcome.error, RuntimeError)
    assert "ProcessBackend" in str(report.outcome.error) and "thread backend" in str(report.outcome.error)


@pytest.mark.timeout(30)
def test_an_exception_that_does_not_pickle_arrives_with_its_class_name_and_message(backend: ProcessBackend) -> None:
    report = settle(backend.submit(raising_body, {}, ctx(AbortController().signal)))
    assert isinstance(report.outcome, Error)
    error = report.outcome.error
    assert type(error).__name__ == "Unpicklable" and str(error) == "the lock stays here"
    assert "raising_body" in str(error.__cause__)  # the worker's traceback


@pytest.mark.timeout(30)
def test_a_return_value_that_does_not_pickle_is_a_value_the_output_check_refuses(backend: ProcessBackend) -> None:
    from dshtools._core.freeze import FreezeError, freeze_with_height

    report = settle(backend.submit(lock_returning_body, {}, ctx(AbortController().signal)))
    assert isinstance(report.outcome, Value)
    with pytest.raises(FreezeError, match="could not be sent back from the worker process"):
        freeze_with_height(report.outcome.value)


@pytest.mark.timeout(30)
def test_validate_refuses_a_body_that_does_not_pickle_naming_the_tool(backend: ProcessBackend) -> None:
    lock = threading.Lock()

    def body(args: Any, run: ToolRunContext) -> object:
        return lock.locked()

    with pytest.raises(ValueError, match="'locked_tool'"):
        backend.validate("locked_tool", body)

    # A closure over plain data goes by value.
    data = {"n": 41}

    def closure(args: Any, run: ToolRunContext) -> object:
        return data["n"] + 1

    backend.validate("closure", closure)
    assert settle(backend.submit(closure, {}, ctx(AbortController().signal))).outcome == Value(42)


@pytest.mark.timeout(30)
def test_an_already_aborted_signal_never_reaches_a_worker(backend: ProcessBackend) -> None:
    controller = AbortController()
    controller.abort("early")
    report = settle(backend.submit(exit_body, {}, ctx(controller.signal)))
    assert report.outcome == NotInvoked(None)  # had it run, its worker would be lost


@pytest.mark.timeout(30)
def test_close_stops_every_worker_and_refuses_new_work(tmp_path: Path) -> None:
    threads = threads_but_abort_runners()
    b = ProcessBackend(2, kill_after=0.5)
    settle(b.submit(echo_body, {}, ctx(AbortController().signal)))
    assert threads_but_abort_runners() - threads  # the manager thread
    pids = b.worker_pids
    assert pids
    b.close()
    b.close()  # idempotent
    assert all(gone(p) for p in pids)
    assert b.worker_pids == []
    with pytest.raises(RuntimeError, match="closed"):
        b.submit(echo_body, {}, ctx(AbortController().signal))
    assert threads_but_abort_runners() - threads == set()


FORK_SCRIPT = """
import json, os, sys, warnings
warnings.simplefilter("ignore", DeprecationWarning)  # fork() of a threaded process, on purpose
from dshtools import AbortController, ProcessBackend, ToolDefinition, ToolExecutionInput, ToolRegistry

def echo(args, run):
    return os.getpid()

backend = ProcessBackend(1, kill_after=0.5)
registry = ToolRegistry(backend=backend)
registry.register(ToolDefinition("echo", "", {"type": "object"}, echo))
call = lambda: ToolExecutionInput("c", "echo", {}, AbortController().signal)
assert not registry.execute(call()).is_error  # a live worker and manager thread
read, write = os.pipe()
pid = os.fork()
if pid == 0:
    signal_alarm = __import__("signal").alarm(10)  # a hang is killed, never waited for
    out = {}
    result = registry.execute(call())
    out["code"] = result.code
    out["reason"] = repr(result.meta["reason"]) if result.meta else None
    try:
        registry.register(ToolDefinition("other", "", {"type": "object"}, echo))
        out["register"] = "no error"
    except RuntimeError as exc:
        out["register"] = "RuntimeError: " + str(exc)
    registry.close()  # must not touch the parent's worker
    os.write(write, json.dumps(out).encode())
    os._exit(0)
os.close(write)
with os.fdopen(read, "rb") as f:
    child = json.loads(f.read() or b"{}")
os.waitpid(pid, 0)
parent_ok = not registry.execute(call()).is_error  # the parent's backend still works
registry.close()
print(json.dumps({"child": child, "parent_ok": parent_ok, "left": backend.worker_pids}))
"""


@pytest.mark.timeout(60)
def test_a_backend_used_in_a_forked_child_raises_runtime_error() -> None:
    # In a subprocess: pytest itself must not fork a threaded process.
    import json

    proc = subprocess.run([sys.executable, "-c", FORK_SCRIPT], capture_output=True, text=True, timeout=50)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    child = out["child"]
    assert child["code"] == "ABORTED_BEFORE_DISPATCH"
    assert "RuntimeError" in child["reason"] and "forked" in child["reason"]
    assert child["register"].startswith("RuntimeError:") and "forked" in child["register"]
    assert out["parent_ok"] is True and out["left"] == []


@pytest.mark.timeout(10)
def test_bad_arguments_are_refused_at_construction() -> None:
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="max_workers"):
            ProcessBackend(bad)  # type: ignore[arg-type]
    for bad_kill in (-0.1, float("nan"), float("inf"), "1"):
        with pytest.raises(ValueError, match="kill_after"):
            ProcessBackend(1, kill_after=bad_kill)  # type: ignore[arg-type]


def _refuse_to_unpickle() -> object:
    raise LookupError("no such class here")


class _UnpicklableHere:
    """Pickles fine; unpickling it raises, as for a reason whose class the
    other side cannot import."""

    def __reduce__(self) -> tuple[Any, tuple[()]]:
        return _refuse_to_unpickle, ()


def test_a_reason_only_cloudpickle_sends_crosses_and_one_that_does_not_unpickle_is_a_stand_in() -> None:
    import pickle

    from dshtools._backends.process.wire import dump_reason, load_reason

    def local_reason() -> str:  # a local function: pickle refuses it, cloudpickle sends it
        return "the user's own"

    with pytest.raises((pickle.PicklingError, AttributeError)):
        pickle.dumps(local_reason)
    crossed = load_reason(dump_reason(local_reason))
    assert callable(crossed) and crossed() == "the user's own"
    stand_in = load_reason(dump_reason(_UnpicklableHere()))
    assert type(stand_in) is AbortError
    assert str(stand_in) == "operation aborted: aborted (the reason could not be unpickled: no such class here)"


def test_stand_ins_keep_the_class_name_message_code_and_abort_classification() -> None:
    from dshtools import timeout_of
    from dshtools._backends.process.wire import RemoteTraceback, describe_error, error_from

    class Coded(ToolError):
        def __init__(self, message: str, code: str, lock: object) -> None:
            super().__init__(message, code)
            self.lock = lock

    class Stopped(AbortError):
        pass

    cases: list[BaseException] = [
        Coded("quota exceeded", "QUOTA", threading.Lock()),
        Stopped(TimeoutReason("TOOL_TIMEOUT", 1.5)),
        Unpicklable("plain"),
    ]
    for original in cases:
        rebuilt = error_from(None, describe_error(original))  # as if it did not pickle
        assert type(rebuilt).__name__ == type(original).__name__
        assert str(rebuilt) == str(original)
        # The worker's traceback, unless the exception has a cause of its
        # own (an AbortError's is its reason).
        assert isinstance(rebuilt.__cause__, TimeoutReason if isinstance(original, AbortError) else RemoteTraceback)
    coded, stopped, plain = (error_from(None, describe_error(e)) for e in cases)
    assert isinstance(coded, ToolError) and coded.code == "QUOTA"
    assert isinstance(stopped, AbortError)
    reason = timeout_of(stopped)
    assert reason is not None and (reason.code, reason.seconds) == ("TOOL_TIMEOUT", 1.5)
    assert type(plain).__mro__[-3:] == (Exception, BaseException, object)
    assert not isinstance(plain, (ToolError, AbortError))


@pytest.mark.timeout(30)
def test_an_interrupt_inside_submit_after_the_start_surfaces_from_wait_and_the_body_is_joined(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from dshtools._backends.process.pool import _Job

    original = _Job.start_on

    def start_then_interrupt(self: _Job, worker: Any) -> bool:
        original(self, worker)
        raise KeyboardInterrupt

    with ProcessBackend(1, kill_after=0.5) as b:
        settle(b.submit(echo_body, {}, ctx(AbortController().signal)))  # a ready, idle worker
        monkeypatch.setattr(_Job, "start_on", start_then_interrupt)
        dispatch = b.submit(echo_body, {"n": 1}, ctx(AbortController().signal))
        monkeypatch.setattr(_Job, "start_on", original)
        with pytest.raises(KeyboardInterrupt):
            dispatch.wait(0.25)
        report = settle(dispatch)  # the started body is still joined
        assert isinstance(report.outcome, Value) and report.outcome.value["args"] == {"n": 1}  # type: ignore[index]


@pytest.mark.timeout(30)
def test_an_interrupt_inside_submit_before_the_start_withdraws_and_strands_no_worker(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from dshtools._backends.process.pool import _Job

    original = _Job.start_on
    counter = tmp_path / "counter"
    counter.write_text("")

    def interrupt_first(self: _Job, worker: Any) -> bool:
        raise KeyboardInterrupt

    with ProcessBackend(1, kill_after=0.5) as b:
        settle(b.submit(echo_body, {}, ctx(AbortController().signal)))
        monkeypatch.setattr(_Job, "start_on", interrupt_first)
        with pytest.raises(KeyboardInterrupt):
            b.submit(counting_body, {"counter": str(counter)}, ctx(AbortController().signal))
        monkeypatch.setattr(_Job, "start_on", original)
        # The only worker is idle again and serves the next call.
        assert isinstance(settle(b.submit(echo_body, {}, ctx(AbortController().signal))).outcome, Value)
    assert counter.read_text() == ""


def test_the_process_benchmark_is_a_section_and_renders_its_targets() -> None:
    from benchmarks import __main__ as bench_main
    from benchmarks import process as bench_process
    from benchmarks import report

    assert bench_main.SECTIONS["process"] is bench_process.run
    figures = {
        "per_call_us": 180.0,
        "bare_pool_us": 250.0,
        "ratio": 0.72,
        "signal_p50_ms": 0.2,
        "signal_p99_ms": 12.0,
        "kill_after_s": 0.2,
        "kill_p50_s": 0.21,
        "kill_p99_s": 0.22,
        "growth_calls": 1000,
        "process_growth": 0,
        "thread_growth": 1,
        "fd_growth": 0,
    }
    table = report.render({"process": figures})
    assert "Process backend" in table
    rows = [line for line in table.splitlines() if line.startswith("| ")]
    assert [row.rsplit("|", 2)[-2].strip() for row in rows[2:]] == ["yes", "**no**", "yes", "**no**"]


@pytest.mark.timeout(30)
def test_close_waits_for_a_running_body_and_its_forced_stop_still_applies(fifos: Fifos) -> None:
    b = ProcessBackend(1, kill_after=0.3)
    controller = AbortController()
    dispatch = b.submit(stubborn_body, {"started": fifos.started}, ctx(controller.signal))
    worker = int(fifos.wait_started())
    controller.abort("closing")
    b.close()  # returns only once the body's worker was stopped and reaped
    assert dispatch.wait(0)
    assert dispatch.report().killed is True
    assert gone(worker) and session_alive(worker) == []
    assert b.worker_pids == []
