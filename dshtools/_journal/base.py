"""The journal's rules over any SQL store: claim, settle, look up, list,
purge, and the approval-ticket store (docs/contract.md#journal).

A store subclass gives one connection and four SQL primitives
(``_execute``, ``_query``, ``_lock_key``/``_unlock_key`` for a
connection-held claim lock where it has one); everything a key can go
through is decided here, by single statements whose ``WHERE`` clause is
the compare-and-set, so two processes racing on one key cannot both win:

* ``claim_call``: ``INSERT ... ON CONFLICT DO NOTHING`` (a new key), or
  ``UPDATE ... WHERE owner = <the dead owner> AND state = 'claimed'`` (an
  idempotent tool's key taken over from a dead owner). One row changed
  means this journal owns the key.
* ``settle_call``: ``UPDATE ... WHERE owner = <me> AND state = 'claimed'`` for
  a claimed key; ``INSERT ... ON CONFLICT DO NOTHING`` for a call that
  never dispatched; ``UPDATE ... WHERE owner = <the dead owner>`` to record
  ``OUTCOME_UNKNOWN``. A settled row is never changed again.

Threads: every public method may be called from any thread; ``_lock``
serializes use of the one connection. The lease renewer (a daemon thread,
started with the first claim, stopped by ``close``) pushes ``lease_until``
of this journal's open claims forward every third of the lease.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import Any, Final

from .._core.errors import check_seconds, safe_str
from .._types.calls import ToolExecutionResult
from .owner import Owner, alive
from .records import CLAIMED, SETTLED, CallRecord, JournalError, arguments_text, encode_result, record_from_row

__all__ = ["CLAIM_SQL", "DEFAULT_LEASE", "SETTLE_SQL", "Journal"]

DEFAULT_LEASE: Final = 60.0
"""Seconds a claim of an owner on another machine stays valid after its
last renewal (renewed every third of it while the owner lives)."""

_log: Final = logging.getLogger("dshtools")

_COLUMNS: Final = "session, call_id, tool, state, owner, claimed_at, settled_at, attempts, result"
CLAIM_SQL: Final = (
    "INSERT INTO dshtools_calls (session, call_id, tool, state, owner, claimed_at, settled_at, attempts, result, "
    "lease_until, arguments) VALUES (?, ?, ?, ?, ?, ?, NULL, 1, NULL, ?, ?) ON CONFLICT DO NOTHING"
)
"""A new key's claim: (session, call_id, tool, "claimed", owner, now, lease_until, arguments)."""
SETTLE_SQL: Final = (
    "UPDATE dshtools_calls SET state = ?, result = ?, settled_at = ? "
    "WHERE session = ? AND call_id = ? AND owner = ? AND state = ?"
)
"""A claimed key's settle: ("settled", result, now, session, call_id, owner, "claimed")."""


class _Guard:
    """``with journal._guard:`` holds the journal's lock, refuses a closed
    journal, and turns a store fault into a ``JournalError`` (its text
    cleaned by the store). Stateless: one per journal, reentrant as the
    lock is."""

    __slots__ = ("_journal",)

    def __init__(self, journal: Journal) -> None:
        self._journal = journal

    def __enter__(self) -> None:
        journal = self._journal
        journal._lock.acquire()
        if journal._closed:
            journal._lock.release()
            raise JournalError(f"{type(journal).__name__} is closed")

    def __exit__(self, _kind: object, exc: BaseException | None, _tb: object) -> None:
        self._journal._lock.release()
        if isinstance(exc, Exception) and not isinstance(exc, JournalError):
            raise self._journal._error(exc) from None


class Journal:
    """The shared logic of ``SqliteJournal`` and ``PostgresJournal``
    (docs/contract.md#journal). Not instantiated directly."""

    _placeholder = "?"

    def __init__(self, *, store_arguments: bool, lease: float) -> None:
        if type(store_arguments) is not bool:
            raise TypeError(f"store_arguments must be a bool, not {type(store_arguments).__name__}")
        self._lease = check_seconds(lease, "lease")
        if self._lease <= 0:
            raise ValueError("lease must be positive seconds")
        self._store_arguments = store_arguments
        self._owner = Owner()
        # Guards the connection (one statement at a time), `_held` and `_closed`.
        self._lock = threading.RLock()
        self._held: set[tuple[str, str]] = set()  # keys this journal claimed and has not settled
        self._closed = False
        self._guard = _Guard(self)  # `with self._guard:` around every use of the connection
        self._renewer: threading.Thread | None = None
        self._stop = threading.Event()

    # -- store primitives (subclasses) ---------------------------------------

    def _execute(self, sql: str, params: Sequence[object]) -> int:
        """Run one statement in its own committed transaction; the rows changed."""
        raise NotImplementedError

    def _query(self, sql: str, params: Sequence[object]) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def _lock_key(self, session: str, call_id: str) -> bool:
        """Take the connection-held lock of a key, if the store has one."""
        return True

    def _unlock_key(self, session: str, call_id: str) -> None:
        pass

    def _holder_alive(self, session: str, call_id: str) -> bool | None:
        """Whether another connection holds the key's lock (``None``: no such lock)."""
        return None

    def _close_store(self) -> None:
        raise NotImplementedError

    def _before_purge(self) -> None:
        pass

    def _after_purge(self) -> None:
        pass

    def _error(self, exc: BaseException) -> JournalError:
        """A ``JournalError`` for a store fault, its text free of secrets."""
        return JournalError(f"{type(self).__name__}: {type(exc).__name__}: {safe_str(exc)}")

    # -- the rules -------------------------------------------------------------

    def _sql(self, sql: str) -> str:
        return sql if self._placeholder == "?" else sql.replace("?", self._placeholder)

    @property
    def owner(self) -> str:
        """This journal's owner text in this process (docs/contract.md#journal-owner)."""
        return self._owner.text

    @property
    def lease(self) -> float:
        """Seconds: how long a claim of an owner on another machine holds without renewal."""
        return self._lease

    def lookup(self, session: str, call_id: str) -> CallRecord | None:
        """The record of key ``(session, call_id)``, or ``None``."""
        with self._guard:
            rows = self._query(
                self._sql(f"SELECT {_COLUMNS} FROM dshtools_calls WHERE session = ? AND call_id = ?"),
                (session, call_id),
            )
        return record_from_row(tuple(rows[0])) if rows else None

    def calls(self, session: str) -> list[CallRecord]:
        """Every record of ``session``, in the order they were first written."""
        if type(session) is not str:
            raise TypeError(f"session must be a str, not {type(session).__name__}")
        with self._guard:
            rows = self._query(
                self._sql(
                    f"SELECT {_COLUMNS} FROM dshtools_calls WHERE session = ? "
                    "ORDER BY COALESCE(claimed_at, settled_at), call_id"
                ),
                (session,),
            )
        return [record_from_row(tuple(row)) for row in rows]

    def sessions(self) -> list[tuple[str, int, int]]:
        """``(session, claimed, settled)`` for every session with records:
        how many of its keys are in each state, oldest session first."""
        with self._guard:
            rows = self._query(
                "SELECT session, SUM(CASE WHEN state = 'claimed' THEN 1 ELSE 0 END), "
                "SUM(CASE WHEN state = 'settled' THEN 1 ELSE 0 END) FROM dshtools_calls "
                "GROUP BY session ORDER BY MIN(COALESCE(claimed_at, settled_at)), session",
                (),
            )
        out: list[tuple[str, int, int]] = []
        for session, claimed, settled in rows:
            if type(session) is not str:
                raise JournalError(f"a journal row names a session that is not text: {session!r}")
            out.append((session, int(claimed), int(settled)))
        return out

    def in_doubt(self) -> list[CallRecord]:
        """Claimed, unsettled records whose owner is dead (a resumed call of
        a non-idempotent tool returns ``OUTCOME_UNKNOWN`` for each)."""
        with self._guard:
            rows = self._query(
                self._sql(f"SELECT {_COLUMNS} FROM dshtools_calls WHERE state = ? ORDER BY claimed_at, call_id"),
                (CLAIMED,),
            )
        records = [record_from_row(tuple(row)) for row in rows]
        return [record for record in records if not self.owner_alive(record)]

    def owner_alive(self, record: CallRecord) -> bool:
        """Whether the owner of a claimed ``record`` may still settle it: this
        journal's own claims by its memory; another process on this machine
        by its pid and start time; elsewhere by the store's connection-held
        lock, else by the lease. Never ``False`` for a live owner."""
        key = (record.session, record.call_id)
        if record.owner == self._owner.text:
            with self._lock:
                return key in self._held
        local = alive(record.owner)
        if local is not None:
            return local
        with self._guard:
            held = self._holder_alive(*key)
            if held is not None:
                return held
            rows = self._query(
                self._sql("SELECT lease_until FROM dshtools_calls WHERE session = ? AND call_id = ? AND owner = ?"),
                (record.session, record.call_id, record.owner),
            )
        if not rows:
            return True  # changed meanwhile: the caller looks again
        until = rows[0][0]
        if type(until) not in (int, float):
            raise JournalError(f"call {record.call_id!r} of session {record.session!r}: corrupt lease {until!r}")
        return time.time() <= float(until)

    def claim_call(
        self, session: str, call_id: str, tool: str, arguments: object, *, takeover: CallRecord | None = None
    ) -> bool:
        """Claim key ``(session, call_id)`` for this journal, committed
        before returning: ``True`` when this journal now owns it; ``False``
        when another owner has it (look it up again). ``takeover`` is a
        record of a dead owner's claim to take over (an idempotent tool's)."""
        now = time.time()
        key = (session, call_id)
        me = self._owner.text
        with self._guard:
            if not self._lock_key(session, call_id):
                return False
            try:
                if takeover is None:
                    changed = self._execute(
                        self._sql(CLAIM_SQL),
                        (
                            session,
                            call_id,
                            tool,
                            CLAIMED,
                            me,
                            now,
                            now + self._lease,
                            arguments_text(arguments, store=self._store_arguments),
                        ),
                    )
                else:
                    changed = self._execute(
                        self._sql(
                            "UPDATE dshtools_calls SET owner = ?, claimed_at = ?, lease_until = ?, "
                            "attempts = attempts + 1 WHERE session = ? AND call_id = ? AND owner = ? AND state = ?"
                        ),
                        (me, now, now + self._lease, session, call_id, takeover.owner, CLAIMED),
                    )
            except BaseException:
                self._unlock_key(session, call_id)
                raise
            if changed != 1:
                self._unlock_key(session, call_id)
                return False
            self._held.add(key)
            self._start_renewer()
        return True

    def settle_call(self, session: str, call_id: str, tool: str, result: ToolExecutionResult, *, claimed: bool) -> bool:
        """Record ``result`` as the key's final one, committed before
        returning: ``True`` when recorded; ``False`` when the key is not
        this journal's to settle (another owner has it or settled it).
        ``claimed``: this journal claimed the key (else the call never
        dispatched and the key must have no record yet)."""
        now = time.time()
        text = encode_result(result)
        with self._guard:
            if claimed:
                changed = self._execute(
                    self._sql(SETTLE_SQL),
                    (SETTLED, text, now, session, call_id, self._owner.text, CLAIMED),
                )
                self._held.discard((session, call_id))
                self._unlock_key(session, call_id)
            else:
                changed = self._execute(
                    self._sql(
                        "INSERT INTO dshtools_calls (session, call_id, tool, state, owner, claimed_at, "
                        "settled_at, attempts, result, lease_until, arguments) "
                        "VALUES (?, ?, ?, ?, ?, NULL, ?, 0, ?, NULL, NULL) ON CONFLICT DO NOTHING"
                    ),
                    (session, call_id, tool, SETTLED, self._owner.text, now, text),
                )
        return changed == 1

    def settle_dead(self, record: CallRecord, result: ToolExecutionResult) -> bool:
        """Record ``result`` for a key whose owner ``record.owner`` died
        with it claimed: ``True`` when recorded, ``False`` when the key
        changed meanwhile (look it up again)."""
        with self._guard:
            changed = self._execute(
                self._sql(
                    "UPDATE dshtools_calls SET state = ?, result = ?, settled_at = ?, owner = ? "
                    "WHERE session = ? AND call_id = ? AND owner = ? AND state = ?"
                ),
                (
                    SETTLED,
                    encode_result(result),
                    time.time(),
                    self._owner.text,
                    record.session,
                    record.call_id,
                    record.owner,
                    CLAIMED,
                ),
            )
        return changed == 1

    def purge(self, older_than: float) -> int:
        """Delete the settled records settled more than ``older_than``
        seconds ago, and expired tickets; returns the records deleted. The
        store really deletes (SQLite overwrites freed pages and checkpoints
        its WAL). Raises ``ValueError`` for a negative ``older_than``."""
        seconds = check_seconds(older_than, "older_than")
        if seconds < 0:
            raise ValueError(f"older_than must be >= 0 seconds, got {older_than!r}")
        cutoff = time.time() - seconds
        with self._guard:
            self._before_purge()
            count = self._execute(
                self._sql("DELETE FROM dshtools_calls WHERE state = ? AND settled_at < ?"), (SETTLED, cutoff)
            )
            self._execute(self._sql("DELETE FROM dshtools_tickets WHERE expires_at < ?"), (time.time(),))
            self._after_purge()
        return count

    # -- TicketStore (dshtools/_registry/tickets.py) ------------------------------

    def add(self, key: str, expires_at: float) -> None:
        """Keep approval ticket digest ``key`` pending until ``expires_at`` (``time.time()`` seconds)."""
        with self._guard:
            self._execute(
                self._sql("INSERT INTO dshtools_tickets (key, expires_at) VALUES (?, ?) ON CONFLICT DO NOTHING"),
                (key, float(expires_at)),
            )

    def claim(self, key: str) -> bool:
        """Take ticket digest ``key`` atomically (exactly one caller of a pending key gets ``True``)."""
        with self._guard:
            return self._execute(self._sql("DELETE FROM dshtools_tickets WHERE key = ?"), (key,)) == 1

    # -- lifecycle ---------------------------------------------------------------

    def _start_renewer(self) -> None:
        if self._renewer is None:
            self._renewer = threading.Thread(target=self._renew, name="dshtools-journal-lease", daemon=True)
            self._renewer.start()

    def _renew(self) -> None:
        while not self._stop.wait(self._lease / 3):
            try:
                with self._guard:
                    if self._held:
                        self._execute(
                            self._sql("UPDATE dshtools_calls SET lease_until = ? WHERE owner = ? AND state = ?"),
                            (time.time() + self._lease, self._owner.text, CLAIMED),
                        )
            except JournalError as exc:
                if self._closed:
                    return
                _log.error("journal lease renewal failed: %s", exc)

    def close(self) -> None:
        """Close the store's connection (idempotent). Claims this journal
        still holds stay in the store, and are taken as in doubt once this
        process ends."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._stop.set()
            try:
                self._close_store()
            except Exception as exc:
                raise self._error(exc) from None

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()
