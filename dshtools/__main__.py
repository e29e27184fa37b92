"""Command line: ``python -m dshtools demo`` (the main job).

Until the full demo lands this prints a short tour of the signal API on real
threads.
"""

from __future__ import annotations

import sys
import threading
import time

from . import AbortController, AbortSignal, deadline, timeout_of


def _tour() -> int:
    controller = AbortController()
    started = threading.Event()
    outcome: list[str] = []

    def worker() -> None:
        started.set()
        aborted = controller.signal.wait(5.0)
        outcome.append(f"worker woke: aborted={aborted} reason={controller.signal.reason!r}")

    t = threading.Thread(target=worker)
    t.start()
    started.wait()
    t0 = time.monotonic()
    controller.abort("user pressed stop")
    t.join()
    print(outcome[0], f"({(time.monotonic() - t0) * 1000:.2f} ms after abort)")
    with deadline(None, 0.05, "DEMO_TIMEOUT") as dl:
        dl.signal.wait()
        print("deadline fired:", timeout_of(dl.signal, "DEMO_TIMEOUT"))
    fused = AbortSignal.any_of([AbortController().signal, AbortSignal.timeout(0.02)])
    fused.wait()
    print("any_of fused timeout:", fused.reason)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] != "demo":
        print("usage: python -m dshtools demo", file=sys.stderr)
        return 2
    return _tour()


if __name__ == "__main__":
    raise SystemExit(main())
