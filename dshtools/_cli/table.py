"""The result table of ``python -m dshtools`` (docs/contract.md#interop-and-cli): one row per
call with batch, call id, tool, outcome (``SUCCESS``, the code, or
``ERROR(<exception name>)`` for a failure without a code), whether the body
was invoked, the dispatch duration, the call's arguments and the start of
the model text; then one line of plain words on BODY. ``wide`` prints
ARGS and DETAIL whole. Formatting only: it reads rows, never the registry.
Every cell is printable on any terminal: control characters are escaped
and lone surrogates become U+FFFD.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import IO

from .._core.freeze import thaw
from .._interop.calls import MalformedArguments, utf8_safe
from .._types.calls import InvalidCall, ToolExecutionResult
from .._types.hooks import ProgressUpdate
from .run import _Row

ARGS_WIDTH = 40
DETAIL_WIDTH = 60

BODY_LEGEND = (
    "BODY: yes = the tool's function was called; no = it never started "
    "(refused, invalid, or cancelled first); ? = unknown (no result)."
)
KILLED_LEGEND = (
    "(killed): the body ignored its abort, so its worker process and everything it "
    'started were killed after a grace and confirmed gone (meta["killed"]).'
)


def outcome_of(result: ToolExecutionResult | None) -> str:
    """``SUCCESS``, the failure's code, ``TOOL_ERROR(<info name>)`` for an
    uncaught exception, ``ERROR(<info name>)`` for a failure without a code,
    or ``NO RESULT``; `` (killed)`` follows when a backend stopped the body
    by force (``meta["killed"]``, docs/contract.md#forced-stop), and
    `` (replayed)`` for a result a journal gave back (``meta["replayed"]``,
    docs/contract.md#journal)."""
    text = _outcome(result)
    if result is not None and result.meta is not None and result.meta.get("killed") is True:
        text += " (killed)"
    if result is not None and result.meta is not None and result.meta.get("replayed") is True:
        text += " (replayed)"
    return text


def _outcome(result: ToolExecutionResult | None) -> str:
    if result is None:
        return "NO RESULT"
    if not result.is_error:
        return "SUCCESS"
    code = result.code
    info = result.error.info
    if code == "TOOL_ERROR" and info is not None:
        return f"TOOL_ERROR({info.name})"
    if code is not None:
        return code
    return f"ERROR({info.name if info is not None else '?'})"


def _one_line(text: str, width: int | None = None) -> str:
    """``text`` on one printable line: whitespace runs become one space,
    other control characters are escaped, lone surrogates become U+FFFD.
    With ``width``, only the start that can show is worked on."""
    if width is not None:
        text = text[: 4 * width + 16]
    text = " ".join(utf8_safe(text).split())
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def _shorten(text: str, width: int | None) -> str:
    if width is None or len(text) <= width:
        return text
    return text[: width - 3] + "..."


def arguments_text(arguments: object, width: int | None = None) -> str:
    """The call's arguments as the model sent them, on one line: JSON for a
    parsed value, the raw text for arguments that did not parse, ``-`` for
    none; shortened to ``width`` characters when given."""
    if isinstance(arguments, InvalidCall):
        arguments = arguments.arguments
    if isinstance(arguments, MalformedArguments):
        text = _one_line(arguments.raw, width)
    elif arguments is None:
        text = "-"
    elif isinstance(arguments, str):
        text = _one_line(arguments, width) or '""'
    else:
        try:
            text = _one_line(json.dumps(thaw(arguments), ensure_ascii=False, default=repr), width)
        except (ValueError, TypeError, RecursionError):
            text = f"<{type(arguments).__name__}>"
    return _shorten(text, width)


def progress_text(update: ProgressUpdate) -> str:
    """``3/10 "downloading"``: the progress, ``/total`` when known, the
    message quoted when there is one."""
    text = f"{update.progress:g}" + ("" if update.total is None else f"/{update.total:g}")
    if update.message is not None:
        text += " " + json.dumps(_one_line(update.message, DETAIL_WIDTH)[:DETAIL_WIDTH], ensure_ascii=False)
    return text


def _detail(result: ToolExecutionResult | None, width: int | None, progress: ProgressUpdate | None = None) -> str:
    """The model text of the result; for a failure (a call that was stopped
    or failed) after it reported progress, ``[progress <last>]`` first."""
    if result is None:
        return ""
    texts = [str(block.get("text", "")) for block in result.content if block.get("type") == "text"]
    if result.is_error and progress is not None:
        texts.insert(0, f"[progress {progress_text(progress)}]")
    return _shorten(_one_line(" ".join(texts), width), width)


def print_table(rows: Sequence[_Row], invoked: Callable[[_Row], str], out: IO[str], *, wide: bool = False) -> None:
    """The table, then the BODY legend, and the ``(killed)`` legend when a
    row shows it. ``wide``: ARGS and DETAIL are not
    shortened (otherwise to 40 and 60 characters)."""
    header = ("BATCH", "CALL ID", "TOOL", "OUTCOME", "BODY", "DURATION", "ARGS", "DETAIL")
    args_width = None if wide else ARGS_WIDTH
    detail_width = None if wide else DETAIL_WIDTH
    lines: list[tuple[str, ...]] = [header]
    for row in rows:
        if row.started is not None and row.ended is not None:
            duration = f"{row.ended - row.started:.3f}s"
        else:
            duration = "-"
        lines.append(
            (
                str(row.batch),
                _one_line(row.call_id) or '""',
                _one_line(row.name) or '""',
                outcome_of(row.result),
                invoked(row),
                duration,
                arguments_text(row.arguments, args_width),
                _detail(row.result, detail_width, row.progress),
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header) - 1)]
    for line in lines:
        cells = [cell.ljust(widths[i]) if i != 5 else cell.rjust(widths[i]) for i, cell in enumerate(line[:-1])]
        print("  ".join(cells + [line[-1]]).rstrip(), file=out)
    print(BODY_LEGEND, file=out)
    if any(line[3].endswith(" (killed)") for line in lines[1:]):
        print(KILLED_LEGEND, file=out)


# Plain words for each quiescence check (what it makes sure of), matched on
# how the check's label starts.
_PLAIN = (
    ("no process left in the", "every command the shell tool started has exited"),
    (
        "no live descendant process",
        "no program started during the run (by a tool, or by a program a tool started) is still running",
    ),
    ("no tool body running", "every tool function has returned; none goes on in the background"),
    ("remote: ", "the remote tool's body stopped on the MCP server, not only here"),
    ("no dispatch in flight", "every tool call has finished; none goes on in the background"),
    (
        "caller signal listener_count",
        "the run removed everything it attached to its cancel signal; nothing leaks into the next turn",
    ),
)


def quiescence_line(label: str, passed: bool) -> str:
    """``  ok   <label> -- checks: <plain words>`` (``FAIL`` when the check
    failed); the plain words only for the checks this module knows."""
    line = f"  {'ok  ' if passed else 'FAIL'} {label}"
    for start, text in _PLAIN:
        if label.startswith(start):
            return f"{line} -- checks: {text}"
    return line
