"""Calls, views, results, codes and the deep freeze (docs/contract.md#calls)."""

from __future__ import annotations

import contextvars
import copy
import math
import pickle
import time
import types
from collections.abc import Callable
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

import dshtools
from dshtools import (
    AbortController,
    AbortSignal,
    ToolError,
    ToolExecutionInput,
    ToolExecutionResult,
    ToolSuccess,
    thaw,
)
from dshtools._core.freeze import FreezeError, dumps, freeze, freeze_with_height
from dshtools._types.calls import EMPTY_META, aborted, exception_failure, failure
from tests.helpers.calls import body_context, context_fields, run_of, validates_deep_values, view_fields


def test_code_constants_have_the_contract_values() -> None:
    assert (dshtools.TOOL_ABORTED_BEFORE_DISPATCH, dshtools.TOOL_ABORTED, dshtools.TOOL_TIMEOUT) == (
        "ABORTED_BEFORE_DISPATCH",
        "ABORTED",
        "TOOL_TIMEOUT",
    )
    assert (dshtools.UNKNOWN_TOOL, dshtools.INVALID_ARGS, dshtools.INVALID_TOOL_OUTPUT, dshtools.DENIED) == (
        "UNKNOWN_TOOL",
        "INVALID_ARGS",
        "INVALID_TOOL_OUTPUT",
        "DENIED",
    )


# ----------------------------------------------------------------- the call


def test_call_requires_a_signal_at_runtime() -> None:
    with pytest.raises(TypeError):
        ToolExecutionInput("c", "t", {})  # type: ignore[call-arg]
    for bad in (None, AbortController(), "signal", object()):
        with pytest.raises(TypeError, match="AbortSignal"):
            ToolExecutionInput("c", "t", {}, bad)  # type: ignore[arg-type]


def test_call_is_frozen_and_evolvable() -> None:
    s1, s2 = AbortController().signal, AbortController().signal
    c = ToolExecutionInput("c", "t", {"a": 1}, s1, agent="x")
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        c.signal = s2  # type: ignore[misc]
    d = attrs.evolve(c, signal=s2)
    assert d.signal is s2 and d.call_id == "c" and d.agent == "x"
    with pytest.raises(TypeError):
        attrs.evolve(c, signal=None)  # type: ignore[arg-type]


def test_execution_token_compares_by_identity_only() -> None:
    a, b = dshtools.ExecutionToken(), dshtools.ExecutionToken()
    assert a == a and a != b and len({a, b, a}) == 2


# ------------------------------------------------------------------ results


def test_success_and_failure_shapes() -> None:
    s = ToolSuccess({"v": 1}, "text")
    assert not s.is_error and s.code is None and s.content[0]["text"] == "text" and s.meta == {}
    f = failure("boom", name="X", code="C", meta={"k": 1})
    assert f.is_error and f.code == "C" and f.error == dshtools.ErrorDetail("boom", dshtools.ErrorInfo("X", "C"))
    assert [dict(b) for b in f.content] == [{"type": "text", "text": "Error: boom"}]
    assert isinstance(f.meta, types.MappingProxyType)
    with pytest.raises(TypeError):
        f.meta["k"] = 2  # type: ignore[index]
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        f.content = ()  # type: ignore[misc]
    assert dshtools.ToolFailure(dshtools.ErrorDetail("m", None), "Error: m").code is None


class _Reason(Exception):
    """A picklable exception, as a result's ``meta`` holds for an abort."""


@pytest.mark.parametrize(
    "result",
    [
        ToolSuccess({"v": [1]}, "text", meta={"attempts": 2, "truncated": {"chars": 10}}, body_invoked=True),
        failure("boom", name="X", code="C", meta={"k": 1}, additional_contexts=[{"c": 1}], body_invoked=True),
        ToolSuccess(1, "empty meta"),
    ],
)
def test_a_result_pickles_and_unpickles_equal_with_meta_still_read_only(result: ToolExecutionResult) -> None:
    """Issue 25: a result whose ``meta`` is not empty did not pickle
    (``cannot pickle 'mappingproxy' object``)."""
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        again = pickle.loads(pickle.dumps(result, protocol))
        assert again == result and type(again) is type(result)
        assert again.body_invoked is result.body_invoked
        assert isinstance(again.meta, types.MappingProxyType) or again.meta is EMPTY_META
        with pytest.raises(TypeError):
            again.meta["new"] = 1  # type: ignore[index]
    assert copy.copy(result) == result
    assert copy.deepcopy(result) == result


def test_a_results_meta_may_hold_a_picklable_exception() -> None:
    reason = _Reason("deadline")
    again = pickle.loads(pickle.dumps(aborted(reason, invoked=True)))
    assert again.code == dshtools.TOOL_ABORTED
    restored = again.meta["reason"]
    assert type(restored) is _Reason and restored.args == ("deadline",)


def test_a_meta_value_that_cannot_pickle_gives_an_error_naming_its_key() -> None:
    import threading

    result = ToolSuccess(1, "x", meta={"ok": 1, "lock": threading.Lock()})
    with pytest.raises(pickle.PicklingError, match=r"ToolSuccess: its meta\['lock'\] \(lock\) cannot be pickled"):
        pickle.dumps(result)


def test_a_callers_mapping_proxy_is_copied() -> None:
    """Issue 25: the caller's proxy was kept as given, so ``meta`` changed
    with the dict behind it."""
    behind = {"k": 1}
    result = ToolSuccess(1, "x", meta=types.MappingProxyType(behind))
    fail = failure("boom", name="X", code="C", meta=types.MappingProxyType(behind))
    behind["k"] = 2
    behind["more"] = 3
    assert dict(result.meta) == {"k": 1} and dict(fail.meta) == {"k": 1}


def test_exception_failure_classification() -> None:
    assert exception_failure(ToolError("gone", "ENOENT")).code == "ENOENT"
    plain = exception_failure(KeyError("k"))
    assert plain.code == dshtools.TOOL_ERROR and plain.error.info == dshtools.ErrorInfo("KeyError", dshtools.TOOL_ERROR)
    assert exception_failure(ToolError("no code")).code == dshtools.TOOL_ERROR


def test_aborted_results_carry_the_reason_object() -> None:
    reason = object()
    a = aborted(reason, invoked=True)
    b = aborted(reason, invoked=False)
    assert a.code == dshtools.TOOL_ABORTED and a.content[0]["text"] == "Error: tool call aborted"
    assert (
        b.code == dshtools.TOOL_ABORTED_BEFORE_DISPATCH
        and b.content[0]["text"] == "Error: tool call aborted before dispatch"
    )
    assert a.meta is not None and a.meta["reason"] is reason
    assert a.error.info == dshtools.ErrorInfo("AbortError", dshtools.TOOL_ABORTED)


def test_tool_error_validates() -> None:
    e = ToolError("msg", "CODE")
    assert str(e) == "msg" and e.code == "CODE"
    with pytest.raises(TypeError):
        ToolError(5)  # type: ignore[arg-type]


# ------------------------------------------------------------------- freeze


def test_freeze_makes_read_only_mappings_and_tuples() -> None:
    f = freeze({"a": [1, {"b": 2}], "c": (3,)})
    assert f == {"a": (1, {"b": 2}), "c": (3,)}
    mutate: Callable[[], object]
    for mutate in (
        lambda: f.__setitem__("x", 1),
        lambda: f.pop("a"),
        lambda: f.update(x=1),
        lambda: f.clear(),
        lambda: f["a"][1].setdefault("z", 0),
        lambda: f.__delitem__("a"),
        lambda: f.popitem(),
    ):
        with pytest.raises(TypeError):
            mutate()
    assert copy.deepcopy(f) is f and pickle.loads(pickle.dumps(f)) == f


def test_thaw_returns_plain_mutable_data() -> None:
    t = thaw(freeze({"a": [1, {"b": (2,)}]}))
    assert t == {"a": [1, {"b": [2]}]} and type(t) is dict and type(t["a"]) is list and type(t["a"][1]) is dict
    assert thaw(5) == 5 and thaw(types.MappingProxyType({"x": (1,)})) == {"x": [1]}


@pytest.mark.parametrize(
    "value, where",
    [
        ({"a": {1, 2}}, "$.a"),
        ({"a": b"x"}, "$.a"),
        ({"a": {1: 2}}, "$.a"),
        ({"a": [0, float("nan")]}, "$.a[1]"),
        ({"a": [float("-inf")]}, "$.a[0]"),
        ({"a b": object()}, '$["a b"]'),
        (bytearray(b"x"), "$"),
    ],
)
def test_freeze_rejects_non_json_with_a_path(value: object, where: str) -> None:
    with pytest.raises(FreezeError) as info:
        freeze(value)
    assert info.value.path == where


def test_freeze_rejects_cycles_but_accepts_dags() -> None:
    loop: list[Any] = [1]
    loop.append({"back": loop})
    with pytest.raises(FreezeError, match="cycle"):
        freeze(loop)
    shared = {"k": [1]}
    f = freeze([shared, shared, {"again": shared}])
    assert thaw(f) == [{"k": [1]}, {"k": [1]}, {"again": {"k": [1]}}]


def test_freeze_dag_that_would_explode_if_unshared_is_linear() -> None:
    node: Any = [1]
    for _ in range(60):  # 2**60 paths, 60 containers
        node = [node, node]
    _f, height = freeze_with_height(node)
    assert height == 61


def test_freeze_and_thaw_work_at_depth_100000() -> None:
    value: Any = "leaf"
    for i in range(100_000):
        value = {"k": value} if i % 2 else [value]
    f, height = freeze_with_height(value)
    assert height == 100_000
    back = thaw(f)
    for i in range(100_000 - 1, -1, -1):
        back = back["k"] if i % 2 else back[0]
    assert back == "leaf"
    assert dumps(f).count("[") == 50_000


def test_freeze_reuses_already_frozen_mappings() -> None:
    inner = freeze({"x": [1, 2, 3]})
    outer = freeze({"inner": inner})
    assert outer["inner"] is inner
    assert freeze(inner) is inner


def test_scalar_subclasses_are_not_json() -> None:
    class MyInt(int):
        pass

    with pytest.raises(FreezeError):
        freeze({"n": MyInt(1)})
    assert freeze({"t": True, "n": None, "f": 1.5})["t"] is True


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4),
    max_leaves=30,
)


@given(json_values)
def test_thaw_of_freeze_is_the_identity_on_json(value: Any) -> None:
    frozen = freeze(value)
    assert thaw(frozen) == value
    assert thaw(freeze(thaw(frozen))) == value


# ------------------------------------------------------ deep arguments, end to end

_TREE_SCHEMA = {
    "type": "object",
    "$defs": {"node": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"$ref": "#/$defs/node"}}]}},
    "properties": {"tree": {"$ref": "#/$defs/node"}},
}


@pytest.mark.skipif(
    not validates_deep_values(), reason="this jsonschema-rs release refuses values nested over 255 levels"
)
@pytest.mark.timeout(60)
def test_arguments_nested_100000_deep_are_validated_and_reach_the_body() -> None:
    schema = _TREE_SCHEMA
    depth: list[int] = []

    def body(args: Any, run: Any) -> Any:
        node, d = args["tree"], 0
        while not isinstance(node, str):
            node, d = node[0], d + 1
        depth.append(d)
        return d

    tree: Any = "leaf"
    for _ in range(100_000):
        tree = [tree]
    with dshtools.ToolRegistry() as registry:
        registry.register(dshtools.ToolDefinition("deep", "", schema, body))
        result = registry.execute(ToolExecutionInput("c", "deep", {"tree": tree}, AbortSignal()))
    assert isinstance(result, ToolSuccess) and result.value == 100_000 and depth == [100_000]


@pytest.mark.skipif(validates_deep_values(), reason="this jsonschema-rs release validates deep values")
def test_arguments_too_deep_for_the_installed_validator_are_refused_not_run() -> None:
    """On a jsonschema-rs release that refuses values nested over 255
    levels (the free-threaded build's pin), such arguments are INVALID_ARGS
    saying they could not be validated: the body never runs unvalidated."""
    ran: list[object] = []
    tree: Any = "leaf"
    for _ in range(1_000):
        tree = [tree]
    with dshtools.ToolRegistry() as registry:
        registry.register(dshtools.ToolDefinition("deep", "", _TREE_SCHEMA, lambda a, r: ran.append(a)))
        result = registry.execute(ToolExecutionInput("c", "deep", {"tree": tree}, AbortSignal()))
    assert result.is_error and result.code == dshtools.INVALID_ARGS and not result.body_invoked
    assert "could not be validated" in result.content[0]["text"] and ran == []


def test_float_edge_values_are_kept() -> None:
    f = freeze({"z": -0.0, "big": 1e308})
    assert math.copysign(1, f["z"]) == -1 and f["big"] == 1e308


# ---- the registry's trusted constructors build the same frozen instances


@pytest.fixture(params=["retyped in place", "frozen copy"])
def finishing(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """How the registry finishes a twin: retyped in place (GIL builds) or
    copied into a new frozen instance (free-threaded builds, where a
    ``__class__`` assignment stops every thread); both on any build."""
    from dshtools._backends import thread
    from dshtools._registry import run, trusted

    for module in (thread, run, trusted):
        monkeypatch.setattr(module, "RETYPE_IN_PLACE", request.param == "retyped in place")
    return str(request.param)


def _same_fields(a: object, b: object) -> None:
    names = [f.name for f in attrs.fields(type(a))]  # type: ignore[arg-type]
    assert type(a) is type(b)
    for name in names:
        assert getattr(a, name) is getattr(b, name), name


@pytest.mark.usefixtures("finishing")
def test_the_body_context_sets_every_field_like_the_class() -> None:
    signal, parent = AbortController().signal, dshtools.ExecutionToken()
    call = ToolExecutionInput("c", "n", {"a": [1]}, signal, agent="ag", parent=parent, root_call_id="r")
    fast = body_context(call)  # built by the registry through a twin
    built = dshtools.ToolRunContext(**context_fields(fast))  # fails when a field is added to the class only
    _same_fields(built, fast)
    assert (fast.call_id, fast.root_call_id, fast.name, fast.agent) == ("c", "r", "n", "ag")
    assert fast.parent is parent and fast.arguments == freeze({"a": [1]})
    assert fast.definition is not None and fast.definition.name == "n"
    assert fast.signal is not signal  # the dispatch signal
    with pytest.raises(AttributeError):
        fast.signal = signal  # type: ignore[misc]


@pytest.mark.usefixtures("finishing")
def test_trusted_success_sets_every_field_like_the_class() -> None:
    from dshtools._registry.trusted import trusted_success
    from dshtools._types.calls import text_content

    content = text_content("hi")
    built, fast = ToolSuccess("v", content, body_invoked=True), trusted_success("v", content)
    _same_fields(built, fast)
    assert built == fast and not fast.is_error and fast.code is None
    with pytest.raises(AttributeError):
        fast.value = 1  # type: ignore[misc]


@pytest.mark.usefixtures("finishing")
def test_trusted_views_set_every_field_like_the_classes() -> None:
    from dshtools._registry.trusted import trusted_dispatch_view, trusted_view
    from dshtools._types.tools import SignalSlot, ToolDispatchExecution, ToolExecution

    signal = AbortController().signal
    values = view_fields(parent=dshtools.ExecutionToken())
    run = run_of(values, signal)
    _same_fields(ToolExecution(**values, signal=signal), trusted_view(run))
    slot = SignalSlot(signal)
    built, fast = ToolDispatchExecution(**values, slot=slot), trusted_dispatch_view(run, slot)
    _same_fields(built, fast)
    assert repr(built) == repr(fast)
    # The retyped view behaves as the class: frozen fields, a replaceable signal.
    for view in (built, fast):
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            view.name = "other"  # type: ignore[misc]
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            del view.name
        with pytest.raises(AttributeError, match="cannot be deleted"):
            del view.signal  # type: ignore[misc]
        other = AbortController().signal
        view.signal = other
        assert view.signal is other and slot.signal is other
        with pytest.raises(TypeError):
            view.signal = "not a signal"  # type: ignore[assignment]


@pytest.mark.usefixtures("finishing")
def test_a_body_value_and_an_overrun_report_are_the_backends_frozen_types() -> None:
    from dshtools._backends.base import BodyReport, NotInvoked, Value
    from dshtools._backends.thread import _Handoff

    handoff = _Handoff()
    handoff.run(contextvars.copy_context(), lambda args, run: ("v", args), "a", None)  # type: ignore[arg-type]
    assert handoff.wait(5)
    assert type(handoff.outcome) is Value and handoff.outcome.value == ("v", "a")
    handoff.aborted_at = time.monotonic()
    handoff.outcome = NotInvoked()
    report = handoff.report()
    assert type(report) is BodyReport and type(report.outcome) is NotInvoked and report.killed is False
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        report.killed = True  # type: ignore[misc]


def test_a_twin_refuses_a_class_with_an_instance_dict() -> None:
    from dshtools._core.construct import twin

    class Plain:
        pass

    with pytest.raises(TypeError, match="not a slotted class"):
        twin(Plain)
