"""Honest transcript repair (docs/contract.md#repair): every tool call of a
history gets exactly one result, in the place its provider requires;
package-internal, used by ``dshtools.openai`` and ``dshtools.anthropic``.

Guarantees:

* **One result per call, in place.** A result answers the oldest earlier
  call with its id that is still unanswered; it is moved to its call's
  required place (Chat Completions: the ``role: "tool"`` messages right
  after the assistant message; Anthropic: the first blocks of the next
  user message; Responses: any place after the call, a missing output
  going right after the call's group of ``function_call`` items). A result
  that answers no call (no earlier call has its id, or that call already
  has a result) is dropped.
* **Honest text for a missing result.** With a journal: the key's settled
  result as recorded (a settled ``ABORTED`` says it had started and was
  stopped); a claim that never settled says the outcome is unknown (or,
  while the journal says its owner is alive, that it is still running); no
  record at all says the call never ran. Without a journal: no result was
  recorded and the call may have run. None of these texts carries clock
  data.
* **Pure.** The input is never changed: a new list is returned, holding
  the input's own message objects except where a message must change
  (an Anthropic user message whose ``tool_result`` blocks move), which is
  a new dict. Repairing the output again returns an equal list.
* Raises ``TypeError`` for what is not a history (not an iterable of
  messages or items, a message that is not an object); ``ValueError`` for a
  journal without a session or a session without a journal.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, Generic, Protocol, TypeVar

import attrs

from .._registry.journaled import UNKNOWN_TEXT
from .._types.calls import TOOL_ABORTED, ToolExecutionResult
from .calls import field, provider_text, utf8_safe

__all__ = [
    "NEVER_RUN_TEXT",
    "NO_RESULT_TEXT",
    "STARTED_AND_STOPPED_TEXT",
    "STILL_RUNNING_TEXT",
    "UNKNOWN_OUTCOME_TEXT",
    "Answer",
    "JournalRecord",
    "ReadsCalls",
    "answers_for",
    "repair_anthropic",
    "repair_chat",
    "repair_items",
]

NEVER_RUN_TEXT: Final = (
    "Error: tool call was never run (its body did not start, so nothing it would do has happened); "
    "it is safe to call it again"
)
STARTED_AND_STOPPED_TEXT: Final = (
    "Error: tool call aborted after it started; it was stopped before it finished, so some of its effects "
    "may have happened"
)
UNKNOWN_OUTCOME_TEXT: Final = f"Error: {UNKNOWN_TEXT}"
"""The text of a key claimed and never settled by an owner that died: the
model text of ``OUTCOME_UNKNOWN``."""
STILL_RUNNING_TEXT: Final = (
    "Error: tool call had started and was still running when this history was sent; "
    "its effects are not known yet: check before repeating it"
)
NO_RESULT_TEXT: Final = (
    "Error: no result was recorded for this tool call and it may have run; check before repeating it"
)


class JournalRecord(Protocol):
    """What repair reads of one journal record (``dshtools.durable.CallRecord``)."""

    @property
    def call_id(self) -> str: ...

    @property
    def state(self) -> str: ...

    @property
    def result(self) -> ToolExecutionResult | None: ...


class ReadsCalls(Protocol):
    """A journal as repair sees it: ``calls(session)`` lists the session's
    records (``dshtools.durable.SqliteJournal`` and ``PostgresJournal``)."""

    def calls(self, session: str) -> Iterable[JournalRecord]: ...


@attrs.frozen
class Answer:
    """The text (always UTF-8 safe) a missing result is given, and whether
    it is an error (Anthropic's ``is_error``)."""

    text: str
    is_error: bool


_P = TypeVar("_P")

_NEVER_RUN: Final = Answer(NEVER_RUN_TEXT, True)
_STOPPED: Final = Answer(STARTED_AND_STOPPED_TEXT, True)
_UNKNOWN: Final = Answer(UNKNOWN_OUTCOME_TEXT, True)
_RUNNING: Final = Answer(STILL_RUNNING_TEXT, True)
_NO_RESULT: Final = Answer(NO_RESULT_TEXT, True)


def answers_for(journal: ReadsCalls | None, session: str | None) -> Callable[[str], Answer]:
    """A function giving the ``Answer`` for a call id whose result is
    missing, read from ``journal``'s records of ``session`` once, here.
    Raises ``ValueError`` when only one of the two is given, ``TypeError``
    for a session that is not a ``str``."""
    if journal is None:
        if session is not None:
            raise ValueError("session names the journal's session: pass journal= too")
        return lambda _call_id: _NO_RESULT
    if session is None:
        raise ValueError("a journal needs the session whose calls it recorded: pass session=")
    if not isinstance(session, str):
        raise TypeError(f"session must be a str, not {type(session).__name__}")
    records = {record.call_id: record for record in journal.calls(session)}

    def answer(call_id: str) -> Answer:
        record = records.get(call_id)
        if record is None:
            # the claim is committed before any body starts: no record, no run
            return _NEVER_RUN
        result = record.result
        if record.state != "settled" or result is None:
            # A claim of a live owner (another thread or process running
            # the call now) is not a crash: say so.
            owner_alive = getattr(journal, "owner_alive", None)
            return _RUNNING if callable(owner_alive) and owner_alive(record) else _UNKNOWN
        if result.code == TOOL_ABORTED:
            return _STOPPED
        return Answer(provider_text(result), result.is_error)

    return answer


class _Pairing(Generic[_P]):
    """The ordered walk that binds results to calls: ``call(group, id)``
    opens a call of a group (a message's calls, a run of items);
    ``result(id, position)`` answers the oldest open call with that id and
    says whether it did (``False``: an orphan, to be dropped). ``slots``
    maps each group to its calls' ids in order, each with its result's
    position or ``None``."""

    __slots__ = ("_open", "slots")

    def __init__(self) -> None:
        self._open: dict[str, deque[tuple[int, int]]] = {}
        self.slots: dict[int, list[tuple[str, _P | None]]] = {}

    def call(self, group: int, call_id: str) -> None:
        slots = self.slots.setdefault(group, [])
        self._open.setdefault(call_id, deque()).append((group, len(slots)))
        slots.append((call_id, None))

    def result(self, call_id: object, position: _P) -> bool:
        if not isinstance(call_id, str):
            return False
        waiting = self._open.get(utf8_safe(call_id))
        if not waiting:
            return False
        group, slot = waiting.popleft()
        self.slots[group][slot] = (call_id, position)
        return True


def _history(items: object, what: str) -> list[object]:
    """``items`` as a list of objects; ``TypeError`` for a ``str``, a
    mapping or anything not iterable (one message passed for the list)."""
    if isinstance(items, (str, bytes, Mapping)) or not isinstance(items, Iterable):
        raise TypeError(f"{what} must be a list of messages or items, not {type(items).__name__}")
    out = list(items)
    for index, item in enumerate(out):
        if isinstance(item, (str, bytes, int, float)) or item is None:
            raise TypeError(f"{what}[{index}] must be an object, not {type(item).__name__}")
    return out


def _call_ids(calls: object) -> list[str]:
    """The usable ids of a message's calls (``tool_calls`` entries or
    ``tool_use`` blocks): a non-empty ``str`` under ``id``; a call without
    one cannot be answered and is skipped."""
    if not isinstance(calls, (list, tuple)):
        return []
    ids: list[str] = []
    for call in calls:
        call_id = field(call, "id")
        if isinstance(call_id, str) and call_id:
            ids.append(utf8_safe(call_id))
    return ids


# ---------------------------------------------------------------- Chat Completions


def repair_chat(messages: object, answer: Callable[[str], Answer]) -> list[Any]:
    """``messages`` (Chat Completions) with each assistant message's
    ``tool_calls`` answered by ``role: "tool"`` messages right after it, in
    call order: the history's own tool message where there is one, else one
    whose ``content`` is ``answer(call_id).text``. Tool messages that answer
    no call are dropped."""
    items = _history(messages, "messages")
    pairing: _Pairing[int] = _Pairing()
    for index, message in enumerate(items):
        role = field(message, "role")
        if role == "assistant":
            for call_id in _call_ids(field(message, "tool_calls")):
                pairing.call(index, call_id)
        elif role == "tool":
            pairing.result(field(message, "tool_call_id"), index)
    out: list[Any] = []
    for index, message in enumerate(items):
        if field(message, "role") == "tool":
            continue  # each answer is placed after its call below; the rest are orphans
        out.append(message)
        for call_id, position in pairing.slots.get(index, ()):
            if position is not None:
                out.append(items[position])
            else:
                out.append({"role": "tool", "tool_call_id": call_id, "content": answer(call_id).text})
    return out


# ---------------------------------------------------------------- Responses API


def repair_items(items: object, answer: Callable[[str], Answer]) -> list[Any]:
    """Responses API input ``items`` with every ``function_call`` answered
    by exactly one later ``function_call_output``: the history's own where
    there is one (left where it is), else one whose ``output`` is
    ``answer(call_id).text``, placed right after the last ``function_call``
    of the run of ``function_call`` and ``reasoning`` items the call
    belongs to (a reasoning item keeps the item that follows it). Outputs
    that answer no earlier call are dropped."""
    entries = _history(items, "items")
    pairing: _Pairing[int] = _Pairing()
    group: int | None = None
    group_end: dict[int, int] = {}
    for index, item in enumerate(entries):
        kind = field(item, "type")
        if kind == "function_call":
            if group is None:
                group = index
            group_end[group] = index
            call_id = field(item, "call_id")
            if isinstance(call_id, str) and call_id:
                pairing.call(group, utf8_safe(call_id))
        elif kind != "reasoning":
            group = None
            if kind == "function_call_output":
                pairing.result(field(item, "call_id"), index)
    answered = {position for slots in pairing.slots.values() for _, position in slots if position is not None}
    missing_after: dict[int, list[str]] = {}
    for start, slots in pairing.slots.items():
        ids = [call_id for call_id, position in slots if position is None]
        if ids:
            missing_after[group_end[start]] = ids
    out: list[Any] = []
    for index, item in enumerate(entries):
        if field(item, "type") == "function_call_output" and index not in answered:
            continue
        out.append(item)
        for call_id in missing_after.get(index, ()):
            out.append({"type": "function_call_output", "call_id": call_id, "output": answer(call_id).text})
    return out


# ---------------------------------------------------------------- Anthropic Messages


def _blocks(content: object) -> list[object] | None:
    return list(content) if isinstance(content, (list, tuple)) else None


def repair_anthropic(messages: object, answer: Callable[[str], Answer]) -> list[Any]:
    """``messages`` (Anthropic Messages) with each assistant message's
    ``tool_use`` blocks answered by ``tool_result`` blocks that lead the
    next message, a user message (a new one when the next message is not),
    in call order: the history's own block where there is one, else one
    whose ``content`` is ``answer(id).text`` and ``is_error`` its
    ``is_error``. ``tool_result`` blocks that answer no call are dropped,
    and a user message left with no content goes with them."""
    items = _history(messages, "messages")
    pairing: _Pairing[object] = _Pairing()
    for index, message in enumerate(items):
        role, content = field(message, "role"), _blocks(field(message, "content"))
        if content is None:
            continue
        if role == "assistant":
            for call_id in _call_ids([block for block in content if field(block, "type") == "tool_use"]):
                pairing.call(index, call_id)
        elif role == "user":
            for block in content:
                if field(block, "type") == "tool_result":
                    pairing.result(field(block, "tool_use_id"), block)
    out: list[Any] = []
    leading: list[object] = []  # the results that must open the next message
    for index, message in enumerate(items):
        role = field(message, "role")
        if role == "user":
            out.extend(_user_message(message, leading))
        else:
            if leading:
                out.append({"role": "user", "content": leading})
            out.append(message)
        leading = []
        for call_id, found in pairing.slots.get(index, ()):
            if found is not None:
                leading.append(found)
            else:
                reply = answer(call_id)
                leading.append(
                    {"type": "tool_result", "tool_use_id": call_id, "content": reply.text, "is_error": reply.is_error}
                )
    if leading:
        out.append({"role": "user", "content": leading})
    return out


def _user_message(message: object, leading: list[object]) -> list[object]:
    """The user ``message`` as it goes out: ``leading`` first, then its own
    blocks that are not ``tool_result`` blocks (those were placed at their
    calls, or were orphans). The message itself when that changes nothing;
    none when nothing is left."""
    content = field(message, "content")
    blocks = _blocks(content)
    if blocks is None:
        if not leading:
            return [message]
        rest: list[object] = [{"type": "text", "text": content}] if isinstance(content, str) and content else []
    else:
        rest = [block for block in blocks if field(block, "type") != "tool_result"]
        if leading + rest == blocks:
            return [message]
    if not leading and not rest:
        return []
    if isinstance(message, Mapping):
        return [{**message, "content": leading + rest}]
    return [{"role": "user", "content": leading + rest}]
