"""Approval that does not hold a thread: an approver answers ``"deferred"``,
``execute`` returns ``APPROVAL_PENDING`` with a ticket, ``registry.resume``
runs the call once (docs/policies.md#deferred-approval; docs/contract.md#policies)."""

from __future__ import annotations

import json
import pickle
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from dshtools import (
    APPROVAL_PENDING,
    DENIED,
    INVALID_ARGS,
    TOOL_ABORTED_BEFORE_DISPATCH,
    UNKNOWN_TOOL,
    AbortController,
    Accept,
    ApprovalDecision,
    ApprovalRequest,
    ApprovalTickets,
    Ask,
    FileTicketStore,
    MemoryTicketStore,
    TicketError,
    TicketStore,
    ToolDefinition,
    ToolExecution,
    ToolExecutionInput,
    ToolRegistry,
    ToolRunContext,
    execute_batch,
)
from tests.helpers.calls import call, error_of, tool, value_of
from tests.helpers.processes import run_python
from tests.helpers.recorders import HookRecorder
from tests.helpers.waiting import run_in_thread

PATH_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"path": {"type": "string"}},
    "required": ["path"],
    "additionalProperties": False,
}


def remove(args: Any, _run: ToolRunContext) -> str:
    """The tool the subprocess registers too (same module and name: same fingerprint)."""
    return f"removed {args['path']}"


class Clock:
    """An injected ``time.time``: tests move it instead of sleeping."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


class Bodies:
    """The ``rm`` body, counting its runs and recording its arguments."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: list[Any] = []

    def __call__(self, args: Any, run: ToolRunContext) -> str:
        with self.lock:
            self.seen.append(dict(args))
        return f"removed {args['path']}"


def defer(_request: ApprovalRequest) -> ApprovalDecision:
    return "deferred"


def ask_for_rm(execution: ToolExecution, next: Any) -> Any:
    return Ask("delete a file?") if execution.name == "rm" else next()


def make(tickets: ApprovalTickets | None = None, bodies: Bodies | None = None, approver: Any = defer) -> ToolRegistry:
    registry = ToolRegistry(approver=approver, tickets=tickets)
    registry.register(tool("rm", bodies or Bodies(), parameters=PATH_SCHEMA))
    registry.register(tool("echo", lambda a, _r: a.get("text", "")))
    registry.add_pre_execute(ask_for_rm)
    return registry


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def bodies() -> Bodies:
    return Bodies()


@pytest.fixture
def deferring(clock: Clock, bodies: Bodies) -> Iterator[ToolRegistry]:
    with make(ApprovalTickets(ttl=60.0, clock=clock), bodies) as registry:
        yield registry


def signal() -> Any:
    return AbortController().signal


def pending_ticket(registry: ToolRegistry, path: str = "/tmp/x", call_id: str = "c1") -> dict[str, Any]:
    result = registry.execute(call("rm", {"path": path}, call_id=call_id))
    assert result.code == APPROVAL_PENDING, result
    ticket = result.meta["ticket"]
    # What a web app does between two requests: the ticket goes out as JSON.
    loaded: dict[str, Any] = json.loads(json.dumps(ticket))
    return loaded


# ------------------------------------------------------------ the pending result


def test_a_deferred_call_returns_pending_at_once_with_a_json_ticket(deferring: ToolRegistry, bodies: Bodies) -> None:
    published = HookRecorder()
    deferring.add_result_observer(published.observer)
    result = deferring.execute(call("rm", {"path": "/tmp/x"}, call_id="call-7"))
    assert result.code == APPROVAL_PENDING and result.is_error
    assert result.body_invoked is False and bodies.seen == []
    assert result.content[0]["text"] == 'Error: tool call "rm" is awaiting approval: delete a file?'
    assert error_of(result).info is not None and error_of(result).info.name == "ApprovalPending"  # type: ignore[union-attr]
    ticket = result.meta["ticket"]
    assert isinstance(ticket, dict)
    assert ticket["tool"] == "rm" and ticket["call_id"] == "call-7" and ticket["arguments"] == {"path": "/tmp/x"}
    assert ticket["reason"] == "delete a file?"
    assert ticket["expires_at"] - ticket["issued_at"] == 60.0
    # JSON and pickle round trips give the same ticket, and the result is published once.
    assert json.loads(json.dumps(ticket)) == ticket
    assert pickle.loads(pickle.dumps(ticket)) == ticket
    assert [r for _e, r in published.results] == [result]


def test_deferring_is_denied_when_the_ticket_cannot_be_issued(bodies: Bodies) -> None:
    class Broken:
        def add(self, key: str, expires_at: float) -> None:
            raise OSError("disk full")

        def claim(self, key: str) -> bool:
            raise AssertionError("never claimed")

    assert isinstance(Broken(), TicketStore)
    with make(ApprovalTickets(Broken()), bodies) as registry:
        result = registry.execute(call("rm", {"path": "/x"}))
    assert result.code == DENIED and "ticket could not be issued: OSError: disk full" in error_of(result).message
    assert "ticket" not in result.meta and bodies.seen == []


def test_a_caller_aborted_while_approval_was_asked_gets_no_ticket(bodies: Bodies) -> None:
    controller = AbortController()
    store = MemoryTicketStore()

    def abort_then_defer(_request: ApprovalRequest) -> ApprovalDecision:
        controller.abort("user left")
        return "deferred"

    with make(ApprovalTickets(store), bodies, abort_then_defer) as registry:
        result = registry.execute(call("rm", {"path": "/x"}, controller.signal))
    assert result.code == TOOL_ABORTED_BEFORE_DISPATCH and len(store) == 0


def test_deferring_an_unknown_tool_is_unknown_tool() -> None:
    with ToolRegistry(approver=defer) as registry:
        registry.add_pre_execute(lambda _e, _n: Ask())
        assert registry.execute(call("ghost")).code == UNKNOWN_TOOL


def test_a_batch_returns_a_pending_call_in_model_order(deferring: ToolRegistry) -> None:
    s = signal()
    batch = [
        ToolExecutionInput("a", "echo", {"text": "one"}, s),
        ToolExecutionInput("b", "rm", {"path": "/x"}, s),
        ToolExecutionInput("c", "echo", {"text": "three"}, s),
    ]
    results = execute_batch(deferring, batch, signal=s)
    assert [r.code for r in results] == [None, APPROVAL_PENDING, None]
    assert [value_of(results[0]), value_of(results[2])] == ["one", "three"]
    ticket = results[1].meta["ticket"]
    assert isinstance(ticket, dict) and ticket["call_id"] == "b"
    assert value_of(deferring.resume(ticket, "allowed-once", signal=s)) == "removed /x"


# ------------------------------------------------------------------- resuming


def test_allowed_once_runs_the_rest_of_the_pipeline_with_the_ticket_arguments(
    deferring: ToolRegistry, bodies: Bodies
) -> None:
    seen: list[tuple[str, str | None]] = []
    deferring.add_result_observer(lambda e, r: seen.append((e.call_id, r.code)))
    deferring.add_post_execute(lambda _e, r, n: Accept(meta={"post": True}) if not r.is_error else n())
    ticket = pending_ticket(deferring, call_id="call-9")
    result = deferring.resume(ticket, "allowed-once", signal=signal())
    assert value_of(result) == "removed /tmp/x" and result.body_invoked is True
    assert result.meta["post"] is True
    assert bodies.seen == [{"path": "/tmp/x"}]
    # The pre-execute hook asked once; the resumed call keeps its call id.
    assert seen == [("call-9", APPROVAL_PENDING), ("call-9", None)]


def test_rejected_returns_the_denied_result_of_a_rejection(deferring: ToolRegistry, bodies: Bodies) -> None:
    result = deferring.resume(pending_ticket(deferring), "rejected", signal=signal())
    assert result.code == DENIED and result.body_invoked is False
    assert result.content[0]["text"] == "Error: tool call was rejected: delete a file?"
    assert bodies.seen == []


def test_edited_arguments_are_validated_again_and_run(deferring: ToolRegistry, bodies: Bodies) -> None:
    result = deferring.resume(pending_ticket(deferring), "allowed-once", arguments={"path": "/tmp/y"}, signal=signal())
    assert value_of(result) == "removed /tmp/y" and bodies.seen == [{"path": "/tmp/y"}]
    ticket = pending_ticket(deferring)
    bad = deferring.resume(ticket, "allowed-once", arguments={"path": 3}, signal=signal())
    assert bad.code == INVALID_ARGS and bad.body_invoked is False and len(bodies.seen) == 1
    # The resume that returned INVALID_ARGS was the call's one result: the ticket is used.
    with pytest.raises(TicketError, match="not pending"):
        deferring.resume(ticket, "allowed-once", arguments={"path": "/ok"}, signal=signal())


def test_guards_run_after_the_deferred_approval(deferring: ToolRegistry, bodies: Bodies) -> None:
    deferring.add_guard(lambda e: "no deleting /etc" if e.arguments.get("path") == "/etc" else None)
    result = deferring.resume(pending_ticket(deferring), "allowed-once", arguments={"path": "/etc"}, signal=signal())
    assert result.code == DENIED and error_of(result).message == "no deleting /etc" and bodies.seen == []


def test_a_resumed_call_aborted_before_resume_is_aborted_before_dispatch(
    deferring: ToolRegistry, bodies: Bodies
) -> None:
    controller = AbortController()
    controller.abort("the user closed the tab")
    ticket = pending_ticket(deferring)
    result = deferring.resume(ticket, "allowed-once", signal=controller.signal)
    assert result.code == TOOL_ABORTED_BEFORE_DISPATCH and result.body_invoked is False
    assert result.meta["reason"] == "the user closed the tab" and bodies.seen == []
    with pytest.raises(TicketError):
        deferring.resume(ticket, "allowed-once", signal=signal())


@pytest.mark.timeout(30)
def test_a_resumed_body_sees_the_resume_signal(clock: Clock) -> None:
    started = threading.Event()

    def waits(_args: Any, run: ToolRunContext) -> str:
        started.set()
        assert run.signal.wait(10)
        return "stopped"

    with ToolRegistry(approver=defer, tickets=ApprovalTickets(clock=clock)) as registry:
        registry.register(tool("slow", waits))
        registry.add_pre_execute(lambda _e, _n: Ask())
        ticket = registry.execute(call("slow")).meta["ticket"]
        controller = AbortController()
        thread, box = run_in_thread(lambda: registry.resume(ticket, "allowed-once", signal=controller.signal))
        assert started.wait(10)
        controller.abort("stop")
        thread.join(10)
    assert box and box[0].code == "ABORTED" and box[0].body_invoked is True


def test_misuse_raises_before_the_ticket_is_used(deferring: ToolRegistry) -> None:
    ticket = pending_ticket(deferring)
    with pytest.raises(ValueError, match="allowed-once' or 'rejected'"):
        deferring.resume(ticket, "cancelled", signal=signal())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="allowed-once' resume only"):
        deferring.resume(ticket, "rejected", arguments={"path": "/y"}, signal=signal())
    with pytest.raises(TypeError, match="AbortSignal"):
        deferring.resume(ticket, "allowed-once", signal=None)  # type: ignore[arg-type]
    assert value_of(deferring.resume(ticket, "allowed-once", signal=signal())) == "removed /tmp/x"


def test_a_ticket_given_as_its_json_text_resumes(deferring: ToolRegistry) -> None:
    text = json.dumps(pending_ticket(deferring))
    assert value_of(deferring.resume(text, "allowed-once", signal=signal())) == "removed /tmp/x"


# ------------------------------------------------------------------ refusals


def test_a_second_resume_is_refused(deferring: ToolRegistry, bodies: Bodies) -> None:
    ticket = pending_ticket(deferring)
    value_of(deferring.resume(ticket, "allowed-once", signal=signal()))
    with pytest.raises(TicketError, match="already resumed"):
        deferring.resume(ticket, "allowed-once", signal=signal())
    with pytest.raises(TicketError):
        deferring.resume(ticket, "rejected", signal=signal())
    assert len(bodies.seen) == 1


@pytest.mark.timeout(30)
@pytest.mark.parametrize("store", ["memory", "file"])
def test_threads_racing_to_resume_one_ticket_run_it_exactly_once(store: str, tmp_path: Path, bodies: Bodies) -> None:
    tickets = ApprovalTickets(MemoryTicketStore() if store == "memory" else FileTicketStore(tmp_path))
    racers = 8
    barrier = threading.Barrier(racers)
    outcomes: list[object] = []
    lock = threading.Lock()
    with make(tickets, bodies) as registry:
        ticket = pending_ticket(registry)

        def racer() -> None:
            barrier.wait(10)
            try:
                outcome: object = registry.resume(ticket, "allowed-once", signal=signal())
            except TicketError as exc:
                outcome = exc
            with lock:
                outcomes.append(outcome)

        threads = [threading.Thread(target=racer) for _ in range(racers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(20)
    results = [o for o in outcomes if not isinstance(o, TicketError)]
    assert len(outcomes) == racers and len(results) == 1
    assert value_of(results[0]) == "removed /tmp/x"  # type: ignore[arg-type]
    assert bodies.seen == [{"path": "/tmp/x"}]


@pytest.mark.parametrize(
    "change",
    [
        {"arguments": {"path": "/etc"}},
        {"tool": "echo"},
        {"call_id": "other"},
        {"expires_at": 10_000_000.0},
        {"fingerprint": "0" * 64},
        {"reason": None},
    ],
)
def test_an_altered_ticket_is_refused_and_the_issued_one_still_resumes(
    deferring: ToolRegistry, bodies: Bodies, change: dict[str, Any]
) -> None:
    ticket = pending_ticket(deferring)
    with pytest.raises(TicketError, match="forged or altered"):
        deferring.resume({**ticket, **change}, "allowed-once", signal=signal())
    assert bodies.seen == []
    assert value_of(deferring.resume(ticket, "allowed-once", signal=signal())) == "removed /tmp/x"


def test_a_forged_ticket_is_refused(deferring: ToolRegistry, clock: Clock, bodies: Bodies) -> None:
    genuine = pending_ticket(deferring)
    forged = {**genuine, "id": "made-up-by-hand"}
    with pytest.raises(TicketError, match="forged or altered"):
        deferring.resume(forged, "allowed-once", signal=signal())
    # A ticket made by a registry with another key, for the same store, is forged to this one.
    other = ApprovalTickets(deferring._tickets.store, key=b"someone else's key", clock=clock)
    with make(other) as elsewhere:
        foreign = pending_ticket(elsewhere)
    with pytest.raises(TicketError, match="forged or altered"):
        deferring.resume(foreign, "allowed-once", signal=signal())
    assert bodies.seen == []


@pytest.mark.parametrize(
    "not_a_ticket",
    ["hello", "{}", 42, None, {}, {"arguments": {}}, ["a"], {"arguments": {}, "dshtools_ticket": True}],
)
def test_what_is_not_a_ticket_is_refused(deferring: ToolRegistry, not_a_ticket: object) -> None:
    with pytest.raises(TicketError, match="not an approval ticket"):
        deferring.resume(not_a_ticket, "allowed-once", signal=signal())


def test_a_ticket_with_an_extra_field_is_refused(deferring: ToolRegistry) -> None:
    ticket = pending_ticket(deferring)
    with pytest.raises(TicketError, match="fields a ticket does not have"):
        deferring.resume({**ticket, "admin": True}, "allowed-once", signal=signal())


def test_an_expired_ticket_is_refused(deferring: ToolRegistry, clock: Clock, bodies: Bodies) -> None:
    fresh = pending_ticket(deferring, "/a")
    stale = pending_ticket(deferring, "/b")
    clock.now += 59.5
    assert value_of(deferring.resume(fresh, "allowed-once", signal=signal())) == "removed /a"
    clock.now += 0.5  # exactly the ttl after issue
    with pytest.raises(TicketError, match="expired"):
        deferring.resume(stale, "allowed-once", signal=signal())
    assert bodies.seen == [{"path": "/a"}]


def test_a_ticket_for_an_unknown_tool_is_refused(clock: Clock) -> None:
    tickets = ApprovalTickets(clock=clock)
    with make(tickets) as registry:
        ticket = pending_ticket(registry)
    # Another registry with the same store and key, but without the tool.
    with ToolRegistry(tickets=tickets) as bare, pytest.raises(TicketError, match="'rm', which is not registered"):
        bare.resume(ticket, "allowed-once", signal=signal())


def test_a_ticket_for_a_changed_tool_is_refused(clock: Clock, bodies: Bodies) -> None:
    tickets = ApprovalTickets(clock=clock)
    with make(tickets, bodies) as registry:
        issued = [pending_ticket(registry) for _ in range(4)]
    wider = {**PATH_SCHEMA, "properties": {"path": {"type": "string"}, "force": {"type": "boolean"}}}
    changes = [
        tool("rm", bodies, parameters=wider),
        attrs.evolve(tool("rm", bodies, parameters=PATH_SCHEMA), description="delete anything"),
        tool("rm", remove, parameters=PATH_SCHEMA),
    ]
    for ticket, definition in zip(issued, changes, strict=False):
        with ToolRegistry(tickets=tickets) as changed:
            changed.register(definition)
            with pytest.raises(TicketError, match="definition has changed"):
                changed.resume(ticket, "allowed-once", signal=signal())
    # The same definition registered again (another registry, same tools) resumes.
    with ToolRegistry(tickets=tickets) as same:
        same.register(tool("rm", bodies, parameters=PATH_SCHEMA))
        assert value_of(same.resume(issued[3], "allowed-once", signal=signal())) == "removed /tmp/x"
    assert bodies.seen == [{"path": "/tmp/x"}]


def typed_remove(path: str) -> str:
    return f"removed {path}"


def typed_archive(path: str) -> str:
    return f"archived {path}"


def test_a_typed_tool_whose_function_changed_is_refused(clock: Clock) -> None:
    """Same name, same parameters, another function: the fingerprint sees
    through the typed body to the function it calls."""
    tickets = ApprovalTickets(clock=clock)
    with ToolRegistry(approver=defer, tickets=tickets) as registry:
        registry.register(ToolDefinition.from_function(typed_remove, name="rm"))
        registry.add_pre_execute(lambda _e, _n: Ask())
        ticket = registry.execute(call("rm", {"path": "/x"})).meta["ticket"]
        again = registry.execute(call("rm", {"path": "/y"})).meta["ticket"]
    with ToolRegistry(tickets=tickets) as changed:
        changed.register(ToolDefinition.from_function(typed_archive, name="rm"))
        with pytest.raises(TicketError, match="definition has changed"):
            changed.resume(ticket, "allowed-once", signal=signal())
    with ToolRegistry(tickets=tickets) as same:
        same.register(ToolDefinition.from_function(typed_remove, name="rm"))
        assert value_of(same.resume(again, "allowed-once", signal=signal())) == "removed /y"


def test_a_closed_registry_refuses_to_resume(deferring: ToolRegistry) -> None:
    ticket = pending_ticket(deferring)
    deferring.close()
    with pytest.raises(RuntimeError, match="closed"):
        deferring.resume(ticket, "allowed-once", signal=signal())


def test_ticket_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="ttl"):
        ApprovalTickets(ttl=0)
    with pytest.raises(TypeError, match="TicketStore"):
        ApprovalTickets(object())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="key"):
        ApprovalTickets(key=b"")
    with pytest.raises(TypeError, match="ApprovalTickets"):
        ToolRegistry(tickets=MemoryTicketStore())  # type: ignore[arg-type]


# ---------------------------------------------------------------- file store


def test_the_file_store_claims_once_and_purges_expired_tickets(tmp_path: Path) -> None:
    store = FileTicketStore(tmp_path / "tickets")
    a, b = "a" * 64, "b" * 64
    store.add(a, 10.0)
    store.add(b, 30.0)
    with pytest.raises(FileExistsError):
        store.add(a, 10.0)
    with pytest.raises(ValueError, match="hex digest"):
        store.add("../escape", 10.0)
    assert store.claim("../escape") is False
    assert store.purge(now=20.0) == 1
    assert store.claim(a) is False
    assert store.claim(b) is True and store.claim(b) is False


@pytest.mark.timeout(60)
def test_a_ticket_dumped_to_disk_resumes_once_in_another_process(tmp_path: Path) -> None:
    """The field case: request 1 (this process) defers and hands the ticket
    out; request 2 (a fresh interpreter with the same tool and the same file
    store and key) resumes it; a replay here, afterwards, is refused."""
    tickets = ApprovalTickets(FileTicketStore(tmp_path / "store"), key="shared secret")
    with ToolRegistry(approver=defer, tickets=tickets) as registry:
        registry.register(tool("rm", remove, parameters=PATH_SCHEMA))
        registry.add_pre_execute(lambda _e, _n: Ask())
        ticket = registry.execute(call("rm", {"path": "/tmp/z"})).meta["ticket"]
        (tmp_path / "ticket.pickle").write_bytes(pickle.dumps(ticket))
        proc = run_python(
            f"""
import pickle
from dshtools import AbortController, ApprovalTickets, FileTicketStore, TicketError, ToolRegistry
from tests.helpers.calls import tool
from tests.registry.test_deferred_approval import PATH_SCHEMA, remove

ticket = pickle.loads(open({str(tmp_path / "ticket.pickle")!r}, "rb").read())
tickets = ApprovalTickets(FileTicketStore({str(tmp_path / "store")!r}), key="shared secret")
with ToolRegistry(tickets=tickets) as registry:
    registry.register(tool("rm", remove, parameters=PATH_SCHEMA))
    print(registry.resume(ticket, "allowed-once", signal=AbortController().signal).value)
    try:
        registry.resume(ticket, "allowed-once", signal=AbortController().signal)
    except TicketError:
        print("refused")
"""
        )
        assert proc.stdout.split() == ["removed", "/tmp/z", "refused"]
        with pytest.raises(TicketError, match="already resumed"):
            registry.resume(ticket, "allowed-once", signal=signal())
