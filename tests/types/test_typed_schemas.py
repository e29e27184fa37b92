"""Typed tools, made (docs/contract.md#typed-tools): the schema a typed
function gets, its descriptions, and what is refused when the tool is made.

The schema snapshots compare each parameter's schema with what pydantic
itself emits for the same annotation (``TypeAdapter(...).json_schema()``),
so they check dshtools' use of pydantic, not pydantic (issue 22)."""

from __future__ import annotations

import copy
import dataclasses
import enum
from collections.abc import Iterator
from typing import Annotated, Any, Literal, Optional, Union

import pydantic
import pytest
from openai.lib._pydantic import _ensure_strict_json_schema
from typing_extensions import TypedDict

import dshtools
from dshtools import ToolDefinition, ToolRegistry, ToolRunContext


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


class Point(pydantic.BaseModel):
    x: int
    y: int = 0


@dataclasses.dataclass
class Box:
    width: float
    label: str = "box"


class Span(TypedDict):
    start: int
    end: int


def _params(fn: Any, **options: Any) -> dict[str, Any]:
    return dshtools.thaw(ToolDefinition.from_function(fn, **options).parameters)  # type: ignore[no-any-return]


def _alone(annotation: Any) -> dict[str, Any]:
    """What pydantic emits for ``annotation`` as a field (no title)."""
    schema: dict[str, Any] = pydantic.TypeAdapter(annotation).json_schema()
    return schema


def _without_title(prop: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in prop.items() if k != "title"}


SCALAR_KINDS: list[tuple[str, Any]] = [
    ("str", str),
    ("int", int),
    ("float", float),
    ("bool", bool),
    ("optional", Optional[int]),  # noqa: UP045 - the spelling under test
    ("union", Union[int, str]),  # noqa: UP007 - the spelling under test
    ("pipe_union", int | None),
    ("literal", Literal["a", "b"]),
    ("constrained", Annotated[int, pydantic.Field(ge=1, le=10)]),
    ("constrained_str", Annotated[str, pydantic.Field(min_length=2, pattern="^[a-z]+$")]),
    ("list", list[int]),
    ("nested", dict[str, list[tuple[int, str]]]),
]


@pytest.mark.parametrize(("kind", "annotation"), SCALAR_KINDS, ids=[k for k, _ in SCALAR_KINDS])
def test_a_parameter_schema_is_pydantics_schema_of_its_annotation(kind: str, annotation: Any) -> None:
    def fn(value: Any) -> None:
        pass

    fn.__annotations__ = {"value": annotation, "return": None}
    params = _params(fn, name=f"kind_{kind}")
    assert params["type"] == "object"
    assert params["required"] == ["value"]
    assert params["additionalProperties"] is False
    assert "title" not in params
    assert _without_title(params["properties"]["value"]) == _alone(annotation)


@pytest.mark.parametrize("model", [Color, Point, Box, Span], ids=lambda m: m.__name__)
def test_an_enum_model_dataclass_or_typeddict_parameter_refers_to_pydantics_definition(model: Any) -> None:
    def fn(value: Any, many: Any) -> None:
        pass

    fn.__annotations__ = {"value": model, "many": list[model]}
    params = _params(fn, name="kinds")
    expected = _alone(model)
    assert params["properties"]["value"] == {"$ref": f"#/$defs/{model.__name__}"}
    assert params["properties"]["many"]["items"] == {"$ref": f"#/$defs/{model.__name__}"}
    assert params["$defs"][model.__name__] == expected


def test_defaults_are_in_the_schema_and_make_a_parameter_optional() -> None:
    def fn(a: int, b: str = "x", c: Optional[Color] = None) -> None:  # noqa: UP045
        pass

    params = _params(fn)
    assert params["required"] == ["a"]
    assert params["properties"]["b"]["default"] == "x"
    assert params["properties"]["c"]["default"] is None


def test_the_whole_schema_is_pydantics_schema_of_the_signature_as_a_model() -> None:
    def search(query: str, limit: Annotated[int, pydantic.Field(ge=1)] = 10, where: Point | None = None) -> str:
        return query

    expected = pydantic.create_model(
        "search_arguments",
        __config__=pydantic.ConfigDict(extra="forbid"),  # the schema is closed at the top
        query=(str, ...),
        limit=(Annotated[int, pydantic.Field(ge=1)], 10),
        where=(Point | None, None),
    ).model_json_schema()
    del expected["title"]
    assert _params(search) == expected


def test_a_run_context_parameter_of_any_name_is_not_in_the_schema() -> None:
    def fn(a: int, *, ctx: ToolRunContext) -> None:
        pass

    def annotated(a: int, here: Annotated[ToolRunContext, "the run"]) -> None:
        pass

    assert set(_params(fn)["properties"]) == {"a"}
    assert set(_params(annotated)["properties"]) == {"a"}


def test_a_function_without_parameters_takes_an_empty_object() -> None:
    def ping() -> str:
        """Answer pong."""
        return "pong"

    params = _params(ping)
    assert params == {"type": "object", "properties": {}, "additionalProperties": False}


# ---------------------------------------------------------------- docstrings


def google(url: str, page: int = 1) -> str:
    """Fetch one page of a document.

    Longer text that is not the description.

    Args:
        url: The document's address.
        page: 1-based page number.
    """
    return url


def numpy_style(url: str, page: int = 1) -> str:
    """Fetch one page of a document.

    Parameters
    ----------
    url : str
        The document's address.
    page : int
        1-based page number.
    """
    return url


def rest(url: str, page: int = 1) -> str:
    """Fetch one page of a document.

    :param url: The document's address.
    :param page: 1-based page number.
    """
    return url


@pytest.mark.parametrize("fn", [google, numpy_style, rest], ids=["google", "numpy", "rest"])
def test_each_docstring_style_gives_the_summary_and_parameter_descriptions(fn: Any) -> None:
    definition = ToolDefinition.from_function(fn)
    assert definition.name == fn.__name__
    assert definition.description == "Fetch one page of a document."
    props = definition.parameters["properties"]
    assert props["url"]["description"] == "The document's address."
    assert props["page"]["description"] == "1-based page number."


def test_explicit_name_and_description_and_field_descriptions_win() -> None:
    def fn(url: Annotated[str, pydantic.Field(description="from the annotation")], page: int = 1) -> str:
        """Summary.

        Args:
            url: from the docstring.
        """
        return url

    definition = ToolDefinition.from_function(fn, name="other", description="Given.")
    assert (definition.name, definition.description) == ("other", "Given.")
    assert definition.parameters["properties"]["url"]["description"] == "from the annotation"
    assert "description" not in definition.parameters["properties"]["page"]


def test_no_docstring_is_an_empty_description() -> None:
    def bare(a: int) -> int:
        return a

    assert ToolDefinition.from_function(bare).description == ""


# ------------------------------------------------------------------ refusals


def star_args(*items: int) -> None:
    pass


def star_kwargs(**options: int) -> None:
    pass


def positional_only(a: int, /) -> None:
    pass


async def coroutine(a: int) -> None:
    pass


def generator(a: int) -> Iterator[int]:
    yield a


class Opaque:
    pass


def opaque(a: Opaque) -> None:
    pass


def two_contexts(a: ToolRunContext, b: ToolRunContext) -> None:
    pass


REFUSALS = [
    (star_args, r"\*items takes any number of positional arguments; give each argument its own named parameter"),
    (star_kwargs, r"\*\*options takes any keyword arguments; give each argument its own named parameter"),
    (positional_only, r"a is positional-only; make it an ordinary parameter \(remove the '/'\)"),
    (coroutine, r"it is async def; tool bodies run synchronously .* write a plain def"),
    (generator, r"it is a generator; return the whole value"),
    (opaque, r"a parameter type cannot be expressed as JSON Schema .*; annotate it with a JSON type"),
    (two_contexts, r"both a and b are annotated ToolRunContext; keep one"),
]


@pytest.mark.parametrize(("fn", "message"), REFUSALS, ids=[f.__name__ for f, _ in REFUSALS])
def test_what_a_tool_function_cannot_be_is_refused_when_it_is_made(fn: Any, message: str) -> None:
    with pytest.raises(TypeError, match=message) as caught:
        ToolDefinition.from_function(fn)
    assert f"tool function {fn.__qualname__}: " in str(caught.value)
    # The decorator refuses at decoration, and registers nothing.
    with ToolRegistry() as registry:
        with pytest.raises(TypeError, match=message):
            registry.tool(fn)
        assert registry.schemas() == []


def test_a_class_or_other_callable_is_refused() -> None:
    with pytest.raises(TypeError, match="made from a function, not type"):
        ToolDefinition.from_function(Opaque)


def test_output_schema_needs_a_return_annotation() -> None:
    def fn(a: int):  # type: ignore[no-untyped-def]
        return a

    with pytest.raises(TypeError, match="output_schema=True needs a return annotation"):
        ToolDefinition.from_function(fn, output_schema=True)


def test_output_schema_is_pydantics_serialization_schema_of_the_return_annotation() -> None:
    def where() -> Point:
        return Point(x=1)

    definition = ToolDefinition.from_function(where, output_schema=True)
    assert dshtools.thaw(definition.output_schema) == pydantic.TypeAdapter(Point).json_schema(mode="serialization")
    assert ToolDefinition.from_function(where).output_schema is None


def test_concurrency_safe_is_the_plain_form_of_is_concurrency_safe() -> None:
    def fn(a: int) -> int:
        return a

    assert ToolDefinition.from_function(fn).is_concurrency_safe is None
    safe = ToolDefinition.from_function(fn, concurrency_safe=True).is_concurrency_safe
    assert safe is not None and safe({"a": 1}) is True
    with pytest.raises(TypeError, match="concurrency_safe must be a bool"):
        ToolDefinition.from_function(fn, concurrency_safe="yes")  # type: ignore[arg-type]


# -------------------------------------------------------------------- strict


def strict_kinds(
    query: str,
    limit: int = 10,
    color: Color | None = None,
    where: Annotated[Point, pydantic.Field(description="A point.")] = Point(x=0),  # noqa: B008
    boxes: list[Box] | None = None,
    span: Span | None = None,
) -> str:
    """Search.

    Args:
        query: What to look for.
        limit: At most this many.
    """
    return query


def test_a_strict_schema_is_already_what_the_openai_sdks_strict_helper_makes() -> None:
    params = _params(strict_kinds, strict=True)
    # The SDK's own helper changes nothing: it is strict already.
    assert _ensure_strict_json_schema(copy.deepcopy(params), path=(), root=params) == params
    _check_strict_rules(params)
    props = params["properties"]
    assert params["required"] == list(props)
    assert {"type": "null"} in props["limit"]["anyOf"]
    assert "default" not in props["limit"]
    assert props["limit"]["description"] == "At most this many."
    assert props["where"]["description"] == "A point."


def _check_strict_rules(node: Any) -> None:
    """Every object closed and every property required; no $ref with siblings."""
    if isinstance(node, dict):
        if node.get("type") == "object":
            assert node.get("additionalProperties") is False, node
            assert node.get("required", []) == list(node.get("properties", {})), node
        if "$ref" in node:
            assert len(node) == 1, node
        for value in node.values():
            _check_strict_rules(value)
    elif isinstance(node, list):
        for value in node:
            _check_strict_rules(value)


def test_a_strict_tool_is_marked_strict_and_the_openai_tools_param_says_so() -> None:
    from dshtools.openai import tools_param

    with ToolRegistry() as registry:
        registry.tool(strict=True)(strict_kinds)
        registry.tool(google)
        tools = {t["function"]["name"]: t["function"] for t in tools_param(registry)}
    assert tools["strict_kinds"]["strict"] is True
    assert "strict" not in tools["google"]
    assert registry.get("strict_kinds") is not None


def test_a_type_named_only_in_the_defining_function_resolves_under_postponed_annotations() -> None:
    # This module has `from __future__ import annotations`: the annotation
    # is the string "Local", which the module's globals do not define.
    class Local(pydantic.BaseModel):
        n: int

    def fn(item: Local) -> int:
        """Read the item's number."""
        return item.n

    with ToolRegistry() as registry:
        registry.tool(fn)
        definition = registry.get("fn")
        assert definition is not None
        assert definition.parameters["properties"]["item"] == {"$ref": "#/$defs/Local"}
    assert ToolDefinition.from_function(fn).name == "fn"


@pytest.mark.filterwarnings("error")
def test_parameter_names_pydantic_reserves_keep_their_names_in_schema_and_call() -> None:
    def fn(json: str, model_name: str, copy: int = 1, _hidden: str = "h") -> str:
        return f"{json} {model_name} {copy} {_hidden}"

    definition = ToolDefinition.from_function(fn)
    assert list(definition.parameters["properties"]) == ["json", "model_name", "copy", "_hidden"]
    assert list(definition.parameters["required"]) == ["json", "model_name"]
    with ToolRegistry() as registry:
        registry.register(definition)
        result = registry.execute(
            dshtools.ToolExecutionInput(
                "c", "fn", {"json": "j", "model_name": "m", "_hidden": "x"}, dshtools.AbortController().signal
            )
        )
    assert isinstance(result, dshtools.ToolSuccess) and result.value == "j m 1 x"
