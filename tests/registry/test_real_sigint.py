"""A real SIGINT reaches ``execute`` on the main thread (docs/contract.md#registry,
"KeyboardInterrupt"; field case B19 a): the dispatch signal aborts, the body
is joined, the ``ABORTED`` result is published, then ``KeyboardInterrupt``
surfaces and the script exits 130."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import pytest

from tests.helpers.processes import signal_and_collect

SCRIPT = textwrap.dedent(
    """
    import sys, threading
    from dshtools import AbortController, ToolDefinition, ToolExecutionInput, ToolRegistry

    finished = threading.Event()

    def body(args, run):
        print("body started", flush=True)
        run.signal.wait()          # untimed: only the abort wakes it
        finished.set()
        return "should not be seen"

    registry = ToolRegistry(max_workers=2)
    registry.register(ToolDefinition("block", "", {"type": "object"}, body))
    registry.add_result_observer(
        lambda e, r: print(f"result {r.code} {r.content[0]['text']} reason={type(r.meta['reason']).__name__}", flush=True)
    )
    caller = AbortController()
    try:
        registry.execute(ToolExecutionInput("c1", "block", {}, caller.signal))
    except KeyboardInterrupt:
        print("body finished" if finished.is_set() else "body STILL RUNNING", flush=True)
        print(f"caller aborted={caller.signal.aborted} listeners={caller.signal.listener_count}", flush=True)
        registry.close()
        # B19: "no worker alive 1 s later". An idle worker can outlive
        # shutdown(wait=True) when the interrupt landed inside the executor's
        # own thread start (CPython then never recorded the thread to join);
        # it exits on the shutdown sentinel, so give it that second.
        for t in threading.enumerate():
            if t.name.startswith("dshtools-tool"):
                t.join(1.0)
        alive = [t.name for t in threading.enumerate() if t.name.startswith("dshtools-tool")]
        print(f"workers alive={alive}", flush=True)
        sys.exit(130)
    print("execute returned normally", flush=True)
    """
)


@pytest.mark.timeout(30)
@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_sigint_aborts_joins_publishes_and_exits_130() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )

    def body_started() -> None:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "body started"

    _, out, err, elapsed = signal_and_collect(proc, signal.SIGINT, 10, body_started)
    lines = out.strip().splitlines()
    assert proc.returncode == 130, (out, err)
    assert lines == [
        "result ABORTED Error: tool call aborted reason=KeyboardInterrupt",
        "body finished",
        "caller aborted=False listeners=0",
        "workers alive=[]",
    ], (out, err)
    assert elapsed < 5.0
