"""A journaled registry's side of a call: resolve the key before step 1,
claim it at the dispatch decision, settle it before publication
(docs/contract.md#journal).

Guarantees:

* Before anything else a call of a journaled registry resolves its key
  ``(session, call_id)``: a settled key returns its recorded result
  (``meta["replayed"]``), the body not invoked; a key claimed by a live
  owner is waited for, on the caller's own signal (an abort or a
  ``KeyboardInterrupt`` while waiting is this caller's
  ``ABORTED_BEFORE_DISPATCH``, not recorded; the interrupt is re-raised
  once the result is published); a key
  claimed by a dead owner becomes ``OUTCOME_UNKNOWN`` (recorded, the
  key's final result), or, for an ``idempotent`` tool, is claimed again
  and run (``meta["attempts"]``); a key with no record runs.
* ``JournalCall.claim`` is called by ``Run`` after the last check before
  the body is submitted to its backend: the claim is committed before
  the body can start. A claim that cannot be committed is ``JOURNAL_ERROR``
  with the body not invoked. A claim lost to a racing process resolves
  the key again (wait, replay or unknown).
* ``JournalCall.settle`` is called by the registry with the final result,
  before observers or the caller see it. ``APPROVAL_PENDING`` is not
  final and leaves the key open. A result that cannot be recorded is
  still returned, with ``meta["journal"]`` saying so, and logged as an
  ERROR.

Threads: a ``JournalCall`` is used by the thread that runs the call's
pipeline (``Run``'s owner), one step after another; the journal is
thread-safe.
"""

from __future__ import annotations

import logging
import threading
from typing import Final, Protocol

import attrs

from .._core.errors import safe_str
from .._journal import CallRecord, Journal, JournalError
from .._signal import AbortSignal
from .._types.calls import (
    APPROVAL_PENDING,
    JOURNAL_ERROR,
    OUTCOME_UNKNOWN,
    ToolExecutionInput,
    ToolExecutionResult,
    aborted,
    failure,
)
from .._types.tools import ToolDefinition

__all__ = ["JournalCall", "begin_journaled"]

_log: Final = logging.getLogger("dshtools")

_FIRST_POLL_S: Final = 0.002
_MAX_POLL_S: Final = 0.05
"""Seconds between looks at a key a live owner holds (doubling up to this)."""

UNKNOWN_TEXT: Final = (
    "tool call was interrupted after it started (its process died before recording a result); "
    "its effects are unknown: check whether it took effect before repeating it"
)
JOURNAL_ERROR_TEXT: Final = "tool call not run: its start could not be recorded in the journal"


def outcome_unknown(record: CallRecord) -> ToolExecutionResult:
    """The final result of a non-idempotent key whose owner died with it claimed."""
    return failure(
        UNKNOWN_TEXT,
        name="OutcomeUnknown",
        code=OUTCOME_UNKNOWN,
        meta={"attempts": record.attempts},
        body_invoked=True,
    )


def journal_error(exc: JournalError) -> ToolExecutionResult:
    return failure(
        JOURNAL_ERROR_TEXT,
        name="JournalError",
        code=JOURNAL_ERROR,
        meta={"journal": "not recorded: " + safe_str(exc)},
    )


def _not_recorded(call: JournalCall, result: ToolExecutionResult, why: str) -> ToolExecutionResult:
    _log.error("journal: the result of call %r of session %r was not recorded: %s", call.call_id, call.session, why)
    return attrs.evolve(result, meta={**result.meta, "journal": "not recorded: " + why})


class JournalCall:
    """One journaled call's key and how far it went: ``takeover`` (a dead
    owner's claim of an idempotent tool to take over), ``claimed`` (this
    journal holds the claim), ``final`` (a result decided by the key's
    record, published as it is and never recorded again)."""

    __slots__ = (
        "attempts",
        "call_id",
        "claim_lock",
        "claimed",
        "final",
        "idempotent",
        "journal",
        "session",
        "takeover",
        "tool",
    )

    def __init__(self, journal: Journal, session: str, call_id: str, tool: str, idempotent: bool) -> None:
        self.journal = journal
        self.session = session
        self.call_id = call_id
        self.tool = tool
        self.idempotent = idempotent
        self.takeover: CallRecord | None = None
        self.claimed = False
        self.final: ToolExecutionResult | None = None
        self.attempts = 1
        # Serializes claims of this call: a wrapper may run next() on two
        # threads at once, and the second must see the first's claim, not
        # wait for its own key.
        self.claim_lock = threading.Lock()

    def resolve(self, signal: AbortSignal) -> ToolExecutionResult | None:
        """Look the key up until it says what this call does: ``None`` to
        run the body (``takeover`` set for a dead owner's idempotent key),
        else the call's result (also kept in ``final``). Blocks while a
        live owner holds the key. Raises ``JournalError``."""
        journal = self.journal
        delay = _FIRST_POLL_S
        while True:
            record = journal.lookup(self.session, self.call_id)
            if record is None:
                self.takeover = None
                return None
            if record.result is not None:
                self.final = attrs.evolve(record.result, meta={**record.result.meta, "replayed": True})
                return self.final
            if journal.owner_alive(record):
                if signal.wait(delay):
                    self.final = aborted(signal.reason, invoked=False)
                    return self.final
                delay = min(delay * 2, _MAX_POLL_S)
                continue
            if self.idempotent:
                self.takeover = record
                self.attempts = record.attempts + 1
                return None
            unknown = outcome_unknown(record)
            if journal.settle_dead(record, unknown):
                self.final = unknown
                return unknown

    def claim(self, signal: AbortSignal, arguments: object) -> ToolExecutionResult | None:
        """Commit the claim before the body is submitted: ``None`` when
        this journal holds the key now (the body may run); else the call's
        result (``JOURNAL_ERROR``, or what resolving the key again gave)."""
        with self.claim_lock:
            if self.claimed:
                return None
            if self.final is not None:
                return self.final
            return self._claim(signal, arguments)

    def _claim(self, signal: AbortSignal, arguments: object) -> ToolExecutionResult | None:
        try:
            while True:
                if self.journal.claim_call(self.session, self.call_id, self.tool, arguments, takeover=self.takeover):
                    self.claimed = True
                    return None
                result = self.resolve(signal)
                if result is not None:
                    return result
                # The racer's claim is not visible yet: look again shortly.
                if signal.wait(_FIRST_POLL_S):
                    self.final = aborted(signal.reason, invoked=False)
                    return self.final
        except JournalError as exc:
            _log.error("journal: call %r of session %r not run: %s", self.call_id, self.session, exc)
            self.final = journal_error(exc)
            return self.final

    def settle(self, result: ToolExecutionResult) -> ToolExecutionResult:
        """Record ``result`` as the key's final one (unless the key's record
        decided it, or it is ``APPROVAL_PENDING``); returns the result to
        publish."""
        final = self.final
        if final is not None:
            return final
        if result.code == APPROVAL_PENDING and not self.claimed:
            return result
        if self.attempts > 1:
            result = attrs.evolve(result, meta={**result.meta, "attempts": self.attempts})
        try:
            recorded = self.journal.settle_call(self.session, self.call_id, self.tool, result, claimed=self.claimed)
        except JournalError as exc:
            return _not_recorded(self, result, safe_str(exc))
        if not recorded:
            return _not_recorded(self, result, "the key was claimed or settled by another owner meanwhile")
        return result


class JournaledRun(Protocol):
    """What ``begin_journaled`` uses of a call's state (``run.Run``
    implements it; this module never imports ``run``, which imports it)."""

    call: ToolExecutionInput
    definition: ToolDefinition | None
    journal: JournalCall | None
    interrupt: BaseException | None

    def settle(self, result: ToolExecutionResult, *, skip_post: bool) -> None: ...


def begin_journaled(journal: Journal, run: JournaledRun) -> bool:
    """Resolve a journaled call's key before step 1 (the module's first
    guarantee): ``True`` when the run is settled by it. Raises
    ``ValueError`` for a call without ``session`` (or an empty one). A
    ``KeyboardInterrupt`` while it resolves settles the run
    ``ABORTED_BEFORE_DISPATCH`` and is left on ``run.interrupt``."""
    call = run.call
    session = call.session
    if not session:
        raise ValueError(
            f"call {call.call_id!r}: a registry with a journal needs the call's session, a non-empty str "
            f"(ToolExecutionInput(..., session=...)), got {session!r} (docs/contract.md#journal)"
        )
    definition = run.definition
    journaled = JournalCall(journal, session, call.call_id, call.name, definition is not None and definition.idempotent)
    run.journal = journaled
    try:
        result = journaled.resolve(call.signal)
    except JournalError as exc:
        _log.error("journal: call %r of session %r not run: %s", call.call_id, session, exc)
        result = journaled.final = journal_error(exc)
    except KeyboardInterrupt as interrupt:
        # As a signal's abort while a live owner holds the key: this
        # caller's ABORTED_BEFORE_DISPATCH, not the key's (never recorded);
        # published, then re-raised by the registry as a step-3 interrupt is.
        result = journaled.final = aborted(interrupt, invoked=False)
        run.interrupt = interrupt
    if result is None:
        return False
    run.settle(result, skip_post=True)
    return True
