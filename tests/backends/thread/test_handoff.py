"""The dispatch hand-off under adversarial interleavings (docs/contract.md#pipeline steps
4-5, "KeyboardInterrupt", "Never: a result for a call whose body is still
running; two results for one call"; decision 0012).

The hand-off (``_Handoff`` in dshtools/_thread_backend.py, decision 0018):
a one-entry claim taken by the worker's ``start()`` (the body runs) or by
the withdrawal (the dispatch signal's abort listener, an executor that
dropped the work, ``submit()`` failing), and a pre-acquired ``done`` lock
released once by whoever won. These tests force the orderings of: the worker claiming,
the withdrawal, a ``KeyboardInterrupt`` in the calling thread, executor
shutdown and misbehaving executors, ``close()`` and nested calls.

Interrupts are real SIGINTs aimed at the main thread where the scenario
allows it. Where a bug needs the interrupt at one exact bytecode (CPython
runs a pending signal handler at the eval-breaker check after a C call
returns or at a function's entry), a probe raises it exactly there: that is
what a Ctrl-C pending at that instant does.

Each scenario that once showed a bug raises ``ObservedBug`` if that bug
comes back (any other failure, such as a setup assertion or a renamed
internal, fails as itself). A watchdog rescues a thread a bug left blocked,
so no test leaves one behind.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from typing import Any

import pytest

from dshtools import (
    TOOL_ABORTED,
    TOOL_ABORTED_BEFORE_DISPATCH,
    AbortController,
    AbortSignal,
    ToolRegistry,
)
from dshtools._backends import thread as _thread_backend
from dshtools._registry import registry as _registry
from dshtools._registry import run as _run
from dshtools._signal import links as _signal_links
from dshtools._signal.signal import _LinkedSignal
from tests.helpers.calls import call, error_of, swapping_signal, tool, value_of
from tests.helpers.recorders import HookRecorder
from tests.helpers.waiting import blocked_in_wait, late_after_abort, run_in_thread, wait_until

MAIN = threading.main_thread()
ABD = TOOL_ABORTED_BEFORE_DISPATCH
# How long a step may take before a test calls the thread stuck: four of the
# registry's 0.25 s join slices.
STUCK = 1.0

posix_only = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals (pthread_kill)")


class ObservedBug(Exception):
    """A bug this file pins (the test's name says which) came back."""


def sigint_main() -> None:
    """A real SIGINT for the main thread. Sent from the main thread itself,
    its handler runs before the next bytecode after this call."""
    ident = MAIN.ident
    assert ident is not None
    signal.pthread_kill(ident, signal.SIGINT)


def main_parked_in(function: str) -> bool:
    """The main thread is parked (``blocked_in_wait``) inside the registry
    function ``function`` - not, say, in ``Thread.start()``'s own wait."""
    if not blocked_in_wait(MAIN):
        return False
    frame = sys._current_frames().get(MAIN.ident or -1)
    while frame is not None:
        if frame.f_code.co_name == function and frame.f_code.co_filename in (_registry.__file__, _run.__file__):
            return True
        frame = frame.f_back
    return False


def sigint_when_main_parks_in(function: str, before: Callable[[], object] = lambda: None) -> threading.Thread:
    """A helper that sends one SIGINT once the main thread is parked in the
    registry function ``function``; ``before`` runs first (in the helper)."""

    def run() -> None:
        before()
        wait_until(lambda: main_parked_in(function))
        sigint_main()

    helper = threading.Thread(target=run, daemon=True)
    helper.start()
    return helper


def named_thread(name: str, fn: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    """Like ``run_in_thread``, with a name a probe can recognise from the
    first bytecode on."""
    box: list[Any] = []

    def target() -> None:
        try:
            box.append(fn())
        except BaseException as exc:
            box.append(exc)

    t = threading.Thread(target=target, name=name, daemon=True)
    t.start()
    return t, box


class Watchdog:
    """Once ``armed`` is set, gives ``progress`` ``STUCK`` seconds; if it is
    still unset, records ``hung`` and calls ``rescue`` (which unblocks the
    stuck thread so the test can finish and report)."""

    def __init__(self, armed: threading.Event, progress: threading.Event, rescue: Callable[[], None]) -> None:
        self.hung = False
        self.progress = progress
        self.stopped = False

        def run() -> None:
            while not armed.wait(0.05):  # polls only to notice join()
                if self.stopped:
                    return
            if not progress.wait(STUCK):
                self.hung = True
                rescue()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def join(self) -> None:
        """Stop watching (the scenario is over) and wait for the watchdog."""
        self.stopped = True
        self.progress.set()
        self.thread.join(10)
        assert not self.thread.is_alive()

    def raise_if_hung(self, bug: str) -> None:
        """Raise ``ObservedBug(bug)`` if the watchdog had to rescue the scenario."""
        if self.hung:
            raise ObservedBug(bug)


def install_handoff_probe(monkeypatch: pytest.MonkeyPatch, wrap: Callable[[Any], None]) -> list[Any]:
    """Replace the hand-off classes (``_Handoff``, and ``_OwnedHandoff`` of
    the backend's own pool) with subclasses whose instances are passed to
    ``wrap`` right after construction; returns them, in creation order."""
    made: list[Any] = []
    for name in ("_Handoff", "_OwnedHandoff"):
        base: Any = getattr(_thread_backend, name)

        class ProbedHandoff(base):  # type: ignore[misc]
            def __init__(self) -> None:
                super().__init__()
                wrap(self)
                made.append(self)

        monkeypatch.setattr(_thread_backend, name, ProbedHandoff)
    return made


# ------------------------------------------------------------- executors


class HeldExecutor(Executor):
    """Queues each submitted function and returns a pending ``Future``; runs
    nothing until the test calls ``run_held()`` (an executor that never runs
    the work, until told). With ``raise_after_queue``, ``submit()`` queues
    the work and then raises that exception (once)."""

    def __init__(self, raise_after_queue: BaseException | None = None) -> None:
        self.held: list[tuple[Future[Any], Callable[..., Any], tuple[Any, ...], dict[str, Any]]] = []
        self.submitted = threading.Event()
        self.raise_after_queue = raise_after_queue

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        fut: Future[Any] = Future()
        self.held.append((fut, fn, args, kwargs))
        self.submitted.set()
        exc, self.raise_after_queue = self.raise_after_queue, None
        if exc is not None:
            raise exc
        return fut

    def run_held(self) -> None:
        """Run every held function now, in this thread (again if called
        again: a buggy executor that runs work twice)."""
        for fut, fn, args, kwargs in self.held:
            value = fn(*args, **kwargs)
            if not fut.done():
                fut.set_result(value)


class InlineExecutor(Executor):
    """Runs each function synchronously inside ``submit()``, in the
    submitting thread; an ``Exception`` goes into the returned ``Future``, a
    ``KeyboardInterrupt`` propagates out of ``submit()``."""

    def __init__(self) -> None:
        self.calls = 0

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        self.calls += 1
        fut: Future[Any] = Future()
        fut.set_running_or_notify_cancel()
        try:
            fut.set_result(fn(*args, **kwargs))
        except Exception as exc:
            fut.set_exception(exc)
        return fut


class TrackingPool(ThreadPoolExecutor):
    """A ``ThreadPoolExecutor`` that keeps the futures it returned."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.futures: list[Future[Any]] = []
        self.queued = threading.Event()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        fut = super().submit(fn, *args, **kwargs)
        self.futures.append(fut)
        self.queued.set()
        return fut


def codes(rec: HookRecorder, call_id: str) -> list[str | None]:
    return [result.code for view, result in rec.results if view.call_id == call_id]


# ============================================================ regressions
# Orderings the hand-off gets right; not pinned elsewhere in tests/.


@pytest.mark.timeout(10)
def test_a_withdrawal_that_loses_the_claim_keeps_the_caller_joining(monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker claimed the call but has not re-checked the fused signal
    yet when the caller aborts: the withdrawal (the abort listener) loses,
    so it must not release the waiting caller; the worker's re-check then
    decides ABORTED_BEFORE_DISPATCH and the body never runs."""
    claimed, go = threading.Event(), threading.Event()

    class GatedClaim(dict):  # type: ignore[type-arg]
        """The claim; the worker is held right after its winning insert,
        before ``start()`` re-checks the signal."""

        def setdefault(self, key: Any, default: Any = None) -> Any:
            value = super().setdefault(key, default)
            if threading.current_thread().name.startswith("dshtools-tool") and not claimed.is_set():
                claimed.set()
                go.wait(5)
            return value

    def wrap(handoff: Any) -> None:
        handoff.claim = GatedClaim()

    install_handoff_probe(monkeypatch, wrap)
    ran = threading.Event()
    rec = HookRecorder()
    controller = AbortController()
    with ToolRegistry(max_workers=1) as registry:
        registry.register(tool("t", lambda a, r: ran.set() or "ran"))  # type: ignore[func-returns-value]
        registry.add_result_observer(rec.observer)
        t, box = run_in_thread(lambda: registry.execute(call("t", signal=controller.signal)))
        assert claimed.wait(5)
        controller.abort("late")  # the withdrawal runs here, in this thread, and loses
        t.join(0.2)  # a negative check: it must still be joining
        assert t.is_alive() and box == []
        go.set()
        t.join(5)
    assert not t.is_alive()
    assert box[0].code == ABD and box[0].meta["reason"] == "late"
    assert not ran.is_set()
    assert codes(rec, "c1") == [ABD]
    assert controller.signal.listener_count == 0


@pytest.mark.timeout(10)
def test_work_run_after_its_withdrawal_is_a_no_op_even_twice() -> None:
    """An executor that runs the queued work only after the call was
    withdrawn (and, buggy, runs it twice): the body never runs, the caller
    got ABORTED_BEFORE_DISPATCH as soon as it aborted, and observers saw
    exactly one result."""
    executor = HeldExecutor()
    ran: list[int] = []
    rec = HookRecorder()
    registry = ToolRegistry(executor=executor)
    registry.register(tool("t", lambda a, r: ran.append(1) or "ran"))  # type: ignore[func-returns-value]
    registry.add_result_observer(rec.observer)
    controller = AbortController()
    t, box = run_in_thread(lambda: registry.execute(call("t", signal=controller.signal)))
    assert executor.submitted.wait(5)
    controller.abort("stop")
    t.join(5)
    assert not t.is_alive() and box[0].code == ABD and box[0].meta["reason"] == "stop"
    executor.run_held()
    executor.run_held()
    assert ran == [] and codes(rec, "c1") == [ABD]
    registry.close()
    assert controller.signal.listener_count == 0


@posix_only
@pytest.mark.timeout(15)
@pytest.mark.parametrize("kind", ["never-running executor", "busy pool"])
def test_sigint_while_the_call_is_queued_publishes_aborted_before_dispatch_and_reraises(kind: str) -> None:
    """A real SIGINT reaches the main thread while its call is still queued
    (an executor that never runs it / a pool whose only worker is busy):
    ABORTED_BEFORE_DISPATCH (reason: the KeyboardInterrupt) is published
    once, KeyboardInterrupt is re-raised, the caller's own listener count
    is back to its value before the call, and the work run later never
    starts the body."""
    assert threading.current_thread() is MAIN
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    ran = threading.Event()
    blocker_started, release = threading.Event(), threading.Event()
    rec = HookRecorder()
    held = HeldExecutor() if kind == "never-running executor" else None
    registry = ToolRegistry(executor=held) if held is not None else ToolRegistry(max_workers=1)
    registry.register(tool("t", lambda a, r: ran.set() or "ran"))  # type: ignore[func-returns-value]
    registry.register(tool("block", lambda a, r: blocker_started.set() or release.wait(5)))  # type: ignore[func-returns-value]
    registry.add_result_observer(rec.observer)
    blocker = None
    if held is None:
        blocker, _ = run_in_thread(lambda: registry.execute(call("block", call_id="b")))
        assert blocker_started.wait(5)
    caller = AbortController().signal
    caller.add_listener(lambda s: None)  # the caller's own: the count must return to 1
    helper = sigint_when_main_parks_in("_run_body")
    with pytest.raises(KeyboardInterrupt):
        registry.execute(call("t", signal=caller, call_id="q"))
    helper.join(5)
    published = [result for view, result in rec.results if view.call_id == "q"]
    assert [result.code for result in published] == [ABD]
    assert published[0].meta is not None and isinstance(published[0].meta["reason"], KeyboardInterrupt)
    assert not caller.aborted and caller.listener_count == 1
    release.set()
    if held is not None:
        held.run_held()
    if blocker is not None:
        blocker.join(5)
    registry.close()
    assert not ran.is_set()


@pytest.mark.timeout(10)
def test_submit_refused_by_a_shut_down_executor_is_aborted_before_dispatch() -> None:
    """A supplied executor that was shut down refuses ``submit()`` with
    ``RuntimeError`` (nothing queued): ABORTED_BEFORE_DISPATCH with a
    ``RuntimeError`` reason, the body never runs, the caller's listener
    count is back to its previous value."""
    executor = ThreadPoolExecutor(max_workers=1)
    executor.shutdown()
    ran = threading.Event()
    registry = ToolRegistry(executor=executor)
    registry.register(tool("t", lambda a, r: ran.set() or "ran"))  # type: ignore[func-returns-value]
    caller = AbortController().signal
    caller.add_listener(lambda s: None)
    result = registry.execute(call("t", signal=caller))
    assert result.code == ABD and result.meta is not None and isinstance(result.meta["reason"], RuntimeError)
    assert not ran.is_set() and caller.listener_count == 1
    registry.close()


@pytest.mark.timeout(10)
def test_keyboard_interrupt_inside_submit_after_queueing_withdraws_the_queued_work() -> None:
    """A Ctrl-C landing inside ``executor.submit()`` after the executor
    queued the work (simulated: ``submit()`` queues, then raises
    KeyboardInterrupt): ``execute`` publishes ABORTED_BEFORE_DISPATCH and
    re-raises, and when the executor later runs the queued work the body
    does not start."""
    executor = HeldExecutor(raise_after_queue=KeyboardInterrupt())
    ran = threading.Event()
    rec = HookRecorder()
    registry = ToolRegistry(executor=executor)
    registry.register(tool("t", lambda a, r: ran.set() or "ran"))  # type: ignore[func-returns-value]
    registry.add_result_observer(rec.observer)
    caller = AbortController().signal
    caller.add_listener(lambda s: None)
    t, box = run_in_thread(lambda: registry.execute(call("t", signal=caller)))
    t.join(5)
    assert not t.is_alive() and isinstance(box[0], KeyboardInterrupt)
    assert codes(rec, "c1") == [ABD]
    executor.run_held()
    assert not ran.is_set()
    assert not caller.aborted and caller.listener_count == 1
    registry.close()


@pytest.mark.timeout(10)
def test_inline_executor_runs_the_body_and_its_nested_call_in_the_calling_thread() -> None:
    """An executor that runs the function inside ``submit()``: the body runs
    in the calling thread, a nested ``run.dispatch`` runs inline without a
    second ``submit()``, and the caller's listener count is restored."""
    executor = InlineExecutor()
    threads: list[threading.Thread] = []

    def outer(a: Any, run: Any) -> Any:
        threads.append(threading.current_thread())
        return run.dispatch("inner", {}).value

    def inner(a: Any, run: Any) -> Any:
        threads.append(threading.current_thread())
        return "inner ok"

    registry = ToolRegistry(executor=executor)
    registry.register(tool("outer", outer))
    registry.register(tool("inner", inner))
    caller = AbortController().signal
    caller.add_listener(lambda s: None)
    result = registry.execute(call("outer", signal=caller))
    assert result.code is None and value_of(result) == "inner ok"
    assert threads == [threading.current_thread()] * 2 and executor.calls == 1
    assert caller.listener_count == 1
    registry.close()


@pytest.mark.timeout(10)
def test_abort_from_inside_an_inline_body_is_aborted_and_never_releases_twice(unraisable: list[Any]) -> None:
    """With an inline executor the body aborts its own caller signal: the
    withdrawal listener runs while the trampoline holds the claim (in the
    same thread) and must be a no-op (a second release of the hand-off lock
    would raise inside the listener and be reported)."""
    executor = InlineExecutor()
    controller = AbortController()

    def body(a: Any, run: Any) -> Any:
        controller.abort("from the body")
        return "done"

    registry = ToolRegistry(executor=executor)
    registry.register(tool("t", body))
    result = registry.execute(call("t", signal=controller.signal))
    assert result.code == TOOL_ABORTED and result.meta is not None and result.meta["reason"] == "from the body"
    assert unraisable == []
    assert controller.signal.listener_count == 0
    registry.close()


@pytest.mark.timeout(10)
def test_inline_executor_is_never_called_when_the_wrapper_signal_is_already_aborted() -> None:
    """A wrapper hands over an already-aborted signal: the fused signal is
    born aborted, nothing is submitted (the inline executor would run the
    body at once)."""
    executor = InlineExecutor()
    ran = threading.Event()

    registry = ToolRegistry(executor=executor)
    registry.register(tool("t", lambda a, r: ran.set() or "ran"))  # type: ignore[func-returns-value]
    registry.add_around_dispatch(swapping_signal(AbortSignal.already_aborted("wrapper")))
    caller = AbortController().signal
    result = registry.execute(call("t", signal=caller))
    assert result.code == ABD and result.meta is not None and result.meta["reason"] == "wrapper"
    assert executor.calls == 0 and not ran.is_set() and caller.listener_count == 0
    registry.close()


@pytest.mark.timeout(10)
@pytest.mark.parametrize("first", ["abort", "shutdown"])
def test_cancel_futures_shutdown_and_caller_abort_both_withdraw_one_call_once(
    first: str, unraisable: list[Any]
) -> None:
    """The queued call is withdrawn twice over - by the caller's abort and by
    ``shutdown(cancel_futures=True)`` dropping the work item - in either
    order: one ABORTED_BEFORE_DISPATCH, the hand-off lock released once (a
    second release would raise), the body never runs."""
    executor = TrackingPool(max_workers=1)
    started, release = threading.Event(), threading.Event()
    ran = threading.Event()
    rec = HookRecorder()
    registry = ToolRegistry(executor=executor)
    registry.register(tool("block", lambda a, r: started.set() or release.wait(5)))  # type: ignore[func-returns-value]
    registry.register(tool("t", lambda a, r: ran.set() or "ran"))  # type: ignore[func-returns-value]
    registry.add_result_observer(rec.observer)
    blocker, _ = run_in_thread(lambda: registry.execute(call("block", call_id="b")))
    assert started.wait(5)
    executor.queued.clear()
    controller = AbortController()
    t, box = run_in_thread(lambda: registry.execute(call("t", signal=controller.signal, call_id="q")))
    assert executor.queued.wait(5)
    steps: list[Callable[[], object]] = [
        lambda: controller.abort("stop"),
        lambda: executor.shutdown(wait=False, cancel_futures=True),
    ]
    for step in steps if first == "abort" else steps[::-1]:
        step()
    t.join(5)
    assert not t.is_alive() and box[0].code == ABD
    release.set()
    blocker.join(5)
    registry.close()
    executor.shutdown(wait=True)
    assert codes(rec, "q") == [ABD] and not ran.is_set() and unraisable == []
    assert controller.signal.listener_count == 0


@pytest.mark.timeout(10)
def test_close_keeps_waiting_for_the_running_body_while_a_queued_call_is_withdrawn() -> None:
    """``close()`` runs while one body runs and another call waits in the
    queue; the queued call's caller aborts: that call returns
    ABORTED_BEFORE_DISPATCH at once, ``close()`` still waits for the running
    body, and the withdrawn body never starts (not even when the worker
    drains the queue during shutdown)."""
    started, release = threading.Event(), threading.Event()
    ran = threading.Event()
    registry = ToolRegistry(max_workers=1)
    registry.register(tool("block", lambda a, r: started.set() or (release.wait(5) and "done")))  # type: ignore[func-returns-value]
    registry.register(tool("t", lambda a, r: ran.set() or "ran"))  # type: ignore[func-returns-value]
    blocker, bbox = run_in_thread(lambda: registry.execute(call("block", call_id="b")))
    assert started.wait(5)
    controller = AbortController()
    queued, qbox = run_in_thread(lambda: registry.execute(call("t", signal=controller.signal, call_id="q")))
    wait_until(lambda: blocked_in_wait(queued))
    closer, _ = run_in_thread(registry.close)
    wait_until(lambda: blocked_in_wait(closer))
    controller.abort("stop")
    queued.join(5)
    assert not queued.is_alive() and qbox[0].code == ABD
    assert closer.is_alive() and blocker.is_alive()  # still joining the running body
    release.set()
    closer.join(5)
    blocker.join(5)
    assert not closer.is_alive() and bbox[0].value == "done"
    assert not ran.is_set() and controller.signal.listener_count == 0


# ================================================================ bugs


@posix_only
@pytest.mark.timeout(15)
@pytest.mark.parametrize("derived", ["nested run.dispatch", "any_of(run.signal)"])
def test_sigint_reaches_signals_derived_from_the_dispatch_signal(derived: str) -> None:
    """A real SIGINT while the main thread joins a body that waits on a
    signal derived from ``run.signal`` (a nested call's ``run.signal``, or
    its own ``any_of([run.signal])``). Expected (docs/contract.md#registry "KeyboardInterrupt":
    the dispatch-scoped signal aborts; nested calls pass the body's signal):
    the derived signal aborts too, the wait ends at once, each call
    publishes exactly one ABORTED, KeyboardInterrupt is re-raised, and the
    caller's listener count is restored. The waits are bounded by the
    watchdog's ``STUCK`` (the bug makes them run out)."""
    assert threading.current_thread() is MAIN
    started = threading.Event()
    observed: list[bool] = []
    rec = HookRecorder()

    def wait_on(signal: AbortSignal) -> None:
        started.set()
        observed.append(signal.wait(STUCK))

    def outer(a: Any, run: Any) -> Any:
        if derived == "nested run.dispatch":
            return run.dispatch("inner", {}).code
        with AbortSignal.any_of([run.signal]) as own:
            wait_on(own)
        return "outer"

    def inner(a: Any, run: Any) -> Any:
        wait_on(run.signal)
        return "inner"

    with ToolRegistry(max_workers=1) as registry:
        registry.register(tool("outer", outer))
        registry.register(tool("inner", inner))
        registry.add_result_observer(rec.observer)
        caller = AbortController().signal
        caller.add_listener(lambda s: None)
        helper = sigint_when_main_parks_in("_run_body", before=lambda: started.wait(5))
        with pytest.raises(KeyboardInterrupt):
            registry.execute(call("outer", signal=caller, call_id="o"))
        helper.join(5)
    assert len(observed) == 1
    assert codes(rec, "o") == [TOOL_ABORTED]
    assert not caller.aborted and caller.listener_count == 1
    if not observed[0]:
        raise ObservedBug("the derived signal never aborted; the join waited for the wait to time out")
    if derived == "nested run.dispatch":
        assert codes(rec, "o:1") == [TOOL_ABORTED]


@posix_only
@pytest.mark.timeout(15)
def test_sigint_right_after_the_join_took_the_done_lock_does_not_hang(monkeypatch: pytest.MonkeyPatch) -> None:
    """The body returned and released the hand-off lock; the main thread's
    ``done.acquire()`` returns True and a SIGINT that arrived meanwhile is
    handled at the very next eval-breaker check, before ``break``. Expected
    (docs/contract.md#registry): KeyboardInterrupt re-raised promptly, ABORTED published once.
    A probe lock sends that SIGINT from inside the successful acquire.
    Unprobed, a main thread calling a 2 ms tool in a loop with a real SIGINT
    every 1-4 ms hung in this state 10 times in 10 s (each rescued after
    1 s), ~6% of the interrupts delivered."""
    assert threading.current_thread() is MAIN
    fired, finished = threading.Event(), threading.Event()

    class DoneProbe:
        def __init__(self, lock: Any) -> None:
            self.lock = lock
            self.armed = True

        def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
            ok: bool = self.lock.acquire(blocking, timeout)
            if ok and self.armed and threading.current_thread() is MAIN:
                self.armed = False
                fired.set()
                sigint_main()  # raises KeyboardInterrupt right here
                raise AssertionError("the SIGINT was not delivered synchronously")
            return ok

        def release(self) -> None:
            self.lock.release()

    def wrap(handoff: Any) -> None:
        handoff.done = DoneProbe(handoff.done)

    def main_in_probe_acquire() -> bool:
        frame = sys._current_frames().get(MAIN.ident or -1)
        return frame is not None and frame.f_code is DoneProbe.acquire.__code__

    made = install_handoff_probe(monkeypatch, wrap)
    rec = HookRecorder()
    with ToolRegistry(max_workers=1) as registry:
        # The body returns only once the main thread is inside the probed
        # acquire, so that acquire is the one the body's release satisfies.
        registry.register(tool("t", lambda a, r: wait_until(main_in_probe_acquire) or "done"))  # type: ignore[func-returns-value]
        registry.add_result_observer(rec.observer)
        registry.add_result_observer(lambda e, r: finished.set())
        dog = Watchdog(fired, finished, lambda: made[0].done.lock.release())
        with pytest.raises(KeyboardInterrupt):
            registry.execute(call("t"))
        dog.join()
    assert fired.is_set()
    assert codes(rec, "c1") == [TOOL_ABORTED]
    dog.raise_if_hung("execute kept joining a hand-off whose lock it had already taken")


@posix_only
@pytest.mark.timeout(15)
def test_second_interrupt_between_the_withdrawal_claim_and_its_release_does_not_hang(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ctrl-C twice on a queued call: the first (a real SIGINT while the main
    thread joins) aborts the fused signal, whose listener ``withdraw`` pops
    the claim; the second lands right after that pop (probe: the claim's
    ``pop`` sends it), so ``done.release()`` never runs. Expected: the call
    settles ABORTED_BEFORE_DISPATCH and KeyboardInterrupt is re-raised."""
    assert threading.current_thread() is MAIN
    fired, finished = threading.Event(), threading.Event()

    class ClaimProbe(dict):  # type: ignore[type-arg]
        """The claim; the main thread's first winning claim operation (today
        ``pop``; ``setdefault`` for a claim that records its winner) is
        followed by the second Ctrl-C."""

        armed = True

        def won(self) -> None:
            if self.armed and threading.current_thread() is MAIN:
                self.armed = False
                fired.set()
                sigint_main()  # the second Ctrl-C
                raise AssertionError("the SIGINT was not delivered synchronously")

        def pop(self, *args: Any) -> Any:
            value = super().pop(*args)
            if value is not None:
                self.won()
            return value

        def setdefault(self, key: Any, default: Any = None) -> Any:
            value = super().setdefault(key, default)
            if value is default:
                self.won()
            return value

    def wrap(handoff: Any) -> None:
        handoff.claim = ClaimProbe(handoff.claim)

    made = install_handoff_probe(monkeypatch, wrap)
    executor = HeldExecutor()
    ran = threading.Event()
    rec = HookRecorder()
    registry = ToolRegistry(executor=executor)
    registry.register(tool("t", lambda a, r: ran.set() or "ran"))  # type: ignore[func-returns-value]
    registry.add_result_observer(rec.observer)
    registry.add_result_observer(lambda e, r: finished.set())
    dog = Watchdog(fired, finished, lambda: made[0].done.release())
    helper = sigint_when_main_parks_in("_run_body")
    with pytest.raises(KeyboardInterrupt):
        registry.execute(call("t"))
    helper.join(5)
    dog.join()
    assert fired.is_set()  # the second interrupt did land after a winning claim
    executor.run_held()
    registry.close()
    assert codes(rec, "c1") == [ABD] and not ran.is_set()
    dog.raise_if_hung("the waiter never learnt that the withdrawal had won the claim")


@pytest.mark.timeout(15)
def test_work_failed_by_a_broken_pool_without_running_settles_the_call() -> None:
    """``ThreadPoolExecutor(initializer=...)`` whose initializer raises:
    ``submit()`` succeeds, then the pool breaks and sets BrokenThreadPool on
    the queued work item - the trampoline never runs. Expected (decision
    0012): ABORTED_BEFORE_DISPATCH within a few join slices; the body never
    runs."""

    def failing_initializer() -> None:
        raise ValueError("initializer failed")

    executor = TrackingPool(max_workers=1, initializer=failing_initializer)
    ran = threading.Event()
    registry = ToolRegistry(executor=executor)
    registry.register(tool("t", lambda a, r: ran.set() or "ran"))  # type: ignore[func-returns-value]
    controller = AbortController()
    t, box = run_in_thread(lambda: registry.execute(call("t", signal=controller.signal)))
    assert executor.queued.wait(5)
    assert executor.futures[0].exception(timeout=5) is not None  # the pool failed the work item
    t.join(STUCK)
    hung = t.is_alive()
    if hung:
        controller.abort("rescue")  # the only way out today
        t.join(5)
    assert not t.is_alive() and box[0].code == ABD and not ran.is_set()
    registry.close()
    executor.shutdown(wait=True)
    if hung:
        raise ObservedBug("execute waited on a work item the executor had already failed")


@pytest.mark.timeout(10)
def test_submit_that_raises_after_queueing_never_runs_the_body_after_execute_returned() -> None:
    """A custom executor whose ``submit()`` queues the work and then raises
    ``ValueError``. Expected: ``execute`` returns one result (the body did
    not run: ABORTED_BEFORE_DISPATCH, as for a refused submit) and the work
    run later never starts the body; or, if the worker won the claim,
    ``execute`` joins the body before returning."""
    executor = HeldExecutor(raise_after_queue=ValueError("rejected after queueing"))
    ran = threading.Event()
    rec = HookRecorder()
    registry = ToolRegistry(executor=executor)
    registry.register(tool("t", lambda a, r: ran.set() or "ran"))  # type: ignore[func-returns-value]
    registry.add_result_observer(rec.observer)
    result = registry.execute(call("t"))
    assert len(rec.results) == 1 and rec.results[0][1] is result
    executor.run_held()
    registry.close()
    if ran.is_set():
        raise ObservedBug(f"the body ran after execute returned {result.code!r} {result.content[0]['text']!r}")


@posix_only
@pytest.mark.timeout(15)
def test_interrupt_inside_an_inline_body_is_reraised_not_turned_into_a_failure() -> None:
    """Inline executor, body waiting on its signal in the main thread, a real
    SIGINT. Expected (docs/contract.md#registry "KeyboardInterrupt", decision 0011): the dispatch
    signal aborts with the interrupt, ABORTED is published, and
    KeyboardInterrupt is re-raised."""
    assert threading.current_thread() is MAIN
    started = threading.Event()
    rec = HookRecorder()

    def body(a: Any, run: Any) -> Any:
        started.set()
        run.signal.wait(5)  # the SIGINT lands here, in the main thread
        return "not interrupted"

    registry = ToolRegistry(executor=InlineExecutor())
    registry.register(tool("t", body))
    registry.add_result_observer(rec.observer)
    helper = threading.Thread(target=lambda: (started.wait(5), sigint_main()), daemon=True)  # type: ignore[func-returns-value]
    helper.start()
    interrupted = False
    result = None
    try:
        result = registry.execute(call("t"))
    except KeyboardInterrupt:
        interrupted = True
    helper.join(5)
    registry.close()
    assert len(rec.results) == 1
    if not interrupted:
        assert result is not None
        raise ObservedBug(f"execute returned {result.content[0]['text']!r} ({error_of(result)}) instead of re-raising")
    assert rec.results[0][1].code == TOOL_ABORTED


@pytest.mark.timeout(10)
def test_close_between_the_closed_check_and_submit_never_lets_a_body_start_after_close(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The window between ``Run.invoke``'s closed check and the attempt
    registration is a few bytecodes; a probe on ``derive`` (called in it,
    before the registration) holds the call there while ``close()`` runs.
    Expected: either ``close()`` waits for that call, or the call is
    settled ABORTED_BEFORE_DISPATCH - never a body starting after
    ``close()`` returned."""
    in_window, go = threading.Event(), threading.Event()
    derive = _run.derive  # type: ignore[attr-defined]

    def held_derive(*args: Any, **kwargs: Any) -> Any:
        if not in_window.is_set():
            in_window.set()
            go.wait(5)
        return derive(*args, **kwargs)

    monkeypatch.setattr(_run, "derive", held_derive)
    close_returned = threading.Event()
    started_after_close: list[bool] = []
    executor = ThreadPoolExecutor(max_workers=1)
    registry = ToolRegistry(executor=executor)
    registry.register(tool("t", lambda a, r: started_after_close.append(close_returned.is_set()) or "ran"))  # type: ignore[func-returns-value]
    t, box = run_in_thread(lambda: registry.execute(call("t")))
    assert in_window.wait(5)
    closer, _ = run_in_thread(lambda: (registry.close(), close_returned.set()))  # type: ignore[func-returns-value]
    closer.join(0.5)  # a bounded wait: returning here is the bug's first half
    go.set()
    t.join(5)
    closer.join(5)
    executor.shutdown(wait=True)
    assert not t.is_alive() and not closer.is_alive() and len(box) == 1
    if started_after_close == [True]:
        raise ObservedBug(f"the body started after close() returned; execute gave {box[0].code!r}")


@pytest.mark.timeout(10)
def test_interrupt_in_the_dispatch_cleanup_does_not_leave_execute_joining_forever(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The body returned; as the calling thread enters ``_invoke``'s
    ``finally``, a Ctrl-C is handled at the entry of ``fused.close()``
    (probe: the dispatch signal's ``_LinkedSignal.close`` raises there once). Expected: execute
    re-raises KeyboardInterrupt promptly and the registry holds no attempt
    (``close()`` returns)."""
    armed, fired, finished = threading.Event(), threading.Event(), threading.Event()
    close = _LinkedSignal.close

    def close_probe(self: _LinkedSignal) -> None:
        if armed.is_set() and threading.current_thread().name == "handoff-caller":
            armed.clear()
            fired.set()
            raise KeyboardInterrupt  # a Ctrl-C handled at close()'s entry
        close(self)

    monkeypatch.setattr(_LinkedSignal, "close", close_probe)
    runs: list[Any] = []

    def body(a: Any, run: Any) -> Any:
        runs.append(run._run)
        armed.set()
        return "done"

    registry = ToolRegistry(max_workers=1)
    registry.register(tool("t", body))

    def rescue() -> None:
        runs[0].attempts.clear()
        registry._bodies.clear()

    dog = Watchdog(fired, finished, rescue)
    t, box = named_thread("handoff-caller", lambda: registry.execute(call("t")))
    t.join(5 + STUCK)
    finished.set()
    dog.join()
    t.join(5)
    assert not t.is_alive() and isinstance(box[0], KeyboardInterrupt)
    leaked = registry.statistics().bodies_in_flight > 0
    registry._bodies.clear()
    registry.close()
    if dog.hung or leaked:
        raise ObservedBug(f"execute stuck in _join_attempts (hung={dog.hung}), attempt leaked in _bodies={leaked}")


@pytest.mark.timeout(10)
def test_interrupt_in_the_inline_trampolines_cleanup_does_not_hang(monkeypatch: pytest.MonkeyPatch) -> None:
    """Inline executor: the body returned and a Ctrl-C is handled in the
    hand-off's cleanup, at the worker-stack pop in ``_Handoff.run``'s
    ``finally`` (probe). Expected: execute re-raises KeyboardInterrupt
    promptly."""
    armed, fired, finished = threading.Event(), threading.Event(), threading.Event()

    class ProbedStack(list):  # type: ignore[type-arg]
        def pop(self, *args: Any) -> Any:
            value = super().pop(*args)
            if armed.is_set():
                armed.clear()
                fired.set()
                raise KeyboardInterrupt
            return value

    made = install_handoff_probe(monkeypatch, lambda h: None)
    registry = ToolRegistry(executor=InlineExecutor())
    registry.register(tool("t", lambda a, r: armed.set() or "done"))  # type: ignore[func-returns-value]
    registry.add_result_observer(lambda e, r: finished.set())
    dog = Watchdog(fired, finished, lambda: made[0].done.release())

    def execute_with_probe() -> Any:
        _thread_backend._tls.stack = ProbedStack()
        return registry.execute(call("t"))

    t, box = named_thread("handoff-caller", execute_with_probe)
    t.join(5 + STUCK)
    dog.join()
    t.join(5)
    assert fired.is_set()
    assert not t.is_alive() and isinstance(box[0], KeyboardInterrupt)
    registry.close()
    dog.raise_if_hung("the trampoline's lost release left execute joining forever")


@posix_only
@pytest.mark.timeout(15)
def test_second_interrupt_during_the_dispatch_signals_abort_still_runs_the_bodys_listener(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """First Ctrl-C (real SIGINT) while the main thread joins a running body:
    the registry aborts the fused signal; the second is handled at the
    entry of its listener dispatch (probe: ``dshtools._signal.links._dispatch``,
    the hook every linked signal's listeners run through, raises once). Expected: the body's abort listener still runs (the registry
    keeps joining, so it must finish delivering the abort), then
    KeyboardInterrupt is re-raised."""
    assert threading.current_thread() is MAIN
    armed, fired, woke, wake = threading.Event(), threading.Event(), threading.Event(), threading.Event()
    dispatch = _signal_links._dispatch

    def dispatch_probe(signal: _LinkedSignal, keys: Any) -> Any:
        if armed.is_set() and threading.current_thread() is MAIN and signal._sources is not None:
            armed.clear()
            fired.set()
            raise KeyboardInterrupt  # the second Ctrl-C
        return dispatch(signal, keys)

    monkeypatch.setattr(_signal_links, "_dispatch", dispatch_probe)
    started = threading.Event()

    def body(a: Any, run: Any) -> Any:
        run.signal.add_listener(lambda s: (woke.set(), wake.set()))  # type: ignore[func-returns-value]
        started.set()
        wake.wait(5)  # like a socket read that only the abort listener unblocks
        return "done"

    with ToolRegistry(max_workers=1) as registry:
        registry.register(tool("t", body))
        dog = Watchdog(fired, woke, wake.set)
        helper = sigint_when_main_parks_in("_run_body", before=lambda: (started.wait(5), armed.set()))  # type: ignore[func-returns-value]
        with pytest.raises(KeyboardInterrupt):
            registry.execute(call("t"))
        helper.join(5)
        dog.join()
    assert fired.is_set()
    dog.raise_if_hung("the body's abort listener never ran; execute joined it until rescued")


@posix_only
@pytest.mark.timeout(15)
def test_close_after_an_interrupted_close_still_waits_for_the_running_body() -> None:
    """``close()`` on the main thread waits for a running body; a real SIGINT
    interrupts that wait. A second ``close()`` (say, in a ``finally``) must
    still wait for the body and shut the executor down (docs/contract.md#registry:
    "close() waits for in-flight bodies"; idempotent means "closed once
    complete", not "return once started")."""
    assert threading.current_thread() is MAIN
    started, release, body_done = threading.Event(), threading.Event(), threading.Event()

    def body(a: Any, run: Any) -> Any:
        started.set()
        release.wait(5)
        body_done.set()
        return "done"

    registry = ToolRegistry(max_workers=1)
    registry.register(tool("t", body))
    t, box = run_in_thread(lambda: registry.execute(call("t")))
    assert started.wait(5)
    helper = sigint_when_main_parks_in("close")
    with pytest.raises(KeyboardInterrupt):
        registry.close()
    helper.join(5)
    closer, _ = run_in_thread(registry.close)
    closer.join(0.3)  # a bounded negative check: it must still be waiting
    returned_early = not closer.is_alive() and not body_done.is_set()
    release.set()
    t.join(5)
    closer.join(5)
    assert box[0].value == "done"
    registry.close()  # what the second close() should have done
    if returned_early:
        raise ObservedBug("the second close() returned while the body was still running")


@posix_only
@pytest.mark.timeout(15)
def test_a21_a_ctrl_c_overrun_is_in_the_published_result_and_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    """Contract A21 on the Ctrl-C path: a real SIGINT while the main thread
    waits for a body; the registry aborts the dispatch signal, the body
    finishes 0.3 s of work after the abort (the scenario's timing) and
    returns; ``execute`` re-raises the interrupt after publishing an
    ``ABORTED`` result with ``meta["overrun_s"]`` and exactly one WARNING
    naming the tool and the call."""
    import logging

    started = threading.Event()

    late = late_after_abort(started, 0.3)  # overruns its abort by 0.3 s

    caplog.set_level(logging.WARNING, logger="dshtools")
    rec = HookRecorder()
    with ToolRegistry() as registry:
        registry.register(tool("late", late))
        registry.add_result_observer(rec.observer)
        helper = sigint_when_main_parks_in("_run_body", before=lambda: started.wait(5))
        with pytest.raises(KeyboardInterrupt):
            registry.execute(call("late", call_id="k"))
        helper.join(5)
    ((_, published),) = rec.results
    assert published.code == TOOL_ABORTED and published.body_invoked is True
    assert 0.25 < published.meta["overrun_s"] < 1.0  # type: ignore[operator]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and "'k'" in r.getMessage()]
    assert len(warnings) == 1 and "'late'" in warnings[0].getMessage()
