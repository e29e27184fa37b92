"""Approval tickets: what a deferred approval hands the caller, and the
check that lets it run its call once (docs/contract.md#deferred-approval,
docs/policies.md#deferred-approval).

A ticket is a JSON object (a ``FrozenDict``; ``json.dumps`` and ``pickle``
take it as it is) naming the call it may run: the tool, the call id, the
arguments it was issued for, the definition's fingerprint, the call's
journal session (or ``None``), and when it was issued and expires (``time.time()`` seconds). ``ApprovalTickets``
issues tickets and redeems them; a ``TicketStore`` keeps the pending ones.

Guarantees:

* A ticket is known to its store only by a keyed digest (HMAC-SHA256 of
  the ticket's canonical JSON, keyed by ``ApprovalTickets(key=...)``):
  a forged ticket, or an issued one with any value changed, has a digest
  the store never saw and is refused. The issued ticket stays pending.
* The canonical form is ``canonical``'s (numbers by value, keys sorted, no
  whitespace, strings by their characters): a ticket that went through
  any conforming JSON round trip (a browser's ``JSON.parse`` and
  ``JSON.stringify`` write ``2.0`` as ``2``) has the digest it was issued
  with, and resumes.
* Redeeming claims the digest from the store, atomically: however many
  threads (or, with a shared store, processes) redeem one ticket at once,
  exactly one succeeds; every other, and every later one, is refused.
* A ticket past its ``expires_at``, or for a tool that is not registered
  or whose definition (schema, description, output schema, body) changed
  since it was issued, is refused, after it was claimed (it can never run).
* Every refusal raises ``TicketError`` (a ``ValueError``), whatever the
  ticket's shape, depth or size: text nested deeper than the JSON decoder
  reads, a value that is not JSON or contains itself, a store whose claim
  fails with ``OSError`` (the ticket is then kept: it can be resumed
  again). A ticket that passes gives the call to run, never a result: the
  registry runs it.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import os
import re
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final, Protocol, runtime_checkable

import attrs

from .._core.freeze import canonical, freeze, thaw
from .._signal import AbortSignal
from .._types.calls import APPROVAL_PENDING, ToolFailure, failure
from .._types.tools import ToolDefinition

__all__ = [
    "DEFAULT_TICKET_TTL",
    "ApprovalTickets",
    "FileTicketStore",
    "MemoryTicketStore",
    "Redeemed",
    "TicketError",
    "TicketStore",
    "check_resume",
    "fingerprint",
    "pending",
]

DEFAULT_TICKET_TTL: Final = 3600.0
"""Seconds a ticket stays valid when ``ApprovalTickets(ttl=...)`` is not given."""

_VERSION: Final = 1
_DEFAULT_KEY: Final = b"dshtools approval ticket"
_DIGEST: Final = re.compile(r"[0-9a-f]{64}")
_MAX_TICKET_CHARS: Final = 1 << 28
"""The longest canonical text a ticket may have (characters): a value
sharing containers many times over is refused, not written out."""
_FIELDS: Final = {
    "dshtools_ticket": (int, float),
    "id": str,
    "tool": str,
    "fingerprint": str,
    "call_id": str,
    "reason": (str, type(None)),
    "agent": (str, type(None)),
    "root_call_id": (str, type(None)),
    "session": (str, type(None)),
    "issued_at": (int, float),
    "expires_at": (int, float),
}


class TicketError(ValueError):
    """``registry.resume`` refused a ticket: not a ticket, forged or altered,
    already resumed, expired, or for a tool that is unknown or changed. The
    call it names was not run, and no result was published for it."""


@runtime_checkable
class TicketStore(Protocol):
    """Where pending tickets are kept, by the hex digest (64 characters of
    ``0-9a-f``) that names each. Called on the thread that runs
    ``execute`` or ``resume``, from any number of threads at once."""

    def add(self, key: str, expires_at: float) -> None:
        """Keep ``key`` pending; ``expires_at`` (``time.time()`` seconds)
        is when the store may forget it. Raises on failure (the call is
        then denied, never left pending without a ticket)."""
        ...

    def claim(self, key: str) -> bool:
        """Take ``key`` atomically: ``True`` for exactly one caller of the
        pending key, however many claim it at once; ``False`` for a key
        that is not pending (never added, claimed before, or forgotten).
        ``OSError`` means the key was not taken: it stays pending."""
        ...


class MemoryTicketStore:
    """Pending tickets in this process's memory (the default store): a
    ticket is resumed at most once by any thread of this process, and is
    lost when the process ends. Expired keys are forgotten as new ones are
    added."""

    _SWEEP_AT: Final = 1024

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[str, float] = {}
        self._sweep_at = self._SWEEP_AT

    def add(self, key: str, expires_at: float) -> None:
        with self._lock:
            if key in self._pending:
                raise ValueError("ticket key already pending")
            self._pending[key] = expires_at
            if len(self._pending) >= self._sweep_at:
                now = time.time()
                self._pending = {k: t for k, t in self._pending.items() if t > now}
                self._sweep_at = max(self._SWEEP_AT, 2 * len(self._pending))

    def claim(self, key: str) -> bool:
        with self._lock:
            return self._pending.pop(key, None) is not None

    def __len__(self) -> int:
        return len(self._pending)


class FileTicketStore:
    """Pending tickets as files in ``directory`` (created, mode 0o700, if
    missing), one file named by its digest each, for registries in
    several processes that share a file system. ``add`` creates the file
    with ``O_CREAT | O_EXCL``; ``claim`` is ``os.unlink``, which exactly one
    of any number of concurrent claimants completes, so a ticket is resumed
    at most once across every process using the directory. Anyone who may
    write the directory is trusted: it can delete pending tickets (deny
    them) or re-create a used one's file (replay it). ``purge()`` removes
    the files of expired tickets."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self._dir = Path(directory)
        self._dir.mkdir(mode=0o700, parents=True, exist_ok=True)

    @property
    def directory(self) -> Path:
        return self._dir

    def _path(self, key: str) -> Path | None:
        # Only a digest names a file: nothing a caller sends reaches the path.
        return self._dir / key if _DIGEST.fullmatch(key) else None

    def add(self, key: str, expires_at: float) -> None:
        path = self._path(key)
        if path is None:
            raise ValueError("a ticket key is a hex digest")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, repr(float(expires_at)).encode("ascii"))
        finally:
            os.close(fd)

    def claim(self, key: str) -> bool:
        path = self._path(key)
        if path is None:
            return False
        try:
            os.unlink(path)
        except FileNotFoundError:
            return False
        return True

    def purge(self, now: float | None = None) -> int:
        """Remove the files of tickets expired at ``now`` (default
        ``time.time()``); returns how many were removed."""
        now = time.time() if now is None else now
        removed = 0
        for entry in self._dir.iterdir():
            if not _DIGEST.fullmatch(entry.name):
                continue
            try:
                expires_at = float(entry.read_text(encoding="ascii"))
            except (OSError, ValueError):
                continue
            if expires_at <= now and self.claim(entry.name):
                removed += 1
        return removed


def _canonical(value: object) -> bytes:
    # surrogatepass: a lone surrogate in a Python str is a character too.
    return canonical(value, max_chars=_MAX_TICKET_CHARS).encode("utf-8", "surrogatepass")


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def _body_name(fn: object) -> str:
    """``module.qualname`` of the function a body runs: through
    ``__wrapped__`` (a typed tool's body) and ``functools.partial``."""
    for _ in range(8):  # a bounded unwrap: a wrapper chain is short
        try:
            inner = getattr(fn, "__wrapped__", None)
        except Exception:
            inner = None
        if inner is None and isinstance(fn, functools.partial):
            inner = fn.func
        if inner is None:
            break
        fn = inner
    try:
        module = getattr(fn, "__module__", None)
        qualname = getattr(fn, "__qualname__", None)
    except Exception:
        module = qualname = None
    if not isinstance(qualname, str):
        qualname = type(fn).__qualname__
    return f"{module}.{qualname}" if isinstance(module, str) else qualname


def fingerprint(definition: ToolDefinition) -> str:
    """A hex digest of what a ticket was approved against: the tool's
    name, description, parameters, output schema and body (the module and
    qualified name of the function it runs). Equal in every process that registers the same tool."""
    described = {
        "name": definition.name,
        "description": definition.description,
        "parameters": thaw(definition.parameters),
        "output_schema": None if definition.output_schema is None else thaw(definition.output_schema),
        "body": _body_name(definition.execute),
    }
    return hashlib.sha256(_canonical(described)).hexdigest()


def pending(name: str, reason: str | None, ticket: Mapping[str, Any]) -> ToolFailure:
    """The ``APPROVAL_PENDING`` result of a deferred call: ``Error: tool call
    "<name>" is awaiting approval[: <reason>]``, ``meta["ticket"]``."""
    text = f'tool call "{name}" is awaiting approval' + (f": {reason}" if reason else "")
    return failure(text, name="ApprovalPending", code=APPROVAL_PENDING, meta={"ticket": ticket})


def check_resume(decision: object, arguments: object, signal: object) -> None:
    """The misuse ``resume`` and ``aresume`` refuse before the ticket is
    touched: ``ValueError`` for a decision other than ``"allowed-once"`` or
    ``"rejected"``, or ``arguments`` with ``"rejected"``; ``TypeError`` for
    a ``signal`` that is not an ``AbortSignal``."""
    if type(decision) is not str or decision not in ("allowed-once", "rejected"):
        raise ValueError(f"decision must be 'allowed-once' or 'rejected', not {decision!r}")
    if arguments is not None and decision == "rejected":
        raise ValueError("arguments apply to an 'allowed-once' resume only")
    if not isinstance(signal, AbortSignal):
        raise TypeError(f"signal must be an AbortSignal, not {type(signal).__name__}")


@attrs.frozen
class Redeemed:
    """What a redeemed ticket names: the call to run and the ``Ask`` reason."""

    tool: str
    call_id: str
    arguments: Any
    agent: str | None
    root_call_id: str | None
    reason: str | None
    session: str | None = None  # the journal's session of the call (docs/contract.md#journal)


def _key_converter(value: bytes | str | None) -> bytes:
    if value is None:
        return _DEFAULT_KEY
    if isinstance(value, str):
        return value.encode()
    if not isinstance(value, bytes) or not value:
        raise TypeError("key must be non-empty bytes or str, or None")
    return value


def _check_ttl(_inst: object, _attr: object, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
        raise ValueError(f"ttl must be a positive number of seconds, not {value!r}")


def _store_converter(value: TicketStore | None) -> TicketStore:
    return MemoryTicketStore() if value is None else value


def _check_store(_inst: object, _attr: object, value: object) -> None:
    if not isinstance(value, TicketStore):
        raise TypeError(f"store must implement TicketStore (add, claim), not {type(value).__name__}")


@attrs.frozen(eq=False)
class ApprovalTickets:
    """How a registry issues and redeems approval tickets
    (``ToolRegistry(tickets=...)``): ``store`` keeps the pending ones
    (default: a ``MemoryTicketStore`` of this object's own), ``ttl`` is the
    seconds a ticket stays valid, ``key`` (bytes or str) keys the digest
    that names a ticket in the store, so that only holders of the key can
    make a ticket the store will accept; ``clock`` gives the time in
    seconds (``time.time`` unless a test injects one). Registries in
    several processes that resume each other's tickets share ``store``
    (e.g. a ``FileTicketStore``) and ``key``."""

    store: TicketStore = attrs.field(factory=MemoryTicketStore, converter=_store_converter, validator=_check_store)
    ttl: float = attrs.field(default=DEFAULT_TICKET_TTL, kw_only=True, validator=_check_ttl)
    key: bytes = attrs.field(default=None, kw_only=True, converter=_key_converter, repr=False)
    clock: Callable[[], float] = attrs.field(default=time.time, kw_only=True)

    def _digest(self, ticket: Mapping[str, Any]) -> str:
        return hmac.new(self.key, _canonical(ticket), hashlib.sha256).hexdigest()

    def issue(
        self,
        definition: ToolDefinition,
        call_id: str,
        arguments: Any,
        agent: str | None,
        root_call_id: str | None,
        reason: str | None,
        session: str | None = None,
    ) -> Mapping[str, Any]:
        """A new pending ticket for the call (frozen, JSON-serializable);
        raises whatever the store raises, or ``ValueError`` for arguments
        that are not JSON."""
        now = float(self.clock())
        ticket = {
            "dshtools_ticket": _VERSION,
            "id": secrets.token_urlsafe(16),
            "tool": definition.name,
            "fingerprint": fingerprint(definition),
            "call_id": call_id,
            "arguments": thaw(arguments),
            "agent": agent,
            "root_call_id": root_call_id,
            "reason": reason,
            "session": session,
            "issued_at": now,
            "expires_at": now + self.ttl,
        }
        self.store.add(self._digest(ticket), ticket["expires_at"])
        frozen: Mapping[str, Any] = freeze(ticket)
        return frozen

    def redeem(self, ticket: object, lookup: Callable[[str], ToolDefinition | None]) -> Redeemed:
        """Claim ``ticket`` (a mapping, or its JSON text) and return the call
        it names; ``TicketError`` when it is refused, for any input
        (docs/contract.md#a27). ``lookup`` finds the tool's current
        definition by name."""
        if isinstance(ticket, (str, bytes, bytearray)):
            if len(ticket) > _MAX_TICKET_CHARS:
                raise TicketError("not an approval ticket: the text is longer than any ticket")
            try:
                ticket = json.loads(ticket, parse_constant=_no_constant)
            except RecursionError:
                raise TicketError("not an approval ticket: the text is nested deeper than JSON is read") from None
            except ValueError:
                raise TicketError("not an approval ticket: the text is not JSON") from None
        if not isinstance(ticket, Mapping) or "arguments" not in ticket:
            raise TicketError("not an approval ticket: a ticket is the mapping in a pending result's meta['ticket']")
        for field, kind in _FIELDS.items():
            value = ticket.get(field)
            if not isinstance(value, kind) or isinstance(value, bool):  # type: ignore[arg-type]
                raise TicketError(f"not an approval ticket: field {field!r} is missing or malformed")
        if ticket["dshtools_ticket"] != _VERSION or set(ticket) != {*_FIELDS, "arguments"}:
            raise TicketError("not an approval ticket: it has fields a ticket does not have")
        plain = thaw(ticket)
        try:
            key = self._digest(plain)
        except ValueError as exc:
            raise TicketError(f"not an approval ticket: it is not JSON ({exc})") from None
        name = plain["tool"]
        try:
            claimed = self.store.claim(key)
        except OSError as exc:
            raise TicketError(
                f"approval ticket {plain['id']!r} for tool {name!r} was kept, not resumed: its store failed "
                f"while claiming it ({type(exc).__name__}: {exc}); it can be resumed again"
            ) from exc
        if not claimed:
            raise TicketError(
                f"approval ticket {plain['id']!r} for tool {name!r} is not pending: it was already resumed, "
                "or was never issued by this registry's ticket store (a forged or altered ticket)"
            )
        if self.clock() >= plain["expires_at"]:
            raise TicketError(f"approval ticket {plain['id']!r} for tool {name!r} has expired")
        definition = lookup(name)
        if definition is None:
            raise TicketError(f"approval ticket {plain['id']!r} is for tool {name!r}, which is not registered")
        if not hmac.compare_digest(fingerprint(definition), plain["fingerprint"]):
            raise TicketError(
                f"approval ticket {plain['id']!r} is for tool {name!r} as it was defined when the ticket was "
                "issued; its definition has changed since"
            )
        return Redeemed(
            name,
            plain["call_id"],
            plain["arguments"],
            plain["agent"],
            plain["root_call_id"],
            plain["reason"],
            plain["session"],
        )
