"""First-come admission of the calls one MCP server connection runs
(docs/contract.md#mcp-stdio): calls overlap, each on its own
thread, except that a call whose ``registry.execution_mode(call)`` is
``"exclusive"`` runs alone.

Guarantees:

* Tickets are admitted in arrival order: an exclusive call waits for the
  calls admitted before it and holds back every call that arrives after it,
  so a stream of parallel calls never starves an exclusive one.
* A call whose signal is aborted while it waits is withdrawn at once, and
  the calls behind it may then start.

Threads: ``enqueue`` and ``drop`` run on the server's event loop
(``enqueue`` before the handler's first ``await``, so in the order requests
are dispatched); ``wait`` and ``leave`` run on the call's own thread. Every
change of state is made under the gate's one condition lock.
"""

from __future__ import annotations

import threading
from collections import deque

from .._signal import AbortSignal


class Ticket:
    """One call's place in the gate's queue; ``admitted`` is set (under the
    gate's lock) when the call may run."""

    __slots__ = ("admitted", "exclusive")

    def __init__(self, exclusive: bool) -> None:
        self.exclusive = exclusive
        self.admitted = False


class Gate:
    """First-come admission of calls: parallel calls overlap, an exclusive
    call runs alone. Invariants (under ``_cond``): tickets are admitted only
    from the head of ``_queue``, so in arrival order; ``_exclusive`` implies
    ``_running == 1``; a parallel ticket never passes an earlier exclusive
    one."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._queue: deque[Ticket] = deque()
        self._running = 0
        self._exclusive = False

    def enqueue(self, exclusive: bool) -> Ticket:
        ticket = Ticket(exclusive)
        with self._cond:
            self._queue.append(ticket)
            self._admit_locked()
        return ticket

    def _admit_locked(self) -> None:
        while self._queue:
            head = self._queue[0]
            if head.exclusive:
                if self._running:
                    break
                self._exclusive = True
            elif self._exclusive:
                break
            self._queue.popleft()
            self._running += 1
            head.admitted = True
        self._cond.notify_all()

    def wait(self, ticket: Ticket, signal: AbortSignal) -> bool:
        """Block until ``ticket`` is admitted (``True``; call ``leave``) or
        ``signal`` aborted first (``False``; the ticket is withdrawn)."""

        def wake(_signal: AbortSignal) -> None:
            with self._cond:
                self._cond.notify_all()

        with signal.add_listener(wake), self._cond:
            while not ticket.admitted:
                if signal.aborted:
                    self._queue.remove(ticket)
                    self._admit_locked()
                    return False
                self._cond.wait()
        return True

    def drop(self, ticket: Ticket) -> None:
        """Give up ``ticket`` whether or not it was admitted (its call will
        not run)."""
        with self._cond:
            if not ticket.admitted:
                self._queue.remove(ticket)
                self._admit_locked()
                return
        self.leave(ticket)

    def leave(self, ticket: Ticket) -> None:
        with self._cond:
            self._running -= 1
            if ticket.exclusive:
                self._exclusive = False
            self._admit_locked()
