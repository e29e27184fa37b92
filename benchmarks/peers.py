"""Target 3: the signal operations on peer libraries, where they have them.

Peers are installed only through the optional ``bench`` extra
(``pip install -e ".[bench]"``); a peer that is not importable is skipped
with a note. Each peer operation is paired, in interleaved rounds, with the
same dshtools operation measured in the same run; ``ratio`` is the median
over rounds of ``dshtools / peer`` within a round (below 1: dshtools is
faster).

Operation mapping (only what a peer really has):

==================  ==========================  ==========================  ==============================
operation           cantok                      cancelscope                 autogen-core
==================  ==========================  ==========================  ==============================
create              ``SimpleToken()``           ``CancelScope()``           ``CancellationToken()``
check               ``token.cancelled``         ``scope.cancelled``         ``token.is_cancelled()``
abort_0             ``token.cancel()``          ``scope.cancel()``          ``token.cancel()``
abort_1/100         (no callbacks)              ``on_cancel`` x N           ``add_callback`` x N
any_of_N_abort      ``SimpleToken(*tokens)``    (nesting only, no any-of)   (none)
add_remove          (no callbacks)              ``on_cancel(cb)()``         (no removal)
==================  ==========================  ==========================  ==============================

cantok has no callbacks and evaluates composite tokens lazily on each
check, so its ``any_of`` operation includes the read of the derived token
(so does ours). cancelscope links scopes by entering them inside each other
in one thread (a parent, not an any-of), so it has no ``any_of`` entry.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from . import signals
from ._timing import CPU, Case, aborts, calls, paired_ratio, reads

__all__ = ["PEERS", "run"]


def _cantok() -> dict[str, Case]:
    from cantok import SimpleToken

    def any_of(width: int) -> Case:
        def case(n: int) -> Callable[[], None]:
            items = [[SimpleToken() for _ in range(width)] for _ in range(n)]

            def go() -> None:
                for sources in items:
                    derived = SimpleToken(*sources)
                    sources[0].cancel()
                    derived.cancelled

            return go

        return case

    return {
        "create": calls(SimpleToken),
        "check": reads(SimpleToken(), "cancelled"),
        "abort_0": aborts(SimpleToken, SimpleToken.cancel),
        "any_of_2_abort": any_of(2),
        "any_of_100_abort": any_of(100),
    }


def _cancelscope() -> dict[str, Case]:
    from cancelscope import CancelScope

    def abort(listeners: int) -> Case:
        return aborts(CancelScope, CancelScope.cancel, listen=lambda s: s.on_cancel(signals.cb), listeners=listeners)

    def add_remove(n: int) -> Callable[[], None]:
        r = range(n)
        on_cancel = CancelScope().on_cancel

        def go() -> None:
            for _ in r:
                on_cancel(signals.cb)()

        return go

    return {
        "create": calls(CancelScope),
        "check": reads(CancelScope(), "cancelled"),
        "abort_0": abort(0),
        "abort_1": abort(1),
        "abort_100": abort(100),
        "add_remove_listener": add_remove,
    }


def _autogen() -> dict[str, Case]:
    from autogen_core import CancellationToken

    def abort(listeners: int) -> Case:
        return aborts(
            CancellationToken,
            CancellationToken.cancel,
            listen=lambda t: t.add_callback(signals.cb0),
            listeners=listeners,
        )

    return {
        "create": calls(CancellationToken),
        "check": calls(CancellationToken().is_cancelled),
        "abort_0": abort(0),
        "abort_1": abort(1),
        "abort_100": abort(100),
    }


# library name (as on PyPI) -> (import name, factory of its cases)
PEERS: dict[str, tuple[str, Callable[[], dict[str, Case]]]] = {
    "cantok": ("cantok", _cantok),
    "cancelscope": ("cancelscope", _cancelscope),
    "autogen-core": ("autogen_core", _autogen),
}

_NUMBER = {
    "create": 10000,
    "check": 50000,
    "abort_0": 10000,
    "abort_1": 5000,
    "abort_100": 200,
    "any_of_2_abort": 2000,
    "any_of_100_abort": 100,
    "add_remove_listener": 10000,
}


def _version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def run(*, quick: bool = False) -> dict[str, Any]:
    """``{"results": {library: {operation: {"ns_per_op", "dshtools_ns_per_op",
    "ratio"}}}, "versions": {library: version}, "skipped": {library: note}}``;
    ``__main__`` files the results under ``peers`` and the rest under
    ``meta``."""
    rounds = 3 if quick else 15
    results: dict[str, Any] = {}
    versions: dict[str, str | None] = {}
    skipped: dict[str, str] = {}
    for dist, (module, factory) in PEERS.items():
        try:
            importlib.import_module(module)
        except ImportError as exc:
            skipped[dist] = f'not installed ({exc}); pip install -e ".[bench]"'
            continue
        versions[dist] = _version(dist)
        entry: dict[str, Any] = {}
        for op, case in factory().items():
            number = max(1, _NUMBER[op] // (20 if quick else 1))
            ours_ns, peer_ns, ratio = paired_ratio(signals.OURS[op], case, number=number, rounds=rounds, clock=CPU)
            entry[op] = {"ns_per_op": peer_ns, "dshtools_ns_per_op": ours_ns, "ratio": ratio}
        results[dist] = entry
    return {"results": results, "versions": versions, "skipped": skipped}
