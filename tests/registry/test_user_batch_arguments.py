"""``execute_batch``'s arguments in the wrong places say so.

Found in a new user's trial: ``execute_batch(calls, registry, signal=s)``
(the two positional arguments swapped) raised ``TypeError: 'ToolRegistry'
object is not iterable``, and ``execute_batch(registry, call, signal=s)``
(one call, not a list) ``'ToolExecutionInput' object is not iterable``;
neither named the argument or the fix. Both are ``TypeError``s that do
(docs/batch-and-openai.md), raised before any call runs.
"""

from __future__ import annotations

import pytest

from dshtools import AbortController, ToolRegistry, execute_batch
from tests.helpers import call, tool


@pytest.mark.timeout(30)
def test_swapped_registry_and_calls_name_the_registry_argument() -> None:
    ran: list[str] = []
    with ToolRegistry() as registry:
        registry.register(tool("t", lambda args, run: ran.append("t")))
        signal = AbortController().signal
        with pytest.raises(TypeError, match=r"registry must be a ToolRegistry, not list"):
            execute_batch([call("t", signal=signal)], registry, signal=signal)  # type: ignore[arg-type]
    assert ran == []


@pytest.mark.timeout(30)
def test_one_call_instead_of_a_list_says_to_pass_a_list() -> None:
    ran: list[str] = []
    with ToolRegistry() as registry:
        registry.register(tool("t", lambda args, run: ran.append("t")))
        signal = AbortController().signal
        with pytest.raises(TypeError, match=r"calls must be an iterable of ToolExecutionInput.*\[call\]"):
            execute_batch(registry, call("t", signal=signal), signal=signal)  # type: ignore[arg-type]
        assert [r.code for r in execute_batch(registry, [call("t", signal=signal)], signal=signal)] == [None]
    assert ran == ["t"]
