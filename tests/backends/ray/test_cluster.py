"""RayBackend against a local Ray (docs/contract.md#backends, docs/contract.md#ray; docs/ray.md).

One ``ray.init(num_cpus=2)`` for the whole session (started by the first
test that needs it, shut down at session end), one registry on one
``RayBackend(kill_after=1.0)`` for the module. The bodies talk to the test
through a small named actor (``Events``, tests/helpers/ray_events.py):
they announce that they started (and their pids) and count what they ran,
so no test sleeps to wait for an interleaving. Skipped only when ``ray`` is not importable.
"""

from __future__ import annotations

import _thread
import contextlib
import functools
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import psutil
import pytest

ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'dshtools[ray]')")

from dshtools import (  # noqa: E402
    INVALID_TOOL_OUTPUT,
    TOOL_ABORTED,
    TOOL_ABORTED_BEFORE_DISPATCH,
    TOOL_ERROR,
    TOOL_TIMEOUT,
    WORKER_LOST,
    AbortController,
    TimeoutPolicy,
    ToolExecution,
    ToolExecutionResult,
    ToolRegistry,
    ToolRunContext,
    execute_batch,
)
from dshtools.ray import RayBackend  # noqa: E402
from tests.helpers.calls import call, error_of, tool, value_of  # noqa: E402
from tests.helpers.processes import run_python  # noqa: E402
from tests.helpers.ray_events import announce, events_handle, start_events  # noqa: E402
from tests.helpers.waiting import ExecutingInThread, wait_until  # noqa: E402
from tests.helpers.workers import (  # noqa: E402
    assert_worker_only_errors_keep_name_message_and_code,
    raises_exiting_error,
    raises_worker_only,
    returns_exiting_value,
)

EVENTS = "dshtools-test-events"


# ------------------------------------------------------------------ Ray


def _events() -> Any:
    """The events actor, from a body or a test (cached per process)."""
    return events_handle(EVENTS)


def _announce(tag: str, value: Any = True) -> None:
    announce(EVENTS, tag, value)


@pytest.fixture(scope="session")
def events_actor(ray_cluster: None) -> Iterator[Any]:
    handle = start_events(EVENTS)
    yield handle
    ray.kill(handle)


class _Recording(RayBackend):
    """Keeps every dispatch so a test can ask Ray about its task."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.dispatches: list[Any] = []

    def submit(self, body: Any, args: object, run: ToolRunContext) -> Any:
        dispatch = super().submit(body, args, run)
        self.dispatches.append(dispatch)
        return dispatch


@pytest.fixture(scope="module")
def backend(events_actor: Any) -> Iterator[_Recording]:
    backend = _Recording(kill_after=1.0)
    yield backend
    backend.close()


@pytest.fixture(scope="module")
def registry(backend: _Recording) -> Iterator[ToolRegistry]:
    registry = ToolRegistry(backend=backend)
    registry.add_around_dispatch(TimeoutPolicy())
    yield registry
    registry.close()


@pytest.fixture
def events(events_actor: Any) -> Any:
    return events_actor


def _register(registry: ToolRegistry, name: str, body: Callable[[Any, Any], object], **kw: Any) -> Callable[[], None]:
    return registry.register(tool(name, body, **kw))


@contextlib.contextmanager
def _started(
    registry: ToolRegistry, events: Any, name: str, body: Callable[[Any, Any], object], tag: str
) -> Iterator[tuple[AbortController, ExecutingInThread, Any]]:
    """Registers ``body`` as tool ``name`` and calls it with ``{"tag": tag}``
    in a thread, on a fresh controller's signal; yields once the body
    announced ``tag``: ``(controller, the running call, what it announced)``.
    The tool is removed on exit."""
    remove = _register(registry, name, body)
    controller = AbortController()
    try:
        running = ExecutingInThread(registry, call(name, {"tag": tag}, signal=controller.signal))
        yield controller, running, ray.get(events.wait.remote(tag, 30))
    finally:
        remove()


def _holding_both_slots(registry: ToolRegistry, events: Any, signal: Any, prefix: str) -> list[ExecutingInThread]:
    """Two calls of the registered ``coop`` tool on ``signal`` (tags and
    call ids ``prefix-0`` and ``prefix-1``), returned once both bodies
    announced they run: they hold both CPU slots until ``signal`` aborts."""
    held = [
        ExecutingInThread(registry, call("coop", {"tag": f"{prefix}-{i}"}, signal=signal, call_id=f"{prefix}-{i}"))
        for i in range(2)
    ]
    for i in range(2):
        assert ray.get(events.wait.remote(f"{prefix}-{i}", 30)) is not None
    return held


# ------------------------------------------------------------------ bodies
# Module-level functions: Ray pickles them by reference (workers import this module).


def _echo(args: Any, run: ToolRunContext) -> object:
    run.defer_context({"worker_pid": os.getpid()})
    return {"echo": args["x"], "call_id": run.call_id, "name": run.name}


def _cooperative(args: Any, run: ToolRunContext) -> object:
    _announce(args["tag"], os.getpid())
    run.signal.wait(30)
    run.defer_context({"seen_reason": repr(run.signal.reason), "aborted": run.signal.aborted})
    run.signal.throw_if_aborted()
    return "never aborted"


def _stubborn(args: Any, run: ToolRunContext) -> object:
    child = subprocess.Popen(["sleep", "60"], start_new_session=True)
    _announce(args["tag"], [os.getpid(), child.pid])
    time.sleep(60)
    return "slept"


def _counted(args: Any, run: ToolRunContext) -> object:
    _events().incr.remote(args["counter"]).future().result()
    return "ran"


def _batch_body(args: Any, run: ToolRunContext) -> object:
    if args["i"] < 5:
        return args["i"]
    _announce(f"batch-{args['i']}")
    _announce("batch-blocking", args["i"])
    run.signal.wait(30)
    run.signal.throw_if_aborted()
    return args["i"]


def _nested(args: Any, run: ToolRunContext) -> object:
    try:
        run.dispatch("echo", {"x": 1})
    except RuntimeError as exc:
        return str(exc)
    return "nested call ran"


def _unpicklable_value(args: Any, run: ToolRunContext) -> object:
    return threading.Lock()


class _Stubborn(Exception):
    def __init__(self, a: int, b: int) -> None:  # unpickling calls _Stubborn(*args) with one arg
        super().__init__(f"{a}+{b}")


def _raises_unpicklable(args: Any, run: ToolRunContext) -> object:
    raise _Stubborn(1, 2)


def _meta(result: ToolExecutionResult) -> Mapping[str, Any]:
    return result.meta or {}


def _gone(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


# ------------------------------------------------------------------ tests


@pytest.mark.timeout(60)
def test_a_body_runs_remotely_and_its_contexts_come_back(registry: ToolRegistry) -> None:
    remove = _register(registry, "echo", _echo)
    try:
        result = registry.execute(call("echo", {"x": 7}, call_id="call-7"))
    finally:
        remove()
    assert value_of(result) == {"echo": 7, "call_id": "call-7", "name": "echo"}
    (context,) = result.additional_contexts
    assert context["worker_pid"] != os.getpid()


@pytest.mark.timeout(60)
def test_cooperative_body_aborted_midway_sees_the_callers_reason(registry: ToolRegistry, events: Any) -> None:
    with _started(registry, events, "coop", _cooperative, "coop-started") as (controller, running, announced):
        assert announced is not None
        controller.abort(ValueError("user pressed stop"))
        result = running.result()
    assert result.code == TOOL_ABORTED
    assert isinstance(_meta(result)["reason"], ValueError)
    # The worker's own run.signal aborted with the same reason (it pickles).
    (context,) = result.additional_contexts
    assert context == {"seen_reason": "ValueError('user pressed stop')", "aborted": True}
    assert "killed" not in _meta(result)


@pytest.mark.timeout(60)
def test_a_reason_that_does_not_pickle_arrives_as_its_repr(registry: ToolRegistry, events: Any) -> None:
    reason = threading.Lock()
    with _started(registry, events, "coop", _cooperative, "lock-started") as (controller, running, announced):
        assert announced is not None
        controller.abort(reason)
        result = running.result()
    assert result.code == TOOL_ABORTED
    assert _meta(result)["reason"] is reason  # the caller's result keeps the caller's object
    (context,) = result.additional_contexts
    assert context["aborted"] is True
    assert context["seen_reason"] == repr(repr(reason))  # the worker saw its repr, a str


@pytest.mark.timeout(60)
def test_non_cooperative_body_is_killed_after_kill_after(
    registry: ToolRegistry, backend: _Recording, events: Any
) -> None:
    with _started(registry, events, "stubborn", _stubborn, "stubborn-started") as (controller, running, announced):
        worker_pid, child_pid = announced
        dispatch = backend.dispatches[-1]
        aborted_at = time.monotonic()
        controller.abort("stop")
        result = running.result()
        returned_after = time.monotonic() - aborted_at
    assert result.code == TOOL_ABORTED
    assert _meta(result)["killed"] is True
    overrun = _meta(result)["overrun_s"]
    assert isinstance(overrun, float) and overrun >= 1.0
    assert 1.0 <= returned_after < 30.0
    # Ray reports the task ended (cancelled), and the processes are gone:
    # the worker and the child it started in a session of its own.
    ready, _ = ray.wait([dispatch.task], timeout=0)
    assert ready == [dispatch.task]
    with pytest.raises((ray.exceptions.TaskCancelledError, ray.exceptions.WorkerCrashedError)):
        ray.get(dispatch.task)
    assert _gone(worker_pid)
    assert _gone(child_pid)
    assert backend.running_tasks() == 0


@pytest.mark.timeout(60)
def test_queued_calls_are_withdrawn_and_never_run(registry: ToolRegistry, backend: _Recording, events: Any) -> None:
    removes = [_register(registry, "coop", _cooperative), _register(registry, "counted", _counted)]
    holders = AbortController()
    queued = AbortController()
    try:
        held = _holding_both_slots(registry, events, holders.signal, "hold")
        before = len(backend.dispatches)
        waiting = [
            ExecutingInThread(
                registry, call("counted", {"counter": "queued-ran"}, signal=queued.signal, call_id=f"q{i}")
            )
            for i in range(4)
        ]
        wait_until(lambda: len(backend.dispatches) >= before + 4, 30)  # the four tasks are submitted (queued in Ray)
        queued.abort("withdraw")
        results = [w.result() for w in waiting]
        holders.abort("release")
        for h in held:
            assert h.result().code == TOOL_ABORTED
    finally:
        for remove in removes:
            remove()
    assert [r.code for r in results] == [TOOL_ABORTED_BEFORE_DISPATCH] * 4
    assert ray.get(events.count.remote("queued-ran")) == 0
    for dispatch in backend.dispatches[before:]:
        ready, _ = ray.wait([dispatch.task], timeout=10)
        assert ready, "a withdrawn task is still running"


@pytest.mark.timeout(60)
def test_a_queued_call_is_withdrawn_not_killed_even_with_kill_after_zero(registry: ToolRegistry, events: Any) -> None:
    # kill_after=0 makes the forced stop due at the abort itself: a task that
    # Ray is still dropping from its queue must come back withdrawn, not
    # killed (it never started).
    remove_holder = _register(registry, "coop", _cooperative)
    holders = AbortController()
    eager = RayBackend(kill_after=0.0)
    try:
        held = _holding_both_slots(registry, events, holders.signal, "zero-hold")
        with ToolRegistry(backend=eager) as other:
            _register(other, "counted", _counted)
            queued = AbortController()
            waiting = ExecutingInThread(
                other, call("counted", {"counter": "zero-ran"}, signal=queued.signal, call_id="zq")
            )
            wait_until(lambda: eager.tasks_started >= 1, 30)  # submitted (queued in Ray behind the holders)
            queued.abort("withdraw")
            result = waiting.result()
        holders.abort("release")
        for h in held:
            assert h.result().code == TOOL_ABORTED
    finally:
        remove_holder()
    assert result.code == TOOL_ABORTED_BEFORE_DISPATCH, result
    assert "killed" not in _meta(result)
    assert eager.tasks_killed == 0
    assert ray.get(events.count.remote("zero-ran")) == 0


@pytest.mark.timeout(60)
def test_timeout_policy_gives_tool_timeout(registry: ToolRegistry, events: Any) -> None:
    remove = _register(registry, "slow", _cooperative, timeout=0.5)
    try:
        result = registry.execute(call("slow", {"tag": "slow-started"}))
    finally:
        remove()
    assert result.code == TOOL_TIMEOUT
    assert "killed" not in _meta(result)


@pytest.mark.timeout(60)
def test_timeout_of_a_non_cooperative_body_is_tool_timeout_and_killed(registry: ToolRegistry, events: Any) -> None:
    remove = _register(registry, "stuck", _stubborn, timeout=0.3)
    try:
        result = registry.execute(call("stuck", {"tag": "stuck-started"}))
        worker_pid, child_pid = ray.get(events.wait.remote("stuck-started", 1))
    finally:
        remove()
    assert result.code == TOOL_TIMEOUT
    assert _meta(result)["killed"] is True  # kept through the policy's own failure
    assert _gone(worker_pid) and _gone(child_pid)


@pytest.mark.timeout(60)
def test_batch_of_twenty_with_a_mid_batch_abort_keeps_one_result_per_call_in_order(
    registry: ToolRegistry, events: Any
) -> None:
    remove = _register(registry, "batch", _batch_body, is_concurrency_safe=lambda args: True)
    published: dict[str, ToolExecutionResult] = {}

    def observe(execution: ToolExecution, result: ToolExecutionResult) -> None:
        published[execution.call_id] = result

    remove_observer = registry.add_result_observer(observe)
    batch = AbortController()
    calls = [call("batch", {"i": i}, call_id=f"b{i}") for i in range(20)]
    out: list[list[ToolExecutionResult]] = []
    try:
        runner = threading.Thread(target=lambda: out.append(execute_batch(registry, calls, signal=batch.signal)))
        runner.start()
        # Mid-batch: a body from call 5 on runs and waits for the abort
        # (which one Ray starts first is Ray's choice).
        assert ray.get(events.wait.remote("batch-blocking", 30)) is not None
        batch.abort("turn stopped")
        runner.join(60)
    finally:
        remove_observer()
        remove()
    (results,) = out
    # One result per call, in model order: the very result each call published.
    assert len(results) == 20
    assert all(results[i] is published[f"b{i}"] for i in range(20))
    for i, result in enumerate(results):
        if result.is_error:
            assert result.code in (TOOL_ABORTED, TOOL_ABORTED_BEFORE_DISPATCH), (i, result)
        else:
            assert i < 5 and value_of(result) == i
    # From call 5 on every body waits for the abort: one that ran (it says
    # so first thing) is ABORTED, one that never started ABORTED_BEFORE_DISPATCH.
    ran = [i for i in range(5, 20) if ray.get(events.wait.remote(f"batch-{i}", 0)) is not None]
    for i in range(5, 20):
        assert results[i].code == (TOOL_ABORTED if i in ran else TOOL_ABORTED_BEFORE_DISPATCH), (i, ran, results[i])
    # Two slots held by blocking bodies: no third started, nothing started after the abort.
    assert 1 <= len(ran) <= 2, ran


@pytest.mark.timeout(60)
def test_worker_killed_from_outside_is_worker_lost(registry: ToolRegistry, events: Any) -> None:
    with _started(registry, events, "victim", _cooperative, "victim-started") as (_, running, pid):
        os.kill(pid, signal.SIGKILL)
        result = running.result()
    assert result.code == WORKER_LOST
    info = error_of(result).info
    assert info is not None and info.name == "WorkerLost"


@pytest.mark.timeout(60)
def test_ctrl_c_while_waiting_aborts_joins_publishes_and_reraises(registry: ToolRegistry, events: Any) -> None:
    remove = _register(registry, "coop", _cooperative)
    seen: list[ToolExecutionResult] = []

    def observer(execution: ToolExecution, result: ToolExecutionResult) -> None:
        seen.append(result)

    remove_observer = registry.add_result_observer(observer)

    def interrupt() -> None:
        ray.get(events.wait.remote("ctrl-c-started", 30))
        _thread.interrupt_main()

    helper = threading.Thread(target=interrupt)
    helper.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            registry.execute(call("coop", {"tag": "ctrl-c-started"}))
    finally:
        helper.join()
        remove_observer()
        remove()
    (result,) = seen
    assert result.code == TOOL_ABORTED
    assert isinstance(_meta(result)["reason"], KeyboardInterrupt)
    (context,) = result.additional_contexts  # the body ran to its end: joined
    assert context["aborted"] is True


def _guarded(args: Any, run: ToolRunContext) -> object:
    from dshtools._backends.ray import remote as _ray_remote

    task_id = ray.get_runtime_context().get_task_id()
    _announce(args["tag"], task_id)
    # Python code keeps running here between short waits: an interrupt that
    # raised would land in this loop and end the body.
    deadline = time.monotonic() + 30
    while _ray_remote._interrupted_task != task_id:
        if time.monotonic() > deadline:
            return "Ray's interrupt never arrived"
        run.signal.wait(0.01)
    _announce(f"{args['tag']}-interrupted")
    run.signal.wait(30)
    run.defer_context({"aborted": run.signal.aborted})
    run.signal.throw_if_aborted()
    return "never aborted"


@pytest.mark.timeout(60)
def test_rays_own_cancel_of_a_started_body_never_raises_in_it(
    registry: ToolRegistry, backend: _Recording, events: Any
) -> None:
    # The withdrawal sends ray.cancel(force=False) to a task that may have
    # started: Ray delivers it as an interrupt, which the worker's guard
    # must keep out of a claimed body (docs/contract.md#backends: no injection).
    with _started(registry, events, "guarded", _guarded, "guarded-started") as (controller, running, announced):
        assert announced is not None
        ray.cancel(backend.dispatches[-1].task, force=False, recursive=False)
        assert ray.get(events.wait.remote("guarded-started-interrupted", 30)) is True
        controller.abort("stop")  # the body still runs and still cooperates
        result = running.result()
    assert result.code == TOOL_ABORTED
    assert _meta(result)["reason"] == "stop"
    assert "killed" not in _meta(result)
    (context,) = result.additional_contexts
    assert context["aborted"] is True


def _plain_task(tag: str) -> str:
    from dshtools._backends.ray import remote as _ray_remote

    _ray_remote._install_guard()  # as in a worker that ran a RayBackend body
    _announce(tag)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        time.sleep(0.01)
    return "not cancelled"


_plain_task_remote: Any = ray.remote(max_retries=0)(_plain_task)


@pytest.mark.timeout(60)
def test_a_plain_ray_task_in_a_guarded_worker_is_still_cancelled(events: Any) -> None:
    # The guard is the worker's SIGINT handler: any other task of that
    # worker keeps Ray's own cancellation.
    ref = _plain_task_remote.remote("plain-started")
    assert ray.get(events.wait.remote("plain-started", 30)) is True
    ray.cancel(ref, force=False, recursive=False)
    with pytest.raises(ray.exceptions.TaskCancelledError):
        ray.get(ref, timeout=30)


def _large_body(blob: bytes, args: Any, run: ToolRunContext) -> object:
    return len(blob)


@pytest.mark.timeout(60)
def test_a_large_body_travels_through_the_object_store(registry: ToolRegistry) -> None:
    blob = os.urandom(200_000)  # above the inline limit: passed by reference
    remove = _register(registry, "large", functools.partial(_large_body, blob))
    try:
        first = registry.execute(call("large", {}, call_id="l1"))
        second = registry.execute(call("large", {}, call_id="l2"))
    finally:
        remove()
    assert value_of(first) == 200_000
    assert value_of(second) == 200_000


@pytest.mark.timeout(60)
def test_run_dispatch_raises_in_a_remote_body(registry: ToolRegistry) -> None:
    remove = _register(registry, "nested", _nested)
    try:
        result = registry.execute(call("nested", {}))
    finally:
        remove()
    assert "thread backend" in value_of(result)


@pytest.mark.timeout(60)
def test_what_does_not_pickle(registry: ToolRegistry) -> None:
    lock = threading.Lock()
    with pytest.raises(ValueError, match="'locked'"):
        _register(registry, "locked", lambda args, run: lock.locked())
    removes = [
        _register(registry, "bad-value", _unpicklable_value),
        _register(registry, "bad-error", _raises_unpicklable),
    ]
    try:
        value = registry.execute(call("bad-value", {}))
        error = registry.execute(call("bad-error", {}))
    finally:
        for remove in removes:
            remove()
    assert value.code == INVALID_TOOL_OUTPUT
    assert "cannot be serialized by Ray" in error_of(value).message
    detail = error_of(error)
    assert detail.info is not None and detail.info.name == "_Stubborn"
    assert detail.message == "1+2"


_FORKED_DRIVER = """\
import os

import ray

from dshtools import ToolRegistry
from dshtools.ray import RayBackend
from tests.helpers.calls import call, tool

ray.init(address={address!r}, namespace={namespace!r}, log_to_driver=False)
with ToolRegistry(backend=RayBackend(kill_after=0.5)) as registry:
    registry.register(tool("echo", lambda args, run: args["x"]))
    assert registry.execute(call("echo", {{"x": 1}})).value == 1  # the driver's backend is live
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never touches Ray, never returns into the script
        try:
            result = registry.execute(call("echo", {{"x": 2}}))
            os.write(write_end, f"{{result.code}}|{{(result.meta or {{}}).get('reason')}}".encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as pipe:
        print(pipe.read())
    os.waitpid(pid, 0)
"""


@pytest.mark.timeout(60)
def test_a_forked_child_is_refused_at_once(ray_cluster: Any) -> None:
    """A driver of its own forks, not the suite's shared one: a fork of a
    process holding Ray's connections can disturb the parent's (its GCS
    requests went unanswered after such a fork), and every later Ray test
    of the session shares this process's driver."""
    context = ray.get_runtime_context()
    script = _FORKED_DRIVER.format(address=context.gcs_address, namespace=context.namespace)
    reported = run_python(script).stdout.strip()
    code, _, reason = reported.partition("|")
    assert code == TOOL_ABORTED_BEFORE_DISPATCH
    assert "fork" in reason


def test_retries_are_refused() -> None:
    with pytest.raises(ValueError, match="max_retries"):
        RayBackend(max_retries=3)
    with pytest.raises(ValueError, match="retry_exceptions"):
        RayBackend(retry_exceptions=True)
    with pytest.raises(ValueError):
        RayBackend(kill_after=-1)
    assert RayBackend(max_retries=0).kill_after == 5.0


@pytest.mark.timeout(60)
def test_closed_backend_refuses_and_is_quiescent(ray_cluster: Any) -> None:
    backend = RayBackend(kill_after=0.5)
    with ToolRegistry(backend=backend) as registry:
        _register(registry, "echo", _echo)
        assert not registry.execute(call("echo", {"x": 1})).is_error
    assert backend.running_tasks() == 0
    assert backend.tasks_started == 1
    with ToolRegistry() as other:
        _register(other, "echo", _echo, backend=backend)
        result = other.execute(call("echo", {"x": 1}))
    assert result.code == TOOL_ABORTED_BEFORE_DISPATCH
    assert "closed" in str(_meta(result)["reason"])


@pytest.mark.timeout(90)
def test_demo_runs_on_the_connected_ray_and_proves_quiescence(
    ray_cluster: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from dshtools._cli.main import main

    status = main(["demo", "--backend", "ray"])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "the connected Ray" in out
    assert "FAIL" not in out
    assert "ok   no Ray task of the run still running" in out
    assert "stopped by force" in out
    # Every call of the bundled transcript runs under its own id: none is
    # refused as a repeated id, and the transcript's last call still runs.
    assert "INVALID_CALL" not in out
    assert "call_12  http_get" in out
    # The shared Ray is still up for the other tests (the demo did not start it).
    assert ray.is_initialized()


@pytest.mark.timeout(60)
def test_a_value_or_exception_whose_unpickling_raises_system_exit_fails_only_its_own_call(
    registry: ToolRegistry,
) -> None:
    # The driver unpickles what the task sent back, in the thread blocked in
    # execute(): foreign code. Its SystemExit must fail only that call
    # (docs/contract.md#a4, docs/contract.md#backends), never escape execute() half-settled.
    removes = [
        _register(registry, "exits_v", returns_exiting_value),
        _register(registry, "exits_e", raises_exiting_error),
    ]
    try:
        bad_value = registry.execute(call("exits_v", {}, call_id="v1"))
        assert bad_value.code == INVALID_TOOL_OUTPUT, bad_value
        bad_error = registry.execute(call("exits_e", {}, call_id="e1"))
        assert bad_error.code == TOOL_ERROR, bad_error
    finally:
        for remove in removes:
            remove()


@pytest.mark.timeout(60)
def test_an_exception_from_a_module_only_the_workers_import_keeps_its_class_name_message_and_code(
    registry: ToolRegistry, tmp_path: Any
) -> None:
    """N14: the driver cannot import the exception's module, so it cannot
    deserialize it; the caller still gets its class name, message and
    ``ToolError`` code (docs/ray.md), not ``ModuleNotFoundError`` "the tool's
    exception cannot be deserialized here"."""
    remove = _register(registry, "worker_only", raises_worker_only)
    try:
        assert_worker_only_errors_keep_name_message_and_code(registry, str(tmp_path), "dshtools_n14_ray_only")
    finally:
        remove()


def _stubborn_with_two_children(args: Any, run: ToolRunContext) -> object:
    """Starts ``sleep 61`` in its own process group and ``sleep 62`` in a
    session of its own, announces the three pids, then ignores its signal."""
    same_group = subprocess.Popen(["sleep", "61"])
    own_session = subprocess.Popen(["sleep", "62"], start_new_session=True)
    _announce(args["tag"], [os.getpid(), same_group.pid, own_session.pid])
    time.sleep(120)
    return "slept"


@pytest.mark.timeout(90)
def test_b56_a_forced_stop_kills_what_the_body_forked_in_its_group_and_in_a_new_session(events: Any) -> None:
    """B56: ``RayBackend(kill_after=0.5)``; a body starts ``sleep 61`` (same
    process group) and ``sleep 62`` (own session), then sleeps 120 s
    ignoring its signal. Aborted once it announced them: ``ABORTED`` with
    ``meta["killed"] is True`` within 30 s of the abort; both ``sleep``
    processes are gone (or unreaped zombies) within 5 s of the return; the
    driver is untouched."""
    backend = RayBackend(kill_after=0.5)
    controller = AbortController()
    with ToolRegistry(backend=backend) as registry:
        registry.register(tool("b56", _stubborn_with_two_children))
        running = ExecutingInThread(
            registry, call("b56", {"tag": "b56-started"}, signal=controller.signal, call_id="b56")
        )
        _worker, same_group, own_session = ray.get(events.wait.remote("b56-started", 30))
        aborted_at = time.monotonic()
        controller.abort("stop")
        result = running.result()
        assert time.monotonic() - aborted_at < 30.0
    assert result.code == TOOL_ABORTED, result
    assert _meta(result)["killed"] is True
    for pid in (same_group, own_session):
        try:
            proc = psutil.Process(pid)
            gone = proc.status() == psutil.STATUS_ZOMBIE or not proc.is_running()
            if not gone:
                proc.wait(timeout=5)
        except psutil.NoSuchProcess:
            pass
        except psutil.TimeoutExpired:
            pytest.fail(f"sleep process {pid} outlived the forced stop by 5 s")
    assert psutil.Process(os.getpid()).is_running()  # the driver is untouched
