"""The hot path's reference-cycle guarantee on the paths that run a body
inline (a nested ``run.dispatch``, a batch's dispatch on its own pool):
every object of a finished call is freed by reference counting, none waits
for the cyclic garbage collector."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from dshtools import (
    AbortController,
    AbortSignal,
    ToolDefinition,
    ToolRegistry,
    ToolRunContext,
    execute_batch,
)
from tests.helpers.calls import OBJECT, body_context, call, context_fields, run_of, view_fields
from tests.helpers.cycles import cyclic_garbage_of, reference_cycles


def _child(_args: Any, _run: ToolRunContext) -> object:
    return {"n": 1}


def _parent(_args: Any, run: ToolRunContext) -> object:
    result = run.dispatch("child", {})
    assert not result.is_error
    return None


def _nested(registry: ToolRegistry, signal: AbortSignal, i: int) -> None:
    assert not registry.execute(call("parent", signal=signal, call_id=f"p{i}")).is_error


def _batch(registry: ToolRegistry, signal: AbortSignal, i: int) -> None:
    calls = [call("child", signal=signal, call_id=f"b{i}-{j}") for j in range(3)]
    assert not any(r.is_error for r in execute_batch(registry, calls, signal=signal))


@pytest.mark.timeout(30)
@pytest.mark.parametrize("path", [_nested, _batch], ids=["nested-dispatch", "batch-on-own-pool"])
def test_a_call_whose_body_ran_inline_leaves_no_reference_cycle(
    path: Callable[[ToolRegistry, AbortSignal, int], None],
) -> None:
    signal = AbortController().signal
    with ToolRegistry(max_workers=2) as registry:
        registry.register(ToolDefinition("child", "child", OBJECT, _child, is_concurrency_safe=lambda _a: True))
        registry.register(ToolDefinition("parent", "parent", OBJECT, _parent))
        found, kinds = cyclic_garbage_of(lambda i: path(registry, signal, i))
    assert found == 0, kinds


class _Node:
    __slots__ = ("other",)  # no instance dict: the same objects on every version

    def __init__(self) -> None:
        self.other: object = None


def test_the_cycle_count_sees_every_cycle_and_nothing_else() -> None:
    """The method of the tests above, on every build (free-threaded
    included): objects on a cycle are counted, objects freed by reference
    counting and objects that merely hang off a cycle are not."""
    with reference_cycles() as cycles:
        a, b, alone, self_ref, chain = _Node(), _Node(), _Node(), _Node(), _Node()
        a.other, b.other = b, (a, chain)  # a -> b -> tuple -> a; chain only hangs off it
        self_ref.other = self_ref
        del a, b, alone, self_ref, chain
    assert cycles.count == 4 and cycles.kinds == ("_Node", "tuple")
    with reference_cycles() as cycles:
        _Node().other = _Node()
    assert cycles.count == 0 and cycles.kinds == ()


def test_objects_built_through_a_twin_behave_as_class_built_ones() -> None:
    """The registry's frozen objects (built through a twin and retyped)
    against the same objects built by their classes: type, equality,
    repr, copies, pickling, ``attrs.evolve``/``asdict``, weak references,
    frozenness, and no way back to the mutable twin."""
    import copy
    import pickle
    import weakref

    import attrs

    from dshtools import ToolExecution, ToolSuccess
    from dshtools._registry.trusted import trusted_success, trusted_view
    from dshtools._types.calls import text_content

    success, built = trusted_success(7, text_content("7")), ToolSuccess(7, "7", body_invoked=True)
    assert type(success) is ToolSuccess and success == built
    assert repr(success) == repr(built)
    assert pickle.loads(pickle.dumps(success)) == built
    assert copy.copy(success) == built and copy.deepcopy(success) == built
    assert attrs.evolve(success, value=8) == ToolSuccess(8, "7", body_invoked=True)
    assert attrs.asdict(success) == attrs.asdict(built)
    assert weakref.ref(success)() is success

    signal = AbortController().signal
    fields = view_fields()
    run = run_of(fields, signal)
    view = trusted_view(run)
    context = body_context(run.call)
    assert type(view) is ToolExecution and type(context) is ToolRunContext
    assert repr(view) == repr(ToolExecution(**fields, signal=signal))
    assert repr(context) == repr(ToolRunContext(**context_fields(context)))
    assert attrs.evolve(view, name="m").name == "m"
    assert attrs.evolve(context, name="m").signal is context.signal
    for obj in (success, view, context):
        twin = next(c for c in type(obj).__subclasses__() if c.__qualname__.endswith(".<twin>"))
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            setattr(obj, "content" if obj is success else "name", "other")
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            obj.__class__ = twin
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            delattr(obj, "value" if obj is success else "call_id")
