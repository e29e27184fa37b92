"""A server that exits before the handshake is a ``ConnectionError`` that says so.

Found in a new user's trial: ``MCPClient.stdio([... "mcp", "--tools",
"nosuchmod:registry"])`` (a typo in the module) raised ``ConnectionError:
the MCP server [...] could not be started: unhandled errors in a TaskGroup
(1 sub-exception)``: the text of the SDK's exception group, which names
nothing a user can act on. The message is now the group's own cause
(``Connection closed``) and what it means: the server exited or closed its
output before the handshake, its reason on its stderr (docs/mcp.md).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed (pip install 'dshtools[mcp]')")

from dshtools.mcp import MCPClient
from tests.mcp.client_support import client_threads


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "code", ["import sys; sys.exit(2)", "print('not JSON-RPC')"], ids=["exits", "prints-and-exits"]
)
def test_a_server_gone_before_the_handshake_names_that_not_a_task_group(code: str) -> None:
    with pytest.raises(ConnectionError) as caught:
        MCPClient.stdio([sys.executable, "-c", code])
    text = str(caught.value)
    assert "TaskGroup" not in text
    assert "could not be started: Connection closed" in text
    assert "exited or closed its output before the MCP handshake" in text
    assert "stderr" in text
    assert client_threads() == []


@pytest.mark.timeout(30)
def test_a_missing_program_keeps_the_operating_system_error(tmp_path: Path) -> None:
    with pytest.raises(ConnectionError, match=r"could not be started: \[Errno 2\]") as caught:
        MCPClient.stdio([f"{tmp_path}/no-such-server"])
    assert "handshake" not in str(caught.value)
