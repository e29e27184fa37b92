"""``execute_batch``'s arguments in the wrong places say so.

Found in a new user's trial: ``execute_batch(calls, registry, signal=s)``
(the two positional arguments swapped) raised ``TypeError: 'ToolRegistry'
object is not iterable``, and ``execute_batch(registry, call, signal=s)``
(one call, not a list) ``'ToolExecutionInput' object is not iterable``;
neither named the argument or the fix. Both are ``TypeError``s that do
(docs/batch-and-openai.md), raised before any call runs.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from dshtools import AbortController, AbortSignal, ToolRegistry, execute_batch
from tests.helpers.calls import call, tool


def _swapped(registry: ToolRegistry, signal: AbortSignal) -> object:
    return execute_batch([call("t", signal=signal)], registry, signal=signal)  # type: ignore[arg-type]


def _one_call(registry: ToolRegistry, signal: AbortSignal) -> object:
    return execute_batch(registry, call("t", signal=signal), signal=signal)  # type: ignore[arg-type]


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("misuse", "message"),
    [
        pytest.param(_swapped, r"registry must be a ToolRegistry, not list", id="swapped-registry-and-calls"),
        pytest.param(
            _one_call, r"calls must be an iterable of ToolExecutionInput.*\[call\]", id="one-call-instead-of-a-list"
        ),
    ],
)
def test_misplaced_arguments_name_the_argument_and_run_nothing(
    misuse: Callable[[ToolRegistry, AbortSignal], object], message: str
) -> None:
    ran: list[str] = []
    with ToolRegistry() as registry:
        registry.register(tool("t", lambda args, run: ran.append("t")))
        signal = AbortController().signal
        with pytest.raises(TypeError, match=message):
            misuse(registry, signal)
        assert ran == []
        assert [r.code for r in execute_batch(registry, [call("t", signal=signal)], signal=signal)] == [None]
    assert ran == ["t"]
