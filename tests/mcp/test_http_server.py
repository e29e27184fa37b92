"""dshtools' MCP server over streamable HTTP (``dshtools.mcp.serve_http``,
docs/mcp.md#the-server-over-http), served in this process on a free port:
calls through ``MCPClient.http``, the bearer token and the DNS-rebinding
checks through raw ``httpx`` requests, a cancel that reaches the body and
leaves its request unanswered, idle sessions, and a stop that aborts and
joins the calls in flight."""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed (pip install 'dshtools[mcp]')")
pytest.importorskip("uvicorn", reason="the HTTP server needs uvicorn (installed with mcp)")

import httpx

from dshtools import (
    TOOL_ABORTED,
    AbortController,
    ToolDefinition,
    ToolExecutionResult,
    ToolRegistry,
    ToolRunContext,
)
from dshtools._cli.main import main
from dshtools.mcp import MCPClient, serve_http
from tests.helpers.processes import run_cli
from tests.mcp.client_support import call, client_threads, eventually, http_server_command, value_of

pytestmark = pytest.mark.timeout(60)

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}},
}
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


class Bodies:
    """The ``wait`` tool's bodies: each sets ``started``, waits for its
    signal, records the abort reason and sets ``ended`` as it returns."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.ended = threading.Event()
        self.reasons: list[str] = []

    def wait(self, _args: Any, run: ToolRunContext) -> str:
        self.started.set()
        try:
            run.signal.wait()
            self.reasons.append(str(run.signal.reason))
            return "stopped"
        finally:
            self.ended.set()


def registry_with(bodies: Bodies) -> ToolRegistry:
    registry = ToolRegistry()
    registry.register(
        ToolDefinition(
            "add",
            "Add two integers",
            {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}},
            lambda args, _run: {"total": args["a"] + args["b"]},
        )
    )
    registry.register(
        ToolDefinition(
            "wait", "Wait until cancelled", {"type": "object"}, bodies.wait, is_concurrency_safe=lambda _a: True
        )
    )
    return registry


@contextmanager
def serving(
    registry: ToolRegistry, stop: AbortController | None = None, port: int = 0, **options: Any
) -> Iterator[tuple[str, list[int]]]:
    """``serve_http(registry, "127.0.0.1", port, **options)`` on a thread,
    stopped by ``stop`` (the test may abort it first; else on leaving the
    block): yields its URL and the list its return status lands in once it
    returned."""
    stop = stop or AbortController()
    urls: list[str] = []
    ready = threading.Event()
    status: list[int] = []

    def on_ready(url: str) -> None:
        urls.append(url)
        ready.set()

    def run() -> None:
        try:
            status.append(serve_http(registry, "127.0.0.1", port, signal=stop.signal, on_ready=on_ready, **options))
        finally:
            ready.set()

    server = threading.Thread(target=run, name="test-serve-http")
    server.start()
    try:
        assert ready.wait(20) and urls, "the server did not start"
        yield urls[0], status
    finally:
        stop.abort("the test is done")
        server.join(20)
        assert not server.is_alive(), "serve_http did not return after its signal was aborted"
    assert status == [0]


def initialize(client: httpx.Client, url: str, **headers: str) -> httpx.Response:
    return client.post(url, json=INITIALIZE, headers={**ACCEPT, **headers})


def events(response: httpx.Response) -> list[dict[str, Any]]:
    """The JSON-RPC messages of an SSE (or JSON) response body."""
    if response.headers.get("content-type", "").startswith("application/json"):
        return [response.json()]
    return [
        json.loads(line[5:]) for line in response.text.splitlines() if line.startswith("data:") and line[5:].strip()
    ]


def open_session(client: httpx.Client, url: str, **headers: str) -> dict[str, str]:
    """Initialize a session; the headers its later requests carry."""
    opened = initialize(client, url, **headers)
    assert opened.status_code == 200, opened.text
    session = {
        **ACCEPT,
        **headers,
        "mcp-session-id": opened.headers["mcp-session-id"],
        "mcp-protocol-version": "2025-06-18",
    }
    sent = client.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session)
    assert sent.status_code == 202
    return session


def test_calls_go_through_the_registry_over_http() -> None:
    bodies = Bodies()
    with (
        registry_with(bodies) as registry,
        serving(registry) as (url, _),
        MCPClient.http(url) as client,
        ToolRegistry() as local,
    ):
        assert [t["name"] for t in client.list_tools()] == ["add", "wait"]
        client.register_tools(local, prefix="remote_")
        # No output schema: the value comes back as the server's one text block.
        assert value_of(local.execute(call("remote_add", {"a": 20, "b": 22}))) == '{"total": 42}'
        # The server's own gate: bad arguments are the registry's INVALID_ARGS.
        with httpx.Client(timeout=10) as raw:
            session = open_session(raw, url)
            bad = {
                "jsonrpc": "2.0",
                "id": 7,
                "method": "tools/call",
                "params": {"name": "add", "arguments": {"a": "x"}},
            }
            (answer,) = events(raw.post(url, json=bad, headers=session))
            assert answer["id"] == 7 and answer["result"]["isError"] is True
            assert (
                "INVALID_ARGS" in answer["result"]["content"][0]["text"]
                or "a" in answer["result"]["content"][0]["text"]
            )
    assert client_threads() == []


def test_a_token_is_required_and_compared_exactly() -> None:
    with registry_with(Bodies()) as registry, serving(registry, token="s3cret") as (url, _):
        with httpx.Client(timeout=10) as raw:
            for headers in (
                {},
                {"Authorization": "Bearer s3cre"},
                {"Authorization": "Bearer s3crets"},
                {"Authorization": "Basic s3cret"},
            ):
                refused = initialize(raw, url, **headers)
                assert refused.status_code == 401, headers
                assert refused.headers["www-authenticate"] == "Bearer"
            assert initialize(raw, url, Authorization="Bearer s3cret").status_code == 200
            assert (
                initialize(raw, url, Authorization="bearer s3cret").status_code == 200
            )  # the scheme is case-insensitive
        with pytest.raises(ConnectionError, match="HTTP 401"):
            MCPClient.http(url, headers={"Authorization": "Bearer wrong"})
        with MCPClient.http(url, headers={"Authorization": "Bearer s3cret"}) as client, ToolRegistry() as local:
            client.register_tools(local)
            assert json.loads(value_of(local.execute(call("add", {"a": 1, "b": 2})))) == {"total": 3}


def test_a_foreign_host_or_origin_is_refused_dns_rebinding() -> None:
    with registry_with(Bodies()) as registry, serving(registry, allowed_origins=["https://app.example"]) as (url, _):
        port = url.split(":")[2].split("/")[0]
        with httpx.Client(timeout=10) as raw:
            assert initialize(raw, url, Host="evil.example.com").status_code == 421
            assert initialize(raw, url, Host=f"evil.example.com:{port}").status_code == 421
            assert initialize(raw, url, Origin="http://evil.example.com").status_code == 403
            assert initialize(raw, url, Host=f"localhost:{port}", Origin=f"http://localhost:{port}").status_code == 200
            assert initialize(raw, url, Origin="https://app.example").status_code == 200  # the caller's own
            assert raw.post(url.replace("/mcp", "/other"), json=INITIALIZE, headers=ACCEPT).status_code == 404


def test_a_host_that_is_not_loopback_needs_allow_remote() -> None:
    with ToolRegistry() as registry, pytest.raises(ValueError, match="allow_remote"):
        serve_http(registry, "0.0.0.0", 0)
    with ToolRegistry() as registry, pytest.raises(ValueError, match="session_idle_timeout"):
        serve_http(registry, "127.0.0.1", 0, session_idle_timeout=0)


def test_a_cancel_over_http_aborts_and_joins_the_body_and_leaves_the_request_unanswered() -> None:
    """A19 over HTTP: the cancelled request's stream ends with no message
    for its id (the SDK's transport alone would send -32800)."""
    bodies = Bodies()
    with registry_with(bodies) as registry, serving(registry) as (url, _), httpx.Client(timeout=20) as raw:
        session = open_session(raw, url)
        request = {"jsonrpc": "2.0", "id": "w-1", "method": "tools/call", "params": {"name": "wait", "arguments": {}}}
        streamed: list[httpx.Response] = []

        def post() -> None:
            streamed.append(raw.post(url, json=request, headers=session))

        poster = threading.Thread(target=post)
        poster.start()
        assert bodies.started.wait(10)
        # A cancel naming another id, and one naming 1 for "w-1", reach nothing.
        for other in ("w-2", 1):
            note = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": other}}
            assert raw.post(url, json=note, headers=session).status_code == 202
        assert not bodies.ended.wait(0.2)
        cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "w-1", "reason": "x"}}
        assert raw.post(url, json=cancel, headers=session).status_code == 202
        poster.join(15)
        assert not poster.is_alive()
        assert bodies.ended.is_set()
        assert bodies.reasons == ["the MCP client cancelled the request (notifications/cancelled)"]
        (response,) = streamed
        assert response.status_code == 200
        assert events(response) == []  # no result, no -32800: nothing for the cancelled request
        ping = {"jsonrpc": "2.0", "id": 9, "method": "ping"}
        assert events(raw.post(url, json=ping, headers=session)) == [{"jsonrpc": "2.0", "id": 9, "result": {}}]


def test_mcp_client_cancel_over_http_reaches_the_body() -> None:
    bodies = Bodies()
    with (
        registry_with(bodies) as registry,
        serving(registry) as (url, _),
        MCPClient.http(url, cancel_grace=5.0) as client,
        ToolRegistry() as local,
    ):
        client.register_tools(local)
        controller = AbortController()
        outcome: list[ToolExecutionResult] = []
        worker = threading.Thread(target=lambda: outcome.append(local.execute(call("wait", {}, controller))))
        worker.start()
        assert bodies.started.wait(10)
        controller.abort("the user pressed stop")
        worker.join(15)
        (result,) = outcome
        assert result.code == TOOL_ABORTED
        assert result.meta["remote"] == "answered"  # the server ended the request well inside the grace
        assert bodies.ended.is_set() and len(bodies.reasons) == 1


def test_stopping_aborts_and_joins_the_calls_in_flight_and_answers_them() -> None:
    bodies = Bodies()
    stop = AbortController()
    with (
        registry_with(bodies) as registry,
        httpx.Client(timeout=20) as raw,
        serving(registry, stop) as (url, status),
    ):
        session = open_session(raw, url)
        streamed: list[httpx.Response] = []
        request = {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "wait", "arguments": {}}}
        poster = threading.Thread(target=lambda: streamed.append(raw.post(url, json=request, headers=session)))
        poster.start()
        assert bodies.started.wait(10)
        stop.abort("shutdown")
        eventually(lambda: status != [], timeout=20, what="serve_http to return")
        assert status == [0]
        # serve_http returned only after the body was joined.
        assert bodies.ended.is_set() and bodies.reasons == ["the MCP server is stopping"]
        poster.join(10)
        (answer,) = events(streamed[0])
        assert answer["id"] == 5 and answer["result"]["isError"] is True
        assert "the MCP server is stopping" in answer["result"]["content"][0]["text"]


def test_an_idle_session_expires() -> None:
    """Each request restarts the idle timer, so the check waits out the
    timeout between its requests (a wait for the server's timer, bounded)."""
    with (
        registry_with(Bodies()) as registry,
        serving(registry, session_idle_timeout=0.2) as (url, _),
        httpx.Client(timeout=10) as raw,
    ):
        session = open_session(raw, url)
        ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
        assert raw.post(url, json=ping, headers=session).status_code == 200
        idle = threading.Event()
        for _ in range(20):
            idle.wait(0.5)
            if raw.post(url, json=ping, headers=session).status_code == 404:
                break
        else:
            raise AssertionError("the idle session never expired")


def test_the_signal_stops_a_server_that_never_served() -> None:
    stopped = AbortController()
    stopped.abort("at once")
    with ToolRegistry() as registry:
        assert serve_http(registry, "127.0.0.1", 0, signal=stopped.signal) == 0


def test_the_command_line_refuses_a_remote_host(tmp_path: Path) -> None:
    (tmp_path / "few_tools.py").write_text("from dshtools import ToolRegistry\nregistry = ToolRegistry()\n")
    remote = run_cli(tmp_path, "mcp", "--http", "0.0.0.0:0", "--tools", "few_tools:registry")
    assert remote.returncode == 2
    assert "not a loopback address" in remote.stderr and "--allow-remote" in remote.stderr


def test_the_command_line_refuses_an_address_without_a_port(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["mcp", "--http", "localhost", "--tools", "few_tools:registry"]) == 2  # refused while parsing
    assert "expected HOST:PORT" in capsys.readouterr().err


class Named:
    """``wait`` bodies by call id: which started, and each one's abort reason."""

    def __init__(self) -> None:
        self.lock = threading.Condition()
        self.started: list[str] = []
        self.aborted: list[str] = []

    def wait(self, _args: Any, run: ToolRunContext) -> str:
        with self.lock:
            self.started.append(run.call_id)
            self.lock.notify_all()
        run.signal.wait()
        with self.lock:
            self.aborted.append(run.call_id)
            self.lock.notify_all()
        return "stopped"

    def until(self, check: Any) -> None:
        with self.lock:
            assert self.lock.wait_for(lambda: check(self), timeout=10)


def test_ids_are_matched_exactly_as_sent_over_http() -> None:
    """A19: the SDK folds 10 and "1_0" (and 1 and "1") into one id; over
    HTTP as over stdio they stay four requests, each cancelled only by its
    own id, each answered under its own id; a reused id in flight is -32600,
    and another session's id 10 is another request."""
    named = Named()
    registry = ToolRegistry()
    registry.register(
        ToolDefinition("wait", "Wait", {"type": "object"}, named.wait, is_concurrency_safe=lambda _a: True)
    )
    with registry, serving(registry) as (url, _), httpx.Client(timeout=20) as raw:
        session = open_session(raw, url)
        other = open_session(raw, url)
        answers: dict[str, list[dict[str, Any]]] = {}

        def post(rid: int | str, headers: dict[str, str], key: str) -> None:
            request = {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": {"name": "wait", "arguments": {}}}
            with httpx.Client(timeout=20) as own:
                answers[key] = events(own.post(url, json=request, headers=headers))

        posters = [threading.Thread(target=post, args=(rid, session, repr(rid))) for rid in (10, "1_0", 1, "1")] + [
            threading.Thread(target=post, args=(10, other, "other 10"))
        ]
        for poster in posters:
            poster.start()
        named.until(lambda n: len(n.started) == 5)
        # Call ids name the client's ids (the text of 1 and "1" alike).
        assert sorted(named.started) == ["mcp:1", "mcp:1", "mcp:10", "mcp:10", "mcp:1_0"]
        (duplicate,) = events(raw.post(url, json={"jsonrpc": "2.0", "id": 10, "method": "ping"}, headers=session))
        assert duplicate == {
            "jsonrpc": "2.0",
            "id": 10,
            "error": {"code": -32600, "message": "Invalid Request: a request with this id is still in flight"},
        }

        def cancel(rid: object, headers: dict[str, str]) -> None:
            note = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": rid}}
            assert raw.post(url, json=note, headers=headers).status_code == 202

        cancel(10, session)
        named.until(lambda n: len(n.aborted) == 1)
        cancel("1", session)
        named.until(lambda n: len(n.aborted) == 2)
        posters[0].join(10)
        posters[3].join(10)
        assert answers["10"] == [] and answers["'1'"] == []  # cancelled: unanswered
        assert "'1_0'" not in answers and "1" not in answers and "other 10" not in answers  # still running
        cancel("1_0", session)
        cancel(1, session)
        cancel(10, other)
        for poster in posters:
            poster.join(10)
        assert all(answers[key] == [] for key in ("'1_0'", "1", "other 10"))
        assert len(named.aborted) == 5


def test_the_command_line_takes_its_token_from_the_environment(tmp_path: Path) -> None:
    (tmp_path / "few_tools.py").write_text("from dshtools import ToolRegistry\nregistry = ToolRegistry()\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    with http_server_command("few_tools:registry", {**env, "DSHTOOLS_MCP_TOKEN": "from-env"}, cwd=tmp_path) as (
        ready,
        url,
    ):
        assert "(a bearer token required)" in ready, ready
        with httpx.Client(timeout=10) as raw:
            assert initialize(raw, url).status_code == 401
            assert initialize(raw, url, Authorization="Bearer from-env").status_code == 200


@pytest.mark.timeout(120)
def test_two_hundred_initializes_with_id_1_at_once_each_get_their_own_session() -> None:
    """N15: every client's ``initialize`` has id 1; requests outside a
    session are told apart before the session exists."""
    count = 200
    barrier = threading.Barrier(count)
    sessions: list[str] = []
    problems: list[str] = []

    def connect(url: str) -> None:
        with httpx.Client(timeout=60) as raw:
            barrier.wait()
            opened = initialize(raw, url)
            (answer,) = events(opened)
            if opened.status_code != 200 or answer.get("id") != 1 or "result" not in answer:
                problems.append(f"{opened.status_code}: {answer}")
            else:
                sessions.append(opened.headers["mcp-session-id"])

    with registry_with(Bodies()) as registry, serving(registry) as (url, _):
        clients = [threading.Thread(target=connect, args=(url,)) for _ in range(count)]
        for client in clients:
            client.start()
        for client in clients:
            client.join(100)
    assert problems == []
    assert len(set(sessions)) == count


@pytest.mark.timeout(120)
def test_six_mcp_clients_connecting_at_once_each_call_a_tool() -> None:
    """N15: six ``MCPClient.http`` at a barrier, each connecting and then
    calling ``add`` through its own registry."""
    count = 6
    barrier = threading.Barrier(count)
    totals: list[object] = []
    problems: list[BaseException] = []

    def connect_and_call(url: str, n: int) -> None:
        try:
            barrier.wait()
            with MCPClient.http(url) as client, ToolRegistry() as local:
                client.register_tools(local, include=["add"])
                totals.append(value_of(local.execute(call("add", {"a": n, "b": 100}))))
        except BaseException as exc:
            problems.append(exc)

    with registry_with(Bodies()) as registry, serving(registry) as (url, _):
        clients = [threading.Thread(target=connect_and_call, args=(url, n)) for n in range(count)]
        for client in clients:
            client.start()
        for client in clients:
            client.join(100)
    assert problems == []
    assert sorted(json.loads(str(total))["total"] for total in totals) == [100 + n for n in range(count)]


@pytest.mark.timeout(120)
def test_a_client_survives_its_servers_restart_in_a_new_session() -> None:
    """docs/contract.md#a23: the restarted server knows no session (``404``
    for the old id); the client's next call initializes a new one and goes
    on."""
    with registry_with(Bodies()) as registry, ToolRegistry() as local:
        with serving(registry) as (url, _):
            client = MCPClient.http(url)
            client.register_tools(local, include=["add"])
            assert value_of(local.execute(call("add", {"a": 1, "b": 2}))) == '{"total": 3}'
        with client, serving(registry, port=int(url.rsplit(":", 1)[1].split("/")[0])) as (again, _):
            assert again == url
            assert value_of(local.execute(call("add", {"a": 3, "b": 4}))) == '{"total": 7}'
            assert value_of(local.execute(call("add", {"a": 5, "b": 6}))) == '{"total": 11}'
            assert [t["name"] for t in client.list_tools()] == ["add", "wait"]
    assert client_threads() == []


def test_a_listing_is_one_snapshot_while_another_thread_re_registers_a_tool() -> None:
    """A24 over MCP (field case B67's kind): eight ``flip`` tools are
    re-registered over and over, with an output schema and without, while a
    client lists the tools; each listed one carries its own definition's
    output schema (the description says which), never the other one's."""
    typed = {"type": "object", "properties": {"n": {"type": "integer"}}}
    done = threading.Event()

    def flip(n: int, typed_output: bool) -> Callable[[], None]:
        label, output = ("with output", typed) if typed_output else ("without output", None)
        body = lambda args, run: {"n": 1}  # noqa: E731
        return registry.register(ToolDefinition(f"flip{n}", label, {"type": "object"}, body, output_schema=output))

    def churn() -> None:
        unregister = [flip(n, True) for n in range(8)]
        i = 0
        while not done.is_set():
            n = i % 8
            unregister[n]()
            unregister[n] = flip(n, (i // 8) % 2 == 1)
            i += 1

    mismatched: list[str] = []
    with registry_with(Bodies()) as registry, serving(registry) as (url, _), httpx.Client(timeout=10) as client:
        session = open_session(client, url)
        churner = threading.Thread(target=churn, daemon=True)
        churner.start()
        switching = sys.getswitchinterval()
        sys.setswitchinterval(1e-6)  # the listing is interrupted many times per request
        try:
            for i in range(300):
                listing = client.post(
                    url, json={"jsonrpc": "2.0", "id": i + 2, "method": "tools/list"}, headers=session
                )
                for tool in events(listing)[0]["result"]["tools"]:
                    if tool["name"].startswith("flip") and ("outputSchema" in tool) != (
                        tool["description"] == "with output"
                    ):
                        mismatched.append(f"{tool['description']}: outputSchema {tool.get('outputSchema')}")
        finally:
            sys.setswitchinterval(switching)
            done.set()
            churner.join(10)
    assert mismatched == []
