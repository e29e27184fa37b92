"""Stress: deferred approval under aborts at random moments, with the
limits and the timeout installed (docs/contract.md#policies; issue 25: every
policy under the randomized interleaving test).

Half the calls are deferred by the approver. Each ticket is then resumed by
two threads at once, each with its own signal, some aborted before or
during the resume. What must hold: exactly one of the two resumes is
accepted and the other raises ``TicketError``; a body runs at most once
per ticket and only under an ``"allowed-once"`` resume; each call id is
published once by ``execute`` and, when deferred, once more by the
accepted resume; ``ABORTED_BEFORE_DISPATCH`` and ``DENIED`` mean the body
did not run; no body runs after the call that started it returned, and no
listener is left on any caller's signal."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Sequence

import pytest

from dshtools import (
    APPROVAL_PENDING,
    DENIED,
    TOOL_ABORTED,
    TOOL_ABORTED_BEFORE_DISPATCH,
    AbortController,
    ApprovalDecision,
    ApprovalRequest,
    Ask,
    ConcurrencyLimit,
    TicketError,
    TimeoutPolicy,
    ToolExecutionResult,
    ToolRegistry,
)
from tests.helpers.calls import tool
from tests.registry.random_aborts import Aborter, Tracker, arm, drive, in_threads, plan_calls

CALLER_THREADS = 6
LIMIT = 2


@pytest.mark.timeout(120)
def test_tickets_resumed_twice_at_once_under_random_aborts_run_at_most_once() -> None:
    seen = Tracker()
    plans = plan_calls(
        2517,
        300,
        defer=lambda rng: rng.random() < 0.5,
        wait=[0.0, 0.0005, 0.002],
        abort=["none", "none", "before", "random"],
        delay=lambda rng: rng.uniform(0, 0.004),
        decision=["allowed-once", "allowed-once", "rejected"],
        resume_abort=["none", "none", "before", "random", "running"],
    )
    by_id = {plan["id"]: plan for plan in plans}

    def approver(request: ApprovalRequest) -> ApprovalDecision:
        return "deferred" if by_id[request.execution.call_id]["defer"] else "allowed-once"

    with ToolRegistry(max_workers=4, approver=approver) as registry:
        registry.register(tool("work", seen.waiting_body(lambda args, run, attempt: "done"), timeout=0.05))
        registry.add_pre_execute(lambda execution, next: Ask("may I?"))
        registry.add_around_dispatch(ConcurrencyLimit(LIMIT))
        registry.add_around_dispatch(TimeoutPolicy())
        registry.add_result_observer(seen.observer)

        results, controllers = drive(registry, plans, ("wait",), seen, threads=CALLER_THREADS)
        pending = {cid: r for cid, r in results.items() if r.code == APPROVAL_PENDING}
        invoked_before_resume = Counter(seen.invoked)

        aborter = Aborter()
        resumed: dict[str, list[ToolExecutionResult | TicketError]] = {cid: [] for cid in pending}
        resume_controllers: list[AbortController] = []
        lock = threading.Lock()

        def resume_one(cid: str, start: threading.Barrier) -> None:
            plan = by_id[cid]
            controller = AbortController()
            with lock:
                resume_controllers.append(controller)
            arm(plan["resume_abort"], controller, call_id=cid, delay=plan["delay"], aborter=aborter, tracker=seen)
            start.wait(10)
            try:
                outcome: ToolExecutionResult | TicketError = registry.resume(
                    pending[cid].meta["ticket"], plan["decision"], signal=controller.signal
                )
            except TicketError as refused:
                outcome = refused
            with seen.lock:
                if not isinstance(outcome, TicketError) and cid in seen.running:
                    seen.problems.append(f"{cid}: resume returned while its body was running")
            with lock:
                resumed[cid].append(outcome)

        def resumer(chunk: Sequence[str]) -> None:
            for cid in chunk:
                start = threading.Barrier(2)
                twin = threading.Thread(target=resume_one, args=(cid, start))
                twin.start()
                resume_one(cid, start)
                twin.join(30)

        in_threads(CALLER_THREADS, sorted(pending), resumer)
        aborter.stop()

    assert seen.problems == []
    assert len(results) == len(plans)
    for plan in plans:
        if not plan["defer"]:
            assert results[plan["id"]].code != APPROVAL_PENDING, plan
        elif plan["abort"] == "none":
            assert plan["id"] in pending, plan
        elif plan["abort"] == "before":
            assert results[plan["id"]].code == TOOL_ABORTED_BEFORE_DISPATCH, plan
    codes: Counter[str | None] = Counter()
    for plan in plans:
        cid = plan["id"]
        first = results[cid]
        if cid not in pending:
            assert seen.observed[cid] == 1, cid
            assert first.body_invoked is (seen.invoked[cid] > 0), cid
            continue
        assert invoked_before_resume[cid] == 0, f"{cid}: a deferred call's body ran before its resume"
        outcomes = resumed[cid]
        assert len(outcomes) == 2, cid
        accepted = [o for o in outcomes if not isinstance(o, TicketError)]
        assert len(accepted) == 1, (cid, outcomes)
        (result,) = accepted
        codes[result.code] += 1
        assert seen.observed[cid] == 2, f"{cid}: published by execute and once by the accepted resume"
        assert seen.invoked[cid] <= 1, f"{cid}: a ticket's body ran twice"
        assert result.body_invoked is (seen.invoked[cid] == 1), cid
        if plan["decision"] == "rejected":
            # An aborted signal comes first, as for execute (docs/policies.md).
            assert result.code in (DENIED, TOOL_ABORTED_BEFORE_DISPATCH) and seen.invoked[cid] == 0, (cid, result)
        if result.code in (TOOL_ABORTED_BEFORE_DISPATCH, DENIED):
            assert seen.invoked[cid] == 0, cid
        if result.code == TOOL_ABORTED:
            assert seen.invoked[cid] == 1, cid
        assert controllers[cid].signal.listener_count == 0
    assert all(c.signal.listener_count == 0 for c in resume_controllers)
    assert seen.running == set()
    assert codes[None] > 10 and codes[DENIED] > 5 and codes[TOOL_ABORTED_BEFORE_DISPATCH] > 5, codes
