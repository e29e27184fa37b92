"""``python -m dshtools``: the command line (docs/contract.md#demo,
docs/contract.md#replay).

``python -m dshtools [demo]`` replays the bundled transcript against real
blocking tools; ``python -m dshtools replay TRANSCRIPT.json --tools
MODULE:ATTRIBUTE`` replays your own. See ``dshtools._cli.main`` for options and
exit codes (0 ok, 1 quiescence check failed, 2 usage error, 128 + signum when
stopped by a signal: 130 Ctrl-C, 143 SIGTERM, 129 SIGHUP). ``--version``
prints the version.
"""

from __future__ import annotations

from collections.abc import Sequence

from ._cli.main import main as _main

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default ``sys.argv[1:]``) and
    return the exit status."""
    return _main(argv)


if __name__ == "__main__":
    raise SystemExit(main())
