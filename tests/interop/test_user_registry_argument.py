"""What is not a registry, given where a registry goes, is a ``TypeError``.

Found in a new user's trial: ``tools_param([])`` (the tools, or a list of
definitions, where the registry goes) raised ``AttributeError: 'list'
object has no attribute 'schemas'``, naming neither the argument nor what
it should be. The conversions that take a registry now raise
``TypeError`` naming the ``ToolRegistry`` they expect (the library's
other public functions do the same for a wrong type).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from dshtools import AbortController, ToolDefinition, ToolRegistry
from dshtools import anthropic as dan
from dshtools import openai as doa

SIGNAL = AbortController().signal
MESSAGE = {
    "role": "assistant",
    "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "t", "arguments": "{}"}}],
}
RESPONSE = {"output": [{"type": "function_call", "call_id": "c1", "name": "t", "arguments": json.dumps({})}]}
ANTHROPIC = {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "t", "input": {}}]}

CONVERSIONS: list[tuple[str, Callable[[Any], object]]] = [
    ("openai.tools_param", doa.tools_param),
    ("openai.responses_tools_param", doa.responses_tools_param),
    ("openai.responses_tools_param(names)", lambda r: doa.responses_tools_param(r, "t")),
    ("anthropic.tools_param", dan.tools_param),
    ("openai.calls_from_message", lambda r: doa.calls_from_message(MESSAGE, signal=SIGNAL, registry=r)),
    ("openai.calls_from_response", lambda r: doa.calls_from_response(RESPONSE, signal=SIGNAL, registry=r)),
    ("anthropic.calls_from_message", lambda r: dan.calls_from_message(ANTHROPIC, signal=SIGNAL, registry=r)),
]


@pytest.mark.parametrize("convert", [c for _, c in CONVERSIONS], ids=[n for n, _ in CONVERSIONS])
@pytest.mark.parametrize("wrong", [[], {}, "registry"], ids=["list", "dict", "str"])
def test_a_wrong_registry_is_a_type_error_naming_tool_registry(convert: Callable[[Any], object], wrong: object) -> None:
    with pytest.raises(TypeError, match=rf"a ToolRegistry.*not {type(wrong).__name__}"):
        convert(wrong)


@pytest.mark.parametrize("convert", [c for _, c in CONVERSIONS], ids=[n for n, _ in CONVERSIONS])
def test_a_registry_still_converts(convert: Callable[[Any], object]) -> None:
    with ToolRegistry() as registry:
        registry.register(ToolDefinition("t", "a tool", {"type": "object"}, lambda args, run: "ok"))
        converted = convert(registry)
    assert isinstance(converted, list) and len(converted) == 1
