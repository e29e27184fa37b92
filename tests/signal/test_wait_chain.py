"""How ``wait()`` blocks and how an abort wakes its waiters
(docs/contract.md#scale): off the main thread a wait never wakes before
the abort; an abort wakes its waiters as a chain (each woken waiter wakes
the next), which never stalls on a waiter that left; the main thread waits
in slices, so Ctrl-C reaches it at once, and its interrupted wait leaves
no other waiter behind."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading
from typing import Any

import pytest

from dshtools import AbortController, AbortSignal
from dshtools._core import interrupts
from dshtools._signal.wake import Waiter, wake
from tests.helpers.processes import signal_and_collect
from tests.helpers.waiting import blocked_in_wait, wait_until


def _waiting_threads(target: Any, n: int) -> list[threading.Thread]:
    threads = [threading.Thread(target=target, daemon=True) for _ in range(n)]
    for t in threads:
        t.start()
    wait_until(lambda: all(blocked_in_wait(t) for t in threads), timeout=30)
    return threads


class _AcquireCounter:
    """A lock stand-in that counts the blocking acquires made on it."""

    def __init__(self, lock: Any) -> None:
        self.lock = lock
        self.acquires = 0

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        self.acquires += 1
        return bool(self.lock.acquire(blocking, timeout))

    def release(self) -> None:
        self.lock.release()


@pytest.mark.timeout(30)
def test_a_wait_off_the_main_thread_blocks_once_however_short_the_slice(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the slice patched to 1 ms, a wait that woke per slice would
    acquire its lock about a hundred times while the test waits for the
    others to park and then aborts; an untimed one acquires it once."""
    monkeypatch.setattr(interrupts, "INTERRUPT_SLICE", 0.001)
    c = AbortController()
    results: list[bool] = []
    counters: list[_AcquireCounter] = []
    real_init = Waiter.__init__

    def counted_init(self: Waiter, main: bool) -> None:
        real_init(self, main)
        counter = _AcquireCounter(self.lock)
        counters.append(counter)
        self.lock = counter  # type: ignore[assignment]  # counts, then forwards

    monkeypatch.setattr(Waiter, "__init__", counted_init)
    threads = [threading.Thread(target=lambda: results.append(c.signal.wait()), daemon=True) for _ in range(20)]
    for t in threads:
        t.start()
    # Counted from the blocking acquire on (the one at creation is not).
    wait_until(lambda: len(counters) == 20 and all(counter.acquires >= 1 for counter in counters))
    parked = threading.Event()
    # Parked for at least 100 slices: a sliced wait would have woken by now.
    parked.wait(0.1)
    c.abort()
    for t in threads:
        t.join(10)
    assert results == [True] * 20
    assert [counter.acquires for counter in counters] == [1] * 20


@pytest.mark.timeout(60)
def test_one_abort_wakes_every_waiter_of_the_signal_and_of_its_dependents() -> None:
    """300 waiters on one controller's signal, 300 on signals derived from
    it (one each), 100 with a timeout that never comes: all wake with
    ``True``, and the aborting thread returns before they all did."""
    c = AbortController()
    derived = [AbortSignal.any_of([c.signal]) for _ in range(300)]
    results: list[bool] = []
    lock = threading.Lock()

    def record(value: bool) -> None:
        with lock:
            results.append(value)

    own = iter(derived)
    threads = _waiting_threads(lambda: record(c.signal.wait()), 300)
    threads += _waiting_threads(lambda: record(next(own).wait()), 300)
    threads += _waiting_threads(lambda: record(c.signal.wait(3600)), 100)
    c.abort()
    for t in threads:
        t.join(20)
    assert results == [True] * 700


@pytest.mark.timeout(30)
def test_the_chain_skips_a_waiter_that_left_and_is_taken_back() -> None:
    """A hand-off to a waiter that already left (timed out between the
    abort's copy of the list and the hand-off) is taken back by the one
    who handed it, who goes on to the next waiter."""
    gone = Waiter(main=False)
    gone.gone = True
    c = AbortController()
    woke: list[bool] = []
    t = threading.Thread(target=lambda: woke.append(c.signal.wait()), daemon=True)
    t.start()
    wait_until(lambda: blocked_in_wait(t))
    assert c.signal._waiters is not None
    real = list(c.signal._waiters)
    c.signal._aborted = True  # as an abort stores it before it wakes
    wake([[gone, *real]])
    t.join(10)
    assert woke == [True]
    assert gone.chain == []  # handed, then taken back


@pytest.mark.timeout(30)
def test_a_waiter_that_times_out_leaves_the_list() -> None:
    """A long-lived signal waited on with timeouts again and again keeps
    no entry per past wait."""
    c = AbortController()
    for _ in range(50):
        assert c.signal.wait(0) is False
        assert c.signal.wait(0.001) is False
    assert c.signal._waiters == []


SCRIPT = textwrap.dedent(
    """
    import threading, time
    from dshtools import AbortController

    c = AbortController()
    woke = []
    threads = [threading.Thread(target=lambda: woke.append(c.signal.wait()), daemon=True) for _ in range(200)]
    for t in threads:
        t.start()

    def announce():
        # Once the main thread's wait joined the 200 others.
        while len(c.signal._waiters or ()) < 201:
            time.sleep(0.01)
        print("waiting", flush=True)

    threading.Thread(target=announce, daemon=True).start()
    try:
        c.signal.wait()
    except KeyboardInterrupt:
        print("interrupted", flush=True)
    c.abort()
    for t in threads:
        t.join(10)
    print(f"woken={len(woke)} alive={sum(t.is_alive() for t in threads)}", flush=True)
    """
)


@pytest.mark.timeout(60)
@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_ctrl_c_reaches_a_main_thread_waiting_with_many_others_and_no_waiter_is_left() -> None:
    """SIGINT while the main thread and 200 others wait untimed on one
    signal: the main thread gets ``KeyboardInterrupt`` at once (within 2 s
    on a loaded machine; a slice is 0.25 s), and the abort that follows
    still wakes all 200."""
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def waiting() -> None:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "waiting"

    _, out, err, elapsed = signal_and_collect(proc, signal.SIGINT, 30, waiting)
    assert out.split() == ["interrupted", "woken=200", "alive=0"], (out, err)
    assert elapsed < 5
