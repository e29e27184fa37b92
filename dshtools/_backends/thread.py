"""The thread backend and its hand-off: where a queued body becomes a
running one (docs/contract.md#step-dispatch, docs/contract.md#backends;
docs/backends.md).

Guarantees:

* **One transition point.** ``_Handoff.start()`` is the single place where
  a submitted body goes from queued to running, as
  ``Future.set_running_or_notify_cancel()`` is in ``concurrent.futures``.
  It claims the hand-off, re-checks the dispatch signal and records "body
  invoked" in one step. The pool path, the inline path and the withdrawal
  all go through it; nothing else decides whether a body ran.
* **Withdrawn, never run late.** A call still queued when its dispatch
  signal aborts (or whose executor refused, dropped or failed the work) is
  withdrawn: the withdrawal claims the hand-off first and the worker, when
  it gets to it, finds the claim taken and returns without running
  anything. The report then says ``NotInvoked``.
* **Joined.** ``_ThreadDispatch.wait`` returns ``True`` only after the body
  returned or the call was withdrawn. It may be interrupted by
  ``KeyboardInterrupt`` at any point and called again: the decision is
  recorded on the hand-off and re-read, so a wait can never block on a lock
  that was already consumed.
* **Caller context.** Every body runs in a copy of the submitting thread's
  ``contextvars`` context, carried by ``_core.context.carry``
  (docs/contract.md#a7, docs/contract.md#a22): it sees the caller's values,
  and what it sets is seen neither by the caller nor by a later body.
* **Nested calls do not deadlock.** ``submit`` from a thread that is
  running a body (any thread backend's worker, or a thread that a body
  dispatches from) runs the body inline, at once, in that thread: a full
  pool of parents waiting for their children cannot deadlock. The inline
  path goes through the same ``start()``.
* **Fork.** In a child created by ``os.fork()`` an owned pool is replaced by
  a fresh one on the next call; a supplied executor is refused with a
  ``RuntimeError`` naming the fork (its threads did not survive), so no
  call waits for a worker that does not exist (docs/contract.md#a10).

Atomicity assumptions (docs/atomicity.md): the claim is one
``dict.setdefault`` on a fresh dict (the first insert wins, later ones read
the winner); ``done`` is a plain ``threading.Lock`` held from creation
(made and acquired, or taken from the spare list of locks whose waiter
consumed their release) and released exactly once, by the claim winner;
``finished``/``outcome`` are written by the worker before it releases
``done`` and read by the waiter only after acquiring it (or after seeing
``finished``). Each holds with the GIL (one C call) and on a free-threaded
build, where ``setdefault`` and the spare list's ``pop``/``append`` run in
the container's critical section and a lock release publishes the writes
made before it.
"""

from __future__ import annotations

import threading
import time
import weakref
from _thread import get_ident
from collections.abc import Callable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from contextvars import Context, copy_context
from typing import Any, Final

from .._core.construct import RETYPE_IN_PLACE, frozen_copy, twin
from .._core.context import carry
from .._core.interrupts import after_fork_in_child
from .._signal import AbortSignal
from .._types.tools import ToolRunContext
from .base import Body, BodyOutcome, BodyReport, Error, NotInvoked, Value

__all__ = [
    "DEFAULT_MAX_WORKERS",
    "ThreadBackend",
    "WithdrawalSlot",
    "enter_worker",
    "leave_worker",
    "on_worker",
    "worker_owners",
]

DEFAULT_MAX_WORKERS: Final = 32

_WORKER: Final = object()  # the claim's value when the worker won it
# Value(value) and BodyReport(outcome=...) are made on every call: built
# through twins (dshtools/_core/construct.py), without attrs' per-field setattr.
_ValueTwin: Final = twin(Value)
_BodyReportTwin: Final = twin(BodyReport)
_NOT_YET: Final = NotInvoked()  # placeholder outcome before the claim is decided
# The outcome and report of a body that returned None with no overrun, the
# commonest of all (both frozen, so one instance serves every call).
_NONE: Final = Value(None)
_NONE_REPORT: Final = BodyReport(outcome=_NONE)


# --------------------------------------------------------------- worker state


class _WorkerState(threading.local):
    # The run contexts of the bodies this thread is running (or dispatching
    # nested calls for), innermost last. A class-level default: a thread that
    # never ran a body reads None here instead of raising AttributeError.
    stack: list[object] | None = None


_tls = _WorkerState()


def on_worker() -> bool:
    """True when the current thread runs a body (of any registry, on any
    thread backend) or dispatches a nested call for one. Package-internal."""
    return bool(_tls.stack)


def worker_owners() -> tuple[object, ...]:
    """What the current thread works for, outermost first: the run context of
    each body it runs (or dispatches a nested call for), the
    ``ThreadBackend`` whose pool runs a batch's dispatch work; empty on a plain thread. Package-internal: the
    registry uses it to recognise a nested call or ``close()`` from one of
    its own bodies."""
    stack = _tls.stack
    return () if stack is None else tuple(stack)


def enter_worker(owner: object) -> None:
    """Mark the current thread as working for ``owner`` (until ``leave_worker``)."""
    stack = _tls.stack
    if stack is None:
        stack = _tls.stack = []
    stack.append(owner)


def leave_worker() -> None:
    stack = _tls.stack
    assert stack
    stack.pop()


# ------------------------------------------------------------------ the fork

_generation = 0  # bumped in a forked child
_backends: weakref.WeakSet[ThreadBackend] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    global _generation
    _generation += 1
    _tls.stack = None  # the forking thread's bodies do not exist in the child


after_fork_in_child(_after_fork_in_child)


# ------------------------------------------------------------------ hand-off

# `done` locks of settled hand-offs, each held by the waiter that consumed its
# one release: a new hand-off takes one instead of making and acquiring a
# lock. list.pop/append are atomic on every build (module docstring).
_LockType: Final = type(threading.Lock())
_spare_locks: list[Any] = []
_SPARE_LOCKS: Final = 64


class _Handoff:
    """One body's hand-off between the submitting thread and a worker, and
    the ``Dispatch`` the registry waits on (docs/backends.md).

    A state machine ``queued -> running -> finished`` or ``queued ->
    withdrawn`` whose only transitions are ``start()`` (the worker),
    ``withdraw()`` (the dispatch signal's abort listener) and ``refuse()``
    (an executor fault). ``done`` is released once, by whichever settles it.
    ``outcome`` is written before ``done`` is released and read after it
    was acquired (or after ``settled()`` saw the decision)."""

    __slots__ = (
        "aborted_at",
        "claim",
        "done",
        "finished",
        "future",
        "interrupt_seen",
        "outcome",
        "pending",
        "signal",
        "thread",
        "waited",
    )

    def __init__(self) -> None:
        self.signal: AbortSignal | None = None  # set before the work is queued
        self.claim: dict[int, object] = {}
        try:
            self.done = _spare_locks.pop()  # already held (see wait())
        except IndexError:
            self.done = threading.Lock()
            self.done.acquire()
        self.outcome: BodyOutcome = _NOT_YET
        self.finished = False
        self.thread = 0  # get_ident() of the thread that ran the body
        self.aborted_at: float | None = None  # monotonic time of an abort seen while running
        # The executor's Future, when it returned one (anything else, from a
        # misbehaving executor, is ignored: the hand-off alone is joined,
        # docs/contract.md#a5).
        self.future: Future[Any] | None = None
        self.pending: KeyboardInterrupt | None = None  # landed inside submit()
        self.waited = False
        self.interrupt_seen = False

    # -- transitions ----------------------------------------------------

    def start(self) -> bool:
        """The worker's claim, the single point where the call goes from
        queued to running: ``True`` when the body is invoked now (the call
        was neither withdrawn nor aborted meanwhile). ``False`` leaves the
        hand-off settled; the worker must not run the body."""
        if self.claim.setdefault(0, _WORKER) is not _WORKER:
            return False  # withdrawn first; the withdrawal released `done`
        signal = self.signal
        if signal is not None and signal.aborted:
            # Claimed, but the abort's listener lost the race to us: it is
            # still a call that never ran.
            self.outcome = NotInvoked()
            self.finished = True
            self.done.release()
            return False
        self.thread = get_ident()
        return True

    def withdraw(self, _signal: object = None) -> None:
        """Withdraw a call still queued (the dispatch signal's listener). Once
        the worker claimed it, note when the abort arrived (for the overrun)."""
        mine = object()
        if self.claim.setdefault(0, mine) is mine:
            self.outcome = NotInvoked()
            self.done.release()
        elif self.aborted_at is None:
            self.aborted_at = time.monotonic()

    def refuse(self, error: BaseException) -> None:
        """Withdraw a call whose executor refused, dropped or failed it; a
        no-op once the worker claimed it."""
        mine = object()
        if self.claim.setdefault(0, mine) is mine:
            self.outcome = NotInvoked(error)
            self.done.release()

    def settled(self) -> bool:
        """The body returned, or the call was withdrawn before it started."""
        winner = self.claim.get(0)
        return self.finished or (winner is not None and winner is not _WORKER)

    # -- the worker ------------------------------------------------------

    def run(self, context: Context, body: Body, args: object, run: ToolRunContext) -> None:
        """The work item: claim, run the body in ``context`` (the
        submitter's, copied), settle."""
        if not self.start():
            return
        stack = _tls.stack
        if stack is None:
            stack = _tls.stack = []
        try:
            stack.append(run)
            try:
                value = context.run(body, args, run)
                if value is None:
                    self.outcome = _NONE
                else:
                    outcome = _ValueTwin()
                    outcome.value = value
                    if RETYPE_IN_PLACE:
                        outcome.__class__ = Value
                    else:
                        outcome = frozen_copy(outcome, Value)
                    self.outcome = outcome
            except BaseException as exc:  # every body fault is an outcome, never a crash
                self.outcome = Error(exc)
            finally:
                stack.pop()
        finally:
            signal = self.signal
            if self.aborted_at is None and signal is not None and signal.aborted:
                self.aborted_at = time.monotonic()
            # Last: the waiting thread resumes with the GIL nearly free.
            self.finished = True
            self.done.release()

    # -- Dispatch (the waiting thread) ------------------------------------

    # Whether `wait(None)` (block until settled) is safe: only with the
    # owned pool, which never drops a work item. A supplied executor's
    # dropped or failed work item is seen by polling its future between
    # timed waits (a done-callback per call would cost every call).
    waits_untimed = False

    def wait(self, timeout: float | None) -> bool:
        """Block up to ``timeout`` seconds (``None``: until settled);
        ``True`` once settled."""
        if self.pending is not None:
            pending, self.pending = self.pending, None
            raise pending
        if self.waited and self.settled():
            # A KeyboardInterrupt may have landed just after an earlier wait
            # consumed `done`: re-read the recorded decision first.
            return self._raise_inline_interrupt()
        self.waited = True
        done = self.done
        if done.acquire(True, -1 if timeout is None else timeout):
            # The one release is consumed and the lock is held again: a
            # fresh hand-off may use it as its `done` (nothing else will
            # touch it through this settled one).
            if type(done) is _LockType and len(_spare_locks) < _SPARE_LOCKS:
                _spare_locks.append(done)
            return type(self.outcome) is not Error or self._raise_inline_interrupt()
        if self.settled():
            return type(self.outcome) is not Error or self._raise_inline_interrupt()
        future = self.future
        if future is not None and future.done():
            # The executor finished the work item without running it to the
            # end: dropped it (shutdown with cancel_futures=True) or failed it
            # (a broken pool). A no-op if the worker claimed.
            error = None if future.cancelled() else future.exception()
            self.refuse(error or RuntimeError("the executor shut down before the call was dispatched"))
            return self.settled() and self._raise_inline_interrupt()
        return False

    def _raise_inline_interrupt(self) -> bool:
        # An executor that ran the body in this very thread (inline): a
        # Ctrl-C inside the body is this thread's interrupt, not a tool fault.
        outcome = self.outcome
        if (
            not self.interrupt_seen
            and type(outcome) is Error
            and isinstance(outcome.error, KeyboardInterrupt)
            and self.thread == get_ident()
        ):
            self.interrupt_seen = True
            raise outcome.error
        return True

    def report(self) -> BodyReport:
        """The settled dispatch's report (after ``wait`` returned ``True``)."""
        # The signal's listener (the withdrawal) refers to this hand-off:
        # drop the way back, so the settled call leaves no reference cycle
        # (the worker read the signal for the last time before settling).
        self.signal = None
        aborted_at = self.aborted_at
        if aborted_at is None and self.outcome is _NONE:
            return _NONE_REPORT
        if aborted_at is not None and type(self.outcome) is not NotInvoked:
            return BodyReport(outcome=self.outcome, overrun_s=max(0.0, time.monotonic() - aborted_at))
        report = _BodyReportTwin()
        report.outcome = self.outcome
        report.contexts = ()
        report.killed = False
        report.overrun_s = None
        report.content = None
        report.meta = None
        if RETYPE_IN_PLACE:
            report.__class__ = BodyReport
        else:
            report = frozen_copy(report, BodyReport)
        return report  # type: ignore[no-any-return]


class _OwnedHandoff(_Handoff):
    """The hand-off of a body on the backend's own pool: its wait may block
    untimed (``waits_untimed``)."""

    __slots__ = ()
    waits_untimed = True


class WithdrawalSlot:
    """The dispatch signal's listener for a thread-backend call
    (``ThreadBackend.make_withdrawal``, the ``ListeningBackend``
    capability), installed by the registry when it derives that signal,
    before ``submit_listening`` made the hand-off it forwards to. No
    ``__init__``: one is made per call."""

    __slots__ = ("handoff",)
    handoff: _Handoff

    def __call__(self, signal: object) -> None:
        try:
            handoff = self.handoff
        except AttributeError:
            return  # aborted before submit(): its own check withdraws
        handoff.withdraw(signal)


class _Settled:
    """A dispatch settled before ``submit`` returned (inline body, refusal)."""

    __slots__ = ("_report",)

    def __init__(self, report: BodyReport) -> None:
        self._report = report

    waits_untimed: Final = True

    def wait(self, timeout: float | None) -> bool:
        return True

    def report(self) -> BodyReport:
        return self._report


class ThreadBackend:
    """Runs bodies on a ``concurrent.futures`` executor in this process: the
    default backend (docs/backends.md, docs/contract.md#backends).

    ``ThreadBackend(max_workers=None, *, executor=None)``: without
    ``executor`` it owns a ``ThreadPoolExecutor`` of ``max_workers``
    (default 32, suited to I/O-bound tools), created on first use and shut
    down by ``close()``; a supplied executor is used as is and never shut
    down. Giving both raises ``ValueError``. ``submit`` is called from the
    thread blocked in ``execute``; bodies run on the executor's threads, or
    inline in the submitting thread when it is itself running a body.
    Threads cannot be killed: a body that ignores its signal is joined
    however long it runs (``killed`` is never reported). It has the
    ``ListeningBackend`` capability (``make_withdrawal`` and
    ``submit_listening``).
    """

    make_withdrawal: Final = WithdrawalSlot
    """A fresh withdrawal listener for ``submit_listening`` (the class itself:
    making one runs no Python code)."""

    def __init__(self, max_workers: int | None = None, *, executor: Executor | None = None) -> None:
        if executor is not None and max_workers is not None:
            raise ValueError("give max_workers or executor, not both")
        if max_workers is not None and (isinstance(max_workers, bool) or not isinstance(max_workers, int)):
            raise TypeError(f"max_workers must be an int, not {type(max_workers).__name__}")
        if max_workers is not None and max_workers < 1:
            raise ValueError(f"max_workers must be >= 1, got {max_workers}")
        if executor is not None and not isinstance(executor, Executor):
            raise TypeError(f"executor must be a concurrent.futures.Executor, not {type(executor).__name__}")
        self.max_workers: Final = max_workers or DEFAULT_MAX_WORKERS
        self._owns_executor = executor is None
        self._executor: Executor | None = executor
        self._lock = threading.Lock()  # guards creating/replacing the owned executor
        self._generation = _generation
        self._closed = False
        _backends.add(self)

    def __repr__(self) -> str:
        return (
            f"ThreadBackend(max_workers={self.max_workers})" if self._owns_executor else "ThreadBackend(executor=...)"
        )

    def validate(self, name: str, body: Body) -> None:
        """Any callable runs in a thread: nothing to check."""

    def executor(self) -> Executor:
        """The executor bodies run on (created on first use when owned;
        ``submit`` reads it directly once it exists).
        Raises ``RuntimeError`` after ``close()`` or, for a supplied
        executor, in a child process forked after it was given."""
        executor = self._executor
        if executor is not None and self._generation == _generation:
            return executor
        with self._lock:
            if self._closed:
                raise RuntimeError("ThreadBackend is closed")
            if self._generation != _generation:
                if not self._owns_executor:
                    raise RuntimeError(
                        "this ThreadBackend's executor was created before os.fork(): its worker threads do not "
                        "exist in the child process; create the registry (or the executor) after the fork"
                    )
                # The parent's pool object (its threads, queue and locks) is
                # unusable here: drop it, never shut it down.
                self._executor = None
                self._generation = _generation
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=self.max_workers, thread_name_prefix="dshtools-tool")
            return self._executor

    def submit(self, body: Body, args: object, run: ToolRunContext) -> _Handoff | _Settled:
        """Queue ``body(args, run)`` on the executor (inline when called from a
        body's thread). Never raises for an executor fault: a refused or
        misbehaving ``submit()`` settles the call ``NotInvoked(error)``
        unless the worker already claimed it, in which case it is joined.
        The withdrawal is added as a listener on ``run.signal``."""
        return self.submit_listening(body, args, run, None)

    def submit_listening(
        self, body: Body, args: object, run: ToolRunContext, withdrawal: Callable[[AbortSignal], object] | None
    ) -> _Handoff | _Settled:
        """``submit``, for a caller that already installed ``withdrawal`` as a
        listener on ``run.signal`` (the registry does, when it derives the
        dispatch signal: one lock round trip instead of two; the
        ``ListeningBackend`` capability)."""
        signal = run.signal
        # ``carry(body)`` inlined (one partial less per call, on the path the
        # dispatch-instructions benchmark counts): the copy is taken here, in
        # the submitting thread, and entered by ``_Handoff.run``.
        context = copy_context()
        handoff = _OwnedHandoff() if self._owns_executor else _Handoff()
        handoff.signal = signal
        if withdrawal is not None:
            # Published before the re-check: either the listener finds the
            # hand-off, or this check sees the abort (it is marked before
            # listeners run).
            withdrawal.handoff = handoff  # type: ignore[attr-defined]  # a WithdrawalSlot (make_withdrawal)
        stack = _tls.stack
        if stack and (stack[-1] is self or not isinstance(stack[-1], ThreadBackend)):
            # Inline (a nested call from a body, or a batch's dispatch on
            # this backend's own pool: queueing behind the thread that waits
            # could deadlock a full pool). A batch dispatching on another
            # backend's pool queues here like any call. Nothing is queued,
            # so there is nothing to withdraw.
            handoff.run(context, body, args, run)
            # The same report as a pooled body's, overrun included; report()
            # also drops the way back from the listening withdrawal (no
            # reference cycle).
            return _Settled(handoff.report())
        if withdrawal is None:
            signal.add_listener(handoff.withdraw)
        elif signal.aborted:
            handoff.withdraw()
        if 0 in handoff.claim:  # aborted before the work was queued
            return _Settled(BodyReport(outcome=handoff.outcome))
        executor = self._executor
        if executor is None or self._generation != _generation:
            executor = self.executor()
        # A KeyboardInterrupt can land inside executor.submit() (it blocks
        # while starting a worker thread) after the work was queued: it is
        # handed back through the dispatch, whose first wait() raises it, so
        # the registry keeps the handle, aborts `signal` (withdrawing the
        # call if still queued) and joins a body the worker claimed.
        try:
            future = executor.submit(handoff.run, context, body, args, run)
            if isinstance(future, Future):
                handoff.future = future
        except KeyboardInterrupt as ki:
            handoff.pending = ki
        except Exception as exc:
            # Shut down, refused, or raising after queueing: withdraw; if the
            # worker claimed anyway, the body is joined as usual.
            handoff.refuse(exc)
        return handoff

    def close(self) -> None:
        """Shut an owned pool down, waiting for its bodies. Idempotent. A
        supplied executor is left running."""
        with self._lock:
            self._closed = True
            executor = self._executor if self._owns_executor and self._generation == _generation else None
        if executor is not None:
            executor.shutdown(wait=True)

    def run_marked(self, fn: Callable[[], Any]) -> Future[Any]:
        """Run ``fn`` on the executor in a copy of the submitting thread's
        context, with the worker marked (so a dispatch there runs its body
        inline). The batch's seam: it dispatches whole calls on workers.
        Raises what the executor's ``submit`` raises."""
        carried = carry(fn)

        def marked() -> Any:
            enter_worker(self)
            try:
                return carried()
            finally:
                leave_worker()

        return self.executor().submit(marked)
