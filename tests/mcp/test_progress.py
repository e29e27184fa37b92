"""MCP progress (docs/mcp.md#progress, docs/contract.md#mcp and docs/contract.md#policies): dshtools'
server sends ``notifications/progress`` for a call whose request carries
``_meta.progressToken`` (that token, ``progress``, ``total``, ``message``;
coalesced, the last update before the response, nothing for a request that
did not ask), and ``MCPClient`` reports a server's progress as the call's
own progress, which the registry's progress observers see.

The server side is read as raw JSON-RPC lines (``test_wire.RawServer``);
the client side runs against the same server through the SDK.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed (pip install 'dshtools[mcp]')")

from dshtools import ProgressUpdate, ToolExecution, ToolRegistry
from dshtools.mcp import MCPClient
from tests.mcp.client_support import call, env_for, value_of
from tests.mcp.test_wire import RawServer, raw_server

pytestmark = pytest.mark.timeout(60)

TOOLS = "progress_tools:registry"


def progress_of(server: RawServer, token: object) -> list[dict[str, Any]]:
    """The params of every ``notifications/progress`` sent for ``token``
    (matched by type and value), in order."""
    with server._cond:
        return [
            m["params"]
            for m in server.messages
            if m.get("method") == "notifications/progress"
            and type(m["params"]["progressToken"]) is type(token)
            and m["params"]["progressToken"] == token
        ]


def index_of_answer(server: RawServer, request_id: object) -> int:
    answer = server.answer(request_id)
    with server._cond:
        return next(i for i, m in enumerate(server.messages) if m is answer)


def last_progress_index(server: RawServer, token: object) -> int:
    with server._cond:
        return max(
            i
            for i, m in enumerate(server.messages)
            if m.get("method") == "notifications/progress" and m["params"]["progressToken"] == token
        )


def test_a_request_with_a_progress_token_gets_its_progress_in_order_and_the_last_before_the_answer(
    tmp_path: Path,
) -> None:
    n = 2000
    with raw_server(tmp_path, TOOLS) as server:
        server.request(1, "tools/call", {"name": "count", "arguments": {"n": n}, "_meta": {"progressToken": "tok-1"}})
        answered_at = index_of_answer(server, 1)
        sent = progress_of(server, "tok-1")
        assert sent, "no progress notification was sent"
        assert sent[-1] == {"progressToken": "tok-1", "progress": n - 1, "total": n, "message": f"step {n - 1}"}
        assert last_progress_index(server, "tok-1") < answered_at, "the last update came after the answer"
        steps = [p["progress"] for p in sent]
        assert steps == sorted(steps) and len(set(steps)) == len(steps)
        assert len(sent) < n  # coalesced, not one notification per report
        assert server.answer(1)["result"]["content"] == [{"type": "text", "text": f"counted {n}"}]
        assert server.finish() == 0


def test_only_requests_that_asked_get_progress_each_under_its_own_token_as_sent(tmp_path: Path) -> None:
    with raw_server(tmp_path, TOOLS) as server:
        server.call(3, "count", {"n": 50})  # no token: no progress
        server.request(4, "tools/call", {"name": "count", "arguments": {"n": 5}, "_meta": {"progressToken": "other"}})
        # An integer token comes back as an integer; unset fields are left out.
        server.request(5, "tools/call", {"name": "vague", "arguments": {"n": 3}, "_meta": {"progressToken": 7}})
        answered_at = index_of_answer(server, 5)
        server.answer(3)
        server.answer(4)
        assert server.finish() == 0
        sent = progress_of(server, 7)
        assert sent and sent[-1] == {"progressToken": 7, "progress": 2}
        assert last_progress_index(server, 7) < answered_at
        assert progress_of(server, "7") == []
        assert progress_of(server, "other")[-1] == {
            "progressToken": "other",
            "progress": 4,
            "total": 5,
            "message": "step 4",
        }
        with server._cond:
            tokens = {
                m["params"]["progressToken"] for m in server.messages if m.get("method") == "notifications/progress"
            }
        assert tokens == {"other", 7}


def test_our_client_reports_our_servers_progress_to_the_registrys_observers(tmp_path: Path) -> None:
    n = 500
    seen: list[tuple[str, ProgressUpdate]] = []
    last = threading.Event()

    def observer(execution: ToolExecution, update: ProgressUpdate) -> None:
        seen.append((execution.call_id, update))
        if update.progress == n - 1:
            last.set()

    command = [sys.executable, "-m", "dshtools", "mcp", "--tools", TOOLS]
    with MCPClient.stdio(command, env=env_for(tmp_path)) as client, ToolRegistry() as registry:
        client.register_tools(registry, prefix="remote_")
        remove = registry.add_progress_observer(observer)
        try:
            result = registry.execute(call("remote_count", {"n": n}, call_id="model-1"))
            assert value_of(result) == f"counted {n}"
            assert last.wait(10), f"the last update never reached the observer: {seen[-3:]}"
        finally:
            remove()
    assert {cid for cid, _ in seen} == {"model-1"}
    steps = [u.progress for _, u in seen]
    assert steps == sorted(steps)
    assert seen[-1][1] == ProgressUpdate(n - 1, n, f"step {n - 1}")


# ------------------------------------------------- the relay, interleavings forced


class _Observers:
    """The registry as ``ProgressRelay`` uses it: one progress observer,
    kept here after its removal so a test can deliver to it late."""

    def __init__(self) -> None:
        self.observe: Any = None
        self.removed = False

    def add_progress_observer(self, fn: Any) -> Any:
        self.observe = fn
        return lambda: setattr(self, "removed", True)


class _Session:
    """A client session whose sends are recorded. Send ``i`` (from 0) waits
    for ``holds[i]`` when there is one, after setting ``entered[i]``; with
    ``broken``, every send raises as for a client that went away."""

    def __init__(self, holds: int = 0, *, broken: bool = False) -> None:
        self.sent: list[tuple[object, ...]] = []
        self.holds = [threading.Event() for _ in range(holds)]
        self.entered = [threading.Event() for _ in range(holds)]
        self.started = 0
        self.broken = broken

    async def send_progress_notification(self, token: object, *update: object, related_request_id: object) -> None:
        import anyio.to_thread

        if self.broken:
            raise BrokenPipeError("the client went away")
        i, self.started = self.started, self.started + 1
        if i < len(self.holds):
            self.entered[i].set()
            await anyio.to_thread.run_sync(self.holds[i].wait, 10)
        self.sent.append((token, *update, related_request_id))


def _relay_run(
    session: _Session,
    script: Any,
    *,
    answered: bool | None = True,
    prepare: Any = lambda relay: None,
    after: Any = lambda: None,
) -> Any:
    """Run a relay on its own event loop for one call with token ``"tok"``:
    ``script(report)`` runs in a worker thread, ``report(n)`` being the
    registry's delivery of update ``n``; then the call finishes with
    ``answered`` (``None``: it does not finish) and ``after()`` runs on the
    loop; ``prepare(relay)`` runs first. Returns ``report``, for deliveries after the loop ended."""
    import types

    import anyio
    import anyio.to_thread

    from dshtools import AbortController
    from dshtools._mcp.progress import ProgressRelay

    observers = _Observers()
    signal = AbortController().signal
    execution = types.SimpleNamespace(signal=signal)
    ctx: Any = types.SimpleNamespace(params={"_meta": {"progressToken": "tok"}}, session=session, request_id=7)
    relay = ProgressRelay(observers)  # type: ignore[arg-type]
    prepare(relay)

    def report(n: int) -> None:
        observers.observe(execution, ProgressUpdate(float(n), None, None))

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            relay.start(tg)
            forward = relay.track(ctx, signal)
            assert forward is not None
            await anyio.to_thread.run_sync(script, report)
            if answered is not None:
                await relay.finish(forward, signal, answered=answered)
            after()
        relay.close()

    anyio.run(main)
    assert observers.removed
    return report


def _second_behind_a_held_first(session: _Session, report: Any) -> None:
    """Update 1 is reported and its send held (``session.holds[0]``); then
    update 2 is reported behind it."""
    report(1)
    assert session.entered[0].wait(10)
    report(2)


@pytest.mark.timeout(20)
def test_updates_reported_while_one_is_being_sent_are_coalesced_to_the_latest() -> None:
    session = _Session(holds=1)

    def script(report: Any) -> None:
        _second_behind_a_held_first(session, report)  # 2 schedules the next send
        report(3)  # the next send is scheduled already: replaces 2
        session.holds[0].set()

    scheduled: list[object] = []

    def count_sends(relay: Any) -> None:
        schedule = relay._schedule

        def counted(forward: object) -> None:
            scheduled.append(forward)
            schedule(forward)

        relay._schedule = counted

    _relay_run(session, script, prepare=count_sends)
    assert session.sent == [("tok", 1.0, None, None, 7), ("tok", 3.0, None, None, 7)]
    assert len(scheduled) == 2  # update 3 rode on the send scheduled for 2


@pytest.mark.timeout(20)
def test_an_update_whose_send_has_not_started_when_the_call_is_answered_is_sent_by_finish() -> None:
    """The send scheduled for update 1 starts only after ``finish``: a
    scheduler may run the two in either order. ``finish`` sends the update
    itself, before the answer, and the late send finds nothing left."""
    session = _Session()
    deferred: list[Any] = []
    schedule: list[Any] = []

    def defer_sends(relay: Any) -> None:
        schedule.append(relay._schedule)
        relay._schedule = deferred.append  # the send is scheduled, not started

    def start_deferred() -> None:
        for forward in deferred:
            schedule[0](forward)

    _relay_run(session, lambda report: report(1), prepare=defer_sends, after=start_deferred)
    assert len(deferred) == 1
    assert session.sent == [("tok", 1.0, None, None, 7)]


@pytest.mark.timeout(20)
def test_nothing_is_sent_for_a_call_that_finished_without_an_answer() -> None:
    session = _Session(holds=1)

    # The held send is released only after finish(answered=False).
    report = _relay_run(
        session, lambda report: _second_behind_a_held_first(session, report), answered=False, after=session.holds[0].set
    )
    report(3)  # after finish: the call is no longer followed
    assert session.sent == [("tok", 1.0, None, None, 7)]


@pytest.mark.timeout(20)
def test_a_send_that_fails_and_an_update_after_the_server_stopped_are_dropped_quietly() -> None:
    session = _Session(broken=True)
    report = _relay_run(session, lambda report: report(1), answered=None)
    report(2)  # still followed, but the loop has finished: nobody to tell
    assert session.sent == []
