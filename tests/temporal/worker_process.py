"""A Temporal activity worker in a process of its own, for the tests that kill it:
``python -m tests.temporal.worker_process TARGET QUEUE MODE [JOURNAL]``.

``MODE`` ``dshtools``: ``tool_activity`` of a registry (journaled when
``JOURNAL``, a SQLite file or a PostgreSQL DSN, is given) with the tools
``append`` and ``append_idempotent`` (the same body, declared idempotent);
``peer``: the plain activity ``peer.append``. Each body appends its key to ``SIDE_EFFECTS`` (fsynced),
and here, in the process the test will kill, then writes this process's pid
to ``FIFO`` and blocks. The same bodies run in the test's own process
(``announce=False``) append and return."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import sys
import threading
from typing import Any

from temporalio import activity
from temporalio.client import Client
from temporalio.worker import Worker

from dshtools import ToolRegistry, ToolRunContext
from dshtools import temporal as dtemporal
from tests.helpers.journals import open_journal

ANNOUNCE = threading.Event()
"""Set in the process the test kills: a body announces itself, then blocks."""


def side_effect(path: str, key: str, fifo: str) -> str:
    with open(path, "a", encoding="ascii") as f:
        f.write(key + "\n")
        f.flush()
        os.fsync(f.fileno())
    if ANNOUNCE.is_set():
        with open(fifo, "w", encoding="ascii") as f:
            f.write(f"{os.getpid()}\n")
        threading.Event().wait()  # until the process is killed
    return "done"


def registry(journal: str | None) -> ToolRegistry:
    tools = ToolRegistry(journal=open_journal(journal) if journal else None)

    @tools.tool
    def append(path: str, key: str, fifo: str, *, run: ToolRunContext) -> str:
        """Append ``key`` to ``path`` (a side effect).

        Args:
            path: The side-effect file.
            key: What to append.
            fifo: Where the killed process announces the body started.
        """
        return side_effect(path, key, fifo)

    tools.tool(name="append_idempotent", idempotent=True)(append)  # the same body, declared safe to run again
    return tools


@activity.defn(name="peer.append")
def peer_append(request: dict[str, Any]) -> str:
    return side_effect(request["path"], request["key"], request["fifo"])


async def main(target: str, queue: str, mode: str, journal: str | None) -> None:
    client = await Client.connect(target)
    activities: list[Any] = [dtemporal.tool_activity(registry(journal))] if mode == "dshtools" else [peer_append]
    with concurrent.futures.ThreadPoolExecutor(4) as executor:
        worker = Worker(client, task_queue=queue, activities=activities, activity_executor=executor)
        await worker.run()


if __name__ == "__main__":
    ANNOUNCE.set()
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] if len(sys.argv) > 4 else None))
