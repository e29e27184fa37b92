"""Every result says whether its body ran, ``meta`` is always a mapping
(docs/contract.md A16, field case B60), and exceptions whose text says
nothing by itself still tell the model something (A17, field case N10)."""

from __future__ import annotations

import pickle
import threading
import time
from collections.abc import Mapping
from typing import Any

import pytest

import dshtools
from dshtools import (
    AbortController,
    AbortSignal,
    Allow,
    Ask,
    Deny,
    TimeoutPolicy,
    ToolDefinition,
    ToolError,
    ToolFailure,
    ToolRegistry,
    ToolSuccess,
    execute_batch,
)
from dshtools._backends.base import BodyReport, NotInvoked, Value
from tests.helpers.calls import call, tool
from tests.helpers.recorders import HookRecorder
from tests.helpers.waiting import run_in_thread, stops_when_aborted


def _text(result: Any) -> str:
    return str(result.content[0]["text"])


# ---------------------------------------------------------------- A16: meta


def test_meta_is_an_empty_read_only_mapping_on_a_plain_success_never_none() -> None:
    """A new user's first error was ``result.meta.get(...)`` on ``None``."""
    with ToolRegistry() as registry:
        registry.register(tool("t", lambda a, r: "ok"))
        registry.register(tool("none", lambda a, r: None))
        for name in ("t", "none"):
            result = registry.execute(call(name))
            assert isinstance(result.meta, Mapping) and result.meta == {}
            assert result.meta.get("overrun_s") is None
            with pytest.raises(TypeError):
                result.meta["x"] = 1  # type: ignore[index]
    built = ToolSuccess("v", "v")
    assert built.meta == {} and built.body_invoked is False
    assert ToolSuccess("v", "v", meta=None).meta == {}
    assert ToolFailure(failure_detail(), "Error: x").meta == {}
    # A result without meta pickles, as it did when meta was None.
    assert pickle.loads(pickle.dumps(built)) == built


def failure_detail() -> Any:
    from dshtools import ErrorDetail, ErrorInfo

    return ErrorDetail("x", ErrorInfo("E", None))


# -------------------------------------------------------- A16: body_invoked


@pytest.mark.timeout(20)
def test_body_invoked_is_true_exactly_when_the_body_ran_whatever_the_outcome() -> None:
    """Each outcome of the pipeline, published to the caller and to the
    observers alike: the body's own outcomes say True, every outcome
    decided before the body started says False."""
    controller = AbortController()
    started = threading.Event()

    cooperative = stops_when_aborted(started, "late", wait=5)

    def raises(a: Any, run: Any) -> Any:
        raise ValueError("bad")

    def returns_bad_output(a: Any, run: Any) -> Any:
        return {1, 2}

    with ToolRegistry() as registry:
        rec = HookRecorder()
        registry.add_result_observer(rec.observer)
        registry.add_pre_execute(lambda e, nxt: Deny("no") if e.name == "denied" else nxt())
        registry.register(tool("ok", lambda a, r: "ok"))
        registry.register(tool("none", lambda a, r: None))
        registry.register(tool("raises", raises))
        registry.register(tool("bad_output", returns_bad_output))
        registry.register(tool("cooperative", cooperative))
        registry.register(tool("denied", lambda a, r: "never"))
        registry.register(tool("typed", lambda a, r: "never", parameters={"type": "object", "required": ["x"]}))
        ran = [
            registry.execute(call("ok")),
            registry.execute(call("none")),
            registry.execute(call("raises")),
            registry.execute(call("bad_output")),
        ]

        def abort_once_started() -> None:
            assert started.wait(5)
            controller.abort("stop")

        helper, _ = run_in_thread(abort_once_started)
        ran.append(registry.execute(call("cooperative", signal=controller.signal)))
        helper.join(5)
        not_ran = [
            registry.execute(call("missing")),
            registry.execute(call("denied")),
            registry.execute(call("typed")),
            registry.execute(call("ok", signal=AbortSignal.already_aborted("early"))),
        ]
    assert [r.code for r in ran] == [None, None, dshtools.TOOL_ERROR, "INVALID_TOOL_OUTPUT", dshtools.TOOL_ABORTED]
    assert [r.code for r in not_ran] == [
        dshtools.UNKNOWN_TOOL,
        dshtools.DENIED,
        dshtools.INVALID_ARGS,
        dshtools.TOOL_ABORTED_BEFORE_DISPATCH,
    ]
    assert all(r.body_invoked is True for r in ran)
    assert all(r.body_invoked is False for r in not_ran)
    assert [r for _, r in rec.results] == ran + not_ran


@pytest.mark.timeout(20)
def test_a_call_withdrawn_from_the_queue_is_aborted_before_dispatch_and_says_its_body_never_ran() -> None:
    """The same record decides the code and ``body_invoked``: a call still
    queued behind a busy pool when its caller aborts."""
    hog_started, release = threading.Event(), threading.Event()
    ran: list[str] = []
    with ToolRegistry(max_workers=1) as registry:
        registry.register(tool("hog", _hog(hog_started, release)))
        registry.register(tool("queued", lambda a, r: ran.append("queued")))
        hog, hog_box = run_in_thread(lambda: registry.execute(call("hog")))
        assert hog_started.wait(5)
        controller = AbortController()
        waiter, box = run_in_thread(lambda: registry.execute(call("queued", signal=controller.signal, call_id="q")))
        controller.abort("stop")
        waiter.join(5)
        release.set()
        hog.join(5)
    assert box[0].code == dshtools.TOOL_ABORTED_BEFORE_DISPATCH and box[0].body_invoked is False and ran == []
    assert hog_box[0].body_invoked is True


def _hog(started: threading.Event, release: threading.Event) -> Any:
    """A body that holds its worker until ``release`` is set."""

    def hog(a: Any, run: Any) -> str:
        started.set()
        release.wait(10)
        return "hog"

    return hog


def test_a_wrappers_own_result_says_whether_any_next_ran_the_body() -> None:
    """A wrapper that answers without ``next()`` built its result with the
    default ``body_invoked=False``; one that ran the body and replaced its
    result still gets True: the registry's record wins."""
    with ToolRegistry() as registry:
        registry.add_around_dispatch(
            lambda e, nxt: ToolSuccess("cached", "cached") if e.name == "cached" else (nxt(), ToolSuccess("x", "x"))[1]
        )
        registry.register(tool("cached", lambda a, r: "never"))
        registry.register(tool("replaced", lambda a, r: "ran"))
        cached = registry.execute(call("cached"))
        replaced = registry.execute(call("replaced"))
    assert cached.value == "cached" and cached.body_invoked is False  # type: ignore[union-attr]
    assert replaced.value == "x" and replaced.body_invoked is True  # type: ignore[union-attr]


class _ReportingBackend:
    """A user's backend that reports what the test says (no thread at all)."""

    def __init__(self, outcome: Any) -> None:
        self.outcome = outcome

    def validate(self, name: str, body: Any) -> None:
        pass

    def submit(self, body: Any, args: object, run: Any) -> Any:
        outcome = self.outcome

        class _Done:
            def wait(self, timeout: float) -> bool:
                return True

            def report(self) -> BodyReport:
                return BodyReport(outcome=outcome)

        return _Done()

    def close(self) -> None:
        pass


def test_results_from_any_backend_carry_body_invoked_from_its_report() -> None:
    """Out-of-process backends go through the same classification: their
    ``Value`` says True, their ``NotInvoked`` says False."""
    with ToolRegistry() as registry:
        registry.register(
            ToolDefinition("ran", "", {"type": "object"}, lambda a, r: None, backend=_ReportingBackend(Value("v")))
        )
        registry.register(
            ToolDefinition(
                "refused",
                "",
                {"type": "object"},
                lambda a, r: None,
                backend=_ReportingBackend(NotInvoked(OSError("full"))),
            )
        )
        ran = registry.execute(call("ran"))
        refused = registry.execute(call("refused"))
    assert ran.value == "v" and ran.body_invoked is True  # type: ignore[union-attr]
    assert refused.code == dshtools.TOOL_ABORTED_BEFORE_DISPATCH and refused.body_invoked is False
    assert isinstance(refused.meta["reason"], OSError)


# --------------------------------------------------------------------- B60


@pytest.mark.timeout(20)
def test_b60_a_timeout_clock_does_not_run_while_the_call_waits_for_approval() -> None:
    """B60 (a): a pre-execute hook answers ``Ask``; the approver takes
    0.6 s (the scenario's timing), then allows; the tool has
    ``timeout=0.3`` and returns at once: a success, the body ran once."""
    ran: list[int] = []

    def approver(request: Any) -> Any:
        threading.Event().wait(0.6)
        return "allowed-once"

    with ToolRegistry(approver=approver) as registry:
        registry.add_pre_execute(lambda e, nxt: Ask("check"))
        registry.add_around_dispatch(TimeoutPolicy())
        registry.register(tool("quick", lambda a, r: ran.append(1) or "done", timeout=0.3))  # type: ignore[func-returns-value]
        result = registry.execute(call("quick"))
    assert not result.is_error and result.value == "done" and ran == [1]
    assert result.body_invoked is True


@pytest.mark.timeout(20)
def test_b60_a_timeout_while_queued_behind_a_busy_pool_says_the_body_never_started() -> None:
    """B60 (b): ``ToolRegistry(max_workers=1)``; a ``hog`` call holds the
    only worker (blocked on an Event); a ``queued`` tool with
    ``timeout=0.3`` is called. It returns within 1.5 s (not after the
    hog), its body never ran, and the model text says it did not start:
    ``TOOL_TIMEOUT`` (the policy owns the timeout) with
    ``Error: tool call timed out after 300ms before it started``."""
    hog_started, release = threading.Event(), threading.Event()
    ran: list[str] = []
    with ToolRegistry(max_workers=1) as registry:
        registry.add_around_dispatch(TimeoutPolicy())
        registry.register(tool("hog", _hog(hog_started, release)))
        registry.register(tool("queued", lambda a, r: ran.append("queued") or "ran", timeout=0.3))  # type: ignore[func-returns-value]
        hog, _ = run_in_thread(lambda: registry.execute(call("hog")))
        assert hog_started.wait(5)
        t0 = time.monotonic()
        result = registry.execute(call("queued", call_id="q"))
        elapsed = time.monotonic() - t0
        release.set()
        hog.join(5)
    assert elapsed < 1.5, elapsed
    assert result.code == dshtools.TOOL_TIMEOUT and result.body_invoked is False and ran == []
    assert _text(result) == "Error: tool call timed out after 300ms before it started"
    assert result.error.message == "tool call timed out after 300ms before it started"  # type: ignore[union-attr]


@pytest.mark.timeout(20)
def test_a_timeout_of_a_body_that_ran_keeps_the_plain_text() -> None:
    with ToolRegistry() as registry:
        registry.add_around_dispatch(TimeoutPolicy())
        registry.register(tool("slow", lambda a, r: r.signal.wait(5) and "late", timeout=0.05))
        result = registry.execute(call("slow"))
    assert result.code == dshtools.TOOL_TIMEOUT and result.body_invoked is True
    assert _text(result) == "Error: tool call timed out after 50ms"


# ----------------------------------------------------------- A17 and N10


class _Silent(Exception):
    pass


@pytest.mark.parametrize(
    ("exc", "text"),
    [
        (KeyError("missing"), "Error: KeyError: 'missing'"),
        (SystemExit(), "Error: SystemExit"),
        (ValueError(""), "Error: ValueError"),
        (_Silent(), "Error: _Silent"),
        (ValueError("kept as written"), "Error: kept as written"),
        (ToolError(""), "Error: "),
        (ToolError("the author's words", code="E1"), "Error: the author's words"),
    ],
    ids=["keyerror", "systemexit", "empty-valueerror", "empty-own-class", "plain", "empty-toolerror", "toolerror"],
)
def test_a17_n10_an_exception_whose_text_says_nothing_by_itself_still_says_what_it_was(
    exc: BaseException, text: str
) -> None:
    """N10: a body that raised ``KeyError("missing")`` gave the model
    ``Error: 'missing'``; one that raised ``SystemExit()`` gave ``Error: ``.
    A17: an empty text gives the class name, a ``KeyError`` is prefixed
    with it, a ``ToolError``'s message stays as written."""

    def body(a: Any, run: Any) -> Any:
        raise exc

    with ToolRegistry() as registry:
        registry.register(tool("t", body))
        result = registry.execute(call("t"))
    assert result.is_error and _text(result) == text and result.body_invoked is True
    assert result.error.info.name == type(exc).__name__  # type: ignore[union-attr]
    assert result.code == (exc.code if isinstance(exc, ToolError) and exc.code else dshtools.TOOL_ERROR)


def test_a17_applies_to_a_batch_and_to_a_hooks_exception_too() -> None:
    def body(a: Any, run: Any) -> Any:
        raise KeyError("k")

    def wrapper(e: Any, nxt: Any) -> Any:
        if e.name == "wrapped":
            raise RuntimeError()
        return nxt()

    with ToolRegistry() as registry:
        registry.add_around_dispatch(wrapper)
        registry.register(tool("t", body))
        registry.register(tool("wrapped", lambda a, r: "never"))
        results = execute_batch(registry, [call("t"), call("wrapped", call_id="c2")], signal=AbortController().signal)
    assert [_text(r) for r in results] == ["Error: KeyError: 'k'", "Error: RuntimeError"]
    assert [r.body_invoked for r in results] == [True, False]


def test_allow_is_still_a_pass_through() -> None:
    """The admission step (now asked only when there is a hook or guard)
    lets an allowed call through to its body exactly once."""
    ran: list[int] = []
    with ToolRegistry() as registry:
        registry.add_pre_execute(lambda e, nxt: Allow())
        registry.add_guard(lambda e: None)
        registry.register(tool("t", lambda a, r: ran.append(1) or "ok"))  # type: ignore[func-returns-value]
        result = registry.execute(call("t"))
        unknown = registry.execute(call("nope"))
    assert result.value == "ok" and ran == [1] and result.body_invoked  # type: ignore[union-attr]
    assert unknown.code == dshtools.UNKNOWN_TOOL and _text(unknown) == 'Error: unknown tool "nope"'


def _quick_in_a_worker(args: Any, run: Any) -> object:
    return "ran in a worker"


def _key_error_in_a_worker(args: Any, run: Any) -> object:
    raise KeyError("k")


@pytest.mark.timeout(60)
def test_a_process_backends_results_carry_body_invoked_and_the_a17_text() -> None:
    """A16 and A17 hold for a body in another process: the worker's report
    goes through the same classification."""
    from dshtools import ProcessBackend

    with ProcessBackend(1, kill_after=0.5) as backend, ToolRegistry(backend=backend) as registry:
        registry.register(tool("quick", _quick_in_a_worker))
        registry.register(tool("key", _key_error_in_a_worker))
        ran = registry.execute(call("quick"))
        raised = registry.execute(call("key", call_id="c2"))
        never = registry.execute(call("quick", call_id="c3", signal=AbortSignal.already_aborted("early")))
    assert ran.value == "ran in a worker" and ran.body_invoked is True  # type: ignore[union-attr]
    assert set(ran.meta) == {"worker_wait"}  # nothing else: docs/contract.md#a32
    assert _text(raised) == "Error: KeyError: 'k'" and raised.body_invoked is True
    assert never.code == dshtools.TOOL_ABORTED_BEFORE_DISPATCH and never.body_invoked is False
