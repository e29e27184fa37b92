"""Reading the ``function_call`` items of an OpenAI Responses API response
(docs/contract.md#responses, docs/contract.md#a11, docs/contract.md#a12);
package-internal, used by
``dshtools.openai``.

Guarantees:

* ``output_items`` raises only for what is not model output: something that
  is neither a response (a mapping or SDK object with ``output``) nor a
  list of items, an ``output`` that is not a list, or another API's shape
  (a Chat Completions response or message, an Anthropic message: each
  refused naming the reader to use, so an agent loop never ends on ``[]``
  as if the model had answered).
* ``function_calls`` never raises on model output: each ``function_call``
  item becomes exactly one ``ToolExecutionInput``, in output order,
  answered under the item's ``call_id``; what the model got wrong (the
  id, the name, the arguments) becomes a placeholder the registry answers
  with ``INVALID_CALL`` or ``INVALID_ARGS``, by the rules and texts of the
  Chat Completions reader. Every other item (a message, reasoning, a
  hosted tool's call, anything that is not an object) is skipped: none of
  them is answered with a ``function_call_output``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any, Final

from .._types.calls import ToolExecutionInput
from .calls import CallIds, as_mapping, field, model_call, refuse_other_shapes
from .names import Aliases

__all__ = ["function_calls", "output_items"]

_ABSENT: Final = object()


def output_items(response_or_items: object) -> Sequence[object]:
    """The output items of ``response_or_items``: a list or tuple is taken
    as the items themselves; a ``Response`` (a mapping, an object with an
    ``output`` attribute such as the SDK's ``Response``, or one with
    ``model_dump()``) gives its ``output`` (``null`` is no items). Raises ``TypeError`` for anything else and for an ``output``
    that is not a list, ``ValueError`` for a mapping without ``output``
    (naming the reader when it is another API's shape)."""
    if isinstance(response_or_items, (list, tuple)):
        return response_or_items
    # An SDK Response is read by attribute: only its output items are dumped.
    response: object = response_or_items
    if not isinstance(response, Mapping) and not hasattr(response, "output"):
        response = as_mapping(response_or_items)
        if response is None:
            raise TypeError(
                'expected a Response (or a JSON object with an "output" list) or a list of output items, '
                f"not {type(response_or_items).__name__}"
            )
    output = field(response, "output", _ABSENT)
    if output is _ABSENT:
        refuse_other_shapes(response, reader="openai")
        refuse_other_shapes(response, reader="anthropic")
        kind = field(response, "type")
        hint = " (one output item: pass a list of items)" if isinstance(kind, str) and kind else ""
        raise ValueError(f'expected a Response or a list of output items, got an object without "output"{hint}')
    if output is None:
        return ()
    if not isinstance(output, (list, tuple)):
        raise TypeError(f'"output" must be a list, not {type(output).__name__}')
    return output


def function_calls(
    items: Sequence[object],
    *,
    signal: Any,
    agent: str | None,
    aliases: Aliases | None,
    session: str | None = None,
) -> list[ToolExecutionInput]:
    """One ``ToolExecutionInput`` per ``function_call`` item of ``items``,
    in order, carrying ``signal`` (an ``AbortSignal``), ``agent`` and ``session``: the
    id from ``call_id``, the name from ``name`` (mapped back through
    ``aliases``), the arguments parsed from the ``arguments`` JSON text.
    An item is a mapping, an object with ``model_dump()`` (the SDK's
    ``ResponseFunctionToolCall``) or one whose fields are attributes. Never
    raises on model output (the module docstring)."""
    ids = CallIds()
    call = partial(model_call, signal=signal, agent=agent, aliases=aliases, session=session)
    out: list[ToolExecutionInput] = []
    for index, raw in enumerate(items):
        item: object = as_mapping(raw)
        if item is None and hasattr(raw, "call_id"):
            item = raw  # an SDK item whose model_dump() failed: read its attributes
        if item is None or field(item, "type") != "function_call":
            continue
        where = f"output[{index}]"
        call_id, problem = ids.check(field(item, "call_id"), where)
        out.append(call(call_id, problem, field(item, "name"), field(item, "arguments", ""), where))
    return out
