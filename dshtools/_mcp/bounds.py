"""The bounds of every wait of ``MCPClient``, in one place
(docs/mcp.md#bounds, docs/contract.md#a23).

Guarantees:

* Every wait of the client ends by one of these times (seconds): starting
  or reaching the server and its handshake (``connect_timeout``, on the
  first connection and on every restart or new session; also a listing of
  the server's tools), a cancelled
  call's wait for an answer (``cancel_grace``; its request and its cancel
  get at least ``WRITE_AT_LEAST`` to be written), a stdio server's SIGTERM
  before SIGKILL, or an HTTP session's closing request (``kill_grace``),
  and a killed process group's disappearance (``KILL_WAIT``, then a
  WARNING). A call's wait for its answer is bounded by the call's own
  signal (its caller, or ``TimeoutPolicy``).
* The three configurable bounds are checked here, once: finite and not
  negative (``connect_timeout`` positive); ``TypeError`` for what is not a
  number of seconds, ``ValueError`` for the rest.
"""

from __future__ import annotations

import math
from typing import Final

import anyio
import attrs

__all__ = ["KILL_WAIT", "WRITE_AT_LEAST", "Bounds", "first_of"]

WRITE_AT_LEAST: Final = 1.0
"""Seconds a cancelled call's request and its cancel get to be written,
whatever ``cancel_grace`` (a server that stopped reading its stdin blocks
the writes; a grace of 0 still cancels)."""

KILL_WAIT: Final = 5.0
"""Seconds to wait for a killed process group to be gone before giving up
on it (a process in uninterruptible sleep)."""


def _seconds(instance: object, attribute: attrs.Attribute[float], value: object) -> None:
    name = attribute.name
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number of seconds, not {type(value).__name__}")
    if math.isnan(value) or math.isinf(value) or value < 0:
        raise ValueError(f"{name} must be finite and not negative (seconds), got {value!r}")
    if name == "connect_timeout" and value == 0:
        raise ValueError("connect_timeout must be more than 0 seconds")


@attrs.frozen(kw_only=True)
class Bounds:
    """The configurable waits of one client, in seconds (see the module
    docstring for what each bounds)."""

    cancel_grace: float = attrs.field(validator=_seconds)
    connect_timeout: float = attrs.field(validator=_seconds)
    kill_grace: float = attrs.field(validator=_seconds)


async def first_of(*events: anyio.Event) -> None:
    """Return as soon as one of ``events`` is set."""
    if any(e.is_set() for e in events):
        return
    async with anyio.create_task_group() as tg:

        async def wait_for(event: anyio.Event) -> None:
            await event.wait()
            tg.cancel_scope.cancel()

        for event in events:
            tg.start_soon(wait_for, event)
