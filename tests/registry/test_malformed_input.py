"""Malformed input never crashes ``execute`` and never hangs a call.

Each malformed input yields either a failure result **with a code**
(docs/contract.md#calls codes) or a clear exception where the mistake is made
(constructing a call or a definition, registering). The list:

Arguments (-> INVALID_ARGS)
  A1 set            A2 bytes          A3 non-str key     A4 nan
  A5 inf            A6 object()       A7 cycle           A8 str-subclass enum
  A9 missing required property        A10 list for an object schema
  A11 violation 300 levels deep (validated on the deep-value path)
Names
  N1 "" (-> UNKNOWN_TOOL)  N2 "no such tool" (-> UNKNOWN_TOOL)
  N3 name=5 / N4 call_id=None / N5 signal=None / N6 signal missing (TypeError at construction)
  N7 execute(not a call) (TypeError)
Definitions and schemas (exception at construction or registration)
  D1 parameters not a dict   D2 parameters {"type": 5}   D3 bad output_schema
  D4 parameters holding a set   D5 timeout 0 / -1 / nan / inf (ValueError)
  D6 timeout "5" / True (TypeError)   D7 execute not callable   D8 name "" / "a b"
  D9 register(non-definition)   D10 duplicate name   D11 render not callable
  D12 a hook class given where its instance belongs (add_around_dispatch(TimeoutPolicy))
Hook return values of the wrong type (-> failure with a code)
  H1 pre-execute returns None (DENIED)     H2 pre-execute returns "allow" (DENIED)
  H3 guard returns 5 (DENIED)              H4 approver returns "yes" (DENIED)
  H5 approver returns None (DENIED)        H6 around-dispatch returns None (INVALID_TOOL_OUTPUT)
  H7 around-dispatch returns a dict (INVALID_TOOL_OUTPUT)
  H8 post-execute returns None (INVALID_TOOL_OUTPUT)
  H9 Accept(content=[block without type]) (INVALID_TOOL_OUTPUT)
  H10 Accept(additional_contexts=["text"]) (INVALID_TOOL_OUTPUT)
  H11 render returns 5 (INVALID_TOOL_OUTPUT)
  H12 finalize_content returns object() (INVALID_TOOL_OUTPUT)
  H13 wrapper success with content [5] (INVALID_TOOL_OUTPUT)
  H14 pre-execute raises / builds Deny(5) (DENIED: policies fail closed)
"""

from __future__ import annotations

import enum
import threading
from typing import Any

import pytest

from dshtools import (
    DENIED,
    INVALID_ARGS,
    INVALID_TOOL_OUTPUT,
    UNKNOWN_TOOL,
    AbortController,
    Accept,
    Ask,
    Deny,
    TimeoutPolicy,
    ToolDefinition,
    ToolExecutionInput,
    ToolRegistry,
    ToolSuccess,
)
from tests.helpers.calls import OBJECT, call, tool
from tests.helpers.waiting import run_in_thread


class Color(str, enum.Enum):
    RED = "red"


def cyclic() -> Any:
    d: dict[str, Any] = {}
    d["self"] = d
    return d


def nested_bad(depth: int) -> Any:
    value: Any = "leaf"  # the schema wants integers at the leaves
    for _ in range(depth):
        value = [value]
    return {"tree": value}


RECURSIVE = {
    "type": "object",
    "$defs": {"node": {"anyOf": [{"type": "integer"}, {"type": "array", "items": {"$ref": "#/$defs/node"}}]}},
    "properties": {"tree": {"$ref": "#/$defs/node"}, "n": {"type": "integer"}},
}


def execute_bounded(registry: ToolRegistry, c: ToolExecutionInput) -> Any:
    """execute() in a thread with a watchdog: a hang fails the test."""
    t, box = run_in_thread(lambda: registry.execute(c))
    t.join(10)
    assert not t.is_alive(), "execute hung"
    if isinstance(box[0], BaseException):
        raise box[0]
    return box[0]


# Deeper than jsonschema-rs can describe (~255 levels): reported without a path.
DEEP = dict(nested_bad(300), n=1)

BAD_ARGUMENTS = [
    ("A1-set", {"x": {1, 2}}),
    ("A2-bytes", {"x": b"raw"}),
    ("A3-non-str-key", {1: "x"}),
    ("A4-nan", {"x": float("nan")}),
    ("A5-inf", {"x": [float("inf")]}),
    ("A6-object", {"x": object()}),
    ("A7-cycle", cyclic()),
    ("A8-enum", {"x": Color.RED}),
    ("A9-missing-required", {}),
    ("A10-list-for-object", [1, 2]),
    ("A11-deep-violation", DEEP),
]


@pytest.mark.timeout(30)
@pytest.mark.parametrize("arguments", [a for _, a in BAD_ARGUMENTS], ids=[i for i, _ in BAD_ARGUMENTS])
def test_bad_arguments_are_invalid_args(arguments: object) -> None:
    schema = dict(RECURSIVE, required=["n"])
    with ToolRegistry() as registry:
        ran = threading.Event()
        registry.register(tool("t", lambda a, r: ran.set(), parameters=schema))
        result = execute_bounded(registry, call("t", arguments))
    assert result.code == INVALID_ARGS, result
    assert result.content[0]["text"].startswith("Error: invalid arguments: ")
    if arguments is not DEEP:
        assert " at $" in result.content[0]["text"]  # the JSON path is named
    assert not ran.is_set()


def test_nested_violation_names_its_path() -> None:
    with ToolRegistry() as registry:
        registry.register(tool("t", lambda a, r: "ok", parameters=RECURSIVE))
        result = execute_bounded(registry, call("t", dict(nested_bad(150), n=1)))
    assert result.code == INVALID_ARGS
    assert result.content[0]["text"].endswith(" at $.tree")  # anyOf fails at its own location


@pytest.mark.parametrize("name", ["", "no such tool"], ids=["N1-empty", "N2-spaces"])
def test_unknown_names(name: str) -> None:
    with ToolRegistry() as registry:
        assert execute_bounded(registry, call(name)).code == UNKNOWN_TOOL


def test_call_construction_rejects_bad_fields() -> None:
    signal = AbortController().signal
    with pytest.raises(TypeError):  # N3
        ToolExecutionInput("c", 5, {}, signal)  # type: ignore[arg-type]
    with pytest.raises(TypeError):  # N4
        ToolExecutionInput(None, "t", {}, signal)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="AbortSignal"):  # N5
        ToolExecutionInput("c", "t", {}, None)  # type: ignore[arg-type]
    with pytest.raises(TypeError):  # N6
        ToolExecutionInput("c", "t", {})  # type: ignore[call-arg]
    with ToolRegistry() as registry, pytest.raises(TypeError):  # N7
        registry.execute({"name": "t"})  # type: ignore[arg-type]


def body(args: Any, run: Any) -> Any:
    return "ok"


@pytest.mark.parametrize(
    "make, exc",
    [
        (lambda: ToolDefinition("t", "", ["not", "a", "dict"], body), TypeError),  # D1
        (lambda: ToolDefinition("t", "", {"type": 5}, body), ValueError),  # D2
        (lambda: ToolDefinition("t", "", OBJECT, body, output_schema={"type": "nope"}), ValueError),  # D3
        (lambda: ToolDefinition("t", "", {"enum": {1, 2}}, body), ValueError),  # D4
        (lambda: ToolDefinition("t", "", OBJECT, body, timeout=0), ValueError),  # D5
        (lambda: ToolDefinition("t", "", OBJECT, body, timeout=-1), ValueError),
        (lambda: ToolDefinition("t", "", OBJECT, body, timeout=float("nan")), ValueError),
        (lambda: ToolDefinition("t", "", OBJECT, body, timeout=float("inf")), ValueError),
        (lambda: ToolDefinition("t", "", OBJECT, body, timeout="5"), TypeError),  # type: ignore[arg-type]  # D6
        (lambda: ToolDefinition("t", "", OBJECT, body, timeout=True), TypeError),
        (lambda: ToolDefinition("t", "", OBJECT, "not callable"), TypeError),  # type: ignore[arg-type]  # D7
        (lambda: ToolDefinition("", "", OBJECT, body), ValueError),  # D8
        (lambda: ToolDefinition("a b", "", OBJECT, body), ValueError),
        (lambda: ToolDefinition("t", "", OBJECT, body, render=5), TypeError),  # type: ignore[arg-type]  # D11
    ],
    ids=[
        "D1",
        "D2",
        "D3",
        "D4",
        "D5-0",
        "D5-neg",
        "D5-nan",
        "D5-inf",
        "D6-str",
        "D6-bool",
        "D7",
        "D8-empty",
        "D8-space",
        "D11",
    ],
)
def test_bad_definitions_fail_at_construction(make: Any, exc: type[Exception]) -> None:
    with pytest.raises(exc):
        make()


def test_bad_registrations_fail_at_registration() -> None:
    with ToolRegistry() as registry:
        with pytest.raises(TypeError):  # D9
            registry.register({"name": "t"})  # type: ignore[arg-type]
        registry.register(tool("t", body))
        with pytest.raises(ValueError, match="already registered"):  # D10
            registry.register(tool("t", body))
        with pytest.raises(TypeError):
            registry.add_guard("not callable")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"pass TimeoutPolicy\(\.\.\.\)"):  # D12
            registry.add_around_dispatch(TimeoutPolicy)  # type: ignore[arg-type]

        class Observer:
            def __call__(self, execution: object, result: object) -> None: ...

        with pytest.raises(TypeError, match="Observer is a class"):  # D12
            registry.add_result_observer(Observer)  # type: ignore[arg-type]
        registry.add_result_observer(Observer())
        registry.add_around_dispatch(TimeoutPolicy())  # the instances are accepted and run
        assert registry.execute(call("t")).code is None


def _install(kind: str, fn: Any) -> Any:
    def setup(registry: ToolRegistry) -> None:
        getattr(registry, kind)(fn)

    return setup


def _deny_int(e: Any, nxt: Any) -> Any:
    return Deny(5)  # type: ignore[arg-type]


def _raising_pre(e: Any, nxt: Any) -> Any:
    raise KeyError("policy broke")


HOOK_CASES: list[tuple[str, Any, Any, dict[str, Any], str]] = [
    ("H1", _install("add_pre_execute", lambda e, nxt: None), None, {}, DENIED),
    ("H2", _install("add_pre_execute", lambda e, nxt: "allow"), None, {}, DENIED),
    ("H3", _install("add_guard", lambda e: 5), None, {}, DENIED),
    ("H4", _install("add_pre_execute", lambda e, nxt: Ask()), lambda req: "yes", {}, DENIED),
    ("H5", _install("add_pre_execute", lambda e, nxt: Ask()), lambda req: None, {}, DENIED),
    ("H6", _install("add_around_dispatch", lambda e, nxt: None), None, {}, INVALID_TOOL_OUTPUT),
    ("H7", _install("add_around_dispatch", lambda e, nxt: {"value": 1}), None, {}, INVALID_TOOL_OUTPUT),
    ("H8", _install("add_post_execute", lambda e, r, nxt: None), None, {}, INVALID_TOOL_OUTPUT),
    (
        "H9",
        _install("add_post_execute", lambda e, r, nxt: Accept(content=[{"text": "no type"}])),
        None,
        {},
        INVALID_TOOL_OUTPUT,
    ),
    (
        "H10",
        _install("add_post_execute", lambda e, r, nxt: Accept(additional_contexts=["text"])),  # type: ignore[list-item]
        None,
        {},
        INVALID_TOOL_OUTPUT,
    ),
    ("H11", None, None, {"render": lambda v: 5}, INVALID_TOOL_OUTPUT),
    ("H12", None, None, {"finalize_content": lambda e, r: object()}, INVALID_TOOL_OUTPUT),
    ("H13", _install("add_around_dispatch", lambda e, nxt: ToolSuccess(1, [5])), None, {}, INVALID_TOOL_OUTPUT),  # type: ignore[list-item]
    ("H14-raise", _install("add_pre_execute", _raising_pre), None, {}, DENIED),
    ("H14-deny-int", _install("add_pre_execute", _deny_int), None, {}, DENIED),
]


@pytest.mark.timeout(30)
@pytest.mark.parametrize("setup, approver, extra, code", [c[1:] for c in HOOK_CASES], ids=[c[0] for c in HOOK_CASES])
def test_hook_returning_the_wrong_type_is_a_coded_failure(
    setup: Any, approver: Any, extra: dict[str, Any], code: str
) -> None:
    observed: list[Any] = []
    with ToolRegistry(approver=approver) as registry:
        if setup is not None:
            setup(registry)
        registry.add_result_observer(lambda e, r: observed.append(r))
        registry.register(tool("t", body, **extra))
        signal = AbortController().signal
        result = execute_bounded(registry, call("t", signal=signal))
    assert result.is_error and result.code == code, result
    assert result.content[0]["text"].startswith("Error: ")
    assert observed == [result] and signal.listener_count == 0


def test_defer_context_rejects_non_objects() -> None:
    errors: list[BaseException] = []

    def b(args: Any, run: Any) -> Any:
        for bad in ("text", [1], {"x": {1}}):
            try:
                run.defer_context(bad)
            except (TypeError, ValueError) as exc:
                errors.append(exc)
        return "ok"

    with ToolRegistry() as registry:
        registry.register(tool("t", b))
        result = execute_bounded(registry, call("t"))
    assert not result.is_error and len(errors) == 3 and result.additional_contexts == ()
