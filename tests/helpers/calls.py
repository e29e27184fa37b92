"""Building calls and tools, and reading their results.

* Building: ``OBJECT`` (the empty object schema), ``ADD_PARAMS`` with
  the bodies ``add`` and ``broken`` (the provider tests' two tools), ``tool`` (one tool
  definition), ``call`` and ``calls`` (one call, ``n`` calls), each with the
  defaults most tests want; ``view_fields``, ``run_of``, ``body_context``
  and ``context_fields`` (a call's view and its body's ``run``, built both
  ways); ``swapping_signal`` (an around-dispatch hook that hands the
  dispatch another signal); ``registry_serving`` (a registry fixture's
  set-up and teardown).
* Checking: ``value_of``, ``error_of``; ``validates_deep_values`` (whether
  the installed ``jsonschema-rs`` validates values nested over 255 levels).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from dshtools import (
    AbortController,
    AbortSignal,
    TimeoutPolicy,
    ToolDefinition,
    ToolError,
    ToolExecutionInput,
    ToolFailure,
    ToolSuccess,
)

if TYPE_CHECKING:  # only in annotations
    from dshtools import (
        ErrorDetail,
        ToolDispatchExecution,
        ToolExecutionResult,
        ToolRegistry,
        ToolRunContext,
    )

OBJECT: dict[str, Any] = {"type": "object"}
"""The parameter schema of a tool that takes any object."""


ADD_PARAMS: dict[str, Any] = {
    "type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
    "required": ["a", "b"],
    "additionalProperties": False,
}
"""The parameter schema of ``add``: two integers ``a`` and ``b``, nothing else."""


def add(args: Mapping[str, Any], run: ToolRunContext) -> object:
    """The body of the provider tests' ``add`` tool: ``{"sum": a + b}``."""
    return {"sum": args["a"] + args["b"]}


def broken(args: Mapping[str, Any], run: ToolRunContext) -> object:
    """A body that always fails with the ``ToolError`` ``BROKEN``, text ``it broke``."""
    raise ToolError("it broke", "BROKEN")


def call(
    name: str, arguments: object = None, signal: AbortSignal | None = None, call_id: str = "c1"
) -> ToolExecutionInput:
    """A call of tool ``name`` with ``arguments`` (``{}`` when omitted), on
    ``signal`` (a fresh controller's when omitted)."""
    return ToolExecutionInput(call_id, name, {} if arguments is None else arguments, signal or AbortController().signal)


def calls(name: str, n: int, signal: AbortSignal, args: Mapping[str, Any] | None = None) -> list[ToolExecutionInput]:
    """``n`` calls of ``name`` with call ids ``c0`` … ``c{n-1}``, all on ``signal``."""
    return [ToolExecutionInput(f"c{i}", name, dict(args or {}), signal) for i in range(n)]


def tool(name: str, body: Callable[[Any, Any], object], **kw: Any) -> ToolDefinition:
    """A tool ``name`` running ``body``; ``parameters`` defaults to ``OBJECT``,
    every other keyword goes to ``ToolDefinition``."""
    params = kw.pop("parameters", OBJECT)
    return ToolDefinition(name, f"{name} tool", params, body, **kw)


def view_fields(**overrides: Any) -> dict[str, Any]:
    """The fields a view shares with its registry run (``token``,
    ``call_id`` "c", ``root_call_id`` "r", ``name`` "n", frozen
    ``arguments``, ``agent``, ``parent``, ``definition``), for building a
    view both ways; ``overrides`` replace some."""
    from dshtools import ExecutionToken
    from dshtools._core.freeze import freeze

    fields: dict[str, Any] = {
        "token": ExecutionToken(),
        "call_id": "c",
        "root_call_id": "r",
        "name": "n",
        "arguments": freeze({"a": [1]}),
        "agent": None,
        "parent": None,
        "definition": None,
    }
    fields.update(overrides)
    return fields


def run_of(fields: Mapping[str, Any], signal: AbortSignal) -> Any:
    """A registry ``Run`` (private) whose call and fields are ``fields``
    (``view_fields``), on ``signal``."""
    from dshtools._registry.run import Hooks, Run

    call = ToolExecutionInput(
        fields["call_id"],
        fields["name"],
        fields["arguments"],
        signal,
        agent=fields["agent"],
        parent=fields["parent"],
        root_call_id=fields["root_call_id"],
    )
    run = Run(None, call, fields["definition"], Hooks())  # type: ignore[arg-type]
    run.token = fields["token"]
    run.arguments = fields["arguments"]
    return run


def body_context(call: ToolExecutionInput) -> ToolRunContext:
    """The ``run`` (``ToolRunContext``) a registry hands the body of a tool
    named ``call.name`` for ``call``: the registry's own construction of
    it, captured from a real call."""
    from dshtools import ToolRegistry

    seen: list[ToolRunContext] = []
    with ToolRegistry() as registry:
        registry.register(tool(call.name, lambda _args, run: seen.append(run)))
        registry.execute(call)
    return seen[0]


def context_fields(context: ToolRunContext) -> dict[str, Any]:
    """``context``'s fields as ``ToolRunContext(**...)`` takes them (every
    field of the class: one the registry did not set raises here)."""
    import attrs

    return {field.alias: getattr(context, field.name) for field in attrs.fields(type(context))}


def swapping_signal(
    signal: AbortSignal,
) -> Callable[[ToolDispatchExecution, Callable[[], ToolExecutionResult]], ToolExecutionResult]:
    """An around-dispatch hook that hands ``signal`` to the rest of the
    dispatch in place of the view's own signal, and puts the own one back
    after."""

    def wrapper(e: ToolDispatchExecution, nxt: Callable[[], ToolExecutionResult]) -> ToolExecutionResult:
        own = e.signal
        e.signal = signal
        try:
            return nxt()
        finally:
            e.signal = own

    return wrapper


def registry_serving(registry: ToolRegistry, definitions: Iterable[ToolDefinition]) -> Iterator[ToolRegistry]:
    """For a fixture (``yield from``): ``registry`` with a ``TimeoutPolicy``
    and ``definitions`` registered, closed when the fixture is torn down
    (the last registry of a backend closes the backend)."""
    registry.add_around_dispatch(TimeoutPolicy())
    for definition in definitions:
        registry.register(definition)
    try:
        yield registry
    finally:
        registry.close()


@functools.cache
def validates_deep_values() -> bool:
    """Whether the installed ``jsonschema-rs`` validates values nested more
    than 255 levels. Its newest release with a free-threaded (cp313t) wheel,
    pinned for that build, refuses them ("Recursion limit reached"), so
    dshtools reports such arguments as not validated instead of running the
    body (docs/interpreters.md#on-the-free-threaded-build)."""
    import jsonschema_rs

    deep: list[Any] = []
    for _ in range(300):
        deep = [deep]
    try:
        return bool(jsonschema_rs.validator_for({}).is_valid(deep))
    except ValueError:
        return False


def value_of(result: ToolExecutionResult) -> Any:
    """A success's value; any other result fails the test, showing it."""
    assert isinstance(result, ToolSuccess), f"expected a success, got {result!r}"
    return result.value


def error_of(result: ToolExecutionResult) -> ErrorDetail:
    """A failure's error; a success fails the test, showing it."""
    assert isinstance(result, ToolFailure), f"expected a failure, got {result!r}"
    return result.error
