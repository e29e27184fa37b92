"""What crosses the process boundary of ``ProcessBackend`` besides plain
data, and what stands in when it cannot
(docs/contract.md#backends): abort reasons, exceptions and return values that do not pickle.

Guarantees:

* Nothing here raises for a foreign object: a value, exception or reason
  that neither ``pickle`` nor ``cloudpickle`` can send is described (type
  name, message) and rebuilt as a stand-in on the other side.
* A stand-in exception has the original's class *name* and message, and is
  a ``ToolError`` (with its code), an ``AbortError`` (with its timeout
  reason) or a plain ``Exception`` to match, so the registry classifies it
  as it would have classified the original.
* Every exception from a worker carries the worker's formatted traceback
  as ``__cause__`` (``RemoteTraceback``) unless it already has a cause.

Used by both sides: ``dshtools._backends.process.worker`` (describe, dump) and
``dshtools._backends.process.backend`` (rebuild, load, ``outcome_of``). Stateless apart from a cache
of stand-in classes.
"""

from __future__ import annotations

import pickle
from typing import Any, Final

from ..._core.errors import AbortError, safe_repr, safe_str
from ..base import Error, NotInvoked, Value
from ..remote import ErrorDetail, RemoteTraceback, describe_error, rebuilt_error

__all__ = [
    "RemoteTraceback",
    "UnsendableValue",
    "describe_error",
    "dump_reason",
    "error_from",
    "load_reason",
    "outcome_of",
]

_PROTOCOL: Final = pickle.HIGHEST_PROTOCOL


def load_reason(data: bytes) -> object:
    """An abort reason sent by the other side; a stand-in ``AbortError``
    when it does not unpickle here."""
    try:
        return pickle.loads(data)
    except Exception as exc:
        return AbortError(f"aborted (the reason could not be unpickled: {safe_str(exc)})")


def dump_reason(reason: object) -> bytes:
    """``reason`` pickled; a stand-in ``AbortError`` carrying its text when
    it does not pickle."""
    try:
        return pickle.dumps(reason, _PROTOCOL)
    except Exception:
        try:
            import cloudpickle as pickler  # type: ignore[import-untyped]

            data: bytes = pickler.dumps(reason, _PROTOCOL)
            return data
        except Exception:
            text = safe_str(reason) if isinstance(reason, BaseException) else safe_repr(reason)
            return pickle.dumps(AbortError(text), _PROTOCOL)


class UnsendableValue:
    """What a body returned when it could not be pickled back: the
    registry's output check refuses it (``INVALID_TOOL_OUTPUT``) with
    ``__json_problem__`` as the text."""

    __slots__ = ("__json_problem__",)

    def __init__(self, type_name: str, problem: str) -> None:
        self.__json_problem__ = (
            f"the return value (a {type_name}) could not be sent back from the worker process: {problem}"
        )


def error_from(payload: bytes | None, detail: ErrorDetail) -> BaseException:
    """The exception a worker sent: unpickled, or a stand-in built from
    ``detail`` (``describe_error``) when it does not unpickle here (a class
    from a module only the worker can import, say)."""
    return rebuilt_error(payload, detail, pickle.loads, BaseException)


def outcome_of(kind: str, payload: bytes | None, detail: Any, name: str) -> Value | Error | NotInvoked:
    """The outcome of tool ``name``'s call from a worker's ``("done", seq,
    kind, payload, contexts, detail)`` frame (the protocol is in
    ``dshtools._backends.process.worker``). Unpickling runs foreign code:
    whatever it raises, ``SystemExit`` included, is this value's fault and
    becomes the call's outcome, never the caller's exception (a Ctrl-C is
    never delivered to the manager thread that runs this, so none is
    swallowed)."""
    if kind == "value":
        try:
            return Value(pickle.loads(payload))  # type: ignore[arg-type]
        except BaseException as exc:
            problem = f"it does not unpickle here ({type(exc).__name__}: {safe_str(exc)})"
            return Value(UnsendableValue(detail or "value", problem))
    if kind == "not_run":
        return NotInvoked(RuntimeError(f"the worker process could not rebuild the call of tool {name!r}: {detail}"))
    if kind == "bad_value":
        return Value(UnsendableValue(detail[0], detail[1]))
    return Error(error_from(payload, detail))
