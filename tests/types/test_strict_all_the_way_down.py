"""``strict=True`` at every depth (docs/contract.md#a29): in nested models,
their ``$defs`` and the items of lists, every property is required, an
optional one also accepts ``null`` (which means "use the default"), and
every object is closed; what the OpenAI tools parameter sends is that
schema, and the OpenAI SDK's own strict helper has nothing left to change."""

from __future__ import annotations

import copy
from typing import Any

import pydantic
import pytest
from openai.lib._pydantic import _ensure_strict_json_schema

import dshtools
from dshtools import ToolDefinition, ToolRegistry
from dshtools.openai import responses_tools_param, tools_param
from tests.helpers.calls import call, value_of


class Match(pydantic.BaseModel):
    text: str
    exact: bool = False


class Query(pydantic.BaseModel):
    match: Match
    tags: list[Match] = []
    fallback: Match | None = None


def search(query: Query, limit: int = 10) -> dict[str, Any]:
    """Search.

    Args:
        query: What to look for.
        limit: At most this many.
    """
    return {"query": query.model_dump(), "limit": limit}


def optional_properties_accept_null(node: Any, original: Any) -> list[str]:
    """The JSON paths of properties that are optional in ``original`` (the
    non-strict schema) but do not accept ``null`` in ``node`` (the strict
    one), or whose strict object is not closed and wholly required."""
    wrong: list[str] = []

    def resolved(schema: Any, root: Any) -> Any:
        ref = schema.get("$ref") if isinstance(schema, dict) else None
        return root["$defs"][ref.rsplit("/", 1)[1]] if isinstance(ref, str) else schema

    def walk(strict: Any, loose: Any, path: str) -> None:
        strict, loose = resolved(strict, node), resolved(loose, original)
        if not isinstance(strict, dict) or not isinstance(loose, dict):
            return
        if strict.get("type") == "object" or "properties" in strict:
            if strict.get("additionalProperties") is not False or strict.get("required") != list(
                strict.get("properties", {})
            ):
                wrong.append(f"{path} (not closed or not all required)")
            for key, prop in strict.get("properties", {}).items():
                loose_prop = loose.get("properties", {}).get(key, {})
                if key not in loose.get("required", ()) and not accepts_null(prop):
                    wrong.append(f"{path}.{key}")
                walk(prop, loose_prop, f"{path}.{key}")
        for key, value in strict.get("$defs", {}).items():
            walk(value, loose.get("$defs", {}).get(key, {}), f"{path}.$defs.{key}")
        if isinstance(strict.get("items"), dict):
            walk(strict["items"], loose.get("items", {}), f"{path}[]")
        for branch, loose_branch in zip(strict.get("anyOf", ()), loose.get("anyOf", ()), strict=False):
            walk(branch, loose_branch, f"{path}|")

    walk(node, original, "$")
    return wrong


def accepts_null(schema: dict[str, Any]) -> bool:
    return schema.get("type") == "null" or any(accepts_null(s) for s in schema.get("anyOf", ()))


def test_a_nested_models_optional_field_is_required_and_nullable() -> None:
    strict = ToolDefinition.from_function(search, strict=True)
    loose = ToolDefinition.from_function(search)
    params = dshtools.thaw(strict.parameters)
    assert optional_properties_accept_null(params, dshtools.thaw(loose.parameters)) == []
    match = params["$defs"]["Match"]
    assert match["required"] == ["text", "exact"]
    assert match["additionalProperties"] is False
    assert {"type": "null"} in match["properties"]["exact"]["anyOf"]
    assert "default" not in match["properties"]["exact"]
    assert params["$defs"]["Query"]["required"] == ["match", "tags", "fallback"]
    # The OpenAI SDK's strict helper (what openai-agents applies) changes nothing.
    assert _ensure_strict_json_schema(copy.deepcopy(params), path=(), root=params) == params


def test_the_openai_tools_params_send_the_strict_schema_at_every_depth() -> None:
    with ToolRegistry() as registry:
        registry.tool(strict=True)(search)
        (chat,) = tools_param(registry)
        (responses,) = responses_tools_param(registry)
    assert chat["function"]["strict"] is True and responses["strict"] is True
    sent: list[Any] = [chat["function"]["parameters"], responses["parameters"]]
    for parameters in sent:
        exact = parameters["$defs"]["Match"]["properties"]["exact"]
        assert {"type": "null"} in exact["anyOf"]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        (
            {"match": {"text": "a", "exact": None}, "tags": None, "fallback": None},
            {"match": {"text": "a", "exact": False}, "tags": [], "fallback": None},
        ),
        (
            {"match": {"text": "a", "exact": True}, "tags": [{"text": "t", "exact": None}], "fallback": None},
            {"match": {"text": "a", "exact": True}, "tags": [{"text": "t", "exact": False}], "fallback": None},
        ),
        (
            {"match": {"text": "a", "exact": None}, "tags": [], "fallback": {"text": "f", "exact": None}},
            {"match": {"text": "a", "exact": False}, "tags": [], "fallback": {"text": "f", "exact": False}},
        ),
    ],
)
def test_a_null_at_any_depth_means_the_default(query: dict[str, Any], expected: dict[str, Any]) -> None:
    """What a strict-mode model sends for a nested optional field it leaves
    out is ``null``: the body gets the field's default."""
    with ToolRegistry() as registry:
        registry.tool(strict=True)(search)
        result = registry.execute(call("search", {"query": query, "limit": None}))
    assert dshtools.thaw(value_of(result)) == {"query": expected, "limit": 10}


def test_a_null_for_a_required_nested_field_is_still_invalid() -> None:
    with ToolRegistry() as registry:
        registry.tool(strict=True)(search)
        result = registry.execute(call("search", {"query": {"match": {"text": None, "exact": None}}}))
    assert result.is_error and result.code == dshtools.INVALID_ARGS
