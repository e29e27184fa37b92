"""The end of a ``demo`` or ``replay`` run: the table, the interruption or
cancellation line, the quiescence checks, and the exit status (0: every
check passed; 1: a check failed; 2: usage error; ``128 + signum`` after
Ctrl-C, SIGTERM or SIGHUP). Shared by every demo flavour, so none of them
imports the command module."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable

from .run import _Replay, _Row
from .signals import current as _current_interrupts
from .table import print_table, quiescence_line

__all__ = ["EXIT_FAILURE", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_USAGE", "_report", "report_run"]

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
# stdout closed before everything was written (``| head``): the status of a
# process that SIGPIPE ended, so pipelines tell it from a failed check.
EXIT_BROKEN_PIPE = 141


def report_run(
    ns: argparse.Namespace, run: _Replay, invoked: Callable[[_Row], str], checks: list[tuple[str, bool]]
) -> int:
    """``_report`` with the command's options: ``--json``, ``--wide`` and
    the time the command started (``ns.started``, set by ``main``)."""
    return _report(run, invoked, checks, ns.json, ns.wide, getattr(ns, "started", None))


def _report(
    run: _Replay,
    invoked: Callable[[_Row], str],
    extra_checks: list[tuple[str, bool]],
    json_out: bool,
    wide: bool = False,
    started: float | None = None,
) -> int:
    """Print the table (stdout, or stderr under --json) and the quiescence
    lines; return the exit status. ``started``: the ``time.monotonic()`` the
    command started at; the time since then is the run's, the batches'
    own is given beside it."""
    out = sys.stderr if json_out else sys.stdout
    if json_out:
        json.dump(run.tool_messages, sys.stdout, indent=2)
        sys.stdout.write("\n")
        sys.stdout.flush()
    print_table(run.rows, invoked, out, wide=wide)
    if run.interrupted:
        print(f"interrupted ({_current_interrupts().name()}): running calls were cancelled and joined", file=out)
    elif run.cancelled_at is not None:
        print(f"cancelled mid-run at {run.cancelled_at:.2f}s", file=out)
    if started is None:
        print(f"finished in {run.elapsed:.2f}s", file=out)
    else:
        print(f"finished in {time.monotonic() - started:.2f}s (tool calls {run.elapsed:.2f}s)", file=out)
    print("quiescence: after the run, nothing it started may still be running", file=out)
    ok = True
    checks = extra_checks + [("caller signal listener_count == 0", run.listener_count == 0)]
    for label, passed in checks:
        ok = ok and passed
        print(quiescence_line(label, passed), file=out)
    out.flush()
    if run.interrupted:
        return _current_interrupts().exit_status()
    return EXIT_OK if ok else EXIT_FAILURE
