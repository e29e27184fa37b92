"""abort_on_signals (docs/contract.md#a13): SIGTERM/SIGHUP abort a user's
controller, so running tools are cancelled and joined instead of orphaned.
The end-to-end behaviour runs in a child interpreter (this test process's
own signal handlers stay untouched); argument checks and the hand-off run
here with SIGUSR1, whose handler the context manager installs first."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import dshtools
from dshtools import AbortController, SignalReason, abort_on_signals
from tests.helpers.processes import alive, signal_and_collect, wait_for_descendant
from tests.helpers.waiting import threads_but_abort_runners

AGENT = r"""
import signal, sys
from dshtools import AbortController, ToolDefinition, ToolExecutionInput, ToolRegistry, abort_on_signals
from dshtools.io import run_process

def shell(args, run):
    return run_process(["sh", "-c", args["script"]], run.signal).returncode

registry = ToolRegistry()
registry.register(ToolDefinition(
    name="shell", description="run a shell script",
    parameters={"type": "object", "properties": {"script": {"type": "string"}}, "required": ["script"]},
    execute=shell,
))
controller = AbortController()
before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
with abort_on_signals(controller) as guard:
    call = ToolExecutionInput("call_1", "shell", {"script": "sleep 40 & sleep 41; wait"}, controller.signal)
    result = registry.execute(call)
    print(result.code, repr(controller.signal.reason), flush=True)
registry.close()
print("restored", all(signal.getsignal(s) is h for s, h in before.items()), flush=True)
sys.exit(guard.exit_status)
"""


@pytest.mark.timeout(60)
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_signal_aborts_the_agent_loop_and_leaves_no_process(tmp_path: Path, signum: int) -> None:
    script = tmp_path / "agent.py"
    script.write_text(AGENT, encoding="utf-8")
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    family, out, err, elapsed = signal_and_collect(
        proc, signum, 5, lambda: wait_for_descendant(proc.pid, ["sleep", "41"], timeout=20)
    )
    name = signal.Signals(signum).name
    assert proc.returncode == 128 + signum, err
    assert elapsed < 5
    assert f"ABORTED SignalReason({name})" in out.splitlines(), out + err
    assert "restored True" in out
    assert alive(family) == []


def test_exported_and_checked() -> None:
    assert dshtools.abort_on_signals is abort_on_signals
    with pytest.raises(TypeError):
        abort_on_signals(object())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="SIGKILL"):
        abort_on_signals(AbortController(), signals=[signal.SIGKILL])
    with pytest.raises(ValueError, match="at least one"):
        abort_on_signals(AbortController(), signals=[])
    errors: list[BaseException] = []

    def enter() -> None:
        try:
            with abort_on_signals(AbortController()):
                pass
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=enter)
    thread.start()
    thread.join()
    assert len(errors) == 1 and isinstance(errors[0], ValueError) and "main thread" in str(errors[0])


@pytest.mark.timeout(30)
def test_first_signal_aborts_later_ones_are_recorded_and_handlers_come_back() -> None:
    controller = AbortController()
    previous = signal.getsignal(signal.SIGUSR1)
    threads = threads_but_abort_runners()
    with abort_on_signals(controller, signals=[signal.SIGUSR1]) as guard:
        assert guard.exit_status == 0  # a normal exit
        signal.raise_signal(signal.SIGUSR1)
        assert controller.signal.wait(5)
        signal.raise_signal(signal.SIGUSR1)
        reason = controller.signal.reason
        assert isinstance(reason, SignalReason)
        assert (reason.signum, reason.name, str(reason)) == (signal.SIGUSR1, "SIGUSR1", "received SIGUSR1")
    assert signal.getsignal(signal.SIGUSR1) is previous
    assert guard.received == [signal.SIGUSR1, signal.SIGUSR1]
    assert guard.exit_status == 128 + signal.SIGUSR1
    assert controller.signal.reason is reason  # the second signal changed nothing
    assert threads_but_abort_runners() == threads  # the watcher thread was joined
