"""``dshtools._core.freeze`` on the paths the call tests rarely take
(docs/contract.md#calls, docs/contract.md#pipeline step 1): a ``FrozenDict`` built directly computes
its height on first read; copies of a frozen value are the value itself;
values too large or too deep for the fast path, with frozen or float
children, freeze by the iterative walk to the same result; every value
outside the JSON model is refused with its JSON path, including one whose
``__json_problem__`` raises; ``dumps`` of a value too deep for the C encoder
still produces the text ``json.dumps`` gives a shallow one; ``json_path`` spells every kind of
key."""

from __future__ import annotations

import copy
import json

import pytest

from dshtools._core.freeze import FreezeError, FrozenDict, dumps, freeze, freeze_with_height, json_path, thaw


def test_a_frozendict_built_directly_knows_its_height_on_first_read() -> None:
    block = FrozenDict(type="text", items=[1, [2]])
    assert block.height == 3
    assert block.height == 3  # cached
    assert freeze_with_height(block) == (block, 3)


def test_copies_of_a_frozen_mapping_are_the_mapping_itself() -> None:
    frozen = freeze({"a": [1, {"b": 2}]})
    assert copy.copy(frozen) is frozen
    assert copy.deepcopy(frozen) is frozen


def test_a_value_past_the_fast_path_budget_freezes_by_the_walk_to_the_same_result() -> None:
    small = {"n": 1.5, "inner": freeze({"x": [1]})}
    big = {"rows": [dict(small) for _ in range(600)], "ratio": 0.25}  # > 512 containers
    frozen, height = freeze_with_height(big)
    assert thaw(frozen) == thaw(freeze({"rows": [small] * 600, "ratio": 0.25}))
    assert height == 5  # big -> rows -> row -> inner -> x
    assert frozen["rows"][0]["inner"] is small["inner"]  # a frozen child is reused, not copied
    assert type(frozen["rows"][599]["n"]) is float


@pytest.mark.parametrize(
    ("value", "problem", "path"),
    [
        ([{"a": 1}] * 300 + [{1: "x"}], "non-string key 1 (JSON object keys are strings)", "$[300]"),
        ([[0]] * 600 + [{"s": {1, 2}}], "unsupported type 'set' (not a JSON value)", "$[600].s"),
        ([[0]] * 600 + [float("nan")], "non-finite number nan is not JSON", "$[600]"),
        ([[0]] * 600 + [True, b"raw"], "unsupported type 'bytes' (not a JSON value)", "$[601]"),
    ],
)
def test_a_bad_value_past_the_fast_path_is_named_with_its_path(value: object, problem: str, path: str) -> None:
    with pytest.raises(FreezeError) as info:
        freeze(value)
    assert (info.value.problem, info.value.path) == (problem, path)


class _Hostile:
    def __getattr__(self, name: str) -> object:
        raise RuntimeError(f"no {name}")


def test_a_value_whose_json_problem_attribute_raises_is_refused_as_unsupported() -> None:
    with pytest.raises(FreezeError) as info:
        freeze(_Hostile())
    assert (info.value.problem, info.value.path) == ("unsupported type '_Hostile' (not a JSON value)", "$")


def test_dumps_of_a_value_too_deep_for_the_c_encoder_gives_the_text_json_dumps_gives() -> None:
    deep: object = ["end", 1]
    for i in range(5000):
        deep = [i, {"k": deep, "z": None}]
    frozen = freeze(deep)
    text = dumps(frozen)
    assert text.startswith('[4999, {"k": [4998, {"k": ')
    assert text.endswith('["end", 1], "z": null}]' + ', "z": null}]' * 4999)
    shallow = freeze([1, {"a": "é", "b": 2.5}, [True, None]])
    assert dumps(shallow) == json.dumps(thaw(shallow), ensure_ascii=False) == '[1, {"a": "é", "b": 2.5}, [true, null]]'


def test_json_path_spells_indexes_identifiers_quoted_and_other_keys() -> None:
    assert json_path(["a", 0, "b c", 2.5, True]) == '$.a[0]["b c"][2.5][True]'
    assert json_path([]) == "$"


def test_subclasses_of_dict_and_list_and_frozen_items_of_a_list_freeze_like_the_plain_types() -> None:
    from collections import OrderedDict

    inner = freeze({"x": 1})
    frozen, height = freeze_with_height(OrderedDict(a=[inner, 2]))
    assert type(frozen) is FrozenDict and frozen == {"a": (inner, 2)} and height == 3
    assert frozen["a"][0] is inner
    listed, height = freeze_with_height([inner, [inner]])
    assert listed == (inner, (inner,)) and listed[0] is inner and height == 3

    class Row(list[int]):
        pass

    assert freeze_with_height(Row([1, 2])) == ((1, 2), 1)
