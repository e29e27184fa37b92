"""Temporal's own tool path, as ``temporalio.openai_agents.workflow.
activity_as_tool`` runs it: a plain synchronous activity, scheduled by
``workflow.execute_activity`` with the integration's default
``TRY_CANCEL``. (The integration package itself pins an openai-agents
release older than the test extra's, so the tests schedule the activity the
way its ``activity_as_tool`` does, option for option.)"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow
from temporalio.common import RetryPolicy


@activity.defn(name="peer.sleep_child")
def sleep_child(fifo: str) -> str:
    """What a user's tool does: run ``sleep 30`` (its start counted in
    ``<fifo>.runs`` and its pid written to ``fifo`` first, as our side's
    ``sleep_child`` does)."""
    subprocess.run(["sh", "-c", 'echo run >> "$1.runs"; echo $$ > "$1"; exec sleep 30', "sh", fifo], check=False)
    return "slept"


IGNORING_FINISHED = threading.Event()


@activity.defn(name="peer.ignore_cancel")
def ignore_cancel(fifo: str) -> str:
    """A body that ignores cancellation: counts its start in ``<fifo>.runs``,
    writes its pid to ``fifo``, blocks in one C call for 4 s, then sets
    ``IGNORING_FINISHED``."""
    with open(fifo + ".runs", "a", encoding="ascii") as runs:
        runs.write("run\n")
    with open(fifo, "w", encoding="ascii") as f:
        f.write(f"{os.getpid()}\n")
    time.sleep(4.0)
    IGNORING_FINISHED.set()
    return "done"


@workflow.defn
class PeerCallTool:
    @workflow.run
    async def run(self, request: dict[str, Any]) -> dict[str, Any]:
        try:
            value = await workflow.execute_activity(
                request["activity"],
                request["argument"],
                start_to_close_timeout=timedelta(seconds=60),
                retry_policy=RetryPolicy(maximum_attempts=request.get("attempts", 1)),
                cancellation_type=workflow.ActivityCancellationType.TRY_CANCEL,
            )
            return {"value": value}
        except BaseException as exc:  # what the workflow learns: the error and nothing else
            return {"error": type(exc).__name__, "cause": type(getattr(exc, "cause", None)).__name__}
