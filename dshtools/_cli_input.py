"""Inputs of ``python -m dshtools replay`` (docs/contract.md §6): the transcript
(a file or standard input) and the ``--tools MODULE:ATTRIBUTE`` registry.

Guarantees:

* Every problem with an input is a ``UsageError`` with a one-line message
  (``dshtools._cli.main`` prints it and exits 2): a missing, unreadable or
  non-JSON transcript, a shape that is not a transcript, no assistant
  message with tool calls, malformed ``tool_calls``; a malformed spec, a
  module that cannot be imported, a missing attribute, a factory that
  raises, anything that is not an open ``ToolRegistry``.
* Transcript errors name the message as ``message #N``, counting every
  message (of any role) from 1.
* Nothing runs here: the registry's tools are only looked up, not called.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from typing import Any

from . import openai as dopenai
from ._registry import ToolRegistry
from ._signal import AbortSignal
from ._types import ToolExecutionInput


class UsageError(Exception):
    """A user error reported as one line on stderr with exit status 2."""


# ---------------------------------------------------------------------------
# Transcript


STDIN = "-"


def _read_json(path: str) -> Any:
    """The parsed JSON of ``path``, or of standard input when ``path`` is
    ``"-"``. Raises ``UsageError`` for a missing or unreadable file and for
    text that is not JSON."""
    name = "<stdin>" if path == STDIN else path
    try:
        if path == STDIN:
            text = sys.stdin.buffer.read().decode("utf-8")
        else:
            with open(path, encoding="utf-8") as f:
                text = f.read()
    except FileNotFoundError:
        raise UsageError(f"transcript not found: {path}") from None
    except IsADirectoryError:
        raise UsageError(f"transcript is a directory, not a file: {path}") from None
    except (OSError, UnicodeDecodeError, ValueError, AttributeError) as exc:  # closed or missing stdin
        raise UsageError(f"cannot read transcript {name}: {exc}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"transcript {name} is not valid JSON: {exc}") from None


def _numbered_batches(data: object, source: str) -> list[tuple[int, list[Any]]]:
    """``(message number, tool_calls)`` for every assistant message with
    tool calls. Messages are numbered from 1 in the order of the
    transcript's message list (every role counts); every transcript error
    names a message this way (``message #N``)."""
    if isinstance(data, dict) and "messages" in data:
        messages = data["messages"]
        if not isinstance(messages, list):
            raise UsageError(f'{source}: "messages" must be a list of messages')
    elif isinstance(data, dict):
        messages = [data]
    elif isinstance(data, list):
        messages = data
    else:
        raise UsageError(
            f'{source}: expected a message list, a {{"messages": [...]}} object or an assistant message, '
            f"not a JSON {type(data).__name__}"
        )
    batches: list[tuple[int, list[Any]]] = []
    for number, message in enumerate(messages, 1):
        if not isinstance(message, dict):
            raise UsageError(f"{source}: message #{number} is not a JSON object")
        if message.get("role", "assistant") != "assistant":
            continue
        calls = message.get("tool_calls")
        if calls is None or calls == []:
            continue
        if not isinstance(calls, list):
            raise UsageError(f'{source}: message #{number}: "tool_calls" must be a list')
        batches.append((number, calls))
    if not batches:
        raise UsageError(f"{source}: no assistant message with tool_calls")
    return batches


def transcript_batches(data: object, source: str = "transcript") -> list[list[Any]]:
    """The ``tool_calls`` lists of ``data``'s assistant messages, in order.

    ``data`` is an OpenAI Chat Completions message list, a ``{"messages":
    [...]}`` object, or one assistant message. Messages of other roles
    (including earlier ``role: "tool"`` answers) are ignored. Raises
    ``UsageError`` when the shape is none of these or no assistant message
    has a non-empty ``tool_calls`` list; errors name the offending message
    as ``message #N``, counting every message from 1."""
    return [calls for _, calls in _numbered_batches(data, source)]


def load_transcript(path: str) -> list[tuple[int, list[Any]]]:
    """Read ``path`` (``"-"``: standard input) and return its batches, each
    with the number of the message it came from (see ``transcript_batches``)."""
    return _numbered_batches(_read_json(path), "<stdin>" if path == STDIN else path)


def _to_inputs(
    batches: list[tuple[int, list[Any]]], signal: AbortSignal, source: str
) -> list[list[ToolExecutionInput]]:
    converted: list[list[ToolExecutionInput]] = []
    for number, calls in batches:
        try:
            converted.append(dopenai.calls_from_message({"role": "assistant", "tool_calls": calls}, signal=signal))
        except (TypeError, ValueError, KeyError) as exc:
            raise UsageError(f"{source}: message #{number}: bad tool_calls: {exc}") from None
    return converted


# ---------------------------------------------------------------------------
# --tools MODULE:ATTRIBUTE


def load_registry(spec: str) -> ToolRegistry:
    """Resolve ``MODULE:ATTRIBUTE`` (the attribute may be dotted) to a
    ``ToolRegistry``: the attribute itself, or the result of calling it with
    no arguments. The current directory is importable (as with ``python
    -m``). Raises ``UsageError`` for a malformed spec, a module that cannot
    be imported (or raises while importing), a missing attribute, a factory
    that raises, anything that is not a ``ToolRegistry``, or a registry
    that is already closed."""
    module_name, sep, attr_path = spec.partition(":")
    if not sep or not module_name or not attr_path:
        raise UsageError(f"--tools must look like MODULE:ATTRIBUTE, got {spec!r}")
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise UsageError(f"--tools: cannot import module {module_name!r}: {exc}") from None
    except Exception as exc:
        raise UsageError(f"--tools: importing {module_name!r} failed: {type(exc).__name__}: {exc}") from None
    target: object = module
    for part in attr_path.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise UsageError(f"--tools: module {module_name!r} has no attribute {attr_path!r}") from None
    if isinstance(target, ToolRegistry):
        return _open(target, spec)
    if callable(target):
        try:
            made = target()
        except Exception as exc:
            raise UsageError(f"--tools: calling {spec}() failed: {type(exc).__name__}: {exc}") from None
        if isinstance(made, ToolRegistry):
            return _open(made, f"{spec}()")
        raise UsageError(f"--tools: {spec}() returned {type(made).__name__}, not a ToolRegistry")
    raise UsageError(f"--tools: {spec} is {type(target).__name__}, not a ToolRegistry or a factory returning one")


def _open(registry: ToolRegistry, what: str) -> ToolRegistry:
    if registry._closed:
        raise UsageError(f"--tools: {what} is a ToolRegistry that is already closed (close() was called)")
    return registry
