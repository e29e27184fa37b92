"""A server's side of MCP progress (docs/mcp.md#progress): the progress a
call's body reports (``run.report_progress``) goes to the client as
``notifications/progress`` when the request asked for it (its
``_meta.progressToken``).

Guarantees:

* Only calls whose request carried a progress token are followed; each
  notification carries that token, the update's ``progress``, ``total``
  and ``message`` (the last two only when set), and is sent as part of
  that request.
* Coalesced: while one notification of a call is being written, newer
  updates replace each other; the latest is sent next. The registry's
  delivery thread only stores the update and schedules the send: it never
  waits for the client.
* The last update comes before the response: the call's thread flushes
  the registry's delivery (``_registry.progress.flush``) before it reports
  the call done, and ``finish`` sends what is left before the handler
  answers. Nothing is sent for a call after ``finish``.

Threads: ``_observe`` runs on the registry's ``dshtools-progress`` thread;
``track``, ``finish`` and the sends run on the server's event loop.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import anyio
import anyio.abc
import anyio.from_thread
import anyio.lowlevel
from mcp.server.context import ServerRequestContext
from mcp.shared.jsonrpc_dispatcher import progress_token_from_params

from .._registry.progress import flush
from .._registry.registry import ToolRegistry
from .._signal import AbortSignal
from .._types.hooks import ProgressUpdate
from .._types.tools import ToolExecution

__all__ = ["FLUSH_S", "ProgressRelay", "flush"]

FLUSH_S = 2.0
"""How long a finished call's thread waits, at most, for the registry to
hand its last update over before the response goes out (seconds)."""


class _Forward:
    """One followed call: its request's token and session, the update not
    sent yet, and a lock held while one is sent (so they go out in order)."""

    __slots__ = ("ctx", "latest", "open", "scheduled", "send_lock", "token")

    def __init__(self, ctx: ServerRequestContext[Any, Any], token: str | int) -> None:
        self.ctx = ctx
        self.token = token
        self.latest: ProgressUpdate | None = None
        self.open = True
        self.scheduled = False
        self.send_lock = anyio.Lock()


class ProgressRelay:
    """The progress of one server connection's calls, from ``registry``'s
    progress observers to the client. ``start(task_group)`` (on the loop)
    installs the observer; ``close()`` removes it."""

    def __init__(self, registry: ToolRegistry) -> None:
        self._registry = registry
        self._lock = threading.Lock()
        self._calls: dict[int, tuple[AbortSignal, _Forward]] = {}
        self._remove: Callable[[], None] | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self._token: anyio.lowlevel.EventLoopToken | None = None

    def start(self, task_group: anyio.abc.TaskGroup) -> None:
        self._tg = task_group
        self._token = anyio.lowlevel.current_token()
        self._remove = self._registry.add_progress_observer(self._observe)

    def close(self) -> None:
        if self._remove is not None:
            self._remove()
            self._remove = None

    def track(self, ctx: ServerRequestContext[Any, Any], signal: AbortSignal) -> _Forward | None:
        """Follow the call whose caller's signal is ``signal`` when its
        request asked for progress; ``None`` when it did not."""
        token = progress_token_from_params(ctx.params)
        if token is None or self._tg is None:
            return None
        forward = _Forward(ctx, token)
        with self._lock:
            self._calls[id(signal)] = (signal, forward)
        return forward

    def _observe(self, execution: ToolExecution, update: ProgressUpdate) -> None:
        signal = execution.signal
        with self._lock:
            entry = self._calls.get(id(signal))
            if entry is None or entry[0] is not signal or not entry[1].open:
                return
            forward = entry[1]
            forward.latest = update
            if forward.scheduled:
                return
            forward.scheduled = True
        try:
            anyio.from_thread.run_sync(self._schedule, forward, token=self._token)
        except anyio.RunFinishedError:  # the server stopped: nobody to tell
            pass

    def _schedule(self, forward: _Forward) -> None:
        assert self._tg is not None
        self._tg.start_soon(self._send_latest, forward)

    async def _send_latest(self, forward: _Forward) -> None:
        async with forward.send_lock:
            with self._lock:
                update, forward.latest = forward.latest, None
                forward.scheduled = False
            if update is not None and forward.open:
                await self._send(forward, update)

    async def finish(self, forward: _Forward, signal: AbortSignal, *, answered: bool) -> None:
        """The call returned: stop following it and, when its response is
        about to go out (``answered``), send its last update first."""
        with self._lock:
            self._calls.pop(id(signal), None)
            forward.open = answered
        if not answered:
            return
        async with forward.send_lock:
            with self._lock:
                update, forward.latest = forward.latest, None
                forward.open = False
            if update is not None:
                await self._send(forward, update)

    async def _send(self, forward: _Forward, update: ProgressUpdate) -> None:
        try:
            await forward.ctx.session.send_progress_notification(
                forward.token,
                update.progress,
                update.total,
                update.message,
                related_request_id=forward.ctx.request_id,  # type: ignore[arg-type]
            )
        except Exception:  # the client went away: the response fails the same way
            pass
