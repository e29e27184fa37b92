"""The demo's remote tool, served by our own MCP server: ``python -m dshtools
mcp --tools dshtools._cli.demo_remote_tools`` (docs/cli.md#the-remote-tool).

``remote_sleep`` sleeps cancellably on the server and writes what happened
to it there, one JSON object per line, to the file named by the
``DSHTOOLS_DEMO_REMOTE_LOG`` environment variable (nothing when it is
unset): ``{"event": "started", "call_id", "pid"}`` when the body starts,
and, in the body's ``finally``, once it is about to return or raise,
``{"event": "aborted", "call_id", "after_ms"}`` when its signal aborted
(the time the abort listener saw it) and ``{"event": "returned", "call_id",
"after_ms"}``. ``after_ms`` is measured from the body's start.
Each line is written whole with one ``write`` on a file opened for append.
"""

from __future__ import annotations

import json
import os
import time
from typing import Annotated

from pydantic import Field

from .. import io as dio
from .._types.marks import tool
from .._types.tools import ToolRunContext

LOG_ENV = "DSHTOOLS_DEMO_REMOTE_LOG"


def _log(record: dict[str, object]) -> None:
    path = os.environ.get(LOG_ENV)
    if not path:
        return
    line = (json.dumps(record) + "\n").encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


@tool(concurrency_safe=True)
def remote_sleep(seconds: Annotated[float, Field(ge=0)], *, run: ToolRunContext) -> dict[str, float]:
    """Sleep for some seconds on the MCP server (cancellable); the server records when the call's signal
    aborted and when its body returned."""
    start = time.monotonic()

    def ms() -> float:
        return round((time.monotonic() - start) * 1000, 1)

    _log({"event": "started", "call_id": run.call_id, "pid": os.getpid()})
    aborted: list[float] = []
    # The listener only takes the time (it may run after the woken body's
    # finally); the lines are written here, the abort's first.
    handle = run.signal.add_listener(lambda _signal: aborted.append(ms()))
    try:
        dio.sleep(seconds, run.signal)
        return {"slept": seconds}
    finally:
        handle.remove()
        returned = ms()
        if aborted or run.signal.aborted:
            _log({"event": "aborted", "call_id": run.call_id, "after_ms": aborted[0] if aborted else returned})
        _log({"event": "returned", "call_id": run.call_id, "after_ms": returned})
