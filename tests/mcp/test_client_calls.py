"""``MCPClient`` results against real servers: the reference ``mcp-server-time``,
an ``MCPServer`` (FastMCP) written for these tests, and a scripted server
for protocol faults (docs/mcp.md#the-client, docs/contract.md#mcp)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed (pip install 'dshtools[mcp]')")

from dshtools import INVALID_ARGS, ToolFailure, ToolRegistry, ToolSuccess, thaw
from dshtools.mcp import REMOTE_PROTOCOL_ERROR, REMOTE_TOOL_ERROR, MCPClient
from tests.mcp.client_support import call, call_ids, client_threads, fast_server, scripted_server, teed, value_of


@pytest.mark.timeout(60)
def test_the_time_servers_tools_are_registry_tools_validated_before_sending(tmp_path: Path) -> None:
    pytest.importorskip("mcp_server_time")
    log = tmp_path / "received.jsonl"
    with MCPClient.stdio(teed(log, [sys.executable, "-m", "mcp_server_time"])) as client, ToolRegistry() as registry:
        listed = {t["name"]: t for t in client.list_tools()}
        assert set(listed) == {"get_current_time", "convert_time"}
        client.register_tools(registry, prefix="time_", timeout=30.0)
        definition = registry.get("time_get_current_time")
        assert definition is not None
        assert thaw(definition.parameters) == listed["get_current_time"]["inputSchema"]
        assert definition.output_schema is not None
        assert thaw(definition.output_schema) == listed["get_current_time"]["outputSchema"]
        assert definition.timeout == 30.0

        ok = registry.execute(call("time_get_current_time", {"timezone": "Europe/Paris"}))
        assert isinstance(ok, ToolSuccess), ok
        assert ok.value["timezone"] == "Europe/Paris"  # structuredContent is the value
        assert ok.content[0]["type"] == "text"
        assert "Europe/Paris" in ok.content[0]["text"]

        # Checked by the registry's bounded gate: the server never sees it.
        before = call_ids(log)
        bad = registry.execute(call("time_get_current_time", {"timezone": 5}))
        assert bad.code == INVALID_ARGS
        assert call_ids(log) == before

        failed = registry.execute(call("time_get_current_time", {"timezone": "Nowhere/Nothing"}))
        assert isinstance(failed, ToolFailure)
        assert failed.code == REMOTE_TOOL_ERROR
        assert "Nowhere/Nothing" in failed.content[0]["text"]
    assert client_threads() == []


@pytest.mark.timeout(60)
def test_structured_values_images_and_embedded_resources_come_back_as_sent(tmp_path: Path) -> None:
    with MCPClient.stdio(fast_server(tmp_path / "log.jsonl")) as client, ToolRegistry() as registry:
        unregister = client.register_tools(registry, include={"add", "picture", "fail"})
        added = registry.execute(call("add", {"a": 2, "b": 3}))
        assert isinstance(added, ToolSuccess), added
        assert thaw(added.value) == {"total": 5}

        picture = registry.execute(call("picture", {}))
        assert isinstance(picture, ToolSuccess), picture
        kinds = [block["type"] for block in picture.content]
        assert kinds == ["image", "resource"]
        assert picture.content[0]["mimeType"] == "image/png"
        assert picture.content[1]["resource"]["text"] == "a note"

        failed = registry.execute(call("fail", {"why": "no reason at all"}))
        assert failed.code == REMOTE_TOOL_ERROR
        assert "no reason at all" in failed.content[0]["text"]

        unregister()
        unregister()  # idempotent
        assert registry.get("add") is None

        single = client.tool("add", name="plus", timeout=5.0)
        assert single.name == "plus"
        assert single.timeout == 5.0
        registry.register(single)
        assert thaw(value_of(registry.execute(call("plus", {"a": 1, "b": 1})))) == {"total": 2}
        with pytest.raises(TypeError, match="backend of a remote tool"):
            client.tool("add", backend=None)
        with pytest.raises(KeyError, match="no_such_tool"):
            client.tool("no_such_tool")
        # The body exists only for the registry's backend.
        with pytest.raises(RuntimeError, match="only through a ToolRegistry"):
            no_run: Any = None
            single.execute({}, no_run)


@pytest.mark.parametrize(
    ("message", "http_status", "text"),
    [
        pytest.param(
            "Server returned an error response",
            "HTTP 403 Forbidden",
            "the MCP server refused the request: HTTP 403 Forbidden",
            id="the-sdks-stand-in-names-the-status",
        ),
        pytest.param(
            "Server returned an error response",
            None,
            "the MCP server answered with JSON-RPC error -32603: Server returned an error response",
            id="no-status-seen",
        ),
        pytest.param(
            "scripted failure",
            "HTTP 403 Forbidden",
            "the MCP server answered with JSON-RPC error -32603: scripted failure",
            id="the-servers-own-error-is-kept",
        ),
    ],
)
def test_an_http_status_stands_in_only_for_the_sdks_generic_error(
    message: str, http_status: str | None, text: str
) -> None:
    from mcp.shared.exceptions import MCPError

    from dshtools import ToolError
    from dshtools._backends.base import Error
    from dshtools._mcp.results import report_of

    report = report_of(MCPError(-32603, message), "answered", http_status)
    assert isinstance(report.outcome, Error) and isinstance(report.outcome.error, ToolError)
    assert str(report.outcome.error) == text and report.outcome.error.code == REMOTE_PROTOCOL_ERROR
    assert report.meta == {"remote": "answered"}


@pytest.mark.timeout(60)
def test_protocol_faults_are_coded_failures_and_the_client_goes_on(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    with MCPClient.stdio(scripted_server(log)) as client, ToolRegistry() as registry:
        client.register_tools(registry, exclude={"die"})
        assert registry.get("die") is None

        rpc = registry.execute(call("rpc_error", {}))
        assert rpc.code == REMOTE_PROTOCOL_ERROR
        assert "-32001" in rpc.content[0]["text"]
        assert "scripted failure" in rpc.content[0]["text"]

        # A line that is not JSON, then a result that is not a CallToolResult.
        garbage = registry.execute(call("garbage", {}))
        assert garbage.code == REMOTE_PROTOCOL_ERROR
        assert "not a valid CallToolResult" in garbage.content[0]["text"]

        assert value_of(registry.execute(call("ok", {}))) == "ok"


@pytest.mark.timeout(60)
def test_registering_is_all_or_nothing_and_misuse_is_named(tmp_path: Path) -> None:
    with MCPClient.stdio(scripted_server(tmp_path / "log.jsonl")) as client, ToolRegistry() as registry:
        client.register_tools(registry, include={"ok"})
        with pytest.raises(ValueError, match="'ok' is already registered"):
            client.register_tools(registry)
        assert [d["name"] for d in registry.schemas()] == ["ok"]
        # A remote tool's body runs on its own client only.
        other = ToolRegistry()
        try:
            with pytest.raises(TypeError, match="sequence of strings"):
                MCPClient.stdio("python -m nothing")
            with pytest.raises(ValueError, match="cancel_grace"):
                MCPClient.stdio([sys.executable], cancel_grace=-1)
        finally:
            other.close()
    assert client_threads() == []


@pytest.mark.timeout(30)
def test_a_server_that_cannot_start_is_a_connection_error_and_leaves_nothing(tmp_path: Path) -> None:
    with pytest.raises(ConnectionError, match="could not be started"):
        MCPClient.stdio([str(tmp_path / "no-such-server")])
    with pytest.raises(ConnectionError):
        MCPClient.stdio([sys.executable, "-c", "import sys; sys.exit(0)"])
    assert client_threads() == []
