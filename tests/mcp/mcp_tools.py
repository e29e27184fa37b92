"""The registry ``tests/mcp/test_server.py`` serves with ``python -m dshtools mcp
--tools mcp_tools:registry``. Bodies record what they saw as files in
``$DSHTOOLS_MCP_TEST_DIR`` (the test reads them from the other process):

* ``echo {"text"}`` -- writes stray output to fd 1 (a ``print`` and a child
  process that inherits it) and returns ``text``: the protocol stream must
  stay clean.
* ``slow {"tag"}`` -- ``sleep 60`` through ``dshtools.io.run_process``.
  ``<tag>.abort`` gets ``time.time()`` and the reason when its signal
  aborts (written by the listener, the instant the abort reaches the
  body); ``<tag>.ended`` is written when the body returns or raises.
* ``wait {"tag"}`` -- parallel-safe; prints ``started <tag>`` when it
  starts (after writing ``<tag>.call_id``) and ``aborted <tag>: <reason>`` when its signal aborts (to fd 1,
  which the server points at stderr, so a test reads them from the
  server's stderr), and returns ``stopped <tag>``.
* ``note {"tag"}`` -- exclusive (no ``is_concurrency_safe``): writes
  ``<tag>.start`` with ``time.time()`` and returns.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from dshtools import AbortSignal, ToolDefinition, ToolRegistry, ToolRunContext
from dshtools.io import run_process

OUT = Path(os.environ.get("DSHTOOLS_MCP_TEST_DIR", "."))


def _echo(args: Any, run: ToolRunContext) -> str:
    print("stray print from a tool body")
    sys.stdout.flush()
    subprocess.run(["echo", "stray output from a child process"], check=True)
    return str(args["text"])


def _slow(args: Any, run: ToolRunContext) -> str:
    tag = str(args["tag"])

    def seen(signal: AbortSignal) -> None:
        (OUT / f"{tag}.abort").write_text(json.dumps({"t": time.time(), "reason": str(signal.reason)}))

    try:
        with run.signal.add_listener(seen):
            run_process(["sleep", "60"], run.signal, grace=2.0)
        return "slept"
    finally:
        (OUT / f"{tag}.ended").write_text(json.dumps({"t": time.time()}))


def _say(line: str) -> None:
    """One line to fd 1 in one ``write`` (under ``PIPE_BUF``, so atomic):
    ``print`` writes the text and the newline separately, and two bodies
    printing at once interleave into one line the test never finds."""
    os.write(1, f"{line}\n".encode())


def _wait(args: Any, run: ToolRunContext) -> str:
    tag = str(args["tag"])
    (OUT / f"{tag}.call_id").write_text(run.call_id)
    _say(f"started {tag}")
    run.signal.wait()
    _say(f"aborted {tag}: {run.signal.reason}")
    return f"stopped {tag}"


def _note(args: Any, run: ToolRunContext) -> str:
    (OUT / f"{args['tag']}.start").write_text(json.dumps({"t": time.time()}))
    return "noted"


def _parallel(_args: object) -> bool:
    return True


registry = ToolRegistry()
registry.register(
    ToolDefinition(
        "echo",
        "Return the text (and write stray output to stdout)",
        {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
        _echo,
        is_concurrency_safe=_parallel,
    )
)
TAGGED = {"type": "object", "properties": {"tag": {"type": "string"}}, "required": ["tag"]}
"""The arguments of the tools whose records are named by their ``tag``."""

registry.register(
    ToolDefinition("slow", "Run sleep 60 in a child process", TAGGED, _slow, is_concurrency_safe=_parallel)
)
registry.register(ToolDefinition("wait", "Wait until cancelled", TAGGED, _wait, is_concurrency_safe=_parallel))
registry.register(ToolDefinition("note", "Record the time (an exclusive tool)", TAGGED, _note))
