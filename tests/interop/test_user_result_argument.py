"""What is not a result, given where a result goes, is a ``TypeError``.

Found in a new user's trial: ``function_call_output("c1", "done")`` and
``tool_messages(calls, ["done"])`` (the text, not the result) raised
``AttributeError: 'str' object has no attribute 'is_error'``. Every
conversion of results now raises ``TypeError`` naming the ``ToolSuccess``
or ``ToolFailure`` it expects, as it does for calls in the wrong place.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from dshtools import AbortController, ToolExecutionInput
from dshtools import anthropic as dan
from dshtools import openai as doa

CALLS = [ToolExecutionInput("c1", "t", {}, AbortController().signal)]

CONVERSIONS: list[tuple[str, Callable[[Any], object]]] = [
    ("openai.tool_message", lambda r: doa.tool_message("c1", r)),
    ("openai.tool_messages", lambda r: doa.tool_messages(CALLS, [r])),
    ("openai.function_call_output", lambda r: doa.function_call_output("c1", r)),
    ("openai.function_call_outputs", lambda r: doa.function_call_outputs(CALLS, [r])),
    ("anthropic.tool_result", lambda r: dan.tool_result("c1", r)),
    ("anthropic.tool_results", lambda r: dan.tool_results(CALLS, [r])),
]


@pytest.mark.parametrize("convert", [c for _, c in CONVERSIONS], ids=[n for n, _ in CONVERSIONS])
@pytest.mark.parametrize("wrong", ["done", None, {"content": "done"}], ids=["str", "none", "dict"])
def test_a_result_that_is_not_one_is_a_type_error(convert: Callable[[Any], object], wrong: object) -> None:
    with pytest.raises(TypeError, match=rf"result must be a ToolSuccess or ToolFailure .*not {type(wrong).__name__}"):
        convert(wrong)
