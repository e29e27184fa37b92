"""Tools from typed Python functions (docs/contract.md#typed-tools).

``ToolDefinition.from_function(fn, ...)``, ``ToolRegistry.tool`` and
``dshtools.tool`` build a ``ToolDefinition`` from a function's signature and
docstring. Guarantees:

* This module is imported when the first typed tool is made (``import
  dshtools`` imports only ``_types.marks``), and imports pydantic and
  docstring-parser then.
* Everything a function cannot be is refused when the tool is made, with a
  ``TypeError`` that says what to write instead: ``*args``, ``**kwargs``,
  positional-only parameters, ``async def``, generators, a parameter type
  pydantic cannot express as JSON Schema.
* The schema is pydantic's JSON Schema (2020-12) of a model with one field
  per parameter, without the model's own title and closed at the top
  (``additionalProperties: false``: an unknown argument is ``INVALID_ARGS``). A parameter annotated
  ``ToolRunContext`` (any name) receives the call's ``run`` and is not in it.
* Arguments are checked twice, in this order, before the body is invoked:
  by the registry's compiled schema (jsonschema-rs, bounded for any input:
  docs/contract.md#a6), then by pydantic, which builds
  the typed values. A pydantic error is ``INVALID_ARGS`` with the JSON path
  of each problem; the body never runs for it.
* The body is called with keyword arguments, on whatever thread or process
  its backend runs bodies on. A ``str`` it returns is the text content; any
  other value goes through pydantic's JSON mode to a JSON value (models,
  dataclasses, ``datetime``, ``Path``, enums, ...).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any, Final, TypeVar

from .._core.freeze import json_path

_T = TypeVar("_T")

RUN_CONTEXT_MARK: Final = "__dshtools_run_context__"
"""The class attribute (``True``) that marks the run-context type: a
parameter annotated with a class carrying it receives ``run``."""

__all__ = ["RUN_CONTEXT_MARK", "TypedArguments", "TypedBody", "strict_schema", "typed_fields"]

_MAX_PROBLEMS: Final = 5
_MAX_PATH: Final = 200
_JSON_SCALARS: Final = (str, int, float, bool, type(None))


class TypedArguments(dict[str, Any]):
    """The keyword arguments of a typed body, built by pydantic from the
    call's validated JSON arguments (a plain ``dict`` of typed values)."""

    __slots__ = ()


def _always(_args: object) -> bool:
    return True


def _problems(exc: Any) -> str:
    """A pydantic ``ValidationError`` as ``"<message> at <JSON path>"`` items
    joined by ``"; "``, like the registry's schema errors."""
    parts: list[str] = []
    errors = exc.errors(include_url=False, include_context=False, include_input=False)
    for error in errors[:_MAX_PROBLEMS]:
        path = json_path(list(error.get("loc", ())))
        if len(path) > _MAX_PATH:
            path = path[:_MAX_PATH] + "…"
        parts.append(f"{error.get('msg', 'invalid value')} at {path}")
    if len(errors) > _MAX_PROBLEMS:
        parts.append(f"and {len(errors) - _MAX_PROBLEMS} more")
    return "; ".join(parts)


class _Coercer:
    """``prepare_arguments`` of a typed tool: the validated frozen JSON
    arguments to ``TypedArguments`` (``ValueError`` naming every problem
    otherwise). Runs in the calling thread, in step 1 of the pipeline."""

    __slots__ = ("_defaults", "_invalid", "_renamed", "_validate", "hints")

    def __init__(
        self, model: Any, defaults: _NullsMeanDefaults | None, hints: dict[str, Any], renamed: dict[str, str]
    ) -> None:
        from pydantic import ValidationError

        # The function's resolved annotations, sent with a pickled body so
        # the validator can be rebuilt where names do not resolve.
        self.hints = hints
        self._validate = model.__pydantic_validator__.validate_python
        self._invalid = ValidationError
        # A strict tool's schema accepts null for every property that is not
        # required, at every depth: a null there means "use the default"
        # (docs/contract.md#a29); None for a tool that is not strict.
        self._defaults = defaults
        # Field name -> parameter name, for parameters pydantic reserves.
        self._renamed = renamed

    def __call__(self, arguments: Any) -> TypedArguments:
        try:
            if self._defaults is not None:
                arguments = self._defaults(arguments)
            model = self._validate(arguments)
        except self._invalid as exc:
            raise ValueError(_problems(exc)) from None
        except RecursionError:
            raise ValueError("the value is nested too deeply at $") from None
        # A model's __dict__ holds exactly its fields (extras are kept apart).
        renamed = self._renamed
        if renamed:
            return TypedArguments({renamed.get(k, k): v for k, v in model.__dict__.items()})
        return TypedArguments(model.__dict__)


def _jsonable(value: object) -> object:
    if type(value) in _JSON_SCALARS:
        return value
    from pydantic_core import PydanticSerializationError, to_jsonable_python

    try:
        return to_jsonable_python(value)
    except (PydanticSerializationError, UnicodeDecodeError):
        # Not JSON in any mode (bytes that are not UTF-8 included): the
        # registry reports INVALID_TOOL_OUTPUT.
        return value


class TypedBody:
    """The ``execute`` of a typed tool: ``body(args, run)`` calls the
    function with ``args`` as keyword arguments (and ``run`` as its
    ``ToolRunContext`` parameter, when it has one) and returns its value as
    JSON. ``args`` not yet coerced (a direct call with the frozen arguments)
    are coerced first. Pickles by value with its function (any backend)."""

    __slots__ = ("__wrapped__", "_context", "_prepare", "_strict")

    def __init__(self, fn: Callable[..., object], context: str | None, prepare: _Coercer, strict: bool) -> None:
        self.__wrapped__ = fn
        self._context = context
        self._prepare: Callable[[Any], TypedArguments] = prepare
        self._strict = strict

    def __call__(self, args: Any, run: Any) -> object:
        if type(args) is not TypedArguments:
            args = self._prepare(args)
        if self._context is None:
            value = self.__wrapped__(**args)
        else:
            value = self.__wrapped__(**args, **{self._context: run})
        if type(value) in _JSON_SCALARS:
            return value
        return _jsonable(value)

    def __getstate__(self) -> tuple[Callable[..., object], str | None, bool, dict[str, Any]]:
        # The validator is rebuilt where the body lands, if it is needed
        # there at all: pydantic's compiled validators are not sent.
        prepare = self._prepare
        hints = prepare.hints if isinstance(prepare, (_Coercer, _LazyCoercer)) else {}
        return self.__wrapped__, self._context, self._strict, hints

    def __setstate__(self, state: tuple[Callable[..., object], str | None, bool, dict[str, Any]]) -> None:
        fn, context, strict, hints = state
        self.__wrapped__ = fn
        self._context = context
        self._strict = strict
        self._prepare = _LazyCoercer(fn, strict, hints)

    def __repr__(self) -> str:
        return f"<typed body {getattr(self.__wrapped__, '__qualname__', self.__wrapped__)!r}>"


class _LazyCoercer:
    """A worker-side ``prepare``: rebuilt from the function on first use
    (only a direct call with uncoerced arguments needs it)."""

    __slots__ = ("_fn", "_real", "_strict", "hints")

    def __init__(self, fn: Callable[..., object], strict: bool, hints: dict[str, Any]) -> None:
        self._fn = fn
        self._strict = strict
        self.hints = hints
        self._real: _Coercer | None = None

    def __call__(self, arguments: Any) -> TypedArguments:
        if self._real is None:
            self._real = _build(self._fn, strict=self._strict, name=None, hints=self.hints)[1]
        return self._real(arguments)


# ------------------------------------------------------------------ making


def _refuse(fn: Callable[..., object], problem: str, instead: str) -> TypeError:
    name = getattr(fn, "__qualname__", repr(fn))
    return TypeError(f"tool function {name}: {problem}; {instead}")


def _check_kind(fn: Callable[..., object]) -> None:
    import inspect

    if not (inspect.isfunction(fn) or inspect.ismethod(fn)):
        raise TypeError(f"a typed tool is made from a function, not {type(fn).__name__}")
    if inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn):
        raise _refuse(
            fn,
            "it is async def",
            "tool bodies run synchronously on a backend's worker: write a plain def "
            "(call a coroutine with asyncio.run() inside it)",
        )
    if inspect.isgeneratorfunction(fn):
        raise _refuse(fn, "it is a generator", "return the whole value (a list, say) instead of yielding parts")


def _build(
    fn: Callable[..., object], *, strict: bool, name: str | None, hints: dict[str, Any] | None = None
) -> tuple[Any, _Coercer, str | None, Any]:
    """``(model, coercer, context parameter name, docstring)`` for ``fn``."""
    import inspect
    import typing

    import pydantic
    from pydantic.fields import FieldInfo

    _check_kind(fn)
    signature = inspect.signature(fn)
    try:
        if hints is None:
            hints = _type_hints(fn)
    except Exception as exc:
        raise _refuse(
            fn,
            f"its annotations cannot be resolved ({type(exc).__name__}: {exc})",
            "import every type its annotations name in the function's module",
        ) from None
    doc = _parse_doc(fn)
    described = {p.arg_name: p.description for p in doc.params if p.description} if doc is not None else {}
    fields: dict[str, Any] = {}
    context: str | None = None
    renamed: dict[str, str] = {}
    for parameter in signature.parameters.values():
        kind = parameter.kind
        if kind is parameter.VAR_POSITIONAL:
            raise _refuse(
                fn,
                f"*{parameter.name} takes any number of positional arguments",
                "give each argument its own named parameter, or take one list parameter",
            )
        if kind is parameter.VAR_KEYWORD:
            raise _refuse(
                fn,
                f"**{parameter.name} takes any keyword arguments",
                "give each argument its own named parameter, or take one dict or model parameter",
            )
        if kind is parameter.POSITIONAL_ONLY:
            raise _refuse(
                fn,
                f"{parameter.name} is positional-only",
                "make it an ordinary parameter (remove the '/'): the body is called with keyword arguments",
            )
        annotation = hints.get(parameter.name, Any)
        if _is_run_context(annotation):
            if context is not None:
                raise _refuse(
                    fn,
                    f"both {context} and {parameter.name} are annotated ToolRunContext",
                    "keep one run context parameter",
                )
            context = parameter.name
            continue
        signal_type = _signal_type_in(annotation)
        if signal_type is not None:
            raise _refuse(
                fn,
                f"{parameter.name} is annotated {signal_type}",
                "the call's signal is not one of the model's arguments: annotate a parameter ToolRunContext "
                "(run: ToolRunContext) and read run.signal",
            )
        default = ... if parameter.default is parameter.empty else parameter.default
        description = described.get(parameter.name)
        if _described_by_annotation(annotation):
            description = None  # Annotated[..., Field(description=...)] wins over the docstring
        described_by = {} if description is None else {"description": description}
        if isinstance(default, FieldInfo):
            field = default if default.description else pydantic.Field(default, **described_by)
        else:
            field = pydantic.Field(default, **described_by)
        key = parameter.name
        if key.startswith(("_", "model_")) or hasattr(pydantic.BaseModel, key):
            # A name pydantic reserves for itself (json, copy, model_*, _x):
            # the field gets another name, the schema and the model's
            # arguments keep the parameter's (an alias).
            key = f"field_{len(fields)}_{key.lstrip('_')}"
            renamed[key] = parameter.name
            annotation = typing.Annotated[annotation, pydantic.Field(alias=parameter.name)]
        fields[key] = (annotation, field)
    # pydantic's default config: a config here would also apply to the
    # dataclasses and TypedDicts of the parameters (the schema closes only
    # the top level, below).
    model_name = f"{name or getattr(fn, '__name__', 'tool')}_arguments"

    def build() -> type[pydantic.BaseModel]:
        model: type[pydantic.BaseModel] = pydantic.create_model(model_name, __module__=fn.__module__, **fields)
        model.model_json_schema()
        return model

    try:
        model = _in_json_schema(
            fn,
            build,
            "a parameter type",
            "annotate it with a JSON type, an Enum, a Literal, a pydantic model, a dataclass or a TypedDict",
        )
    except pydantic.PydanticUserError as exc:
        raise _refuse(fn, f"pydantic refused its parameters ({_first_line(exc)})", "see the pydantic message") from None
    defaults = _NullsMeanDefaults(model.model_json_schema()) if strict else None
    return model, _Coercer(model, defaults, hints, renamed), context, doc


def _type_hints(fn: Callable[..., object]) -> dict[str, Any]:
    """``fn``'s resolved annotations. A name its module does not define (a
    type imported or defined in the function that defines ``fn``, under
    ``from __future__ import annotations``) is looked up in the locals of
    the nearest caller outside dshtools, as pydantic does for models."""
    import typing

    try:
        return typing.get_type_hints(fn, include_extras=True)
    except NameError:
        frame = sys._getframe(1)
        while frame is not None and frame.f_globals.get("__name__", "").partition(".")[0] == "dshtools":
            frame = frame.f_back  # type: ignore[assignment]
        if frame is None:
            raise
        return typing.get_type_hints(fn, localns=dict(frame.f_locals), include_extras=True)


def _in_json_schema(fn: Callable[..., object], build: Callable[[], _T], what: str, instead: str) -> _T:
    """``build()``, which makes a JSON Schema of ``what`` (a part of
    ``fn``'s signature); a type pydantic cannot express in JSON Schema
    refuses ``fn``: ``TypeError`` naming ``what`` and suggesting
    ``instead``."""
    import pydantic

    try:
        return build()
    except (pydantic.PydanticSchemaGenerationError, pydantic.errors.PydanticInvalidForJsonSchema) as exc:
        raise _refuse(fn, f"{what} cannot be expressed as JSON Schema ({_first_line(exc)})", instead) from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _described_by_annotation(annotation: object) -> bool:
    import typing

    from pydantic.fields import FieldInfo

    if typing.get_origin(annotation) is not typing.Annotated:
        return False
    return any(isinstance(m, FieldInfo) and m.description for m in typing.get_args(annotation)[1:])


def _is_run_context(annotation: object) -> bool:
    """``annotation`` is the run-context type (``ToolRunContext``, which
    carries ``RUN_CONTEXT_MARK``), bare or inside ``Annotated``."""
    import typing

    if typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    return isinstance(annotation, type) and getattr(annotation, RUN_CONTEXT_MARK, False) is True


def _signal_type_in(annotation: object) -> str | None:
    """The name of ``AbortSignal`` or ``AbortController`` when
    ``annotation`` is one, bare, inside ``Annotated`` or in a union
    (``AbortSignal | None``); else ``None``."""
    import typing

    from .._signal import AbortController, AbortSignal

    if annotation is AbortSignal or annotation is AbortController:
        return annotation.__name__
    for inner in typing.get_args(annotation):
        found = _signal_type_in(inner)
        if found is not None:
            return found
    return None


def _parse_doc(fn: Callable[..., object]) -> Any:
    import inspect

    text = inspect.getdoc(fn)
    if not text:
        return None
    import docstring_parser

    try:
        return docstring_parser.parse(text)
    except docstring_parser.ParseError:
        return None


def _parameters_schema(model: Any, strict: bool) -> dict[str, Any]:
    schema: dict[str, Any] = model.model_json_schema()
    schema.pop("title", None)
    schema.setdefault("properties", {})
    # An unknown argument is INVALID_ARGS (the first gate refuses it).
    schema["additionalProperties"] = False
    if strict:
        schema = strict_schema(schema)
    return schema


def _accepts_null(schema: Mapping[str, Any]) -> bool:
    if schema.get("type") == "null":
        return True
    types = schema.get("type")
    if isinstance(types, list) and "null" in types:
        return True
    return any(_accepts_null(s) for s in schema.get("anyOf", ()) if isinstance(s, Mapping))


def strict_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` (pydantic's schema of a tool's parameters) in the form
    OpenAI's strict mode accepts, at every depth (the top level, nested
    objects, ``$defs``, list items, union branches): every object has
    ``additionalProperties: false`` and every property required; a property
    that was optional (it has a default) also accepts ``null`` (the default
    then applies, ``_NullsMeanDefaults``) and loses its ``default``;
    ``default: null`` goes; a ``$ref`` with siblings is inlined. Returns a
    new schema. Source: docs/contract.md#typed-tools, docs/contract.md#a29."""
    import copy

    root = copy.deepcopy(schema)
    strict: dict[str, Any] = _strict_node(root, root)
    return strict


def _nullable(prop: dict[str, Any]) -> dict[str, Any]:
    """An optional property's strict form: no ``default``, and ``null``
    accepted (its title and description kept outside the ``anyOf``)."""
    prop.pop("default", None)
    if _accepts_null(prop):
        return prop
    title = prop.pop("title", None)
    described = prop.pop("description", None)
    nullable: dict[str, Any] = {"anyOf": [prop, {"type": "null"}]}
    if title is not None:
        nullable["title"] = title
    if described is not None:
        nullable["description"] = described
    return nullable


def _strict_node(node: Any, root: dict[str, Any]) -> Any:
    if not isinstance(node, dict):
        return node
    for defs in ("$defs", "definitions"):
        if isinstance(node.get(defs), dict):
            for key, value in node[defs].items():
                node[defs][key] = _strict_node(value, root)
    if node.get("type") == "object" and "additionalProperties" not in node:
        node["additionalProperties"] = False
    properties = node.get("properties")
    if isinstance(properties, dict):
        required = node.get("required", ())
        for key, value in properties.items():
            if key not in required and isinstance(value, dict):
                value = _nullable(value)
            properties[key] = _strict_node(value, root)
        node["required"] = list(properties)
    if isinstance(node.get("items"), dict):
        node["items"] = _strict_node(node["items"], root)
    for key in ("anyOf", "allOf"):
        if isinstance(node.get(key), list):
            node[key] = [_strict_node(v, root) for v in node[key]]
    if isinstance(node.get("allOf"), list) and len(node["allOf"]) == 1:
        node.update(node.pop("allOf")[0])
    if "default" in node and node["default"] is None:
        del node["default"]
    ref = node.get("$ref")
    if isinstance(ref, str) and len(node) > 1 and ref.startswith("#/"):
        merged = {**_resolved(node, root), **node}
        del merged["$ref"]
        node.clear()
        node.update(merged)
        return _strict_node(node, root)
    return node


def _resolved(node: dict[str, Any], root: Mapping[str, Any]) -> dict[str, Any]:
    """The schema a local ``$ref`` (``#/...``) of ``node`` points to in
    ``root``; ``node`` itself when it has none."""
    ref = node.get("$ref")
    if not (isinstance(ref, str) and ref.startswith("#/")):
        return node
    resolved: Any = root
    for part in ref[2:].split("/"):
        resolved = resolved[part]
    return resolved  # type: ignore[no-any-return]


class _NullsMeanDefaults:
    """A strict tool's arguments with every ``null`` given for a property
    that is not required dropped, at every depth, so that pydantic applies
    the default (docs/contract.md#a29). Walks the arguments along the
    tool's non-strict parameters schema (``root``, with its ``$defs``):
    into an object's properties, an array's items, and the one branch of a
    union that takes an object (or an array) when exactly one does; other
    values are left as they are. Returns new plain containers where it
    walked; raises ``RecursionError`` only for arguments nested past the
    interpreter's limit (the coercer reports it as too deep)."""

    __slots__ = ("_root",)

    def __init__(self, root: dict[str, Any]) -> None:
        self._root = root

    def __call__(self, arguments: Any) -> Any:
        return self._walk(arguments, self._root)

    def _walk(self, value: Any, schema: Mapping[str, Any]) -> Any:
        if isinstance(value, Mapping):
            node = self._branch(schema, "properties")
            if node is None:
                return value
            properties = node["properties"]
            required = node.get("required", ())
            return {
                key: self._walk(item, properties[key]) if key in properties else item
                for key, item in value.items()
                if not (item is None and key in properties and key not in required)
            }
        if isinstance(value, (list, tuple)):
            node = self._branch(schema, "items")
            if node is None:
                return value
            return [self._walk(item, node["items"]) for item in value]
        return value

    def _branch(self, schema: Mapping[str, Any], key: str) -> Mapping[str, Any] | None:
        """``schema`` (resolved) when it has ``key``, else the one branch
        of its ``anyOf``/``oneOf``/``allOf`` that has it; ``None`` when
        none or several do."""
        if not isinstance(schema, dict):
            return None
        schema = _resolved(schema, self._root)
        if isinstance(schema.get(key), dict):
            return schema
        found = [
            branch
            for union in ("anyOf", "oneOf", "allOf")
            for branch in (self._branch(b, key) for b in schema.get(union, ()) if isinstance(b, dict))
            if branch is not None
        ]
        return found[0] if len(found) == 1 else None


def typed_fields(
    fn: Callable[..., object],
    *,
    name: str | None,
    description: str | None,
    concurrency_safe: bool,
    strict: bool,
    output_schema: bool,
) -> dict[str, Any]:
    """The ``ToolDefinition`` fields of a typed function, as keyword
    arguments: ``name``, ``description``, ``parameters``, ``execute``,
    ``output_schema``, ``is_concurrency_safe``, ``strict``,
    ``prepare_arguments`` (``ToolDefinition.from_function`` documents
    each). Raises ``TypeError`` for what a typed tool cannot be made from."""
    if not isinstance(concurrency_safe, bool):
        raise TypeError(f"concurrency_safe must be a bool, not {type(concurrency_safe).__name__}")
    model, coercer, context, doc = _build(fn, strict=strict, name=name)
    if description is None:
        description = (doc.short_description or "") if doc is not None else ""
    return {
        "name": name if name is not None else fn.__name__,
        "description": description,
        "parameters": _parameters_schema(model, strict),
        "execute": TypedBody(fn, context, coercer, strict),
        "output_schema": _return_schema(fn) if output_schema else None,
        "is_concurrency_safe": _always if concurrency_safe else None,
        "strict": strict,
        "prepare_arguments": coercer,
    }


def undescribed(fn: Callable[..., object], name: str, description: str) -> list[str]:
    """What the model will not be told about tool ``name`` made from
    ``fn``, one sentence each: no description (no docstring summary and no
    ``description=``), and each parameter without an annotation (its schema
    accepts anything). Empty for a fully described tool."""
    import inspect

    said = []
    if not description:
        said.append(
            f"tool {name!r} has no description: the model is told nothing about what it does "
            "(give the function a docstring, or pass description=...)"
        )
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        parameters = []  # type: ignore[assignment]
    bare = [p.name for p in parameters if p.annotation is inspect.Parameter.empty]
    if bare:
        listed = ", ".join(repr(n) for n in bare)
        said.append(
            f"tool {name!r}: parameter{'s' if len(bare) > 1 else ''} {listed} "
            f"{'have' if len(bare) > 1 else 'has'} no annotation, so the model may send any value "
            "(annotate it, e.g. 'path: str')"
        )
    return said


def _return_schema(fn: Callable[..., object]) -> dict[str, Any]:

    import pydantic

    hints = _type_hints(fn)
    if "return" not in hints:
        raise _refuse(fn, "output_schema=True needs a return annotation", "annotate what the function returns")
    return _in_json_schema(
        fn,
        lambda: pydantic.TypeAdapter(hints["return"]).json_schema(mode="serialization"),
        "its return type",
        "annotate a JSON type, a pydantic model, a dataclass or a TypedDict, or drop output_schema=True",
    )
