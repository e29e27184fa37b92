"""Inputs of ``python -m dshtools replay`` (docs/contract.md#replay): the transcript
(a file or standard input; OpenAI Chat Completions or Anthropic Messages,
detected or chosen with ``--format``) and the ``--tools MODULE:ATTRIBUTE``
registry.

Guarantees:

* Every problem with an input is a ``UsageError`` with a one-line message
  (``dshtools._cli.main.main`` prints it and exits 2): a missing, unreadable or
  non-JSON transcript, one nested too deeply to read, a shape that is not
  a transcript, no assistant message with tool calls, both formats in one
  transcript, ``tool_calls`` that is not a list (a malformed call inside
  it is model output: it becomes an ``INVALID_ARGS``/``INVALID_CALL``
  result, docs/contract.md#a11); a file path where a module is
  expected (the message names the module form), a malformed spec, a
  module that cannot be imported, a missing attribute, a factory that
  raises, anything that is not an open ``ToolRegistry``. That holds
  whatever the user's module does while it is imported or its factory
  runs: an exception whose ``__str__`` raises, ``sys.exit(3)`` (any
  ``BaseException`` but ``KeyboardInterrupt``, which stays Ctrl-C) -- still
  one line and exit 2, with the original behind ``--traceback``.
* Transcript errors name the message as ``message #N``, counting every
  message (of any role) from 1.
* Nothing runs here: the registry's tools are only looked up, not called.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from types import ModuleType
from typing import Any, NamedTuple

from .. import anthropic as danthropic
from .. import openai as dopenai
from .._core.errors import safe_str, safe_type_name
from .._registry.registry import ToolRegistry
from .._signal import AbortSignal
from .._types.calls import ToolExecutionInput


class UsageError(Exception):
    """A user error reported as one line on stderr with exit status 2."""


# ---------------------------------------------------------------------------
# Transcript


STDIN = "-"


def _read_json(path: str) -> Any:
    """The parsed JSON of ``path``, or of standard input when ``path`` is
    ``"-"``. Raises ``UsageError`` for a missing or unreadable file, for
    text that is not JSON, and for a document nested too deeply to read
    (a usage error, never a traceback)."""
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
    except RecursionError:
        raise UsageError(f"transcript {name} is nested too deeply to read (JSON nesting beyond the stack)") from None


OPENAI = "openai"
ANTHROPIC = "anthropic"
FORMATS = (OPENAI, ANTHROPIC)


class Batch(NamedTuple):
    """One assistant message's tool calls: ``number`` counts every message
    of the transcript from 1; ``calls`` is its ``tool_calls`` list (OpenAI)
    or its ``tool_use`` blocks (Anthropic); ``fmt`` says which."""

    number: int
    calls: list[Any]
    fmt: str


def _is_tool_use(block: object) -> bool:
    return isinstance(block, dict) and block.get("type") == "tool_use"


def _numbered_batches(data: object, source: str, fmt: str | None = None) -> list[Batch]:
    """A ``Batch`` for every assistant message with tool calls. Messages
    are numbered from 1 in the order of the transcript's message list (every
    role counts); every transcript error names a message this way
    (``message #N``). ``fmt`` is ``"openai"`` (``tool_calls``),
    ``"anthropic"`` (``tool_use`` blocks in ``content``) or ``None``: the
    format the transcript uses (a transcript that has both is a usage
    error)."""
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
    found: dict[str, list[Batch]] = {OPENAI: [], ANTHROPIC: []}
    for number, message in enumerate(messages, 1):
        if not isinstance(message, dict):
            raise UsageError(f"{source}: message #{number} is not a JSON object")
        if message.get("role", "assistant") != "assistant":
            continue
        if fmt != ANTHROPIC:
            calls = message.get("tool_calls")
            if calls is not None and calls != []:
                if not isinstance(calls, list):
                    raise UsageError(f'{source}: message #{number}: "tool_calls" must be a list')
                found[OPENAI].append(Batch(number, calls, OPENAI))
        if fmt != OPENAI:
            content = message.get("content")
            if isinstance(content, list):
                blocks = [block for block in content if _is_tool_use(block)]
                if blocks:
                    found[ANTHROPIC].append(Batch(number, blocks, ANTHROPIC))
    if found[OPENAI] and found[ANTHROPIC]:
        first = min(found[OPENAI][0].number, found[ANTHROPIC][0].number)
        raise UsageError(
            f"{source}: the transcript has both OpenAI tool_calls and Anthropic tool_use blocks "
            f"(from message #{first}); choose one with --format openai or --format anthropic"
        )
    batches = found[OPENAI] or found[ANTHROPIC]
    if not batches:
        wanted = {
            OPENAI: "no assistant message with tool_calls",
            ANTHROPIC: "no assistant message with tool_use blocks",
            None: "no assistant message with tool_calls (OpenAI) or tool_use blocks (Anthropic)",
        }[fmt]
        if _holds_function_call_items(data, messages):
            wanted += (
                "; it holds Responses API function_call items, which replay does not read: "
                "a transcript is Chat Completions or Anthropic messages"
            )
        raise UsageError(f"{source}: {wanted}")
    return batches


def _holds_function_call_items(data: object, messages: list[Any]) -> bool:
    """``data`` is a Responses API conversation: a response whose
    ``output`` holds ``function_call`` items, or messages among which one
    is such an item."""
    output = data.get("output") if isinstance(data, dict) else None
    items = output if isinstance(output, list) else messages
    return any(isinstance(item, dict) and item.get("type") == "function_call" for item in items)


def transcript_batches(data: object, source: str = "transcript", fmt: str | None = None) -> list[list[Any]]:
    """The tool calls of ``data``'s assistant messages, one list per
    message, in order: ``tool_calls`` lists (OpenAI) or ``tool_use`` blocks
    (Anthropic).

    ``data`` is a message list, a ``{"messages": [...]}`` object, or one
    assistant message, in either format (``fmt``: ``"openai"``,
    ``"anthropic"``, or ``None`` to detect it). Messages of other roles
    (including earlier ``role: "tool"`` answers and ``role: "user"``
    ``tool_result`` messages) are ignored. Raises ``UsageError`` when the
    shape is none of these, no assistant message has tool calls, or both
    formats appear; errors name the offending message as ``message #N``,
    counting every message from 1."""
    return [batch.calls for batch in _numbered_batches(data, source, fmt)]


def load_transcript(path: str, fmt: str | None = None) -> list[Batch]:
    """Read ``path`` (``"-"``: standard input) and return its batches (see
    ``transcript_batches``)."""
    return _numbered_batches(_read_json(path), "<stdin>" if path == STDIN else path, fmt)


def _to_inputs(
    batches: list[Batch],
    signal: AbortSignal,
    source: str,
    registry: ToolRegistry | None = None,
    session: str | None = None,
) -> list[list[ToolExecutionInput]]:
    """Each batch's ``ToolExecutionInput``s, one per model tool call (model
    output never raises: a broken call becomes an ``INVALID_ARGS`` or
    ``INVALID_CALL`` result), in ``session`` (a journaled replay's).
    Aliases sent by ``tools_param`` map back to the registry's names."""
    converted: list[list[ToolExecutionInput]] = []
    for number, calls, fmt in batches:
        try:
            if fmt == ANTHROPIC:
                converted.append(
                    danthropic.calls_from_message(
                        {"role": "assistant", "content": calls}, signal=signal, registry=registry, session=session
                    )
                )
            else:
                converted.append(
                    dopenai.calls_from_message(
                        {"role": "assistant", "tool_calls": calls}, signal=signal, registry=registry, session=session
                    )
                )
        except (TypeError, ValueError, KeyError) as exc:
            raise UsageError(f"{source}: message #{number}: bad tool calls: {exc}") from None
    return converted


# ---------------------------------------------------------------------------
# --tools MODULE:ATTRIBUTE


def load_registry(spec: str) -> ToolRegistry:
    """Resolve ``MODULE:ATTRIBUTE`` (the attribute may be dotted) to a
    ``ToolRegistry``: the attribute itself, or the result of calling it with
    no arguments; or ``MODULE`` to a new registry of the module's
    ``@dshtools.tool`` functions (``_module_tools``). The current directory is importable (as with ``python
    -m``). Raises ``UsageError`` for a malformed spec, a module that cannot
    be imported (or raises while importing), a missing attribute, a factory
    that raises, anything that is not a ``ToolRegistry``, or a registry
    that is already closed."""
    module_name, sep, attr_path = spec.partition(":")
    if _looks_like_a_path(module_name):
        raise UsageError(_module_form_hint(spec, module_name, attr_path))
    if not module_name or (sep and not attr_path):
        raise UsageError(f"--tools must look like MODULE:ATTRIBUTE or MODULE, got {spec!r}")
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if module_name.endswith(".py"):
            raise UsageError(_module_form_hint(spec, module_name, attr_path)) from exc
        raise UsageError(
            f"--tools: cannot import module {module_name!r}: {safe_str(exc)} (--traceback shows where)"
        ) from exc
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # the user's module: SystemExit at import included
        raise UsageError(f"--tools: importing {module_name!r} {_failed(exc)} (--traceback shows where)") from exc
    if not sep:
        return _module_tools(module, module_name)
    target: object = module
    for part in attr_path.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise UsageError(f"--tools: module {module_name!r} has no attribute {attr_path!r}") from None
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # a module __getattr__ of the user's
            raise UsageError(
                f"--tools: reading {attr_path!r} of {module_name!r} {_failed(exc)} (--traceback shows where)"
            ) from exc
    if isinstance(target, ToolRegistry):
        return _open(target, spec)
    if callable(target):
        try:
            made = target()
        except KeyboardInterrupt:
            raise
        except BaseException as exc:
            raise UsageError(f"--tools: calling {spec}() {_failed(exc)} (--traceback shows where)") from exc
        if isinstance(made, ToolRegistry):
            return _open(made, f"{spec}()")
        raise UsageError(f"--tools: {spec}() returned {type(made).__name__}, not a ToolRegistry")
    raise UsageError(f"--tools: {spec} is {type(target).__name__}, not a ToolRegistry or a factory returning one")


def _failed(exc: BaseException) -> str:
    """``failed: <Class>: <text>`` or, for ``SystemExit``, ``called
    sys.exit(<code>)``: what went wrong in the user's code, formatted
    without trusting it (docs/contract.md#a4)."""
    if isinstance(exc, SystemExit):
        code = exc.code
        shown = repr(code) if code is None or type(code) in (int, str) else f"<{safe_type_name(code)}>"
        return f"called sys.exit({shown}) instead of finishing"
    text = " ".join(safe_str(exc).split())
    return f"failed: {safe_type_name(exc)}: {text}" if text else f"failed: {safe_type_name(exc)}"


def _module_tools(module: ModuleType, module_name: str) -> ToolRegistry:
    """``--tools MODULE``: a new registry holding the module's
    ``@dshtools.tool`` functions, with a ``TimeoutPolicy`` so their
    ``timeout=`` holds. ``UsageError`` when the module
    marks none or one is refused."""
    from .._registry.policies import TimeoutPolicy
    from .._types.marks import tools_from_module

    try:
        definitions = tools_from_module(module)
    except TypeError as exc:
        raise UsageError(f"--tools: {exc}") from exc
    if not definitions:
        raise UsageError(
            f"--tools: module {module_name!r} has no @dshtools.tool functions "
            "(name a registry instead: --tools MODULE:ATTRIBUTE)"
        )
    registry = ToolRegistry()
    registry.add_around_dispatch(TimeoutPolicy())
    try:
        for definition in definitions:
            registry.register(definition)
    except Exception as exc:
        registry.close()
        raise UsageError(f"--tools: {exc}") from exc
    return registry


def _open(registry: ToolRegistry, what: str) -> ToolRegistry:
    if registry.statistics().closed:
        raise UsageError(f"--tools: {what} is a ToolRegistry that is already closed (close() was called)")
    return registry


def _looks_like_a_path(module_name: str) -> bool:
    """A path separator, or a ``.py`` name that is a file here (``pkg.py``
    could also name a submodule ``py`` of a package ``pkg``)."""
    if "/" in module_name or (os.sep != "/" and os.sep in module_name):
        return True
    return module_name.endswith(".py") and os.path.isfile(module_name)


def _module_form_hint(spec: str, path: str, attr_path: str) -> str:
    """The one-line usage error for ``--tools ./tools.py:registry``: say
    which ``MODULE:ATTRIBUTE`` to write instead."""
    attr = attr_path or "ATTRIBUTE"
    stem = os.path.normpath(path)
    if stem.endswith(".py"):
        stem = stem[: -len(".py")]
    if os.path.isabs(stem) or stem.split(os.sep)[0] == os.pardir:
        directory, module = os.path.split(stem)
        suggestion = f"--tools {module}:{attr} (run it from {directory or os.sep}, or put that directory on PYTHONPATH)"
    else:
        dotted = stem.replace(os.sep, ".")
        suggestion = f"--tools {dotted}:{attr} (the current directory is importable)"
    return f"--tools takes a module name, not a file path: for {spec!r} use {suggestion}"
