"""``dshtools._core.schema.CompiledSchema`` (docs/contract.md#a6): a schema
that is not valid JSON Schema, names an unknown draft or cannot be compiled
is a ``ValueError`` naming the schema; a value too large to describe within
the budget, or nested deeper than can be validated at all, gets one
sentence instead of located messages; when the validator cannot describe a
value it falls back to a yes/no answer, and when it fails on the helper
thread of a deep value the failure is reported, not raised."""

from __future__ import annotations

from typing import Any

import pytest

from dshtools._core.freeze import freeze_with_height
from dshtools._core.schema import INLINE_DEPTH, MAX_DEPTH, CompiledSchema


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ({"type": 12}, "tool 't' input schema is not a valid JSON Schema: "),
        ({"$schema": "https://example.invalid/no-such-draft"}, "tool 't' input schema is not a valid JSON Schema: "),
        ({"$ref": "#/$defs/missing"}, "tool 't' input schema could not be compiled: "),
    ],
)
def test_a_schema_that_cannot_be_used_is_a_value_error_naming_it(schema: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as info:
        CompiledSchema(schema, "tool 't' input schema")
    assert str(info.value).startswith(message), str(info.value)
    assert info.value.__cause__ is None and info.value.__suppress_context__


@pytest.mark.timeout(30)
def test_a_large_value_with_many_violations_gets_its_first_one_located_at_once() -> None:
    """Every item wrong (200 000 violations): the first one, with its path,
    and no time spent building the others (the validator builds them all
    before it hands out one: seconds). A small value lists them all, up to
    five (docs/contract.md#a20)."""
    for items in ({"type": "string"}, {"anyOf": [{"type": "string"}, {"type": "boolean"}]}):
        compiled = CompiledSchema({"type": "array", "items": items}, "schema")
        value, height = freeze_with_height(list(range(200_000)))
        problems = compiled.problems(value, height)
        assert len(problems) == 1 and problems[0].endswith(" at $[0]"), problems
    compiled = CompiledSchema({"type": "array", "items": {"type": "string"}}, "schema")
    small, small_height = freeze_with_height(["ok", 3, 4])
    assert compiled.problems(small, small_height) == [
        '3 is not of type "string" at $[1]',
        '4 is not of type "string" at $[2]',
    ]
    # A small value with more violations than are listed: the first five.
    many, many_height = freeze_with_height(list(range(8)))
    assert compiled.problems(many, many_height) == [f'{i} is not of type "string" at $[{i}]' for i in range(5)]


def test_a_value_deeper_than_can_be_validated_is_refused_without_validating() -> None:
    compiled = CompiledSchema({}, "schema")
    assert compiled.problems([], MAX_DEPTH + 1) == [
        f"value nests {MAX_DEPTH + 1} levels deep, more than the {MAX_DEPTH} that can be validated"
    ]


class _Validator:
    """Stands in for jsonschema-rs where it refuses to describe a value."""

    def __init__(self, valid: bool | Exception) -> None:
        self.valid = valid
        self.asked = 0

    def is_valid(self, value: object) -> bool:
        self.asked += 1
        if self.asked == 1:
            return False
        if isinstance(self.valid, Exception):
            raise self.valid
        return self.valid

    def iter_errors(self, value: object) -> Any:
        raise ValueError("Recursion limit reached")


def _with(validator: _Validator) -> CompiledSchema:
    compiled = CompiledSchema({}, "schema")
    compiled._validator = validator  # type: ignore[assignment]
    return compiled


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (False, ["value does not match the schema (nested too deeply to locate the violation)"]),
        (True, []),
        (ValueError("Recursion limit reached"), ["value could not be validated: Recursion limit reached"]),
    ],
)
def test_when_messages_cannot_be_had_the_answer_is_the_validators_yes_or_no(
    answer: bool | Exception, expected: list[str]
) -> None:
    value, height = freeze_with_height({"a": [1]})
    assert _with(_Validator(answer)).problems(value, height) == expected


class _Broken:
    def is_valid(self, value: object) -> bool:
        raise RuntimeError("validator crashed")


@pytest.mark.timeout(30)
def test_a_validator_failing_on_the_deep_value_thread_is_reported_not_raised() -> None:
    compiled = CompiledSchema({}, "schema")
    compiled._validator = _Broken()  # type: ignore[assignment]
    assert compiled.problems([], INLINE_DEPTH + 1) == ["value could not be validated: RuntimeError: validator crashed"]
