"""RayBackend under interleavings the cluster produces only by chance
(docs/contract.md#backends, docs/contract.md#ray; decision 0042): each test forces one with a
probe actor the bodies report to, never with a sleep.

Runs on the session's local Ray (the ``ray_cluster`` fixture,
tests/backends/conftest.py), shared with test_cluster.py; the probe is the
``Events`` actor of tests/helpers/ray_events.py.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

import psutil
import pytest

ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'dshtools[ray]')")

from dshtools import (  # noqa: E402
    TOOL_ABORTED,
    TOOL_ABORTED_BEFORE_DISPATCH,
    WORKER_LOST,
    AbortController,
    ToolDefinition,
    ToolExecution,
    ToolExecutionResult,
    ToolRegistry,
    ToolRunContext,
)
from dshtools._backends.ray import remote as _ray_remote  # noqa: E402
from dshtools.ray import RayBackend  # noqa: E402
from tests.helpers.calls import OBJECT, call  # noqa: E402
from tests.helpers.faults import FirstCallSkipped  # noqa: E402
from tests.helpers.ray_events import announce, events_handle, start_events  # noqa: E402
from tests.helpers.waiting import ExecutingInThread  # noqa: E402

PROBE = "dshtools-review-probe"


def _probe() -> Any:
    return events_handle(PROBE)


def _announce(tag: str) -> None:
    announce(PROBE, tag)


@pytest.fixture(scope="module")
def probe(ray_cluster: None) -> Iterator[Any]:
    handle = start_events(PROBE)
    yield handle
    ray.kill(handle)


def _published(registry: ToolRegistry) -> list[ToolExecutionResult]:
    seen: list[ToolExecutionResult] = []

    def observe(_execution: ToolExecution, result: ToolExecutionResult) -> None:
        seen.append(result)

    registry.add_result_observer(observe)
    return seen


@contextlib.contextmanager
def _serving(
    body: Callable[[Any, ToolRunContext], object], kill_after: float | None = None
) -> Iterator[tuple[RayBackend, ToolRegistry]]:
    """A registry on a fresh ``RayBackend(kill_after=kill_after)`` whose one
    tool, ``t``, runs ``body``; the registry (and with it the backend) is
    closed on exit."""
    backend = RayBackend(kill_after=kill_after)
    with ToolRegistry(backend=backend) as registry:
        registry.register(ToolDefinition("t", "t", OBJECT, body))
        yield backend, registry


class _InFlight:
    """``with _InFlight(backend) as left:`` - on exit, ``left.count`` is how
    many calls ``backend`` still held in flight, and the backend forgets
    them all, so that a failure cannot leave ``close()`` waiting on one."""

    def __init__(self, backend: RayBackend) -> None:
        self.backend = backend
        self.count = -1

    def __enter__(self) -> _InFlight:
        return self

    def __exit__(self, *exc: object) -> None:
        self.count = len(self.backend._in_flight)
        self.backend._in_flight.clear()


# ------------------------------------------------------------------ bodies


def _waits_for_its_abort(args: Any, run: ToolRunContext) -> object:
    _announce(f"{run.call_id}-started")
    run.signal.wait(30)
    return "ran"


def _waits_for_its_release(args: Any, run: ToolRunContext) -> object:
    # Ignores its abort: it returns when the test releases it.
    _announce(f"{run.call_id}-started")
    _probe().wait.remote(f"{run.call_id}-release", 30).future().result()
    return "ran"


def _load_slowly(driver_pid: int, tag: str, exits: bool = False) -> _SlowToLoad:
    # In a worker: block the task before its claim (as a tool module that is
    # slow to import does on a fresh worker) until the test releases it;
    # then load, or end the worker process (as a crash while importing does).
    if os.getpid() != driver_pid:
        announce(PROBE, f"{tag}-pid", os.getpid())
        _announce(f"{tag}-loading")
        _probe().wait.remote(f"{tag}-release", 20).future().result()
        if exits:
            os._exit(1)
    return _SlowToLoad(driver_pid, tag, exits)


class _SlowToLoad:
    """A body whose unpickling in a worker blocks (not in the driver, where
    ``validate`` round-trips it)."""

    def __init__(self, driver_pid: int, tag: str, exits: bool = False) -> None:
        self.driver_pid = driver_pid
        self.tag = tag
        self.exits = exits

    def __reduce__(self) -> tuple[Any, tuple[int, str, bool]]:
        return (_load_slowly, (self.driver_pid, self.tag, self.exits))

    def __call__(self, args: Any, run: ToolRunContext) -> object:
        _probe().incr.remote(f"{self.tag}-ran").future().result()
        return "ran"


class _LoadsOnlyInTheWorker(Exception):
    """What a body's unpickling raises in a worker; unpickling it in the
    driver raises in turn (as a class the driver cannot rebuild does)."""

    def __init__(self, driver_pid: int) -> None:
        super().__init__(f"body refused in the worker (driver {driver_pid})")
        self.driver_pid = driver_pid

    def __reduce__(self) -> tuple[Any, tuple[int]]:
        return (_rebuild_refusal, (self.driver_pid,))


def _rebuild_refusal(driver_pid: int) -> _LoadsOnlyInTheWorker:
    if os.getpid() == driver_pid:
        raise RuntimeError("this exception cannot be rebuilt in the driver")
    return _LoadsOnlyInTheWorker(driver_pid)


def _refuse_in_the_worker(driver_pid: int) -> _RefusedInTheWorker:
    if os.getpid() != driver_pid:
        raise _LoadsOnlyInTheWorker(driver_pid)
    return _RefusedInTheWorker(driver_pid)


class _LoadedBy:
    """A body that loads in the driver (``validate`` round-trips it) and is
    loaded in a worker by ``load(driver_pid)``, before the claim; it returns
    ``"ran"`` if it ever runs."""

    load: Callable[[int], object]

    def __init__(self, driver_pid: int) -> None:
        self.driver_pid = driver_pid

    def __reduce__(self) -> tuple[Any, tuple[int]]:
        return (type(self).load, (self.driver_pid,))

    def __call__(self, args: Any, run: ToolRunContext) -> object:
        return "ran"


class _RefusedInTheWorker(_LoadedBy):
    """Fails to load in a worker."""

    load = staticmethod(_refuse_in_the_worker)


def _exit_in_the_worker(driver_pid: int) -> _ExitsInTheWorker:
    if os.getpid() != driver_pid:
        raise SystemExit(2)  # as a tool module that parses sys.argv at import time does there
    return _ExitsInTheWorker(driver_pid)


class _ExitsInTheWorker(_LoadedBy):
    """Raises ``SystemExit`` when a worker loads it."""

    load = staticmethod(_exit_in_the_worker)


# ------------------------------------------------------------------ tests


@pytest.mark.timeout(60)
def test_a_submit_that_close_overtakes_starts_no_signal_actor(probe: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # close() (another thread, another registry sharing the backend) lands
    # after submit()'s closed check and before the signal actor is made:
    # the call is refused and no actor outlives the closed backend.
    backend = RayBackend(kill_after=None)
    real = backend._actor_handle

    def closed_meanwhile() -> Any:
        backend.close()
        return real()

    monkeypatch.setattr(backend, "_actor_handle", closed_meanwhile)
    with ToolRegistry(backend=backend) as registry:
        registry.register(ToolDefinition("t", "t", OBJECT, _waits_for_its_abort))
        result = registry.execute(call("t", call_id="close-race"))
        assert result.code == TOOL_ABORTED_BEFORE_DISPATCH
        assert "closed" in str((result.meta or {})["reason"])
        # Checked before the registry's own close() (which would close the
        # backend a second time): the first close() is the one that counts.
        # (Not asked of Ray by name: a named-actor lookup has no timeout.)
        assert backend._actor is None


@pytest.mark.timeout(60)
def test_a_task_aborted_before_its_claim_is_withdrawn_not_killed(probe: Any) -> None:
    tag = "slow-load"
    backend = RayBackend(kill_after=0.0)
    result, _alive_then = _stopped_while_loading(probe, backend, tag)
    assert ray.get(probe.count.remote(f"{tag}-ran")) == 0  # the body never started ...
    assert result.code == TOOL_ABORTED_BEFORE_DISPATCH, result  # ... so it was withdrawn
    assert backend.tasks_killed == 0


def _report(backend: RayBackend, number: int = 1) -> Any:
    """What the abort of the backend's ``number``-th call found in the worker
    running its task, once that worker reported it (decision 0046)."""
    return ray.get(backend._actor.where.remote(f"{backend._prefix}-{number}", 30))


def _alive(pid: int) -> bool:
    """``pid`` runs (a zombie its parent has not reaped yet is gone)."""
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


def _stopped_while_loading(probe: Any, backend: RayBackend, tag: str) -> tuple[ToolExecutionResult, bool]:
    """Execute a call whose body loads until released (``_SlowToLoad``),
    abort it once its task is loading, and require ``execute`` to return
    while the load is still held (``kill_after`` bounds the wait whatever
    the task does). Returns the result and whether the task's worker was
    still alive when ``execute`` returned; the load is released afterwards."""
    controller = AbortController()
    try:
        with ToolRegistry(backend=backend) as registry:
            registry.register(ToolDefinition("slow", "slow", OBJECT, _SlowToLoad(os.getpid(), tag)))
            running = ExecutingInThread(registry, call("slow", signal=controller.signal, call_id=tag))
            assert ray.get(probe.wait.remote(f"{tag}-loading", 30)) is True  # in the task, before its claim
            worker = ray.get(probe.wait.remote(f"{tag}-pid", 30))
            controller.abort("stop")
            result = running.result(40)  # execute must not wait for the load
            alive = _alive(worker)
    finally:
        probe.set.remote(f"{tag}-release")
    return result, alive


@pytest.mark.timeout(60)
def test_a_load_that_never_ends_is_stopped_at_kill_after_and_the_call_stays_withdrawn(probe: Any) -> None:
    # kill_after bounds the wait after an abort whatever the task is doing:
    # a task still loading its body when it falls due is ended by force (its
    # load may never end), after its worker reported the claim impossible,
    # so the call is withdrawn, not a killed body.
    tag = "endless-load"
    backend = RayBackend(kill_after=0.3)
    result, alive = _stopped_while_loading(probe, backend, tag)
    assert result.code == TOOL_ABORTED_BEFORE_DISPATCH, result
    assert "killed" not in (result.meta or {})
    assert backend.tasks_killed == 0
    assert not alive  # stopped and confirmed gone, as a killed body's worker is
    assert ray.get(probe.count.remote(f"{tag}-ran")) == 0


@pytest.mark.timeout(60)
def test_a_load_that_ends_within_the_grace_refuses_its_claim_and_keeps_its_worker(probe: Any) -> None:
    tag = "short-load"
    controller = AbortController()
    with _serving(_SlowToLoad(os.getpid(), tag), kill_after=30.0) as (backend, registry):
        running = ExecutingInThread(registry, call("t", signal=controller.signal, call_id="g1"))
        assert ray.get(probe.wait.remote(f"{tag}-loading", 30)) is True
        worker = ray.get(probe.wait.remote(f"{tag}-pid", 30))
        controller.abort("stop")
        assert _report(backend)[0] == _ray_remote.WITHDRAWN  # before the release: the claim lost already
        probe.set.remote(f"{tag}-release")
        result = running.result(20)  # within the grace, well before kill_after
        survived = _alive(worker)
    assert result.code == TOOL_ABORTED_BEFORE_DISPATCH, result
    assert backend.tasks_killed == 0
    assert survived  # nothing was stopped by force
    assert ray.get(probe.count.remote(f"{tag}-ran")) == 0


@pytest.mark.timeout(60)
def test_a_worker_lost_after_it_reported_the_call_withdrawn_is_not_a_lost_body(probe: Any) -> None:
    # The worker dies while loading the body, after the abort made its
    # claim impossible: the body never started, so the call is withdrawn,
    # not WORKER_LOST (which says the body may have had effects).
    tag = "lost-load"
    controller = AbortController()
    with _serving(_SlowToLoad(os.getpid(), tag, exits=True)) as (backend, registry):
        running = ExecutingInThread(registry, call("t", signal=controller.signal, call_id="l1"))
        assert ray.get(probe.wait.remote(f"{tag}-loading", 30)) is True
        controller.abort("stop")
        assert _report(backend)[0] == _ray_remote.WITHDRAWN
        probe.set.remote(f"{tag}-release")  # the worker now exits
        result = running.result(40)
    assert result.code == TOOL_ABORTED_BEFORE_DISPATCH, result
    assert ray.get(probe.count.remote(f"{tag}-ran")) == 0


@pytest.mark.timeout(60)
def test_a_worker_lost_before_the_claim_without_an_abort_stays_worker_lost(probe: Any) -> None:
    # Without an abort no worker reports anything: a worker that dies under
    # the task is lost, the conservative answer (the caller cannot tell a
    # load from a body).
    tag = "lost-unaborted"
    with _serving(_SlowToLoad(os.getpid(), tag, exits=True)) as (_backend, registry):
        running = ExecutingInThread(registry, call("t", call_id="u1"))
        assert ray.get(probe.wait.remote(f"{tag}-loading", 30)) is True
        probe.set.remote(f"{tag}-release")
        result = running.result(40)
    assert result.code == WORKER_LOST, result


class _Unreported:
    """The signal actor's handle as a forced stop sees it when the worker's
    report does not come in time (a worker stuck holding its GIL, a report
    still on its way): ``where`` answers ``None``, the rest is the actor."""

    def __init__(self, actor: Any) -> None:
        self._actor = actor
        self.abort = actor.abort
        self.forget = actor.forget

    class _Nowhere:
        def remote(self, *_args: Any) -> Any:
            return ray.put(None)

    where = _Nowhere()


@pytest.mark.timeout(60)
def test_without_the_workers_report_the_forced_stop_stays_conservative(
    probe: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # When in doubt a stopped task is a killed body: ABORTED with
    # meta["killed"], never withdrawn (that would claim the body never ran).
    backend = RayBackend(kill_after=0.0)
    real = backend._actor_handle
    monkeypatch.setattr(backend, "_actor_handle", lambda: _Unreported(real()))
    result, _alive_then = _stopped_while_loading(probe, backend, "unreported-load")
    assert result.code == TOOL_ABORTED, result
    assert (result.meta or {})["killed"] is True
    assert backend.tasks_killed == 1


@pytest.mark.timeout(60)
def test_a_forced_stop_that_ray_drops_is_sent_again_until_the_task_ends(
    probe: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Ray drops a cancel of a task whose previous cancel is still in flight
    # (the withdrawal sent at the abort): a forced stop sent once may never
    # arrive, and the call would wait for a load that may never end.
    import dshtools._backends.ray.backend as dray

    forced_stops = FirstCallSkipped(monkeypatch, dray, "_cancel", matching=lambda ref, *, force: force)
    backend = RayBackend(kill_after=0.0)
    real = backend._actor_handle
    monkeypatch.setattr(backend, "_actor_handle", lambda: _Unreported(real()))
    result, _alive_then = _stopped_while_loading(probe, backend, "dropped-stop")  # returned: stopped after all
    assert forced_stops.skipped  # the first forced stop was lost
    assert result.code == TOOL_ABORTED and (result.meta or {})["killed"] is True, result
    assert backend.tasks_killed == 1


class _InterruptedAfterSubmit:
    """``.remote()`` of the backend's task that is interrupted after Ray took
    the task: a Ctrl-C landing in Ray's ``.remote()`` after the submission,
    while the worker claims the call before the abort reaches it."""

    def __init__(self, task: Any, probe: Any, started: str) -> None:
        self._task = task
        self._probe = probe
        self._started = started

    def remote(self, packed: Any) -> Any:
        ref = self._task.remote(packed)
        assert ray.get(self._probe.wait.remote(self._started, 30)) is True
        signal.raise_signal(signal.SIGINT)  # the Ctrl-C lands here, after Ray took the task
        return ref


@pytest.mark.timeout(60)
def test_a_ctrl_c_inside_submit_never_reports_a_started_body_as_not_dispatched(
    probe: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = RayBackend(kill_after=None)
    monkeypatch.setattr(backend, "_task", _InterruptedAfterSubmit(backend._task, probe, "ki-submit-started"))
    with ToolRegistry(backend=backend) as registry:
        published = _published(registry)
        registry.register(ToolDefinition("t", "t", OBJECT, _waits_for_its_abort))
        with pytest.raises(KeyboardInterrupt):
            registry.execute(call("t", call_id="ki-submit"))
        (result,) = published
        # The body started (the fake .remote() waited for it): the call was
        # dispatched, so it must not read as never dispatched.
        assert result.code != TOOL_ABORTED_BEFORE_DISPATCH, result


def _another_handler(_signum: int, _frame: Any) -> None:
    """A SIGINT handler some other code of the worker installs."""


@pytest.mark.timeout(10)
def test_the_guard_is_put_back_for_each_task_when_other_code_replaced_it(monkeypatch: pytest.MonkeyPatch) -> None:
    # A plain Ray task of the same worker process (or a library it imports)
    # may install its own SIGINT handler after a RayBackend task installed
    # the guard. The next RayBackend task must run behind the guard again,
    # else Ray's cancel of its started body raises KeyboardInterrupt in it
    # (docs/contract.md#backends: nothing is raised into a body).
    original = signal.getsignal(signal.SIGINT)
    monkeypatch.setattr(_ray_remote, "_guard_installed", False, raising=False)
    monkeypatch.setattr(_ray_remote, "_previous_handler", None)
    try:
        _ray_remote._install_guard()  # a first task of ours (this is the main thread)
        assert signal.getsignal(signal.SIGINT) is _ray_remote._guard
        signal.signal(signal.SIGINT, _another_handler)  # a plain task of the same worker
        _ray_remote._install_guard()  # the next task of ours
        assert signal.getsignal(signal.SIGINT) is _ray_remote._guard
        # Plain tasks keep what was installed for them.
        assert _ray_remote._previous_handler is _another_handler
    finally:
        signal.signal(signal.SIGINT, original)


class _ExitsWhenLoaded:
    """An abort reason whose unpickling raises ``SystemExit`` (as a module
    that parses ``sys.argv`` at import time does in a worker)."""

    def __reduce__(self) -> tuple[Any, tuple[int]]:
        import sys

        return (sys.exit, (3,))


@pytest.mark.timeout(10)
def test_a_reason_whose_unpickling_exits_aborts_the_body_and_spares_the_watcher() -> None:
    # deliver() runs on the worker's watcher thread, the only way aborts
    # reach this process: a reason's unpickling is foreign code, and what it
    # raises must neither end that thread (every later abort would be lost)
    # nor keep the body from its abort.
    channel = _ray_remote._Channel("test", None, ("node-1", (101, 5, 101)))
    controller = channel.claim("k1", "task-1")
    assert controller is not None
    data = _ray_remote._dumps(_ExitsWhenLoaded())
    try:
        delivered = channel.deliver([("k1", data), ("k2", _ray_remote._dumps("stop"))])
    except BaseException as exc:
        pytest.fail(f"deliver() raised {exc!r}: the watcher thread would end")
    assert delivered == [("k1", _ray_remote.RUNNING)]
    assert controller.signal.wait(5)  # aborted on a thread of its own
    assert "did not unpickle" in str(controller.signal.reason)
    assert "k2" in channel.withdrawn  # the abort after it still reached the process


@pytest.mark.timeout(10)
def test_a_body_listener_that_exits_spares_the_watcher() -> None:
    # A body's own listener on run.signal runs when the abort arrives, on a
    # thread the watcher starts for it; a SystemExit it raises has nobody
    # to go to there and must neither end the watcher nor be lost.
    channel = _ray_remote._Channel("test", None, ("node-1", (101, 5, 101)))
    controller = channel.claim("k1", "task-1")
    assert controller is not None

    def exits(_signal: object) -> None:
        raise SystemExit(3)

    controller.signal.add_listener(exits)
    reported: list[BaseException] = []
    done = threading.Event()

    def hook(args: Any) -> None:
        reported.append(args.exc_value)
        done.set()

    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr("sys.unraisablehook", hook)
            delivered = channel.deliver([("k1", _ray_remote._dumps("stop")), ("k2", _ray_remote._dumps("stop"))])
            listened = done.wait(5)
    except BaseException as exc:
        pytest.fail(f"deliver() raised {exc!r}: the watcher thread would end")
    assert listened and delivered == [("k1", _ray_remote.RUNNING)]
    assert controller.signal.aborted and controller.signal.reason == "stop"
    assert "k2" in channel.withdrawn
    assert [type(e) for e in reported] == [SystemExit]  # reported, not lost


class _RefusingActor:
    """The signal actor's handle once Ray refuses to submit to it (as after
    ``ray.shutdown()``): every ``.remote()`` raises."""

    class _Method:
        def remote(self, *_args: Any) -> Any:
            raise Exception("Failed to submit task to actor: Can't find actor")  # what Ray raises

    forget = _Method()


@pytest.mark.timeout(60)
def test_an_aborted_call_settles_when_ray_refuses_its_forget(probe: Any) -> None:
    # The forget after an aborted call settled is bookkeeping: Ray refusing
    # it must neither fail the call nor leave it in flight (close() would
    # then wait forever).
    controller = AbortController()
    with _serving(_waits_for_its_abort) as (backend, registry):
        running = ExecutingInThread(registry, call("t", signal=controller.signal, call_id="refused"))
        assert ray.get(probe.wait.remote("refused-started", 30)) is True
        actor = backend._actor
        backend._actor = _RefusingActor()  # the call's abort still goes through its own handle
        with _InFlight(backend) as left:
            try:
                controller.abort("stop")
                result = running.result(30)
            finally:
                backend._actor = actor
    assert result.code == TOOL_ABORTED, result
    assert left.count == 0


@pytest.mark.timeout(60)
def test_the_forced_stop_survives_ray_refusing_to_say_whether_the_task_ended(
    probe: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # kill_after=0: the forced stop is weighed at the abort and first asks
    # Ray whether the task ended. Ray refusing to answer (shut down
    # meanwhile: ray.wait raises) must not fail the call or leave it in
    # flight; the task's own end settles it.
    controller = AbortController()
    with _serving(_waits_for_its_release, kill_after=0.0) as (backend, registry):
        running = ExecutingInThread(registry, call("t", signal=controller.signal, call_id="no-wait"))
        assert ray.get(probe.wait.remote("no-wait-started", 30)) is True

        asked = threading.Event()

        def refuses(*_args: Any, **_kw: Any) -> Any:
            asked.set()
            raise ValueError("You are trying to access Ray objects whose owner is unknown")  # what Ray raises

        with _InFlight(backend) as left, monkeypatch.context() as patch:
            patch.setattr(ray, "wait", refuses)
            controller.abort("stop")
            assert asked.wait(30)  # the forced stop asked Ray, and was refused
            probe.set.remote("no-wait-release")
            result = running.result(30)
    assert result.code == TOOL_ABORTED, result
    assert left.count == 0


@pytest.mark.timeout(60)
def test_a_refusal_before_the_claim_that_does_not_unpickle_here_settles_the_call(probe: Any) -> None:
    # The task failed before its claim with an exception that round-trips
    # in the worker but not in the driver: foreign code, like a value or an
    # exception the body sent back, it fails only its own call - never the
    # wait, which would leave the call in flight for close() to wait on.
    # The refusal keeps its class name and message (N14); why
    # it did not deserialize is in its cause.
    with _serving(_RefusedInTheWorker(os.getpid())) as (backend, registry), _InFlight(backend) as left:
        result = registry.execute(call("t", call_id="refused-here"))
    assert result.code == TOOL_ABORTED_BEFORE_DISPATCH, result
    reason = (result.meta or {})["reason"]
    assert isinstance(reason, BaseException), reason
    assert type(reason).__name__ == "_LoadsOnlyInTheWorker"
    assert str(reason) == f"body refused in the worker (driver {os.getpid()})"
    assert "cannot be rebuilt in the driver" in str(reason.__cause__)
    assert left.count == 0


@pytest.mark.timeout(60)
def test_a_body_whose_loading_exits_in_the_worker_fails_only_its_call(probe: Any) -> None:
    # Loading the body is foreign code (docs/contract.md#a4): its
    # SystemExit fails the call before dispatch, as any other fault there;
    # it must not end the Ray worker and read as a worker lost under a body
    # that never started.
    with _serving(_ExitsInTheWorker(os.getpid())) as (_backend, registry):
        result = registry.execute(call("t", call_id="exits-loading"))
    assert result.code == TOOL_ABORTED_BEFORE_DISPATCH, result
    assert "SystemExit" in repr((result.meta or {})["reason"])


def _slow_listener_body(args: Any, run: ToolRunContext) -> object:
    # A child in a session of its own (as run_process starts one), and an
    # abort listener that does not return (a cleanup that waits on
    # something that never comes); the body itself ignores its abort.
    import subprocess

    child = subprocess.Popen(["sh", "-c", "sleep 60 & echo $!; wait"], start_new_session=True, stdout=subprocess.PIPE)
    assert child.stdout is not None
    grandchild = int(child.stdout.readline())
    run.signal.add_listener(lambda _signal: threading.Event().wait())
    announce(PROBE, f"{run.call_id}-child", grandchild)
    _probe().wait.remote(f"{run.call_id}-release", 30).future().result()
    return "ran"


@pytest.mark.timeout(60)
def test_a_body_whose_abort_listener_blocks_is_still_swept_with_its_descendants(probe: Any) -> None:
    # The body's listeners run as its abort is delivered in the worker; one
    # that does not return must not hold back the worker's RUNNING report,
    # without which the forced stop cannot find the worker's node-local
    # processes and leaves the body's child alive (decisions 0037, 0046).
    backend = RayBackend(kill_after=0.3)
    controller = AbortController()
    child = 0
    try:
        with ToolRegistry(backend=backend) as registry:
            registry.register(ToolDefinition("slow", "slow", OBJECT, _slow_listener_body))
            running = ExecutingInThread(registry, call("slow", signal=controller.signal, call_id="sl1"))
            child = ray.get(probe.wait.remote("sl1-child", 30))
            controller.abort("stop")
            result = running.result(40)
            swept = not _alive(child)
    finally:
        probe.set.remote("sl1-release")
        if child and _alive(child):
            os.kill(child, signal.SIGKILL)
    assert result.code == TOOL_ABORTED, result
    assert (result.meta or {}).get("killed") is True
    assert swept, "the body's child survived the forced stop"
