"""The end of a ``demo`` or ``replay`` run: the table, the interruption or
cancellation line, the quiescence checks, and the exit status (0: every
check passed; 1: a check failed; 2: usage error; ``128 + signum`` after
Ctrl-C, SIGTERM or SIGHUP). Shared by every demo flavour, so none of them
imports the command module."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable

from .run import _Replay, _Row
from .signals import current as _current_interrupts
from .table import print_table, quiescence_line

__all__ = ["EXIT_FAILURE", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_USAGE", "_report"]

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
# stdout closed before everything was written (``| head``): the status of a
# process that SIGPIPE ended, so pipelines tell it from a failed check.
EXIT_BROKEN_PIPE = 141


def _report(
    run: _Replay,
    invoked: Callable[[_Row], str],
    extra_checks: list[tuple[str, bool]],
    json_out: bool,
    wide: bool = False,
) -> int:
    """Print the table (stdout, or stderr under --json) and the quiescence
    lines; return the exit status."""
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
    print(f"finished in {run.elapsed:.2f}s", file=out)
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
