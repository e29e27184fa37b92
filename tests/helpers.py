"""What several test modules share, defined once.

* Building: ``OBJECT`` (the empty object schema), ``ADD_PARAMS`` with
  the bodies ``add`` and ``broken`` (the provider tests' two tools), ``tool`` (one tool
  definition), ``call`` and ``calls`` (one call, ``n`` calls), each with the
  defaults most tests want; ``swapping_signal`` (an around-dispatch hook
  that hands the dispatch another signal); ``FirstCallSkipped`` (a
  function whose first matching call does not happen); ``registry_serving`` (a
  registry fixture's set-up and teardown).
* Recording: ``HookRecorder`` records which hooks ran and what was
  published; ``CallEventRecorder`` records, per call id, the hook events and
  the start and end of each body (``recorded_tool`` wraps a body for it);
  ``ProgressRecorder`` is a progress observer that records the updates it
  is handed (and can hold the delivery thread); ``CallWatchRecorder`` is a
  call observer whose watch records them.
* Waiting without sleeping: ``run_in_thread``, ``ExecutingInThread`` (one
  ``execute`` in a thread of its own), ``race_in_lockstep``,
  ``cancel_during_join`` (an asyncio task cancelled again and again),
  ``late_after_abort`` (a body that overruns its abort),
  ``wait_until``, ``blocked_in_wait``, ``tool_threads``, ``AbortLater``,
  ``Gate`` (holds the thread that reaches it until the test opens it).
* Child processes: ``wait_for_descendant``, ``alive``,
  ``signal_and_collect``, ``run_cli``, ``run_mypy``, ``run_python`` and
  ``fork_while_held`` (a script that forks while a lock is held).
* Worker bodies (imported by reference in a worker process): ``write_line``
  (to a FIFO the test reads), ``blocked_until_released``,
  ``raises_worker_only`` with ``WORKER_ONLY_MODULE``, ``returns_exiting_value``
  and ``raises_exiting_error`` (an outcome whose unpickling exits).
* Checking: ``value_of``, ``error_of``, ``cyclic_garbage_of``, ``young_heap``,
  ``assert_worker_only_errors_keep_name_message_and_code``.
* Faults: ``Unprintable`` (an exception whose ``str`` and ``repr`` raise)
  and ``Unrepresentable`` (an object whose ``repr`` raises, with methods
  that raise ``Unprintable`` in the place of a hook, an observer or a
  listener).
* Providers: ``FakeProvider``, an HTTP server on 127.0.0.1 that answers
  the official SDK clients with canned JSON and keeps the request bodies;
  ``output_message``, an assistant message item of the Responses API.
* Ray: ``Events`` (a named actor the remote bodies report to),
  ``start_events``, ``events_handle``, ``announce``. ``ray`` is imported
  only when one of these runs: it is an optional extra.

Fixtures live in the ``conftest.py`` of the folder that uses them; see
docs/decisions/0058-one-helpers-module-for-the-tests.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from dshtools import (
    TOOL_ERROR,
    AbortController,
    AbortSignal,
    TimeoutPolicy,
    ToolDefinition,
    ToolError,
    ToolExecutionInput,
    ToolFailure,
    ToolSuccess,
)
from dshtools._backends import thread as _thread_backend

if TYPE_CHECKING:  # only in annotations
    import pytest

    from dshtools import (
        ErrorDetail,
        ProgressUpdate,
        ToolDispatchExecution,
        ToolExecution,
        ToolExecutionResult,
        ToolRegistry,
        ToolRunContext,
    )

T = TypeVar("T")

# ------------------------------------------------------------------ building

OBJECT: dict[str, Any] = {"type": "object"}
"""The parameter schema of a tool that takes any object."""

ADD_PARAMS: dict[str, Any] = {
    "type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
    "required": ["a", "b"],
    "additionalProperties": False,
}
"""The parameter schema of ``add``: two integers ``a`` and ``b``, nothing else."""


def add(args: Mapping[str, Any], run: ToolRunContext) -> object:
    """The body of the provider tests' ``add`` tool: ``{"sum": a + b}``."""
    return {"sum": args["a"] + args["b"]}


def broken(args: Mapping[str, Any], run: ToolRunContext) -> object:
    """A body that always fails with the ``ToolError`` ``BROKEN``, text ``it broke``."""
    raise ToolError("it broke", "BROKEN")


def call(
    name: str, arguments: object = None, signal: AbortSignal | None = None, call_id: str = "c1"
) -> ToolExecutionInput:
    """A call of tool ``name`` with ``arguments`` (``{}`` when omitted), on
    ``signal`` (a fresh controller's when omitted)."""
    return ToolExecutionInput(call_id, name, {} if arguments is None else arguments, signal or AbortController().signal)


def calls(name: str, n: int, signal: AbortSignal, args: Mapping[str, Any] | None = None) -> list[ToolExecutionInput]:
    """``n`` calls of ``name`` with call ids ``c0`` … ``c{n-1}``, all on ``signal``."""
    return [ToolExecutionInput(f"c{i}", name, dict(args or {}), signal) for i in range(n)]


def tool(name: str, body: Callable[[Any, Any], object], **kw: Any) -> ToolDefinition:
    """A tool ``name`` running ``body``; ``parameters`` defaults to ``OBJECT``,
    every other keyword goes to ``ToolDefinition``."""
    params = kw.pop("parameters", OBJECT)
    return ToolDefinition(name, f"{name} tool", params, body, **kw)


def view_fields(**overrides: Any) -> dict[str, Any]:
    """The fields a view shares with its registry run (``token``,
    ``call_id`` "c", ``root_call_id`` "r", ``name`` "n", frozen
    ``arguments``, ``agent``, ``parent``, ``definition``), for building a
    view both ways; ``overrides`` replace some."""
    from dshtools import ExecutionToken
    from dshtools._core.freeze import freeze

    fields: dict[str, Any] = {
        "token": ExecutionToken(),
        "call_id": "c",
        "root_call_id": "r",
        "name": "n",
        "arguments": freeze({"a": [1]}),
        "agent": None,
        "parent": None,
        "definition": None,
    }
    fields.update(overrides)
    return fields


def run_of(fields: Mapping[str, Any], signal: AbortSignal) -> Any:
    """A registry ``Run`` (private) whose call and fields are ``fields``
    (``view_fields``), on ``signal``."""
    from dshtools._registry.run import Hooks, Run

    call = ToolExecutionInput(
        fields["call_id"],
        fields["name"],
        fields["arguments"],
        signal,
        agent=fields["agent"],
        parent=fields["parent"],
        root_call_id=fields["root_call_id"],
    )
    run = Run(None, call, fields["definition"], Hooks())  # type: ignore[arg-type]
    run.token = fields["token"]
    run.arguments = fields["arguments"]
    return run


def body_context(call: ToolExecutionInput) -> ToolRunContext:
    """The ``run`` (``ToolRunContext``) a registry hands the body of a tool
    named ``call.name`` for ``call``: the registry's own construction of
    it, captured from a real call."""
    from dshtools import ToolRegistry

    seen: list[ToolRunContext] = []
    with ToolRegistry() as registry:
        registry.register(tool(call.name, lambda _args, run: seen.append(run)))
        registry.execute(call)
    return seen[0]


def context_fields(context: ToolRunContext) -> dict[str, Any]:
    """``context``'s fields as ``ToolRunContext(**...)`` takes them (every
    field of the class: one the registry did not set raises here)."""
    import attrs

    return {field.alias: getattr(context, field.name) for field in attrs.fields(type(context))}


def swapping_signal(
    signal: AbortSignal,
) -> Callable[[ToolDispatchExecution, Callable[[], ToolExecutionResult]], ToolExecutionResult]:
    """An around-dispatch hook that hands ``signal`` to the rest of the
    dispatch in place of the view's own signal, and puts the own one back
    after."""

    def wrapper(e: ToolDispatchExecution, nxt: Callable[[], ToolExecutionResult]) -> ToolExecutionResult:
        own = e.signal
        e.signal = signal
        try:
            return nxt()
        finally:
            e.signal = own

    return wrapper


class FirstCallSkipped:
    """Replaces ``owner.name`` (through ``monkeypatch``, so the test's end
    puts it back) with a wrapper that skips the first call for which
    ``matching(*args, **kwargs)`` holds (it returns ``None`` without running
    the real function, as a check that passed or a request that was lost)
    and runs the real function for every other call. ``calls`` holds the
    positional arguments of every call, ``skipped`` those of the one skipped."""

    def __init__(
        self,
        monkeypatch: pytest.MonkeyPatch,
        owner: object,
        name: str,
        matching: Callable[..., bool] = lambda *args, **kwargs: True,
    ) -> None:
        real = getattr(owner, name)
        self.calls: list[tuple[Any, ...]] = []
        self.skipped: list[tuple[Any, ...]] = []

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(args)
            if not self.skipped and matching(*args, **kwargs):
                self.skipped.append(args)
                return None
            return real(*args, **kwargs)

        monkeypatch.setattr(owner, name, wrapper)


# ------------------------------------------------------------------ recording


class HookRecorder:
    """Records the name of every hook invocation (``events``, in order) and
    every published result (``results``); thread-safe."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.results: list[tuple[ToolExecution, ToolExecutionResult]] = []
        self.lock = threading.Lock()

    def note(self, event: str) -> None:
        with self.lock:
            self.events.append(event)

    def observer(self, execution: ToolExecution, result: ToolExecutionResult) -> None:
        with self.lock:
            self.results.append((execution, result))

    def install_all(self, registry: ToolRegistry) -> None:
        """Install a pass-through hook of every kind that records itself."""

        def pre(e: Any, nxt: Any) -> Any:
            self.note("pre-execute")
            return nxt()

        def guard(e: Any) -> None:
            self.note("guard")

        def around(e: Any, nxt: Any) -> Any:
            self.note("around-dispatch")
            return nxt()

        def post(e: Any, r: Any, nxt: Any) -> Any:
            self.note("post-execute")
            return nxt()

        registry.add_pre_execute(pre)
        registry.add_guard(guard)
        registry.add_around_dispatch(around)
        registry.add_post_execute(post)
        registry.add_result_observer(self.observer)


class CallEventRecorder:
    """Thread-safe log of ``(event, call_id)`` in the order they happened:
    ``pre``/``post``/``result`` from the hooks ``install`` adds,
    ``body_start``/``body_end`` from bodies built by ``recorded_tool``; with
    the monotonic start and end time of each body and the results published
    per call id."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.events: list[tuple[str, str]] = []
        self.started: dict[str, float] = {}
        self.finished: dict[str, float] = {}
        self.running = 0
        self.results: dict[str, list[ToolExecutionResult]] = {}

    def log(self, event: str, call_id: str) -> None:
        with self.lock:
            self.events.append((event, call_id))

    def body_start(self, call_id: str) -> int:
        with self.lock:
            self.started[call_id] = time.monotonic()
            self.running += 1
            self.events.append(("body_start", call_id))
            return len(self.started)

    def body_end(self, call_id: str) -> None:
        with self.lock:
            self.finished[call_id] = time.monotonic()
            self.running -= 1
            self.events.append(("body_end", call_id))

    def counts(self, event: str) -> Counter[str]:
        with self.lock:
            return Counter(cid for ev, cid in self.events if ev == event)

    def order(self, event: str) -> list[str]:
        with self.lock:
            return [cid for ev, cid in self.events if ev == event]

    def install(self, registry: ToolRegistry) -> None:
        def pre(execution: ToolExecution, nxt: Callable[[], Any]) -> Any:
            self.log("pre", execution.call_id)
            return nxt()

        def post(execution: ToolExecution, result: ToolExecutionResult, nxt: Callable[[], Any]) -> Any:
            self.log("post", execution.call_id)
            return nxt()

        def observe(execution: ToolExecution, result: ToolExecutionResult) -> None:
            with self.lock:
                self.events.append(("result", execution.call_id))
                self.results.setdefault(execution.call_id, []).append(result)

        registry.add_pre_execute(pre)
        registry.add_post_execute(post)
        registry.add_result_observer(observe)


class ProgressRecorder:
    """A progress observer recording each update it is handed
    (``updates``), the thread that handed it (``threads``) and its call id
    (``call_ids``); it sets ``last`` once it sees ``progress == final``.
    With ``hold``, each delivery first sets ``entered``, then holds the
    delivery thread until ``hold`` is set (10 seconds at most) before it
    records the update."""

    def __init__(self, final: float | None = None, *, hold: threading.Event | None = None) -> None:
        self.final = final
        self.hold = hold
        self.updates: list[ProgressUpdate] = []
        self.threads: set[str] = set()
        self.call_ids: set[str] = set()
        self.entered = threading.Event()
        self.last = threading.Event()

    def __call__(self, execution: ToolExecution, update: ProgressUpdate) -> None:
        if self.hold is not None:
            self.entered.set()
            assert self.hold.wait(10)
        self.updates.append(update)
        self.threads.add(threading.current_thread().name)
        self.call_ids.add(execution.call_id)
        if update.progress == self.final:
            self.last.set()


class CallWatchRecorder:
    """A call observer (``dshtools._registry.observer``) that watches every
    call with itself; the watch records each progress update it is handed
    (``updates``, in the body's thread) and does nothing else."""

    def __init__(self) -> None:
        self.updates: list[ProgressUpdate] = []

    def started(self, _call: ToolExecutionInput, _d: ToolDefinition | None) -> CallWatchRecorder:
        return self

    def enter(self) -> object:
        return None

    def exit(self, _token: object) -> None:
        pass

    def aborted(self, _signal: AbortSignal) -> None:
        pass

    def progress(self, update: ProgressUpdate) -> None:
        self.updates.append(update)

    def finished(self, _result: ToolExecutionResult) -> None:
        pass


def recorded_tool(
    name: str,
    recorder: CallEventRecorder,
    fn: Callable[[Mapping[str, Any], ToolRunContext], Any],
    *,
    parallel: bool = True,
    timeout: float | None = None,
) -> ToolDefinition:
    """A tool whose body is recorded (start/end) around ``fn``; concurrency
    safe unless ``parallel=False``."""

    def body(args: Mapping[str, Any], run: ToolRunContext) -> Any:
        recorder.body_start(run.call_id)
        try:
            return fn(args, run)
        finally:
            recorder.body_end(run.call_id)

    return tool(name, body, timeout=timeout, is_concurrency_safe=(lambda _a: True) if parallel else None)


# ------------------------------------------------------------------ waiting


def run_in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    """Start ``fn`` in a thread; the returned list receives its result or exception."""
    box: list[Any] = []

    def target() -> None:
        try:
            box.append(fn())
        except BaseException as exc:  # pragma: no cover - surfaced by the test
            box.append(exc)

    t = threading.Thread(target=target, daemon=True)
    t.start()
    return t, box


class ExecutingInThread:
    """``registry.execute(call)`` running in a daemon thread of its own;
    ``result(timeout)`` joins it and returns the result, failing the test
    if ``execute`` has not returned within ``timeout`` seconds."""

    def __init__(self, registry: ToolRegistry, call: ToolExecutionInput) -> None:
        self._out: list[ToolExecutionResult] = []
        self._thread = threading.Thread(target=lambda: self._out.append(registry.execute(call)), daemon=True)
        self._thread.start()

    def result(self, timeout: float = 60.0) -> ToolExecutionResult:
        self._thread.join(timeout)
        assert self._out, "execute did not return"
        return self._out[0]


async def cancel_during_join(task: asyncio.Future[Any], *, times: int, turns: int) -> None:
    """Cancel ``task`` ``times`` times, each followed by ``turns`` turns of
    the running asyncio loop (in which a wait that abandoned its body would
    have ended the task), asserting after each that the task is not done."""
    for _ in range(times):
        task.cancel()
        for _ in range(turns):
            await asyncio.sleep(0)
        assert not task.done()


def wait_until(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    """Poll a condition that no event can signal (e.g. "a thread is parked")."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.0005)


def blocked_in_wait(thread: threading.Thread) -> bool:
    """The thread is parked: in ``threading``'s ``wait`` (a Condition or an
    Event), or in the thread backend's join (it blocks in a C-level
    ``Lock.acquire`` called from the dispatch's ``wait``, the innermost
    Python frame)."""
    frame = sys._current_frames().get(thread.ident or -1)
    if frame is not None and frame.f_code.co_name == "wait" and frame.f_code.co_filename == _thread_backend.__file__:
        return True
    while frame is not None:
        if frame.f_code.co_name == "wait" and frame.f_code.co_filename == threading.__file__:
            return True
        frame = frame.f_back
    return False


def tool_threads() -> list[threading.Thread]:
    """The live threads of the thread backend's pools."""
    return [t for t in threading.enumerate() if t.name.startswith("dshtools-tool")]


def race_in_lockstep(
    rounds: int, *steps: Callable[[int], object], barrier_timeout: float = 10, join: float = 50
) -> None:
    """Run each of ``steps`` on a daemon thread of its own for ``rounds``
    rounds: in round ``i`` every thread waits at one barrier, then calls its
    ``step(i)`` (what it returns is ignored), so the steps of a round start
    together and the race is forced every round; after the last round they
    meet at the barrier once more. A barrier wait longer than
    ``barrier_timeout`` seconds (a round whose steps did not all return in
    time) breaks the barrier. Raises the first exception a step raised
    (``threading.BrokenBarrierError`` for a round too slow); fails if a
    thread is still blocked ``join`` seconds after the start of its join
    (a deadlock)."""
    barrier = threading.Barrier(len(steps))
    errors: list[BaseException] = []

    def loop(step: Callable[[int], object]) -> None:
        try:
            for i in range(rounds):
                barrier.wait(timeout=barrier_timeout)
                step(i)
            barrier.wait(timeout=barrier_timeout)
        except BaseException as exc:
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=loop, args=(step,), daemon=True) for step in steps]
    for t in threads:
        t.start()
    for t in threads:
        t.join(join)
    assert not any(t.is_alive() for t in threads), "a thread is still blocked (deadlock)"
    if errors:
        raise errors[0]


class Gate:
    """Where a test holds another thread: ``hold()`` sets ``entered``, then
    blocks until ``opened`` is set (10 seconds at most)."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.opened = threading.Event()

    def hold(self) -> None:
        self.entered.set()
        self.opened.wait(10)


def stops_when_aborted(
    started: threading.Event, returns: object = "stopped", wait: float = 10
) -> Callable[[Any, Any], object]:
    """A cooperative body: it sets ``started``, waits for its signal
    (``wait`` seconds at most) and returns ``returns``."""

    def cooperative(args: Any, run: Any) -> object:
        started.set()
        run.signal.wait(wait)
        return returns

    return cooperative


def late_after_abort(started: threading.Event, seconds: float, wait: float = 10) -> Callable[[Any, Any], object]:
    """A body that sets ``started``, waits for its signal (``wait`` seconds
    at most), then works ``seconds`` more (the overrun: work done after the
    abort, the scenario's timing) and returns ``"late"``."""

    def late(args: Any, run: Any) -> object:
        started.set()
        run.signal.wait(wait)
        time.sleep(seconds)
        return "late"

    return late


class AbortLater:
    """Abort ``controller`` with ``reason`` after ``seconds`` on the shared
    timer thread, recording the monotonic time of the abort in ``at``."""

    def __init__(self, controller: AbortController, seconds: float, reason: object) -> None:
        self.at: float | None = None
        self._controller = controller
        self._reason = reason
        self._timer = AbortSignal.timeout(seconds)
        self._timer.add_listener(self._fire)

    def _fire(self, _s: AbortSignal) -> None:
        self.at = time.monotonic()
        self._controller.abort(self._reason)

    def cancel(self) -> None:
        self._timer.close()


def wait_for_descendant(root: int, argv: list[str], timeout: float, *, matching_only: bool = False) -> list[int]:
    """Poll (every 10 ms, up to ``timeout`` seconds) until a live descendant
    of ``root`` runs exactly ``argv``; return the pids of every descendant
    seen then, or with ``matching_only`` of those running ``argv`` (for a
    ``root`` such as the test process itself, whose other descendants
    belong to other tests). Raises ``AssertionError`` when none appears in
    time."""
    import psutil

    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            family = psutil.Process(root).children(recursive=True)
        except psutil.NoSuchProcess:
            break
        matching = []
        for proc in family:
            try:
                if proc.cmdline() == argv:
                    matching.append(proc.pid)
            except psutil.Error:
                pass
        if matching:
            return matching if matching_only else [p.pid for p in family]
        time.sleep(0.01)
    raise AssertionError(f"no descendant of {root} ran {argv} within {timeout}s")


def alive(pids: list[int]) -> list[int]:
    """The pids among ``pids`` that are still running (not zombies)."""
    import psutil

    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:
            pass
    return out


def signal_and_collect(
    proc: subprocess.Popen[str], signum: int, timeout: float, when_ready: Callable[[], T]
) -> tuple[T, str, str, float]:
    """Call ``when_ready()`` (it returns once ``proc`` reached the point to
    interrupt, or raises), send ``signum`` to ``proc`` and wait up to
    ``timeout`` seconds for it to exit. Returns what ``when_ready``
    returned, ``proc``'s stdout and stderr, and the seconds from the signal
    to the exit. ``proc`` is killed and reaped if it is still running when
    this returns or raises (``subprocess.TimeoutExpired`` on a hang)."""
    try:
        ready = when_ready()
        sent = time.monotonic()
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=timeout)
        return ready, out, err, time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def run_cli(
    folder: str | os.PathLike[str], *args: str, timeout: float = 60, **kw: Any
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m dshtools *args`` in ``folder``, with ``folder`` first
    on ``PYTHONPATH`` (where a test writes its tools module), capturing its
    output as text; ``timeout`` seconds bound a hang. Keywords go to
    ``subprocess.run``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(folder), env.get("PYTHONPATH", "")) if p)
    return subprocess.run(
        [sys.executable, "-m", "dshtools", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=folder,
        timeout=timeout,
        **kw,
    )


def run_mypy(*args: str | os.PathLike[str]) -> subprocess.CompletedProcess[str]:
    """Run mypy with the checkout's setup.cfg (its plugin and strictness)
    and its incremental cache (``.mypy_cache``; the gate's run keeps its
    own: the standard library, the SDKs and ``dshtools`` are analysed
    once per checkout, not once per call; a file mypy reports errors in is
    checked again every run), from the checkout (so ``dshtools`` is this
    one), on ``args`` (paths and extra flags); 300 s at most. The caller
    reads the return code and the report. Not safe to run twice at once on
    one checkout: the cache is shared."""
    checkout = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", os.path.join(checkout, "setup.cfg")]
        + [os.fspath(a) for a in args],
        cwd=checkout,
        env=dict(os.environ, MYPYPATH=checkout),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def run_python(code: str, timeout: float = 50) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter (deprecation warnings off: a
    fork in a threaded process warns) and assert it exits 0, showing its
    stderr; ``timeout`` seconds bound a hang."""
    proc = subprocess.run(
        [sys.executable, "-W", "ignore::DeprecationWarning", "-c", code],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stderr
    return proc


_FORK_WHILE_HELD = """\
held, release = threading.Event(), threading.Event()

def hold():
    with {lock}:
        held.set()
        release.wait(10)

holder = threading.Thread(target=hold)
holder.start()
assert held.wait(5)
pid = os.fork()
if pid == 0:
    code = 1
    try:
{child}
    finally:
        os._exit(code)
release.set()
holder.join(5)
_, status = os.waitpid(pid, 0)
"""


def fork_while_held(lock: str, child: str, *, setup: str = "", after: str = "") -> str:
    """The source of a script for ``run_python``: after ``setup`` (imports
    and any state), a helper thread holds ``lock`` (an expression naming a
    lock) while the main thread forks. The child runs ``child``, which sets
    ``code`` (0 for success), and exits with it; the parent releases the
    lock, reaps the child, runs ``after`` and exits with the child's status.
    A child that deadlocks on the lock hangs until ``run_python``'s timeout."""
    body = textwrap.indent(textwrap.dedent(child).strip("\n"), " " * 8)
    return (
        "import os, sys, threading\n"
        + textwrap.dedent(setup).strip("\n")
        + "\n\n"
        + _FORK_WHILE_HELD.format(lock=lock, child=body)
        + textwrap.dedent(after).strip("\n")
        + "\nsys.exit(os.waitstatus_to_exitcode(status))\n"
    )


def write_line(path: str, text: str) -> None:
    """Write ``text`` and a newline to ``path`` (a FIFO a test blocks on
    reading: a body announces that it started)."""
    with open(path, "w", encoding="ascii") as f:
        f.write(text + "\n")


def blocked_until_released(args: Mapping[str, Any], run: ToolRunContext) -> object:
    """A body for a worker: writes its pid to the FIFO ``args["started"]``,
    then blocks reading the FIFO ``args["release"]`` (ignoring its signal)
    until the test writes a line; returns ``"released"``."""
    write_line(args["started"], str(os.getpid()))
    with open(args["release"], encoding="ascii") as f:
        f.readline()
    return "released"


def registry_serving(registry: ToolRegistry, definitions: Iterable[ToolDefinition]) -> Iterator[ToolRegistry]:
    """For a fixture (``yield from``): ``registry`` with a ``TimeoutPolicy``
    and ``definitions`` registered, closed when the fixture is torn down
    (the last registry of a backend closes the backend)."""
    registry.add_around_dispatch(TimeoutPolicy())
    for definition in definitions:
        registry.register(definition)
    try:
        yield registry
    finally:
        registry.close()


# ------------------------------------------------------------------ checking


def value_of(result: ToolExecutionResult) -> Any:
    """A success's value; any other result fails the test, showing it."""
    assert isinstance(result, ToolSuccess), f"expected a success, got {result!r}"
    return result.value


def error_of(result: ToolExecutionResult) -> ErrorDetail:
    """A failure's error; a success fails the test, showing it."""
    assert isinstance(result, ToolFailure), f"expected a failure, got {result!r}"
    return result.error


class Unprintable(Exception):
    """An exception whose ``str`` and ``repr`` raise."""

    def __str__(self) -> str:
        raise RuntimeError("no str for you")

    def __repr__(self) -> str:
        raise RuntimeError("no repr for you")


class Unrepresentable:
    """An object whose ``repr`` raises. Its bound methods raise
    ``Unprintable`` where a hook, a result observer or an abort listener
    goes; the observer and the listener first append ``"observer ran"`` or
    ``"listener ran"`` to ``log``."""

    def __init__(self, log: list[str]) -> None:
        self.log = log

    def __repr__(self) -> str:
        raise RuntimeError("no repr")

    def raising_observer(self, e: Any, r: Any) -> None:
        self.log.append("observer ran")
        raise Unprintable

    def raising_listener(self, signal: Any) -> None:
        self.log.append("listener ran")
        raise Unprintable

    def raising_hook(self, *a: Any) -> Any:
        raise Unprintable


@contextlib.contextmanager
def young_heap() -> Iterator[None]:
    """Inside, a ``gc.collect()`` traverses only the objects made inside:
    everything older is moved to the permanent generation (``gc.freeze``)
    and moved back on exit. An older object still keeps what it references
    alive, so nothing reachable is freed; a cycle made inside is found as
    before. For tests that collect again and again: one full collection of
    the test runner's heap (the SDKs, Ray, pydantic loaded) costs a tenth of
    a second or more."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def cyclic_garbage_of(run: Callable[[int], None], repeat: int = 10) -> tuple[int, list[str]]:
    """What the cyclic collector finds after ``run(i)`` for ``i`` in
    ``range(repeat)``, after one warm-up ``run(-1)`` (pools and caches made
    once): the count and the sorted type names. Runs with the collector off
    and ``gc.DEBUG_SAVEALL``, which keeps whatever a collection finds
    unreachable; both are restored. A count of 0 means every object was
    freed by reference counting."""
    run(-1)
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        for i in range(repeat):
            run(i)
        found = gc.collect()
        return found, sorted({type(o).__name__ for o in gc.garbage})
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if was_enabled:
            gc.enable()


WORKER_ONLY_MODULE = """\
from dshtools import ToolError

class WorkerOnlyError(Exception):
    pass

class WorkerOnlyQuotaError(ToolError):
    pass
"""


def raises_worker_only(args: Mapping[str, Any], run: ToolRunContext) -> object:
    """A body for a worker: imports the module ``args["module"]`` from the
    folder ``args["dir"]`` (a folder only the worker puts on its path, as
    ``runtime_env={"pip": [...]}`` installs a package only there) and raises
    its ``WorkerOnlyQuotaError`` (``args["coded"]``) or ``WorkerOnlyError``."""
    import importlib

    if args["dir"] not in sys.path:
        sys.path.insert(0, args["dir"])
    module = importlib.import_module(args["module"])
    if args["coded"]:
        raise module.WorkerOnlyQuotaError("3 of 3 calls used", "QUOTA_EXCEEDED")
    raise module.WorkerOnlyError("the index is 3 days old")


def assert_worker_only_errors_keep_name_message_and_code(registry: ToolRegistry, directory: str, module: str) -> None:
    """Write ``WORKER_ONLY_MODULE`` as ``module`` in ``directory`` (checking
    that this process cannot import it: the scenario is real), call the
    tool ``worker_only`` (``raises_worker_only`` on a worker) once for each
    exception, and assert the caller gets each one's class name, message and
    ``ToolError`` code, not the driver's failure to import the module."""
    with open(os.path.join(directory, f"{module}.py"), "w", encoding="utf-8") as f:
        f.write(WORKER_ONLY_MODULE)
    try:
        __import__(module)
    except ImportError:
        pass
    else:  # pragma: no cover - the scenario would not be what it claims
        raise AssertionError(f"{module} is importable here")
    plain, coded = (
        registry.execute(call("worker_only", {"dir": directory, "module": module, "coded": c}, call_id=f"wo{i}"))
        for i, c in enumerate((False, True))
    )
    assert plain.code == TOOL_ERROR, plain
    info = error_of(plain).info
    assert info is not None and info.name == "WorkerOnlyError"
    assert error_of(plain).message == "the index is 3 days old"
    assert coded.code == "QUOTA_EXCEEDED", coded
    assert error_of(coded).message == "3 of 3 calls used"


def returns_exiting_value(args: object, run: object) -> object:
    """A body for a worker: returns a value whose unpickling, where the
    outcome is read, calls ``sys.exit(3)``."""

    class ExitsWhenLoaded:
        def __reduce__(self) -> tuple[object, tuple[int]]:
            return (sys.exit, (3,))

    return ExitsWhenLoaded()


def raises_exiting_error(args: object, run: object) -> object:
    """A body for a worker: raises ``ExitsWhenLoadedError("boom")``, whose
    unpickling, where the outcome is read, calls ``sys.exit(4)``."""

    class ExitsWhenLoadedError(Exception):
        def __reduce__(self) -> tuple[object, tuple[int]]:
            return (sys.exit, (4,))

    raise ExitsWhenLoadedError("boom")


# ------------------------------------------------------------------ providers


class FakeProvider:
    """A provider API on ``127.0.0.1`` for the official SDK clients (offline):
    each POST is answered with the next of ``responses`` (JSON, status 200)
    and its body kept, decoded, in ``requests``. ``url`` is the base URL;
    ``close()`` stops the server and joins its thread."""

    def __init__(self, responses: list[dict[str, Any]]) -> None:
        import json
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.responses = list(responses)
        self.requests: list[dict[str, Any]] = []
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                provider.requests.append(json.loads(body.decode("utf-8")))
                payload = json.dumps(provider.responses.pop(0)).encode("utf-8")
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


# ------------------------------------------------------------------ Ray


def output_message(text: str, *, item_id: str = "msg_1") -> dict[str, Any]:
    """A completed assistant ``message`` output item of the OpenAI
    Responses API whose one ``output_text`` part is ``text``."""
    return {
        "type": "message",
        "id": item_id,
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


RAY_NAMESPACE = "dshtools-tests"


class Events:
    """Named events with a value, and counters (run as a threaded Ray
    actor): a body ``set``s an event when it reaches a point, the test
    ``wait``s for it, so no test sleeps to wait for an interleaving."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._values: dict[str, Any] = {}
        self._counts: dict[str, int] = {}

    def set(self, name: str, value: Any = True) -> None:
        with self._cond:
            self._values[name] = value
            self._cond.notify_all()

    def wait(self, name: str, timeout: float) -> Any:
        with self._cond:
            self._cond.wait_for(lambda: name in self._values, timeout)
            return self._values.get(name)

    def incr(self, name: str) -> None:
        with self._cond:
            self._counts[name] = self._counts.get(name, 0) + 1

    def count(self, name: str) -> int:
        with self._cond:
            return self._counts.get(name, 0)


@functools.cache
def _events_actor_class() -> Any:
    import ray

    return ray.remote(num_cpus=0, max_concurrency=64)(Events)  # type: ignore[call-overload]


def start_events(name: str) -> Any:
    """Start the ``Events`` actor ``name`` on the running Ray and return its
    handle once it answers (the caller ``ray.kill``s it)."""
    import ray

    handle = _events_actor_class().options(name=name).remote()
    ray.get(handle.count.remote("warm-up"))
    return handle


_handles: dict[str, Any] = {}


def events_handle(name: str) -> Any:
    """The handle of the ``Events`` actor ``name``, from a body or the test
    (cached per process)."""
    import ray

    handle = _handles.get(name)
    if handle is None:
        handle = _handles[name] = ray.get_actor(name, namespace=RAY_NAMESPACE)
    return handle


def announce(name: str, tag: str, value: Any = True) -> None:
    """Set event ``tag`` on actor ``name`` from a body. ``.future().result()``,
    not ``ray.get()``: a body must not give up its CPU slot."""
    events_handle(name).set.remote(tag, value).future().result()
