"""Typed tools, called (docs/contract.md#typed-tools): typed values reach the
body, coercion errors are ``INVALID_ARGS`` before any body runs, return
values become JSON, and the pipeline's guarantees (one result, cancellation,
quiescence) hold for typed bodies as for hand-written ones (issue 22)."""

from __future__ import annotations

import dataclasses
import datetime
import enum
import json
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import cloudpickle  # type: ignore[import-untyped]
import pydantic
import pytest
from typing_extensions import TypedDict

import dshtools
from dshtools import (
    INVALID_ARGS,
    INVALID_TOOL_OUTPUT,
    TOOL_ABORTED,
    AbortController,
    Allow,
    ToolDefinition,
    ToolError,
    ToolExecution,
    ToolRegistry,
    ToolRunContext,
    execute_batch,
)
from dshtools._core.freeze import freeze
from dshtools._types.functions import TypedArguments
from tests.helpers.calls import call, error_of, value_of
from tests.helpers.recorders import HookRecorder
from tests.helpers.waiting import run_in_thread


class Unit(enum.Enum):
    CELSIUS = "c"
    FAHRENHEIT = "f"


class Place(pydantic.BaseModel):
    city: str
    zip: Annotated[str, pydantic.Field(pattern=r"^\d{5}$")]


@dataclasses.dataclass
class Window:
    start: datetime.datetime
    hours: int = 1


class Span(TypedDict):
    start: int
    end: int


def test_arguments_reach_the_body_as_typed_values_by_keyword(registry: ToolRegistry) -> None:
    seen: dict[str, Any] = {}

    @registry.tool
    def forecast(
        place: Place,
        when: Window,
        unit: Unit,
        folder: Path,
        day: datetime.date,
        spans: list[Span],
        places: dict[str, Place],
        *,
        run: ToolRunContext,
    ) -> str:
        """The test tool forecast."""
        seen.update(place=place, when=when, unit=unit, folder=folder, day=day, spans=spans, places=places, run=run)
        return "sunny"

    arguments = {
        "place": {"city": "Oslo", "zip": "01234"},
        "when": {"start": "2026-12-01T10:00:00"},
        "unit": "c",
        "folder": "/tmp/x",
        "day": "2026-12-01",
        "spans": [{"start": 1, "end": 2}],
        "places": {"home": {"city": "Bergen", "zip": "50000"}},
    }
    result = registry.execute(call("forecast", arguments))
    assert value_of(result) == "sunny"
    assert result.content[0]["text"] == "sunny"
    assert seen["place"] == Place(city="Oslo", zip="01234")
    assert seen["when"] == Window(datetime.datetime(2026, 12, 1, 10), 1)
    assert seen["unit"] is Unit.CELSIUS
    assert seen["folder"] == Path("/tmp/x")
    assert seen["day"] == datetime.date(2026, 12, 1)
    assert seen["spans"] == [{"start": 1, "end": 2}] and isinstance(seen["spans"], list)
    assert seen["places"]["home"] == Place(city="Bergen", zip="50000")
    run = seen["run"]
    assert isinstance(run, ToolRunContext)
    # The run context and the hooks keep the frozen JSON arguments.
    assert dshtools.thaw(run.arguments) == arguments and isinstance(run.arguments, dshtools.FrozenDict)


def test_the_decorator_returns_the_function_itself_still_callable(registry: ToolRegistry) -> None:
    def add(a: int, b: int = 2) -> int:
        """Add."""
        return a + b

    assert registry.tool(add) is add
    assert registry.tool(name="plus")(add) is add
    assert add(1) == 3
    assert [s["name"] for s in registry.schemas()] == ["add", "plus"]
    assert value_of(registry.execute(call("plus", {"a": 40}))) == 42


def test_a_coercion_error_is_invalid_args_with_its_path_and_no_hook_or_body_ran(registry: ToolRegistry) -> None:
    ran: list[str] = []
    observed = HookRecorder()

    @registry.tool
    def where(when: Window, day: datetime.date) -> str:
        """The test tool where."""
        ran.append("body")
        return "x"

    def pre(execution: ToolExecution, nxt: Any) -> Any:
        ran.append("pre-execute")
        return Allow()

    registry.add_pre_execute(pre)
    registry.add_result_observer(observed.observer)
    # Both values pass the schema (jsonschema-rs does not check formats);
    # pydantic refuses them.
    result = registry.execute(call("where", {"when": {"start": "noon"}, "day": "2026-02-30"}))
    message = error_of(result).message
    assert result.code == INVALID_ARGS
    assert message.startswith("invalid arguments: ")
    assert "Input should be a valid datetime" in message and "at $.when.start" in message
    assert "Input should be a valid date" in message and "at $.day" in message
    assert result.content[0]["text"] == "Error: " + message
    assert ran == []
    assert [r for _e, r in observed.results] == [result]


def test_the_schema_is_the_first_gate_and_an_unknown_argument_is_refused(registry: ToolRegistry) -> None:
    @registry.tool
    def count(n: int) -> int:
        """The test tool count."""
        return n

    wrong = registry.execute(call("count", {"n": "three"}))
    unknown = registry.execute(call("count", {"n": 1, "m": 2}))
    # jsonschema-rs's messages (the schema's gate), not pydantic's.
    assert wrong.code == INVALID_ARGS and "is not of type" in error_of(wrong).message
    assert unknown.code == INVALID_ARGS and "Additional properties" in error_of(unknown).message


_DEEP_CHILD = textwrap.dedent(
    """
    from __future__ import annotations
    import json, resource, sys, time
    import pydantic
    from dshtools import AbortController, ToolExecutionInput, ToolRegistry

    class Node(pydantic.BaseModel):
        child: Node | None = None

    ran = []
    registry = ToolRegistry()

    @registry.tool
    def walk(node: Node) -> str:
        ran.append(True)
        return "walked"

    # A warm call first: pydantic's first validation builds what it caches.
    registry.execute(ToolExecutionInput("w", "walk", {"node": {"child": None}}, AbortController().signal))
    ran.clear()
    deep = {"child": None}
    for _ in range(10_000):
        deep = {"child": deep}
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.monotonic()
    result = registry.execute(ToolExecutionInput("c", "walk", {"node": deep}, AbortController().signal))
    elapsed = time.monotonic() - started
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    registry.close()
    print(json.dumps({"code": result.code, "text": result.content[0]["text"], "elapsed": elapsed,
                      "grown_mib": grown_kib / 1024, "ran": bool(ran)}))
    """
)


@pytest.mark.timeout(90)
def test_a_ten_thousand_deep_value_against_a_recursive_model_is_invalid_args_within_bounds() -> None:
    """A6: model-written input cannot exhaust the process. The schema's gate
    (jsonschema-rs on a sized helper thread) accepts the value, pydantic then
    refuses its depth; neither crashes, and the call is INVALID_ARGS."""
    proc = subprocess.run([sys.executable, "-c", _DEEP_CHILD], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["code"] == INVALID_ARGS, out
    assert out["ran"] is False
    assert out["text"].startswith("Error: invalid arguments: ")
    assert len(out["text"]) < 2000  # the path is shortened, not 10 000 levels long
    assert out["grown_mib"] < 100
    assert out["elapsed"] < 1.0


# ------------------------------------------------------------------- returns


class Reading(pydantic.BaseModel):
    at: datetime.datetime
    unit: Unit
    value: float


def test_return_values_go_through_pydantics_json_mode(registry: ToolRegistry) -> None:
    at = datetime.datetime(2026, 12, 1, 12, 30)

    @registry.tool
    def reading() -> Reading:
        """The test tool reading."""
        return Reading(at=at, unit=Unit.FAHRENHEIT, value=1.5)

    @registry.tool
    def window() -> Window:
        """The test tool window."""
        return Window(at, 2)

    @registry.tool
    def mixed() -> dict[str, Any]:
        """The test tool mixed."""
        return {"when": at.date(), "where": Path("/x"), "list": [Unit.CELSIUS]}

    @registry.tool
    def nothing() -> None:
        """The test tool nothing."""
        return None

    assert value_of(registry.execute(call("reading"))) == {"at": "2026-12-01T12:30:00", "unit": "f", "value": 1.5}
    assert value_of(registry.execute(call("window"))) == {"start": "2026-12-01T12:30:00", "hours": 2}
    assert dshtools.thaw(value_of(registry.execute(call("mixed")))) == {
        "when": "2026-12-01",
        "where": "/x",
        "list": ["c"],
    }
    assert value_of(registry.execute(call("nothing"))) is None


def test_a_value_that_is_not_json_in_any_mode_is_invalid_tool_output(registry: ToolRegistry) -> None:
    @registry.tool
    def opaque() -> object:
        """The test tool opaque."""
        return threading.Lock()

    assert registry.execute(call("opaque")).code == INVALID_TOOL_OUTPUT


def test_output_schema_true_checks_the_value_against_the_return_annotation(registry: ToolRegistry) -> None:
    @registry.tool(output_schema=True)
    def lying() -> int:
        """The test tool lying."""
        return "not a number"  # type: ignore[return-value]

    @registry.tool(output_schema=True)
    def honest() -> Reading:
        """The test tool honest."""
        return Reading(at=datetime.datetime(2026, 1, 1), unit=Unit.CELSIUS, value=2)

    assert registry.execute(call("lying")).code == INVALID_TOOL_OUTPUT
    assert value_of(registry.execute(call("honest")))["value"] == 2.0


def test_a_tool_error_keeps_its_code(registry: ToolRegistry) -> None:
    @registry.tool
    def refuse(a: int) -> str:
        """The test tool refuse."""
        raise ToolError(f"no {a}", code="NOPE")

    result = registry.execute(call("refuse", {"a": 3}))
    assert result.code == "NOPE" and error_of(result).message == "no 3"


def test_strict_null_for_a_parameter_with_a_default_means_the_default(registry: ToolRegistry) -> None:
    @registry.tool(strict=True)
    def page(url: str, number: int = 1, note: str | None = "n") -> str:
        """The test tool page."""
        return f"{url} {number} {note}"

    assert value_of(registry.execute(call("page", {"url": "u", "number": None, "note": None}))) == "u 1 n"
    assert value_of(registry.execute(call("page", {"url": "u", "number": 3, "note": "x"}))) == "u 3 x"
    # Strict: every property is required, so leaving one out is refused by the gate.
    assert registry.execute(call("page", {"url": "u"})).code == INVALID_ARGS


def test_a_direct_call_of_the_body_with_frozen_arguments_coerces_them() -> None:
    def double(day: datetime.date, *, run: ToolRunContext) -> str:
        return (day + datetime.timedelta(days=1)).isoformat()

    body = ToolDefinition.from_function(double).execute
    assert body(freeze({"day": "2026-12-31"}), None) == "2027-01-01"  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"at \$\.day"):
        body(freeze({"day": "never"}), None)  # type: ignore[arg-type]


def test_a_typed_body_pickles_by_value_and_works_where_it_lands() -> None:
    def shout(place: Place, times: int = 1) -> str:
        return place.city.upper() * times

    definition = ToolDefinition.from_function(shout)
    again = cloudpickle.loads(cloudpickle.dumps(definition.execute))
    assert again(TypedArguments(place=Place(city="a", zip="00000"), times=2), None) == "AA"
    # The validator is rebuilt on first need (a direct call with JSON arguments).
    assert again(freeze({"place": {"city": "b", "zip": "00000"}}), None) == "B"


# -------------------------------------------------- cancellation, quiescence


@pytest.mark.timeout(30)
def test_a_typed_body_sees_its_signal_and_an_abort_is_aborted_after_the_join(registry: ToolRegistry) -> None:
    started = threading.Event()
    returned = threading.Event()

    @registry.tool
    def wait(place: Place, *, run: ToolRunContext) -> str:
        """The test tool wait."""
        started.set()
        run.signal.wait()
        returned.set()
        return place.city

    controller = AbortController()
    caller, results = run_in_thread(
        lambda: registry.execute(call("wait", {"place": {"city": "Oslo", "zip": "00000"}}, controller.signal))
    )
    assert started.wait(10)
    controller.abort("stop")
    caller.join(10)
    assert not caller.is_alive()
    assert returned.is_set()  # joined, never abandoned
    assert results[0].code == TOOL_ABORTED
    assert registry.statistics().bodies_in_flight == 0


@pytest.mark.timeout(30)
def test_concurrency_safe_typed_tools_overlap_in_a_batch_and_leave_nothing_running() -> None:
    barrier = threading.Barrier(2, timeout=10)
    with ToolRegistry() as registry:

        @registry.tool(concurrency_safe=True)
        def meet(who: str) -> str:
            """The test tool meet."""
            barrier.wait()  # both calls must be in flight at once
            return who

        signal = AbortController().signal
        results = execute_batch(
            registry, [call("meet", {"who": "a"}, call_id="1"), call("meet", {"who": "b"}, call_id="2")], signal=signal
        )
        assert [value_of(r) for r in results] == ["a", "b"]
        assert registry.execution_mode(call("meet", {"who": "a"})) == "parallel"
    stats = registry.statistics()
    assert stats.closed and stats.bodies_in_flight == 0


@pytest.mark.timeout(30)
def test_close_waits_for_a_running_typed_body() -> None:
    release = threading.Event()
    started = threading.Event()
    registry = ToolRegistry()

    @registry.tool
    def hold(when: datetime.date) -> str:
        """The test tool hold."""
        started.set()
        release.wait(10)
        return when.isoformat()

    caller, results = run_in_thread(lambda: registry.execute(call("hold", {"when": "2026-01-01"})))
    assert started.wait(10)
    closer = threading.Thread(target=registry.close)
    closer.start()
    closer.join(0.2)
    assert closer.is_alive()  # close() waits for the body (quiescence)
    release.set()
    closer.join(10)
    caller.join(10)
    assert value_of(results[0]) == "2026-01-01"
    assert registry.statistics().bodies_in_flight == 0


# --------------------------------------------------------- import and module


def test_import_dshtools_imports_neither_pydantic_nor_docstring_parser() -> None:
    code = (
        "import sys, dshtools\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pydantic', 'pydantic_core', 'docstring_parser')"
        " or m in ('dshtools._types.functions', 'typing_extensions')))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


@pytest.mark.parametrize("mark", [dshtools.tool, dshtools.tool(name="length")], ids=["bare", "with-options"])
def test_marking_what_takes_no_attribute_is_a_type_error_naming_its_type(mark: Callable[[object], object]) -> None:
    with pytest.raises(TypeError, match=r"^@dshtools.tool marks functions, not builtin_function_or_method$") as info:
        mark(len)
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_tools_from_module_collects_the_marked_functions_defined_there(tmp_path: Path) -> None:
    (tmp_path / "typed_tools_elsewhere.py").write_text(
        textwrap.dedent(
            '''
            import dshtools

            @dshtools.tool
            def borrowed(a: int) -> int:
                """Not the other module's tool."""
                return a
            '''
        )
    )
    (tmp_path / "typed_tools_here.py").write_text(
        textwrap.dedent(
            '''
            import dshtools
            from typed_tools_elsewhere import borrowed

            @dshtools.tool
            def second(a: int) -> int:
                """Second."""
                return a

            @dshtools.tool(name="first_one", concurrency_safe=True, timeout=2.0)
            def first(b: str) -> str:
                """First."""
                return b

            def helper(c: int) -> int:
                return c
            '''
        )
    )
    sys.path.insert(0, str(tmp_path))
    try:
        import typed_tools_here  # type: ignore[import-not-found]

        definitions = dshtools.tools_from_module(typed_tools_here)
        assert [d.name for d in definitions] == ["second", "first_one"]
        assert definitions[1].timeout == 2.0 and definitions[1].is_concurrency_safe is not None
        assert [d.name for d in dshtools.tools_from_module("typed_tools_here")] == ["second", "first_one"]
        # Marking changes nothing about the function.
        assert typed_tools_here.second(4) == 4
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("typed_tools_here", None)
        sys.modules.pop("typed_tools_elsewhere", None)
