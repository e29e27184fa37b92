"""What a journal holds: the record of one call key, its result as stored
text, and the one error a journal raises (docs/contract.md#journal).

Guarantees:

* A result is stored as JSON text (never pickle): ``encode_result`` keeps
  the code, content, value, ``body_invoked``, contexts and the JSON-safe
  part of ``meta`` (other ``meta`` values, such as an abort reason, are
  kept as their text). ``decode_result`` rebuilds an equal result (values
  frozen as the registry freezes them) or raises ``JournalError``: a
  corrupt, truncated or hostile row never crashes the caller and never
  comes back as a wrong result.
* ``CallRecord`` is a frozen value with every field checked on
  construction; stores build it only through ``record_from_row``.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from typing import Any, Final, Literal

import attrs

from .._core.errors import safe_str
from .._core.freeze import FreezeError, dumps, freeze, thaw
from .._types.calls import ErrorDetail, ErrorInfo, ToolExecutionResult, ToolFailure, ToolSuccess

__all__ = [
    "CLAIMED",
    "SETTLED",
    "CallRecord",
    "JournalError",
    "State",
    "arguments_text",
    "decode_result",
    "encode_result",
    "record_from_row",
]

State = Literal["claimed", "settled"]
CLAIMED: Final = "claimed"
SETTLED: Final = "settled"
_FORMAT: Final = 1
_MAX_TEXT: Final = 64 * 1024 * 1024  # characters of one stored result


class JournalError(RuntimeError):
    """A journal could not do what was asked: its store failed, or what it
    read is not a record this library wrote (corrupt, truncated, or written
    by someone else). The message names the key and the problem, never a
    password (docs/contract.md#journal)."""


def _opt_time(_inst: object, attr: attrs.Attribute[Any], value: object) -> None:
    if value is not None and (type(value) is not float or not math.isfinite(value)):
        raise JournalError(f"{attr.name} must be finite float seconds or None, not {value!r}")


def _text(_inst: object, attr: attrs.Attribute[Any], value: object) -> None:
    if type(value) is not str:
        raise JournalError(f"{attr.name} must be a str, not {type(value).__name__}")


@attrs.frozen(kw_only=True)
class CallRecord:
    """One journaled call key ``(session, call_id)`` as its journal holds it.

    ``state`` is ``"claimed"`` (a process decided to run the body and has
    not recorded its result) or ``"settled"`` (``result`` is the key's final
    result). ``owner`` names the process (and journal) that claimed or
    settled it; ``claimed_at``/``settled_at`` are ``time.time()`` seconds
    (``None`` when that step did not happen: a call that never dispatched
    is settled without a claim); ``attempts`` counts the body's starts
    across crashes (an ``idempotent`` tool's key may be claimed again).
    Source: docs/contract.md#journal."""

    session: str = attrs.field(validator=_text)
    call_id: str = attrs.field(validator=_text)
    tool: str = attrs.field(validator=_text)
    state: State = attrs.field()
    result: ToolExecutionResult | None
    owner: str = attrs.field(validator=_text)
    claimed_at: float | None = attrs.field(validator=_opt_time)
    settled_at: float | None = attrs.field(validator=_opt_time)
    attempts: int = attrs.field()

    @state.validator
    def _check_state(self, _attr: object, value: object) -> None:
        if value not in (CLAIMED, SETTLED):
            raise JournalError(f"state must be 'claimed' or 'settled', not {value!r}")
        if (value == SETTLED) is (self.result is None):
            raise JournalError(f"a {value} record {'needs' if value == SETTLED else 'has no'} result")

    @attempts.validator
    def _check_attempts(self, _attr: object, value: object) -> None:
        if type(value) is not int or value < 0:
            raise JournalError(f"attempts must be a non-negative int, not {value!r}")


def _json_safe(value: object) -> object:
    """``value`` if JSON can hold it as it is, else its text."""
    try:
        dumps(freeze(value))
    except (FreezeError, TypeError, ValueError, RecursionError):
        return safe_str(value) if isinstance(value, BaseException) else _repr(value)
    return value


def _repr(value: object) -> str:
    try:
        return repr(value)
    except Exception:
        return f"<unrepresentable {type(value).__name__}>"


def encode_result(result: ToolExecutionResult) -> str:
    """The stored JSON text of ``result``."""
    doc: dict[str, object] = {
        "format": _FORMAT,
        "body_invoked": result.body_invoked,
        "content": result.content,
        "contexts": result.additional_contexts,
        "meta": dict(result.meta),
    }
    if isinstance(result, ToolSuccess):
        doc["value"] = result.value
    else:
        info = result.error.info
        doc["error"] = {
            "message": result.error.message,
            "name": None if info is None else info.name,
            "code": None if info is None else info.code,
        }
    try:
        # The registry froze content, contexts and value: JSON as they are.
        return dumps(doc)
    except (TypeError, ValueError):
        pass
    doc["meta"] = {str(k): _json_safe(v) for k, v in result.meta.items()}
    if "value" in doc:
        doc["value"] = _json_safe(doc["value"])
    return dumps(freeze(thaw(doc)))


def _field(doc: Mapping[str, Any], name: str, kinds: tuple[type, ...]) -> Any:
    value = doc.get(name)
    if type(value) not in kinds:
        raise JournalError(
            f"stored result: {name!r} is {type(value).__name__}, not {' or '.join(k.__name__ for k in kinds)}"
        )
    return value


def decode_result(text: object, where: str) -> ToolExecutionResult:
    """The result stored as ``text`` (from ``encode_result``); ``where``
    names the key in the error. Raises ``JournalError`` for anything else."""
    if type(text) is not str:
        raise JournalError(f"{where}: the stored result is {type(text).__name__}, not JSON text")
    if len(text) > _MAX_TEXT:
        raise JournalError(f"{where}: the stored result is larger than {_MAX_TEXT} characters")
    try:
        doc = json.loads(text)
        if type(doc) is not dict:
            raise JournalError("not a JSON object")
        if doc.get("format") != _FORMAT or type(doc.get("format")) is not int:
            raise JournalError(f"unknown format {doc.get('format')!r}")
        invoked = _field(doc, "body_invoked", (bool,))
        content = _field(doc, "content", (list,))
        if not all(type(block) is dict and type(block.get("type")) is str for block in content):
            raise JournalError("a content block is not an object with a 'type'")
        contexts = _field(doc, "contexts", (list,))
        if not all(type(context) is dict for context in contexts):
            raise JournalError("a context is not an object")
        meta = _field(doc, "meta", (dict,))
        frozen_meta = {k: freeze(v) for k, v in meta.items()}
        if "error" in doc:
            error = _field(doc, "error", (dict,))
            message = _field(error, "message", (str,))
            name = error.get("name")
            code = error.get("code")
            if type(name) is not str or not (code is None or type(code) is str):
                raise JournalError("the error's name or code is not text")
            return ToolFailure(
                ErrorDetail(message, ErrorInfo(name, code)),
                freeze(content),
                frozen_meta,
                freeze(contexts),
                body_invoked=invoked,
            )
        if "value" not in doc:
            raise JournalError("neither a value nor an error")
        return ToolSuccess(freeze(doc["value"]), freeze(content), frozen_meta, freeze(contexts), body_invoked=invoked)
    except JournalError as exc:
        raise JournalError(f"{where}: corrupt stored result: {exc}") from None
    except (ValueError, TypeError, RecursionError, FreezeError) as exc:
        raise JournalError(f"{where}: corrupt stored result: {type(exc).__name__}: {safe_str(exc)}") from None


def arguments_text(arguments: object, *, store: bool) -> str:
    """The stored form of a call's arguments: their JSON text, or with
    ``store=False`` only its SHA-256 digest (``"sha256:<hex>"``)."""
    try:
        text = dumps(arguments)  # the registry froze them: JSON as they are
    except (TypeError, ValueError):
        try:
            text = dumps(freeze(arguments))
        except (FreezeError, TypeError, ValueError):
            text = _repr(arguments)
    if store:
        return text
    return "sha256:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _time(value: object) -> float | None:
    if value is None:
        return None
    if type(value) is int:
        return float(value)
    return value  # type: ignore[return-value]  # checked by CallRecord


def record_from_row(row: tuple[object, ...]) -> CallRecord:
    """A record from a stored row ``(session, call_id, tool, state, owner,
    claimed_at, settled_at, attempts, result)``; ``JournalError`` for a row
    this library did not write."""
    if len(row) != 9:
        raise JournalError(f"a journal row has {len(row)} columns, not 9")
    session, call_id, tool, state, owner, claimed_at, settled_at, attempts, text = row
    where = f"call {call_id!r} of session {session!r}"
    result = None if text is None else decode_result(text, where)
    try:
        return CallRecord(
            session=session,  # type: ignore[arg-type]
            call_id=call_id,  # type: ignore[arg-type]
            tool=tool,  # type: ignore[arg-type]
            state=state,  # type: ignore[arg-type]
            result=result,
            owner=owner,  # type: ignore[arg-type]
            claimed_at=_time(claimed_at),
            settled_at=_time(settled_at),
            attempts=attempts,  # type: ignore[arg-type]
        )
    except JournalError as exc:
        raise JournalError(f"{where}: corrupt record: {exc}") from None
