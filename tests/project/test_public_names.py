"""Public names report their public module (the fix-up at the end of
``dshtools/__init__.py``), so reprs, tracebacks and pickles say
``dshtools.ToolRegistry``, not the private module that defines it."""

from __future__ import annotations

import pickle
import traceback
from types import FunctionType

import dshtools


def test_every_exported_class_and_function_reports_dshtools_as_its_module() -> None:
    checked = []
    for name in dshtools.__all__:
        obj = getattr(dshtools, name)
        # The object's real type: on 3.10 ``inspect.isclass`` accepts a
        # ``Callable[[X], Y]`` alias, which forwards ``__class__``.
        if issubclass(type(obj), (type, FunctionType)):
            assert obj.__module__ == "dshtools", f"{name} reports {obj.__module__}"
            checked.append(name)
    # The loop really covered the API, not an empty selection.
    assert {"ToolRegistry", "AbortSignal", "AbortError", "FrozenDict", "execute_batch", "thaw"} <= set(checked)


def test_reprs_tracebacks_and_pickles_use_the_public_path() -> None:
    assert repr(dshtools.ToolRegistry) == "<class 'dshtools.ToolRegistry'>"
    try:
        raise dshtools.AbortError("stop")
    except dshtools.AbortError as exc:
        assert "dshtools.AbortError: " in "".join(traceback.format_exception_only(type(exc), exc))
        again = pickle.loads(pickle.dumps(exc))
    assert isinstance(again, dshtools.AbortError) and again.reason == "stop"
    frozen = pickle.loads(pickle.dumps(dshtools.FrozenDict({"a": 1})))
    assert isinstance(frozen, dshtools.FrozenDict) and frozen == {"a": 1}


def test_exported_type_aliases_are_left_as_they_are() -> None:
    """N19: on 3.10 ``isinstance(Callable[[X], Y], type)`` is true and the
    alias's ``__module__`` is read-only, so ``import dshtools`` raised
    AttributeError; aliases are exported untouched on every version."""
    from collections.abc import Callable

    assert not issubclass(type(dshtools.Guard), type)
    assert dshtools.Guard.__origin__ is Callable  # type: ignore[attr-defined]
    assert dshtools.Guard.__module__ != "dshtools"
