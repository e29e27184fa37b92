"""What crosses the process boundary of ``ProcessBackend`` besides plain
data, and what stands in when it cannot (docs/contract.md §9; decision
0034): abort reasons, exceptions and return values that do not pickle.

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
``dshtools._backends.process.backend`` (rebuild, load). Stateless apart from a cache
of stand-in classes.
"""

from __future__ import annotations

import pickle
import traceback
from typing import Any, Final

from ..._core.errors import AbortError, TimeoutReason, safe_repr, safe_str
from ..._signal.deadline import timeout_of
from ..._types.calls import ToolError

__all__ = [
    "RemoteTraceback",
    "UnsendableValue",
    "describe_error",
    "dump_reason",
    "error_from",
    "load_reason",
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


def describe_error(exc: BaseException) -> tuple[str, str, bool, str | None, tuple[str, float] | None, str]:
    """``(class name, message, is AbortError, ToolError code, (timeout code,
    seconds) or None, traceback text)``: enough to rebuild a stand-in when
    ``exc`` does not cross the process boundary."""
    tool_code = exc.code if isinstance(exc, ToolError) else None
    reason = timeout_of(exc)
    timeout = None if reason is None else (reason.code, reason.seconds)
    try:
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    except Exception:
        text = f"{type(exc).__name__}: <traceback unavailable>"
    return (type(exc).__name__, safe_str(exc), isinstance(exc, AbortError), tool_code, timeout, text)


class RemoteTraceback(Exception):
    """The traceback of an exception raised in a worker process, set as
    its ``__cause__`` (its text is the formatted traceback)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class UnsendableValue:
    """What a body returned when it could not be pickled back: the
    registry's output check refuses it (``INVALID_TOOL_OUTPUT``) with
    ``__json_problem__`` as the text."""

    __slots__ = ("__json_problem__",)

    def __init__(self, type_name: str, problem: str) -> None:
        self.__json_problem__ = (
            f"the return value (a {type_name}) could not be sent back from the worker process: {problem}"
        )


_stand_ins: dict[tuple[str, type[BaseException]], type[BaseException]] = {}


def _stand_in(detail: tuple[Any, ...]) -> BaseException:
    """An exception with the remote class name and message, for one that
    did not cross the process boundary."""
    name, message, is_abort, tool_code, timeout, _tb = detail
    base: type[BaseException]
    if tool_code is not None:
        base = ToolError
    elif is_abort or timeout is not None:
        base = AbortError
    else:
        base = Exception
    cls = _stand_ins.get((name, base))
    if cls is None:
        cls = _stand_ins[(name, base)] = type(str(name), (_RemoteText, base), {"__module__": "dshtools.remote"})
    if base is ToolError:
        exc = cls(message, tool_code)
    elif base is AbortError:
        exc = cls(TimeoutReason(timeout[0], timeout[1]) if timeout is not None else None)
    else:
        exc = cls(message)
    exc._remote_text = message  # type: ignore[attr-defined]
    return exc


class _RemoteText:
    """Mixin of stand-ins: ``str()`` is the original's message."""

    _remote_text: str

    def __str__(self) -> str:
        return self._remote_text


def error_from(payload: bytes | None, detail: tuple[Any, ...]) -> BaseException:
    """The exception a worker sent: unpickled, or a stand-in built from
    ``detail`` (see ``describe_error``)."""
    exc: object = None
    if payload is not None:
        try:
            exc = pickle.loads(payload)
        except BaseException:  # foreign code runs here: even SystemExit is the payload's fault
            exc = None
    if not isinstance(exc, BaseException):
        exc = _stand_in(detail)
    if exc.__cause__ is None:
        exc.__cause__ = RemoteTraceback(detail[5])
    return exc
