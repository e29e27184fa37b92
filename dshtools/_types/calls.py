"""Calls, views, results and codes: the data types of a tool call (docs/contract.md#calls).

Guarantees:

* ``ToolExecutionInput.signal`` is required and must be an ``AbortSignal``:
  construction raises ``TypeError`` otherwise. Python has no compiler to
  enforce the annotation, so the check is made at runtime as well
  (a deliberate difference from a typed-only seam).
* Results are frozen. The registry deep-freezes a result's ``value``,
  ``content`` and contexts before anyone outside the pipeline sees it
  (docs/contract.md#step-finish); ``meta`` is a read-only mapping (not
  deep-frozen) from construction on, empty when nothing is in it, never
  ``None``; ``body_invoked`` says whether the registry invoked the body
  (docs/contract.md#a16).
* A body's exception becomes ``Error: <str(exc)>``, except that an empty
  text gives the class name and a ``KeyError`` is prefixed with it
  (docs/contract.md#a17).
* Every code constant of docs/contract.md#codes is defined here, once.
* Views and tool definitions are in ``_types.tools``.
"""

from __future__ import annotations

import itertools
import pickle
import types
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, Literal, TypeAlias

import attrs

from .._core.errors import AbortError, safe_str, safe_type_name
from .._core.freeze import FrozenDict, freeze
from .._signal import AbortSignal
from .._signal.deadline import timeout_of

# ---------------------------------------------- codes (docs/contract.md#codes)

TOOL_ABORTED_BEFORE_DISPATCH: Final = "ABORTED_BEFORE_DISPATCH"
TOOL_ABORTED: Final = "ABORTED"
TOOL_TIMEOUT: Final = "TOOL_TIMEOUT"
UNKNOWN_TOOL: Final = "UNKNOWN_TOOL"
INVALID_ARGS: Final = "INVALID_ARGS"
INVALID_TOOL_OUTPUT: Final = "INVALID_TOOL_OUTPUT"
DENIED: Final = "DENIED"
APPROVAL_PENDING: Final = "APPROVAL_PENDING"
"""The code of a call whose approver answered ``"deferred"``: the body was
not invoked, and ``meta["ticket"]`` lets ``registry.resume`` run it later
(docs/contract.md#deferred-approval)."""
TOOL_ERROR: Final = "TOOL_ERROR"
WORKER_LOST: Final = "WORKER_LOST"
INVALID_CALL: Final = "INVALID_CALL"
"""The code of a model tool call that cannot be run as written: an empty or
repeated call id, an unsupported call type, no tool name
(docs/contract.md#a11). Same precedence as ``INVALID_ARGS`` (docs/contract.md#precedence)."""
OUTCOME_UNKNOWN: Final = "OUTCOME_UNKNOWN"
"""The code of a journaled call whose body was started by a process that
died before its result was recorded: the body may have run to any point
(``body_invoked`` is ``True``); check before repeating it
(docs/contract.md#journal)."""
JOURNAL_ERROR: Final = "JOURNAL_ERROR"
"""The code of a journaled call whose claim could not be committed to its
journal: the body was not invoked (docs/contract.md#journal)."""


ANY_OBJECT: Final = freeze({"type": "object"})
"""The ``parameters`` of every ``ToolDefinition`` whose schema is exactly
``{"type": "object"}`` (any JSON object): one shared frozen instance."""

ContentBlock = Mapping[str, Any]
"""A content block: a JSON object with a ``"type"``, e.g. ``{"type": "text", "text": "..."}``."""


@attrs.frozen
class InvalidCall:
    """The ``arguments`` of a model tool call that cannot run as written
    (an empty or repeated call id, an unsupported call type, no tool name).
    The registry answers such a call with an ``INVALID_CALL`` failure whose
    text is ``Error: invalid call: <problem>``, before any hook runs
    (docs/contract.md#a11). ``arguments`` keeps what the model sent, for
    display."""

    problem: str
    arguments: object = None

    def __str__(self) -> str:
        return f"invalid call: {self.problem}"


# ------------------------------------------------------------------ token

_token_ids = itertools.count(1)


class ExecutionToken:
    """An opaque identity for one execution: compares equal only to itself,
    hashable. Nested calls carry their parent's token as ``parent``."""

    __slots__ = ("__weakref__", "_n")
    _n: int

    # No __init__: a token is made on every call, and its number is only
    # needed for repr, so it is drawn on the first repr (still unique).

    def __repr__(self) -> str:
        try:
            n = self._n
        except AttributeError:
            n = self._n = next(_token_ids)
        return f"<ExecutionToken #{n}>"


# ------------------------------------------------------------------ the call


def _opt_str(name: str) -> Callable[[object, attrs.Attribute[Any], object], None]:
    def check(_inst: object, _attr: attrs.Attribute[Any], value: object) -> None:
        if value is not None and not isinstance(value, str):
            raise TypeError(f"{name} must be a str or None, not {type(value).__name__}")

    return check


def _req_str(name: str) -> Callable[[object, attrs.Attribute[Any], object], None]:
    def check(_inst: object, _attr: attrs.Attribute[Any], value: object) -> None:
        if not isinstance(value, str):
            raise TypeError(f"{name} must be a str, not {type(value).__name__}")

    return check


def _check_signal(_inst: object, _attr: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, AbortSignal):
        raise TypeError(
            f"signal must be an AbortSignal, not {type(value).__name__} "
            "(every call carries a caller-owned signal; there is no default)"
        )


def _check_parent(_inst: object, _attr: attrs.Attribute[Any], value: object) -> None:
    if value is not None and not isinstance(value, ExecutionToken):
        raise TypeError(f"parent must be an ExecutionToken or None, not {type(value).__name__}")


@attrs.frozen(eq=False)
class ToolExecutionInput:
    """One tool call as the model asked for it.

    ``ToolExecutionInput(call_id, name, arguments, signal, agent=None,
    parent=None, root_call_id=None, session=None)``. ``signal`` is required: a
    non-``AbortSignal`` raises ``TypeError`` here (docs/contract.md#calls). ``call_id``
    and ``name`` must be ``str`` (``TypeError``); ``arguments`` is anything
    and is checked by the registry (``INVALID_ARGS``). Frozen, so
    ``attrs.evolve(call, signal=...)`` derives a variant. Equality is
    identity. ``session`` (a conversation or run id, caller-owned like the
    signal) names the journal key ``(session, call_id)``; a registry with a
    journal raises ``ValueError`` for a call without one
    (docs/contract.md#journal).
    """

    call_id: str = attrs.field(validator=_req_str("call_id"))
    name: str = attrs.field(validator=_req_str("name"))
    arguments: object
    signal: AbortSignal = attrs.field(validator=_check_signal)
    agent: str | None = attrs.field(default=None, validator=_opt_str("agent"))
    parent: ExecutionToken | None = attrs.field(default=None, validator=_check_parent)
    root_call_id: str | None = attrs.field(default=None, validator=_opt_str("root_call_id"))
    session: str | None = attrs.field(default=None, validator=_opt_str("session"))


# ------------------------------------------------------------------- results


@attrs.frozen
class ErrorInfo:
    """``name``: the error class name (e.g. ``"AbortError"``); ``code``: one
    of the code constants, a tool's own code, or ``None``."""

    name: str = attrs.field(validator=_req_str("name"))
    code: str | None = attrs.field(validator=_opt_str("code"))


@attrs.frozen
class ErrorDetail:
    """What went wrong: ``message`` (the model text without ``Error: ``) and
    the classification ``info``."""

    message: str = attrs.field(validator=_req_str("message"))
    info: ErrorInfo | None = attrs.field(validator=attrs.validators.optional(attrs.validators.instance_of(ErrorInfo)))


def text_content(text: str) -> tuple[ContentBlock, ...]:
    """``(FrozenDict(type="text", text=text),)``."""
    return (FrozenDict(type="text", text=text),)


def to_content(value: str | Iterable[ContentBlock]) -> tuple[ContentBlock, ...]:
    if isinstance(value, str):
        return text_content(value)
    if isinstance(value, tuple):
        return value
    if isinstance(value, (Mapping, bytes)) or not isinstance(value, Iterable):
        raise TypeError(f"content must be a str or a sequence of content blocks, not {type(value).__name__}")
    return tuple(value)


EMPTY_META: Final[Mapping[str, object]] = FrozenDict()
"""The ``meta`` of a result with nothing in it (read-only, shared, and
picklable, as a result without meta always was)."""


def _to_meta(value: Mapping[str, object] | None) -> Mapping[str, object]:
    """A read-only copy of ``value``: the caller's mapping (a
    ``MappingProxyType`` of the caller's dict included) is copied, so the
    result's ``meta`` never changes after it was built."""
    if value is None or value is EMPTY_META:
        return EMPTY_META
    if not isinstance(value, Mapping):
        raise TypeError(f"meta must be a mapping or None, not {type(value).__name__}")
    return types.MappingProxyType(dict(value))


def _meta_state(result: object, meta: Mapping[str, object]) -> dict[str, object] | None:
    """``meta`` as a plain ``dict`` for pickling a result (a
    ``MappingProxyType`` itself does not pickle); ``None`` for the empty
    one. A value that the standard pickler refuses raises
    ``pickle.PicklingError`` naming the key, rather than an error about an
    object nobody can place."""
    if not meta:
        return None
    for key, value in meta.items():
        try:
            pickle.dumps(value, pickle.HIGHEST_PROTOCOL)
        except Exception as exc:
            raise pickle.PicklingError(
                f"cannot pickle this {type(result).__name__}: its meta[{key!r}] "
                f"({safe_type_name(value)}) cannot be pickled: {safe_str(exc)}"
            ) from exc
    return dict(meta)


_set: Final = object.__setattr__


def _restored_meta(state: dict[str, object] | None) -> Mapping[str, object]:
    return EMPTY_META if state is None else types.MappingProxyType(state)


def _result_state(result: ToolExecutionResult) -> tuple[object, ...]:
    """A result's fields in their declared order, for pickling; ``meta`` as
    ``_meta_state`` gives it."""
    return tuple(
        _meta_state(result, result.meta) if field.name == "meta" else getattr(result, field.name)
        for field in attrs.fields(type(result))
    )


def _restore_result(result: ToolExecutionResult, state: tuple[Any, ...]) -> None:
    """Set a result's fields (the classes are frozen) from ``_result_state``'s tuple."""
    for field, value in zip(attrs.fields(type(result)), state, strict=True):
        _set(result, field.name, _restored_meta(value) if field.name == "meta" else value)


def to_contexts(value: Iterable[Mapping[str, Any]]) -> tuple[Mapping[str, Any], ...]:
    if isinstance(value, tuple):
        return value
    if isinstance(value, (Mapping, str, bytes)) or not isinstance(value, Iterable):
        raise TypeError(f"additional_contexts must be a sequence of JSON objects, not {type(value).__name__}")
    return tuple(value)


@attrs.frozen
class ToolSuccess:
    """A successful call: ``value`` (a JSON value, deep-frozen by the
    registry), ``content`` (content blocks for the model; a ``str`` becomes
    one text block), ``meta`` (a read-only mapping, empty by default; ``None``
    gives the empty one), ``additional_contexts`` (JSON objects),
    ``body_invoked`` (keyword-only: whether the registry invoked the tool's
    body; every result the registry returns sets it, a result built by hand
    says ``False`` unless told). ``is_error`` is ``False``, ``code`` is
    ``None``. Source: docs/contract.md#calls,
    docs/contract.md#a16."""

    value: Any
    content: tuple[ContentBlock, ...] = attrs.field(converter=to_content)
    meta: Mapping[str, object] = attrs.field(default=EMPTY_META, converter=_to_meta)
    additional_contexts: tuple[Mapping[str, Any], ...] = attrs.field(default=(), converter=to_contexts)
    body_invoked: bool = attrs.field(default=False, kw_only=True)

    # Pickles and unpickles equal, ``meta`` read-only again.
    __getstate__ = _result_state
    __setstate__ = _restore_result

    @property
    def is_error(self) -> Literal[False]:
        return False

    @property
    def code(self) -> str | None:
        return None


@attrs.frozen
class ToolFailure:
    """A failed call: ``error`` (``ErrorDetail``), ``content`` (exactly one
    text block ``Error: <message>``, except a post-execute ``Block``),
    ``meta`` (a read-only mapping, empty by default), ``additional_contexts``,
    ``body_invoked`` (keyword-only, as on ``ToolSuccess``). ``is_error`` is
    ``True``; ``code`` is ``error.info.code`` or ``None``. Source:
    docs/contract.md#calls."""

    error: ErrorDetail = attrs.field(validator=attrs.validators.instance_of(ErrorDetail))
    content: tuple[ContentBlock, ...] = attrs.field(converter=to_content)
    meta: Mapping[str, object] = attrs.field(default=EMPTY_META, converter=_to_meta)
    additional_contexts: tuple[Mapping[str, Any], ...] = attrs.field(default=(), converter=to_contexts)
    body_invoked: bool = attrs.field(default=False, kw_only=True)

    # Pickles and unpickles equal, ``meta`` read-only again.
    __getstate__ = _result_state
    __setstate__ = _restore_result

    @property
    def is_error(self) -> Literal[True]:
        return True

    @property
    def code(self) -> str | None:
        info = self.error.info
        return None if info is None else info.code


ToolExecutionResult: TypeAlias = ToolSuccess | ToolFailure


class ToolError(Exception):
    """Raised by a tool body for a structured failure: ``ToolError(message,
    code=None)`` becomes ``ToolFailure`` with ``info.name == "ToolError"``
    and ``info.code == code`` (the code is kept even when the call was
    cancelled meanwhile, docs/contract.md#precedence)."""

    def __init__(self, message: str, code: str | None = None) -> None:
        if not isinstance(message, str):
            raise TypeError(f"message must be a str, not {type(message).__name__}")
        if code is not None and not isinstance(code, str):
            raise TypeError(f"code must be a str or None, not {type(code).__name__}")
        super().__init__(message, code)
        self.message = message
        self.code = code

    def __str__(self) -> str:
        return self.message


def failure(
    message: str,
    *,
    name: str,
    code: str | None,
    meta: Mapping[str, object] | None = None,
    additional_contexts: Iterable[Mapping[str, Any]] = (),
    body_invoked: bool = False,
) -> ToolFailure:
    """A ``ToolFailure`` with the canonical content ``Error: <message>``
    (for policies; docs/contract.md#calls)."""
    return ToolFailure(
        ErrorDetail(message, ErrorInfo(name, code)),
        text_content("Error: " + message),
        meta,
        tuple(additional_contexts),
        body_invoked=body_invoked,
    )


def exception_text(exc: BaseException) -> str:
    """The model text of a raised exception, without ``Error: ``
    (docs/contract.md#a17): ``str(exc)``, except
    the class name when that is empty and ``<ClassName>: <str(exc)>`` for a
    ``KeyError`` (whose text is only the key's repr). A ``ToolError``'s
    message is the tool author's and stays as written; an unprintable
    message is replaced by a stand-in."""
    text = safe_str(exc)
    if isinstance(exc, ToolError):
        return text
    if not text:
        return safe_type_name(exc)
    if isinstance(exc, KeyError):
        return f"{safe_type_name(exc)}: {text}"
    return text


def exception_failure(exc: BaseException, *, body_invoked: bool = False) -> ToolFailure:
    """A raised exception as a failure (docs/contract.md#a2), with the
    text of ``exception_text``: a ``ToolError`` keeps its code
    (``TOOL_ERROR`` when it has none); an exception carrying a timeout
    (``timeout_of(exc)``, e.g. the ``AbortError`` of
    ``run_process(timeout=...)``) gets that reason's code; any other
    exception ``TOOL_ERROR``. ``info.name`` is the exception's class name."""
    text = exception_text(exc)
    if isinstance(exc, ToolError):
        return failure(text, name=safe_type_name(exc), code=exc.code or TOOL_ERROR, body_invoked=body_invoked)
    timeout = timeout_of(exc)
    code = TOOL_ERROR if timeout is None else timeout.code
    return failure(text, name=safe_type_name(exc), code=code, body_invoked=body_invoked)


def aborted(reason: object, *, invoked: bool, additional_contexts: Iterable[Mapping[str, Any]] = ()) -> ToolFailure:
    """``ABORTED`` (the body was invoked) or ``ABORTED_BEFORE_DISPATCH``;
    ``meta["reason"]`` is the abort reason object and ``body_invoked`` is
    ``invoked``."""
    return failure(
        "tool call aborted" if invoked else "tool call aborted before dispatch",
        name=AbortError.__name__,
        code=TOOL_ABORTED if invoked else TOOL_ABORTED_BEFORE_DISPATCH,
        meta={"reason": reason},
        additional_contexts=additional_contexts,
        body_invoked=invoked,
    )
