"""Execution backends: where a tool body runs (docs/contract.md#backends).

A backend owns one step of the pipeline, the innermost one: running a body
whose call was admitted, and telling the registry what became of it. The
registry does everything else (admission, wrappers, classification,
post-execute, observers) the same way for every backend.

The contract every backend keeps, whatever it runs on:

* **One claim decides.** A submitted body goes from queued to running at
  exactly one point, a claim that races the withdrawal. When ``run.signal``
  (the dispatch-scoped signal) aborts while the body is still queued, the
  withdrawal wins and the body never starts anywhere: the report says
  ``NotInvoked``. When the claim wins, the body is invoked (``Value`` or
  ``Error``), even if the signal aborts a moment later (the body sees the
  abort through ``run.signal``).
* **Joined, never abandoned.** ``wait`` returns ``True`` only once the body
  returned (or was withdrawn, or its process was killed and confirmed
  gone). The registry publishes nothing before that.
* **No injection.** A backend never raises into a running body; it stops
  one only through ``run.signal`` and, for out-of-process backends, by
  killing the process that runs it after a grace (``killed``).

Threads: the registry calls ``validate`` from ``register()``'s thread,
``submit``, ``wait`` and ``report`` from the thread blocked in ``execute``
(or a batch's dispatch thread; always the same one for a given dispatch).
``wait`` may be interrupted by ``KeyboardInterrupt`` and called again; the
registry then aborts ``run.signal`` itself and keeps waiting. The thread
backend (``ThreadBackend``, the default) implements this protocol; the
guide for writing one is docs/backends.md.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeAlias, runtime_checkable

import attrs

from .._signal import AbortSignal
from .._types.tools import ToolRunContext

__all__ = [
    "Backend",
    "BodyOutcome",
    "BodyReport",
    "Dispatch",
    "Error",
    "ListeningBackend",
    "NotInvoked",
    "Value",
    "WorkerLost",
]

Body: TypeAlias = Callable[[Any, ToolRunContext], object]


class WorkerLost(Exception):
    """The process (or Ray worker) running a body died on its own (a crash,
    ``os._exit``) before the body returned. A backend reports it as
    ``Error(WorkerLost(...))``; the registry makes it a failure with code
    ``WORKER_LOST`` and ``info.name`` ``"WorkerLost"`` (docs/contract.md#lost-workers)."""


@attrs.frozen(slots=True)
class Value:
    """The body returned ``value`` (not yet frozen or validated: the
    registry checks it)."""

    value: object


@attrs.frozen(slots=True)
class Error:
    """The body raised ``error``."""

    error: BaseException


@attrs.frozen(slots=True)
class NotInvoked:
    """The body never started. ``error`` is ``None`` when it was withdrawn
    because ``run.signal`` aborted; otherwise the fault that kept it from
    starting (an executor that refused or dropped it, a closed backend)."""

    error: BaseException | None = None


BodyOutcome: TypeAlias = Value | Error | NotInvoked
"""What became of a submitted body, decided at one point per dispatch."""


@attrs.frozen(slots=True, kw_only=True)
class BodyReport:
    """Everything a backend tells the registry about one dispatch.

    * ``outcome``: ``Value`` / ``Error`` / ``NotInvoked``.
    * ``contexts``: JSON objects the body deferred with
      ``run.defer_context`` where the registry could not see them (a body
      in another process); an in-process body defers directly and leaves
      this empty. The registry attaches them first, as the tool's own.
    * ``killed``: the body did not return ``kill_after`` seconds after its
      signal aborted and its process (and everything it started) was
      killed and confirmed gone. ``outcome`` is then ``Error``.
    * ``overrun_s``: seconds between the abort of ``run.signal`` and the
      body's return, when the body was invoked and the signal aborted
      before it returned; else ``None``. The registry reports overruns
      above 0.1 s (docs/contract.md#a8).
    * ``content``: with a ``Value`` outcome, the content blocks the body
      produced beside its value (a remote tool's result carries both);
      ``None``: the registry renders the value as for any body.
    * ``meta``: entries the registry adds to the call's final ``meta``
      whichever hook built that result (a remote call's cancellation
      status); ``None`` adds nothing.
    """

    outcome: BodyOutcome
    contexts: tuple[Mapping[str, Any], ...] = ()
    killed: bool = False
    overrun_s: float | None = None
    content: tuple[Mapping[str, Any], ...] | None = None
    meta: Mapping[str, object] | None = None


@runtime_checkable
class Dispatch(Protocol):
    """One submitted body, as the waiting registry sees it."""

    def wait(self, timeout: float) -> bool:
        """Block up to ``timeout`` seconds; ``True`` once the dispatch has
        settled (``report()`` is ready). Safe to call again after a
        ``KeyboardInterrupt`` interrupted it. A dispatch whose class sets
        ``waits_untimed = True`` also accepts ``None`` (block until
        settled): the registry then waits untimed on every thread but the
        main one, where it waits in slices of ``INTERRUPT_SLICE`` seconds so
        that Ctrl-C gets in (docs/contract.md#scale)."""
        ...

    def report(self) -> BodyReport:
        """The settled dispatch's report. Only after ``wait`` returned
        ``True``."""
        ...


@runtime_checkable
class Backend(Protocol):
    """Where tool bodies run: ``ToolRegistry(backend=...)`` for every tool,
    ``ToolDefinition(backend=...)`` for one. The thread pool is the
    default. Users may write their own (docs/backends.md)."""

    def validate(self, name: str, body: Body) -> None:
        """Called by ``register()``: raise ``ValueError`` naming the tool
        when this backend cannot run ``body`` (e.g. it does not pickle)."""
        ...

    def submit(self, body: Body, args: object, run: ToolRunContext) -> Dispatch:
        """Queue ``body(args, run)``. Never blocks on the body. ``run.signal``
        is the dispatch-scoped signal, not aborted when ``submit`` is called;
        its abort withdraws a still-queued body (``NotInvoked``) and is
        delivered to a running one. Raising means the body was not and will
        not be started (the registry reports ``ABORTED_BEFORE_DISPATCH``
        with that error as the reason)."""
        ...

    def close(self) -> None:
        """Stop accepting work, wait for (or stop) what runs, release the
        workers. Idempotent. The registry calls it when the last registry
        using this backend closes."""
        ...


@runtime_checkable
class ListeningBackend(Backend, Protocol):
    """An optional capability of a ``Backend``: its withdrawal can listen on
    the dispatch signal from the moment the registry derives that signal,
    instead of being added by ``submit`` (one lock round trip instead of
    two). The registry finds it by this protocol, once per backend, and
    then, per call:

    1. ``withdrawal = backend.make_withdrawal()`` (no arguments; called in
       the thread blocked in ``execute``);
    2. derives the dispatch signal with ``withdrawal`` as a listener: it is
       called with the signal, on the aborting thread, when the signal
       aborts, possibly before step 3 (it must then do nothing; ``submit``
       sees the abort itself);
    3. ``backend.submit_listening(body, args, run, withdrawal)`` instead of
       ``submit``: the same contract, except that it adds no listener of
       its own for the withdrawal.

    ``ThreadBackend`` has it (docs/backends.md)."""

    @property
    def make_withdrawal(self) -> Callable[[], Callable[[AbortSignal], object]]:
        """Makes one fresh withdrawal listener per call."""
        ...

    def submit_listening(
        self, body: Body, args: object, run: ToolRunContext, withdrawal: Callable[[AbortSignal], object]
    ) -> Dispatch:
        """``submit``, with ``withdrawal`` (from ``make_withdrawal``) already
        listening on ``run.signal``."""
        ...
