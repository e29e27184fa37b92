"""Public names report their public module (the fix-up at the end of
``dshtools/__init__.py``), so reprs, tracebacks and pickles say
``dshtools.ToolRegistry``, not the private module that defines it."""

from __future__ import annotations

import inspect
import pickle
import traceback

import dshtools


def test_every_exported_class_and_function_reports_dshtools_as_its_module() -> None:
    checked = []
    for name in dshtools.__all__:
        obj = getattr(dshtools, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
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
