"""The journal's contract, on every store (docs/contract.md#journal): one
suite, parametrized by the ``journal`` fixture (tests/durable/conftest.py)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dshtools import (
    APPROVAL_PENDING,
    JOURNAL_ERROR,
    OUTCOME_UNKNOWN,
    AbortController,
    Ask,
    ToolDefinition,
    ToolExecutionInput,
    ToolExecutionResult,
    ToolRegistry,
)
from dshtools.durable import CallRecord, Journal, JournalError
from tests.helpers.journals import open_journal

from .conftest import claim_in_dead_process, raw_sql

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


def counting_registry(
    journal: Journal, *, idempotent: bool = False, approver: Any = None
) -> tuple[ToolRegistry, list[int]]:
    runs: list[int] = []

    def body(args: Any, _run: Any) -> int:
        runs.append(args["n"])
        return int(args["n"]) * 2

    registry = ToolRegistry(journal=journal, approver=approver)
    registry.register(ToolDefinition("double", "doubles n", SCHEMA, body, idempotent=idempotent))
    return registry, runs


def call(session: str, call_id: str = "c1", n: object = 2, signal: Any = None) -> ToolExecutionInput:
    signal = AbortController().signal if signal is None else signal
    return ToolExecutionInput(call_id, "double", {"n": n}, signal, session=session)


@pytest.mark.timeout(30)
def test_a_settled_key_replays_its_recorded_result_without_running_the_body(journal: Journal, session: str) -> None:
    registry, runs = counting_registry(journal)
    first = registry.execute(call(session))
    again = registry.execute(call(session, n=5))  # a replay ignores what the call says now
    registry.close()
    assert runs == [2]
    assert first.value == 4 and first.body_invoked and "replayed" not in first.meta  # type: ignore[union-attr]
    assert again.value == 4 and again.meta["replayed"] is True  # type: ignore[union-attr]


@pytest.mark.timeout(30)
def test_records_carry_session_state_result_owner_times_and_attempts(journal: Journal, session: str) -> None:
    registry, _ = counting_registry(journal)
    registry.execute(call(session, "a"))
    registry.execute(call(session, "b", n="not a number"))  # never dispatched: settles too
    registry.close()
    a, b = journal.calls(session)
    assert isinstance(a, CallRecord)
    assert (a.session, a.call_id, a.tool, a.state, a.attempts) == (session, "a", "double", "settled", 1)
    assert a.result is not None and a.result.value == 4 and a.owner == journal.owner  # type: ignore[union-attr]
    assert a.claimed_at is not None and a.settled_at is not None and a.claimed_at <= a.settled_at
    assert b.result is not None and b.result.code == "INVALID_ARGS" and b.claimed_at is None and b.attempts == 0
    assert journal.calls("other-" + session) == []


@pytest.mark.timeout(30)
def test_a_journaled_registry_refuses_a_call_without_session(journal: Journal) -> None:
    registry, runs = counting_registry(journal)
    with pytest.raises(ValueError, match="session"):
        registry.execute(ToolExecutionInput("c", "double", {"n": 1}, AbortController().signal))
    with pytest.raises(ValueError, match="non-empty"):
        registry.execute(ToolExecutionInput("c", "double", {"n": 1}, AbortController().signal, session=""))
    registry.close()
    assert runs == []


@pytest.mark.timeout(60)
def test_a_dead_owners_claim_is_outcome_unknown_and_stays_so(spec: str, journal: Journal, session: str) -> None:
    claim_in_dead_process(spec, session, "c1")
    assert [r.call_id for r in journal.in_doubt() if r.session == session] == ["c1"]
    registry, runs = counting_registry(journal)
    first = registry.execute(call(session))
    again = registry.execute(call(session))
    registry.close()
    assert runs == []
    assert first.code == OUTCOME_UNKNOWN and first.body_invoked is True
    assert "effects are unknown" in first.content[0]["text"]
    assert again.code == OUTCOME_UNKNOWN and again.meta["replayed"] is True
    assert [r for r in journal.in_doubt() if r.session == session] == []


@pytest.mark.timeout(60)
def test_an_idempotent_tool_runs_again_after_its_owner_died(spec: str, journal: Journal, session: str) -> None:
    claim_in_dead_process(spec, session, "c1")
    registry, runs = counting_registry(journal, idempotent=True)
    result = registry.execute(call(session))
    registry.close()
    assert runs == [2] and result.value == 4 and result.meta["attempts"] == 2  # type: ignore[union-attr]
    [record] = journal.calls(session)
    assert record.attempts == 2 and record.state == "settled"


def when_found_claimed(journal: Journal, action: Callable[[], object]) -> None:
    """Run ``action`` each time ``journal.lookup`` finds the key claimed
    (a call is about to wait for its owner)."""
    lookup = journal.lookup

    def watched(session: str, call_id: str) -> CallRecord | None:
        record = lookup(session, call_id)
        if record is not None and record.state == "claimed":
            action()
        return record

    journal.lookup = watched  # type: ignore[method-assign]


@pytest.mark.timeout(30)
def test_a_live_owners_claim_is_waited_for_and_its_result_replayed(spec: str, journal: Journal, session: str) -> None:
    other = open_journal(spec)  # another live owner (same process, its own token)
    assert other.claim_call(session, "c1", "double", {"n": 2})
    registry, runs = counting_registry(journal)
    waiting = threading.Event()
    when_found_claimed(journal, waiting.set)
    out: list[Any] = []
    worker = threading.Thread(target=lambda: out.append(registry.execute(call(session))))
    worker.start()
    assert waiting.wait(10)
    from dshtools import ToolSuccess

    assert other.settle_call(session, "c1", "double", ToolSuccess(4, "4", body_invoked=True), claimed=True)
    worker.join(10)
    other.close()
    registry.close()
    assert runs == []
    assert out[0].value == 4 and out[0].meta["replayed"] is True


@pytest.mark.timeout(30)
def test_an_abort_while_waiting_for_a_live_owner_is_aborted_before_dispatch(
    spec: str, journal: Journal, session: str
) -> None:
    other = open_journal(spec)
    assert other.claim_call(session, "c1", "double", {"n": 2})
    registry, runs = counting_registry(journal)
    controller = AbortController()
    when_found_claimed(journal, lambda: controller.abort("user stop"))
    result = registry.execute(call(session, signal=controller.signal))
    registry.close()
    [record] = other.calls(session)
    other.close()
    assert runs == [] and result.code == "ABORTED_BEFORE_DISPATCH" and not result.body_invoked
    assert record.state == "claimed"  # the waiter's abort is its own, not the key's


@pytest.mark.timeout(30)
def test_ctrl_c_while_waiting_for_a_live_owner_publishes_aborted_before_dispatch_then_raises(
    spec: str, journal: Journal, session: str
) -> None:
    other = open_journal(spec)
    assert other.claim_call(session, "c1", "double", {"n": 2})
    registry, runs = counting_registry(journal)
    published: list[ToolExecutionResult] = []
    registry.add_result_observer(lambda _view, result: published.append(result))

    def ctrl_c() -> None:
        raise KeyboardInterrupt

    when_found_claimed(journal, ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        registry.execute(call(session))
    registry.close()
    [record] = other.calls(session)
    other.close()
    assert runs == []
    [result] = published
    assert result.code == "ABORTED_BEFORE_DISPATCH" and not result.body_invoked
    assert record.state == "claimed"  # the interrupt is this caller's, not the key's


def execute_while_failing(
    journal: Journal, session: str, caplog: pytest.LogCaptureFixture, method: str, message: str
) -> tuple[ToolExecutionResult, list[int]]:
    """One call, with the journal's ``method`` raising ``JournalError(message)``."""

    def fail(*_args: object, **_kwargs: object) -> bool:
        raise JournalError(message)

    setattr(journal, method, fail)
    registry, runs = counting_registry(journal)
    with caplog.at_level(logging.ERROR, logger="dshtools"):
        result = registry.execute(call(session))
    registry.close()
    return result, runs


@pytest.mark.timeout(30)
def test_a_claim_that_cannot_be_committed_is_journal_error_and_the_body_never_runs(
    journal: Journal, session: str, caplog: pytest.LogCaptureFixture
) -> None:
    result, runs = execute_while_failing(journal, session, caplog, "claim_call", "disk full")
    assert runs == [] and result.code == JOURNAL_ERROR and result.body_invoked is False
    assert "disk full" in str(result.meta["journal"])
    assert journal.calls(session) == []


@pytest.mark.timeout(30)
def test_a_settle_that_fails_still_returns_the_real_result_and_logs_an_error(
    journal: Journal, session: str, caplog: pytest.LogCaptureFixture
) -> None:
    result, runs = execute_while_failing(journal, session, caplog, "settle_call", "connection lost")
    assert runs == [2] and result.value == 4 and result.body_invoked  # type: ignore[union-attr]
    assert str(result.meta["journal"]).startswith("not recorded: ") and "connection lost" in str(result.meta["journal"])
    assert any("not recorded" in r.getMessage() for r in caplog.records if r.levelno == logging.ERROR)


@pytest.mark.timeout(30)
def test_approval_pending_leaves_the_key_open(journal: Journal, session: str) -> None:
    registry, runs = counting_registry(journal, approver=lambda _request: "deferred")
    registry.add_pre_execute(lambda _execution, _next: Ask())
    result = registry.execute(call(session))
    registry.close()
    assert result.code == APPROVAL_PENDING and runs == []
    assert journal.calls(session) == []


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "column, value",
    [
        ("result", "{not json"),
        ("result", json.dumps({"format": 1, "body_invoked": "yes", "content": [], "contexts": [], "meta": {}})),
        ("result", json.dumps({"format": 99})),
        ("state", "exploded"),
        ("owner", "../../etc/passwd"),
        ("attempts", -3),
    ],
)
def test_a_corrupt_or_hostile_row_is_a_journal_error_never_a_wrong_result(
    spec: str, journal: Journal, session: str, column: str, value: object
) -> None:
    registry, runs = counting_registry(journal)
    registry.execute(call(session))
    raw_sql(spec, f"UPDATE dshtools_calls SET {column} = ? WHERE session = ?", (value, session))
    try:
        if column == "owner":
            raw_sql(spec, "UPDATE dshtools_calls SET state = 'claimed', result = NULL WHERE session = ?", (session,))
            record = journal.lookup(session, "c1")
            assert record is not None
            with pytest.raises(JournalError):
                journal.owner_alive(record)
        else:
            with pytest.raises(JournalError):
                journal.lookup(session, "c1")
        result = registry.execute(call(session))
        registry.close()
    finally:  # the PostgreSQL database is shared by the other tests
        raw_sql(spec, "DELETE FROM dshtools_calls WHERE session = ?", (session,))
    assert runs == [2] and result.code == JOURNAL_ERROR and result.body_invoked is False


@pytest.mark.timeout(30)
def test_purge_deletes_old_settled_records_only(journal: Journal, spec: str, session: str) -> None:
    """``a`` is made to have been settled in 1970 (epoch second 1 000 000),
    ``b`` now, ``open`` is claimed and never settled. The cutoffs are placed
    around 1970 so that the purges touch no other test's records (the
    PostgreSQL database is shared)."""
    registry, _ = counting_registry(journal)
    registry.execute(call(session, "a"))
    registry.execute(call(session, "b"))
    registry.close()
    raw_sql(spec, "UPDATE dshtools_calls SET settled_at = 1000000.0 WHERE session = ? AND call_id = 'a'", (session,))
    assert journal.claim_call(session, "open", "double", {})
    assert journal.purge(older_than=time.time() - 500_000) == 0  # settled before epoch second 500 000: none
    with pytest.raises(ValueError, match=">= 0"):
        journal.purge(older_than=-1)
    assert journal.purge(older_than=time.time() - 2_000_000) == 1  # settled before epoch second 2 000 000: a
    assert sorted(r.call_id for r in journal.calls(session)) == ["b", "open"]


@pytest.mark.timeout(30)
def test_the_journal_is_a_ticket_store_whose_tickets_are_claimed_once(journal: Journal) -> None:
    from dshtools import ApprovalTickets
    from dshtools._registry.tickets import TicketStore

    assert isinstance(journal, TicketStore)
    ApprovalTickets(journal)  # accepted as a store
    key = os.urandom(32).hex()
    journal.add(key, 2e9)
    assert [journal.claim(key), journal.claim(key)] == [True, False]


@pytest.mark.timeout(120)
def test_several_processes_racing_on_one_key_run_its_body_exactly_once(spec: str, session: str, tmp_path: Path) -> None:
    effects = tmp_path / "effects"
    code = (
        "import os, sys\n"
        "sys.path.insert(0, sys.argv[4])\n"
        "from dshtools import AbortController, ToolDefinition, ToolExecutionInput, ToolRegistry\n"
        "from tests.durable.conftest import open_journal\n"
        "def body(args, run):\n"
        "    with open(sys.argv[3], 'a') as f:\n"
        "        f.write('ran\\n')\n"
        "    return 7\n"
        "j = open_journal(sys.argv[1])\n"
        "r = ToolRegistry(journal=j)\n"
        "r.register(ToolDefinition('t', 'd', {'type': 'object'}, body))\n"
        "sys.stdin.readline()\n"
        "res = r.execute(ToolExecutionInput('k', 't', {}, AbortController().signal, session=sys.argv[2]))\n"
        "print(res.value)\n"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, spec, session, str(effects), str(Path.cwd())],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    for proc in procs:  # all started and waiting: release them together
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    outputs = [proc.communicate(timeout=100)[0].strip() for proc in procs]
    assert outputs == ["7"] * 4
    assert effects.read_text() == "ran\n"


def test_sqlite_creates_its_files_owner_only(tmp_path: Path) -> None:
    from dshtools.durable import SqliteJournal

    with SqliteJournal(tmp_path / "j.db") as journal:
        journal.add("a" * 64, 2e9)
        modes = {p.name: p.stat().st_mode & 0o777 for p in tmp_path.iterdir()}
    assert modes and set(modes.values()) == {0o600}, modes


def test_a_dsn_password_never_reaches_the_error_or_repr() -> None:
    from dshtools.durable import PostgresJournal

    with pytest.raises(JournalError) as info:
        PostgresJournal("postgresql://someone:s3cret-pw@127.0.0.1:1/db?connect_timeout=2")
    assert "s3cret-pw" not in str(info.value) and "s3cret-pw" not in repr(info.value)


@pytest.mark.timeout(30)
def test_a_ticket_deferred_in_one_process_resumes_in_another_and_settles_the_key(
    spec: str, journal: Journal, session: str
) -> None:
    issuing, runs = counting_registry(journal, approver=lambda _request: "deferred")
    issuing.add_pre_execute(lambda _execution, _next: Ask())
    pending = issuing.execute(call(session))
    issuing.close()
    assert pending.code == APPROVAL_PENDING and journal.calls(session) == []
    assert pending.meta["ticket"]["session"] == session  # type: ignore[index]
    other = open_journal(spec)  # another process's journal on the same store
    resuming, resumed_runs = counting_registry(other)
    result = resuming.resume(pending.meta["ticket"], "allowed-once", signal=AbortController().signal)
    again = resuming.execute(call(session))
    resuming.close()
    other.close()
    assert runs == [] and resumed_runs == [2]
    assert result.value == 4 and again.meta["replayed"] is True  # type: ignore[union-attr]
    [record] = journal.calls(session)
    assert record.state == "settled" and record.attempts == 1


def test_an_owner_on_another_machine_is_judged_by_its_lease_or_its_lock(
    store: str, spec: str, journal: Journal, session: str
) -> None:
    """SQLite: alive until its lease runs out. PostgreSQL: alive while its
    connection holds the key's lock (none here: dead at once)."""
    foreign = "another-host/4242/1/0123456789abcdef"
    for call_id, lease_until in (("future", time.time() + 3600), ("past", time.time() - 1)):
        raw_sql(
            spec,
            "INSERT INTO dshtools_calls (session, call_id, tool, state, owner, claimed_at, settled_at, attempts, "
            "result, lease_until, arguments) VALUES (?, ?, 'double', 'claimed', ?, ?, NULL, 1, NULL, ?, '{}')",
            (session, call_id, foreign, time.time(), lease_until),
        )
    alive = {r.call_id: journal.owner_alive(r) for r in journal.calls(session)}
    assert alive == ({"future": True, "past": False} if store == "sqlite" else {"future": False, "past": False})


@pytest.mark.timeout(30)
def test_a_wrapper_calling_next_on_two_threads_claims_the_key_once(journal: Journal, session: str) -> None:
    registry, runs = counting_registry(journal)
    barrier = threading.Barrier(2)

    def hedge(_execution: object, nxt: Any) -> Any:
        results: list[Any] = []

        def attempt() -> None:
            barrier.wait()
            results.append(nxt())

        other = threading.Thread(target=attempt)
        other.start()
        attempt()
        other.join()
        return results[0]

    registry.add_around_dispatch(hedge)
    result = registry.execute(call(session))
    registry.close()
    assert runs == [2, 2] and result.value == 4  # type: ignore[union-attr]
    [record] = journal.calls(session)
    assert record.state == "settled" and record.attempts == 1


def test_a_journal_is_attached_only_to_an_open_registry_without_one(journal: Journal) -> None:
    from dshtools._registry.lifecycle import attach_journal

    registry = ToolRegistry()
    attach_journal(registry, journal)
    with pytest.raises(ValueError, match="has none"):
        attach_journal(registry, journal)
    registry.close()
    with pytest.raises(RuntimeError, match="closed"):
        attach_journal(registry, journal)


@pytest.mark.timeout(30)
def test_the_same_key_executed_twice_at_once_in_one_process_runs_its_body_once(journal: Journal, session: str) -> None:
    second_waits = threading.Event()
    runs: list[int] = []

    def body(args: Any, _run: Any) -> int:
        runs.append(args["n"])
        assert second_waits.wait(10)  # the second execution found the key claimed
        return 4

    registry = ToolRegistry(journal=journal)
    registry.register(ToolDefinition("double", "doubles n", SCHEMA, body))
    when_found_claimed(journal, second_waits.set)
    out: list[Any] = []
    first = threading.Thread(target=lambda: out.append(registry.execute(call(session))))
    first.start()
    second = registry.execute(call(session))
    first.join(10)
    registry.close()
    assert runs == [2]
    results = [out[0], second]  # either may have claimed the key first
    assert [r.value for r in results] == [4, 4]
    assert sorted(bool(r.meta.get("replayed")) for r in results) == [False, True]
