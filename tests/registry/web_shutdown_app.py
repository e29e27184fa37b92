"""The recipe of docs/async.md#shutdown as an app uvicorn serves in
``test_close_in_a_web_server``: a tool whose child ignores SIGTERM (only the
kill after its grace stops it), a handler that aborts its call when the
client disconnects, and a lifespan hook that ends every call still in
flight with ``close(abort=...)``."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncIterator

import anyio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from dshtools import AbortController, ToolExecutionInput, ToolRegistry, ToolRunContext
from dshtools.io import run_process

CHILD = ["sh", "-c", 'trap "" TERM; sleep 30']
"""The child a call runs: it outlives SIGTERM; only SIGKILL ends it."""

tools = ToolRegistry()


@tools.tool
def stubborn(*, run: ToolRunContext) -> str:
    """Run a child that ignores SIGTERM, for 30 seconds unless aborted."""
    run_process(CHILD, run.signal, grace=0.5)
    return "done"


async def abort_on_disconnect(request: Request, controller: AbortController) -> None:
    """Abort ``controller`` once the client goes away (the body is read)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
    controller.abort("client disconnected")


async def run_tool(request: Request) -> JSONResponse:
    controller = AbortController()
    call = ToolExecutionInput("c1", "stubborn", {}, controller.signal)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(abort_on_disconnect, request, controller)
        result = await tools.aexecute(call)
        tasks.cancel_scope.cancel()
    return JSONResponse({"code": result.code})


@contextlib.asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    yield
    # uvicorn gets here after its graceful wait: abort what still runs and
    # join it, off the event loop, before the process exits.
    await anyio.to_thread.run_sync(functools.partial(tools.close, abort="server shutting down"))


app = Starlette(routes=[Route("/run", run_tool, methods=["POST"])], lifespan=lifespan)
