"""Adversarial review of where the registry core and the out-of-process
backends meet (docs/contract.md#registry, docs/contract.md#amendments, docs/contract.md#backends): each test forces one
interleaving with events or by blocking a backend's own step, never a sleep.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from dshtools import (
    INVALID_TOOL_OUTPUT,
    TOOL_ABORTED,
    TOOL_ABORTED_BEFORE_DISPATCH,
    TOOL_ERROR,
    AbortController,
    ProcessBackend,
    ThreadBackend,
    ToolDefinition,
    ToolFailure,
    ToolRegistry,
    ToolSuccess,
    execute_batch,
)
from dshtools._backends.process.pool import _Job, _Worker
from tests.helpers.calls import OBJECT, call
from tests.helpers.workers import raises_exiting_error, returns_exiting_value

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pidfd and /proc are Linux")


def _ok(args: object, run: object) -> str:
    return "ok"


@pytest.fixture
def one_worker() -> Iterator[tuple[ProcessBackend, ToolRegistry]]:
    """``(backend, registry)``: a one-worker ``ProcessBackend`` (stop
    escalates to a kill after 1 s) behind a registry with the tool ``t``
    (returns ``"ok"``), closed after the test."""
    backend = ProcessBackend(1, kill_after=1.0)
    registry = ToolRegistry(backend=backend)
    registry.register(ToolDefinition("t", "t", OBJECT, _ok))
    try:
        yield backend, registry
    finally:
        registry.close()


def _wait_exited(pid: int) -> None:
    """Block until ``pid`` has exited (without reaping it)."""
    fd = os.pidfd_open(pid)
    try:
        select.select([fd], [], [])
    finally:
        os.close(fd)


@pytest.mark.timeout(30)
def test_a_call_sent_to_an_idle_worker_that_just_died_never_started_so_it_is_aborted_before_dispatch(
    one_worker: tuple[ProcessBackend, ToolRegistry],
) -> None:
    # An idle worker dies (OOM killer, a stray kill) and the next call is
    # claimed for it before the manager thread noticed: sending the call
    # fails, so the body never started anywhere. docs/contract.md#backends:
    # ABORTED_BEFORE_DISPATCH exactly when the body never started (not
    # WORKER_LOST, which says a body was running when its worker died).
    backend, registry = one_worker
    warm = registry.execute(call("t", signal=_never(), call_id="c0"))
    assert warm.code is None
    (pid,) = backend.worker_pids

    noticed = threading.Event()
    release = threading.Event()
    lose = backend._lose

    def held_lose(worker: _Worker) -> None:
        noticed.set()
        release.wait(20)
        lose(worker)

    backend._lose = held_lose  # type: ignore[method-assign]
    os.kill(pid, signal.SIGKILL)
    _wait_exited(pid)
    assert noticed.wait(20)  # the manager saw it but has not retired it yet

    done: list[Any] = []
    caller = threading.Thread(target=lambda: done.append(registry.execute(call("t", signal=_never()))))
    caller.start()
    # The call is claimed and sent (to the dead worker) on the caller's
    # thread inside submit(); only then may the manager go on.
    while backend.bodies_running == 0 and caller.is_alive():
        caller.join(0.01)
    release.set()
    caller.join(20)
    assert not caller.is_alive()
    (result,) = done
    assert result.code == TOOL_ABORTED_BEFORE_DISPATCH, result
    after = registry.execute(call("t", signal=_never(), call_id="c2"))
    assert after.code is None  # a fresh worker takes the next call


@pytest.mark.timeout(30)
def test_a_worker_that_died_after_sending_its_result_gives_that_result_not_worker_lost(
    one_worker: tuple[ProcessBackend, ToolRegistry],
) -> None:
    # The body returned and its worker sent the outcome, then the worker
    # died (a thread the body left behind called os._exit, the OOM killer)
    # before the manager read the outcome: whichever of the two events the
    # manager handles first, the call returned (docs/contract.md#backends:
    # WORKER_LOST says a body was running when its worker died).
    backend, registry = one_worker
    assert registry.execute(call("t", signal=_never(), call_id="c0")).code is None
    (pid,) = backend.worker_pids

    arrived = threading.Event()
    receive = backend._receive

    def death_first(worker: _Worker) -> None:
        # The outcome is in the pipe; the worker dies; the manager learns
        # of the death before it reads the pipe.
        arrived.set()
        os.kill(worker.pid, signal.SIGKILL)
        _wait_exited(worker.pid)
        backend._receive = receive  # type: ignore[method-assign]
        backend._lose(worker)

    backend._receive = death_first  # type: ignore[method-assign]
    result = registry.execute(call("t", signal=_never()))
    assert arrived.is_set()
    assert isinstance(result, ToolSuccess) and result.value == "ok", result
    assert backend._lost == 0 and backend.kills == 0
    assert pid not in backend.worker_pids
    assert registry.execute(call("t", signal=_never(), call_id="c2")).code is None  # a fresh worker


def _never() -> Any:
    from dshtools import AbortController

    return AbortController().signal


@pytest.mark.timeout(30)
def test_backend_close_racing_a_call_being_handed_to_a_worker_still_settles_the_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # submit() took an idle worker and the call off the queue, and is about
    # to send it, when close() runs on another thread. close() must wait for
    # that hand-off like for a running body: if it stops the manager first,
    # the body starts in a worker nobody watches, close() kills it, and the
    # caller waits forever (joined, never abandoned: docs/contract.md#backends).
    backend = ProcessBackend(1, kill_after=1.0)
    registry = ToolRegistry(backend=backend)
    done: list[Any] = []

    def execute() -> None:
        done.append(registry.execute(call("t", signal=_never())))

    caller = threading.Thread(target=execute, daemon=True)
    try:
        registry.register(ToolDefinition("t", "t", OBJECT, _ok))
        assert registry.execute(call("t", signal=_never(), call_id="c0")).code is None

        handing_off = threading.Event()
        go_on = threading.Event()
        stopping = threading.Event()
        sent = threading.Event()
        start_on = _Job.start_on

        def held_start_on(job: _Job, worker: _Worker) -> bool:
            handing_off.set()
            go_on.wait(20)
            try:
                return start_on(job, worker)
            finally:
                sent.set()

        monkeypatch.setattr(_Job, "start_on", held_start_on)
        stop_worker = backend._stop_worker

        def held_stop_worker(worker: _Worker) -> None:
            # close() got past its wait for running bodies: let the hand-off
            # finish first (sent to a live worker), then stop the worker.
            stopping.set()
            go_on.set()
            sent.wait(20)
            stop_worker(worker)

        backend._stop_worker = held_stop_worker  # type: ignore[method-assign]

        caller.start()
        assert handing_off.wait(20)
        closer = threading.Thread(target=backend.close, daemon=True)
        closer.start()
        # close() either waits for the hand-off (and never reaches
        # _stop_worker while it is pending) or reaches it at once.
        if not stopping.wait(1):
            go_on.set()
        caller.join(8)
        closer.join(8)
        assert not caller.is_alive(), "the call was abandoned: it never settled"
        assert not closer.is_alive()
        (result,) = done
        assert result.code in (None, TOOL_ABORTED_BEFORE_DISPATCH), result
    finally:
        go_on.set()
        sent.set()
        if not caller.is_alive():  # an abandoned call would hold close() forever
            registry.close()


@pytest.mark.timeout(30)
def test_a_batch_runs_each_thread_backed_body_on_its_own_backend_not_on_the_registry_pool() -> None:
    # A batch's parallel dispatches run on the registry's own pool, marked
    # so that a body of *that* pool runs inline (a full pool cannot
    # deadlock). A tool given its own ThreadBackend (a dedicated executor,
    # or a smaller bound) must still run there, in a batch as in execute:
    # the backend decides where a body runs (docs/contract.md#backends).
    special = ThreadPoolExecutor(1, thread_name_prefix="special-executor")
    threads: list[str] = []

    def body(args: object, run: object) -> str:
        threads.append(threading.current_thread().name)
        return "ok"

    registry = ToolRegistry()
    registry2 = ToolRegistry(backend=ThreadBackend(executor=special))
    try:
        for reg, backend in ((registry, ThreadBackend(executor=special)), (registry2, None)):
            reg.register(ToolDefinition("t", "t", OBJECT, body, backend=backend, is_concurrency_safe=lambda a: True))
            results = execute_batch(
                reg, [call("t", signal=_never(), call_id=f"c{i}") for i in range(3)], signal=_never()
            )
            assert [r.code for r in results] == [None, None, None]
        assert len(threads) == 6
        assert all(name.startswith("special-executor") for name in threads), threads
    finally:
        registry.close()
        registry2.close()
        special.shutdown()


@pytest.mark.timeout(30)
def test_a_value_or_exception_whose_unpickling_raises_system_exit_fails_only_its_own_call(
    one_worker: tuple[ProcessBackend, ToolRegistry],
) -> None:
    # Unpickling what a worker sent runs foreign code in the backend's
    # manager thread. A SystemExit (or KeyboardInterrupt) raised there must
    # be contained like any unpicklable outcome (docs/contract.md#a4, docs/contract.md#backends),
    # not kill the manager and close the backend for every later call.
    _, registry = one_worker
    registry.register(ToolDefinition("v", "v", OBJECT, returns_exiting_value))
    registry.register(ToolDefinition("e", "e", OBJECT, raises_exiting_error))
    bad_value = registry.execute(call("v", signal=_never(), call_id="c0"))
    assert bad_value.code == INVALID_TOOL_OUTPUT, bad_value
    bad_error = registry.execute(call("e", signal=_never()))
    assert isinstance(bad_error, ToolFailure) and bad_error.code == TOOL_ERROR, bad_error
    assert bad_error.error.info is not None and bad_error.error.info.name == "ExitsWhenLoadedError"
    after = registry.execute(call("t", signal=_never(), call_id="c2"))
    assert after.code is None, after


@pytest.mark.timeout(30)
def test_a_worker_that_died_after_saying_ready_did_start_so_the_queued_call_runs_on_a_fresh_one(
    one_worker: tuple[ProcessBackend, ToolRegistry],
) -> None:
    # A worker started, sent "ready", then died (the OOM killer, a stray
    # kill) before the manager read it: the manager learns of the death
    # first. The worker did start, so the queue waiting for it is not a
    # start-up failure to refuse: the call runs on a fresh worker.
    backend, registry = one_worker
    died: list[int] = []
    receive = backend._receive

    def death_first(worker: _Worker) -> None:
        # "ready" is in the pipe; the worker dies; the manager handles
        # the death before it reads the pipe.
        backend._receive = receive  # type: ignore[method-assign]
        died.append(worker.pid)
        os.kill(worker.pid, signal.SIGKILL)
        _wait_exited(worker.pid)
        backend._lose(worker)

    backend._receive = death_first  # type: ignore[method-assign]
    result = registry.execute(call("t", signal=_never(), call_id="c0"))
    assert died, "the interleaving was not forced"
    assert isinstance(result, ToolSuccess) and result.value == "ok", result
    assert died[0] not in backend.worker_pids


def _returns_when_aborted(args: Any, run: Any) -> str:
    with open(args["started"], "wb") as fifo:  # the test reads it: the body runs
        fifo.write(b"x")
    run.signal.wait(20)
    return "returned"


@pytest.mark.timeout(30)
def test_a_body_whose_outcome_is_in_the_pipe_when_its_stop_falls_due_is_not_killed(tmp_path: Any) -> None:
    # The body returned on its abort and its worker sent the outcome, but
    # the manager reaches the forced stop before it reads the pipe: the body
    # was not stopped, so the call is not reported killed
    # (docs/contract.md#backends: killed says a body was stopped by force)
    # and the worker lives on.
    from dshtools import AbortController

    started = tmp_path / "started"
    os.mkfifo(started)
    backend = ProcessBackend(1, kill_after=0.0)
    registry = ToolRegistry(backend=backend)
    try:
        registry.register(ToolDefinition("t", "t", OBJECT, _returns_when_aborted))
        outcome_first: list[bool] = []
        kill = backend._kill

        def outcome_in_the_pipe_first(worker: _Worker, job: _Job) -> None:
            backend._kill = kill  # type: ignore[method-assign]
            outcome_first.append(worker.conn.poll(10))  # the body returned and sent its outcome
            kill(worker, job)

        backend._kill = outcome_in_the_pipe_first  # type: ignore[method-assign]
        controller = AbortController()
        result: list[Any] = []
        runner = threading.Thread(
            target=lambda: result.append(
                registry.execute(call("t", {"started": str(started)}, signal=controller.signal))
            )
        )
        runner.start()
        with open(started, "rb") as fifo:
            assert fifo.read(1) == b"x"
        controller.abort("stop")
        runner.join(20)
        assert outcome_first == [True], "the interleaving was not forced"
        (res,) = result
        assert "killed" not in (res.meta or {}), res
        assert backend.kills == 0
        assert len(backend.worker_pids) == 1  # its worker was not stopped
    finally:
        registry.close()


def _announce_on(fifo: str) -> None:
    with open(fifo, "w") as f:
        f.write("started\n")


def _blocking_listener(args: Any, run: Any) -> str:
    never = threading.Event()
    run.signal.add_listener(lambda _s: never.wait())
    _announce_on(args["fifo"])
    run.signal.wait(20)
    return "stopped"


def _exiting_listener(args: Any, run: Any) -> str:
    def leave(_signal: object) -> None:
        raise SystemExit(3)

    run.signal.add_listener(leave)
    _announce_on(args["fifo"])
    run.signal.wait(20)
    return "stopped"


def _cooperative_on(args: Any, run: Any) -> str:
    _announce_on(args["fifo"])
    run.signal.wait(20)
    run.signal.throw_if_aborted()
    return "not aborted"


def _started(fifo: str) -> None:
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        ready, _, _ = select.select([fd], [], [], 20)
        assert ready and os.read(fd, 100) == b"started\n"
    finally:
        os.close(fd)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("body", [_blocking_listener, _exiting_listener])
def test_a_body_listener_that_blocks_or_exits_leaves_the_worker_reading_its_next_calls_and_aborts(
    body: Any, tmp_path: Any
) -> None:
    # The worker's reader thread handed each abort to the call's listeners
    # itself: one that blocked stopped it reading, so the next call on that
    # worker never started; one that raised SystemExit ended it.
    fifo = str(tmp_path / "started")
    os.mkfifo(fifo)
    backend = ProcessBackend(1, kill_after=5.0)
    registry = ToolRegistry(backend=backend)
    try:
        registry.register(ToolDefinition("first", "first", OBJECT, body))
        registry.register(ToolDefinition("next", "next", OBJECT, _cooperative_on))
        for name in ("first", "next"):
            controller = AbortController()
            done: list[Any] = []
            caller = threading.Thread(
                target=lambda: done.append(
                    registry.execute(call(name, {"fifo": fifo}, signal=controller.signal, call_id=name))
                )
            )
            caller.start()
            _started(fifo)  # its body runs on the one worker
            controller.abort("stop")
            caller.join(30)
            (result,) = done
            assert result.code == TOOL_ABORTED and not (result.meta or {}).get("killed"), (name, result)
        assert backend.kills == 0 and len(backend.workers_started) == 1  # the same worker took both
    finally:
        registry.close()
