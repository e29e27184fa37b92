"""Typing contract of ``abort_on_signals(...).exit_status``
(docs/contract.md#a33), checked by mypy --strict from
tests/typing/test_case_files.py: the documented ``return guard.exit_status``
type-checks in a function returning ``int``, as ``sys.exit`` of it does.
Every ``# type: ignore[...]`` marks an error mypy must report."""

from __future__ import annotations

import sys

from dshtools import AbortController, abort_on_signals


def run_agent(controller: AbortController) -> int:
    with abort_on_signals(controller) as guard:
        if controller.signal.aborted:
            return guard.exit_status
        return 0


def main() -> None:
    sys.exit(run_agent(AbortController()))


def not_a_string(controller: AbortController) -> str:
    with abort_on_signals(controller) as guard:
        return guard.exit_status  # type: ignore[return-value]
