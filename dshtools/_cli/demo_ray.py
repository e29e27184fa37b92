"""``python -m dshtools demo --backend ray``: the demo's tools as Ray tasks
on a local Ray (docs/contract.md#demo, docs/contract.md#ray; docs/ray.md).

The same transcript, server and tools as the thread demo (``shell``,
``http_get``, ``read_file``, ``sleep``), rebuilt as module functions with
their settings bound by ``functools.partial`` so that Ray can ship them,
including the non-cooperative ``stubborn`` (a ``time.sleep`` that ignores
its signal), which the transcript calls in the second batch: the mid-run
cancellation reaches it, it does not return, and the backend stops it by
force after ``KILL_AFTER`` seconds.

Quiescence, checked right after the batches returned:

* Ray reports every task of the run ended (``ray.wait`` on all of them,
  asked of Ray, not of the backend's bookkeeping);
* the worker process of every body stopped by force is gone;
* no process is left in the process groups the ``shell`` tool created
  (each shell writes its pid, which is its group id, to a file in the
  work directory: the demo's Ray is local, so the driver reads them).

Ray is started here (``ray.init(num_cpus=4)``) unless this process is
already connected, and shut down at the end if it was started here.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shlex
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Callable
from contextlib import ExitStack
from importlib import resources
from typing import Any, Final

from .. import io as dio
from .._registry.policies import TimeoutPolicy
from .._registry.registry import ToolRegistry
from .._types.calls import ToolError
from .._types.hooks import ToolDefinition
from .._types.tools import ToolRunContext
from .demo import (
    HTTP_TIMEOUT,
    READ_TIMEOUT,
    SHELL_GRACE,
    SHELL_TIMEOUT,
    SLEEP_TIMEOUT,
    DemoServer,
    RemoteTool,
    group_alive,
)
from .trace import tracing

__all__ = ["KILL_AFTER", "cmd_demo_ray"]

KILL_AFTER = 1.0
"""Seconds between a call's abort and the forced stop of its body."""
STUBBORN_TIMEOUT = 3.0
_PIDS = "pids"


# ---------------------------------------------------------------------------
# Tools (run in Ray workers; everything they need is in their arguments)


def _record_pid(workdir: str, kind: str, pid: int) -> None:
    directory = os.path.join(workdir, _PIDS)
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, f"{kind}-{pid}"), "w", encoding="ascii") as f:
        f.write(str(pid))


def _shell(workdir: str, args: Any, run: ToolRunContext) -> object:
    """Run a POSIX shell command in the demo's work directory. Exclusive unless read_only is true."""
    # The shell leads the session run_process creates (pid == pgid) and
    # records itself before running anything.
    directory = os.path.join(workdir, _PIDS)
    os.makedirs(directory, exist_ok=True)
    script = f"echo $$ > {shlex.quote(directory)}/pgid-$$\n{args['command']}"
    done = dio.run_process(["/bin/sh", "-c", script], run.signal, grace=SHELL_GRACE, cwd=workdir)
    if done.returncode != 0:
        raise ToolError(
            f"exit status {done.returncode}: {done.stderr.decode(errors='replace').strip()}",
            "EXIT_STATUS",
        )
    return {"exit_code": done.returncode, "stdout": done.stdout.decode(errors="replace")}


def _http_get(base_url: str, args: Any, run: ToolRunContext) -> object:
    """GET a URL; relative URLs resolve against the demo's local server."""
    url = urllib.parse.urljoin(base_url + "/", args["url"])
    response = dio.http_request("GET", url, run.signal)
    return {"status": response.status, "body": response.body.decode(errors="replace")}


def _read_file(workdir: str, args: Any, run: ToolRunContext) -> object:
    """Read a text file from the demo's work directory."""
    data = dio.read_file(os.path.join(workdir, args["path"]), run.signal)
    return {"path": args["path"], "text": data.decode(errors="replace")}


def _sleep(args: Any, run: ToolRunContext) -> object:
    """Sleep for some seconds (cancellable)."""
    dio.sleep(float(args["seconds"]), run.signal)
    return {"slept": args["seconds"]}


def _stubborn(workdir: str, args: Any, run: ToolRunContext) -> object:
    """Sleep for some seconds, ignoring cancellation (stopped by force)."""
    _record_pid(workdir, "worker", os.getpid())
    time.sleep(float(args["seconds"]))  # ignores run.signal on purpose
    return {"slept": args["seconds"]}


def _warm(args: Any, run: ToolRunContext) -> object:
    return os.getpid()


def _obj(props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": required, "additionalProperties": False}


def _always(args: Any) -> bool:
    return True


def _read_only(args: Any) -> bool:
    return args.get("read_only") is True


_STRING: Final = {"type": "string"}
_SECONDS: Final = {"seconds": {"type": "number", "minimum": 0}}


def _definition(
    body: Callable[..., object],
    properties: dict[str, Any],
    required: list[str],
    timeout: float,
    *bound: str,
    safe: Callable[[Any], bool] = _always,
) -> ToolDefinition:
    """The tool whose body is ``body`` with ``bound`` as its first arguments:
    named after the function (without its underscore), described by its
    docstring, taking an object of exactly ``properties``."""
    assert body.__doc__ is not None
    execute = functools.partial(body, *bound) if bound else body
    return ToolDefinition(
        body.__name__.lstrip("_"),
        body.__doc__,
        _obj(properties, required),
        execute,
        timeout=timeout,
        is_concurrency_safe=safe,
    )


def _definitions(base_url: str, workdir: str) -> list[ToolDefinition]:
    shell = {"command": _STRING, "read_only": {"type": "boolean"}}
    return [
        _definition(_shell, shell, ["command"], SHELL_TIMEOUT, workdir, safe=_read_only),
        _definition(_http_get, {"url": _STRING}, ["url"], HTTP_TIMEOUT, base_url),
        _definition(_read_file, {"path": _STRING}, ["path"], READ_TIMEOUT, workdir),
        _definition(_sleep, _SECONDS, ["seconds"], SLEEP_TIMEOUT),
        _definition(_stubborn, _SECONDS, ["seconds"], STUBBORN_TIMEOUT, workdir),
    ]


def _pids(workdir: str, kind: str) -> list[int]:
    directory = os.path.join(workdir, _PIDS)
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    return sorted(int(n.split("-", 1)[1]) for n in names if n.startswith(kind + "-"))


# ---------------------------------------------------------------------------
# The command


def _warm_up(registry: ToolRegistry, backend: Any, slots: int = 4) -> None:
    """Start the workers before the clock does: ``slots`` no-op calls in
    parallel, so each worker has imported dshtools and found the signal
    actor (a cold worker takes seconds on a loaded machine, which would
    make the transcript's timeouts about Ray's start-up)."""
    from .._registry.batch import execute_batch
    from .._signal import AbortController
    from .._types.calls import ToolExecutionInput

    remove = registry.register(ToolDefinition("warm_up", "no-op", _obj({}, []), _warm, is_concurrency_safe=_always))
    try:
        signal = AbortController().signal
        calls = [ToolExecutionInput(f"warm-{i}", "warm_up", {}, signal) for i in range(slots)]
        execute_batch(registry, calls, signal=signal, max_parallel=slots)
    finally:
        remove()
        backend.tasks.clear()


def cmd_demo_ray(ns: argparse.Namespace) -> int:
    """``demo --backend ray``: returns the exit status (as ``cmd_demo``)."""
    try:
        import ray

        from ..ray import RayBackend
    except ImportError:
        print("dshtools: error: --backend ray needs Ray: pip install 'dshtools[ray]'", file=sys.stderr)
        return 2
    from .inputs import _numbered_batches
    from .report import report_run
    from .run import _Meter, _run_batches

    class _Recording(RayBackend):
        """Keeps every task's ObjectRef, to ask Ray about them afterwards."""

        def __init__(self, **kw: Any) -> None:
            super().__init__(**kw)
            self.tasks: list[Any] = []

        def submit(self, body: Any, args: object, run: ToolRunContext) -> Any:
            dispatch = super().submit(body, args, run)
            self.tasks.append(dispatch.task)
            return dispatch

    cancel_after: float | None = None if ns.no_cancel else ns.cancel_after
    trace = tracing(ns.trace)
    source = "demo_transcript.json"
    data = json.loads(resources.files("dshtools").joinpath("data").joinpath(source).read_text("utf-8"))
    batches = _numbered_batches(data, source)
    meter = _Meter()
    out = sys.stderr if ns.json else sys.stdout
    started_ray = False
    with ExitStack() as stack:
        if not ray.is_initialized():
            print("starting a local Ray (ray.init(num_cpus=4)) ...", file=out, flush=True)
            ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
            started_ray = True
            stack.callback(ray.shutdown)
        workdir = stack.enter_context(tempfile.TemporaryDirectory(prefix="dshtools-demo-"))
        with open(os.path.join(workdir, "notes.txt"), "w", encoding="utf-8") as f:
            f.write("TODO: ship the cancellable registry\n")
        remote = stack.enter_context(RemoteTool(workdir))  # our own MCP server, started in the background
        server = stack.enter_context(DemoServer())
        backend = _Recording(kill_after=KILL_AFTER)
        registry = stack.enter_context(ToolRegistry(backend=backend))
        registry.add_around_dispatch(TimeoutPolicy())
        for definition in _definitions(server.base_url, workdir):
            registry.register(definition)
        _warm_up(registry, backend)
        remote.register(registry)
        warm_killed = backend.tasks_killed
        ncalls = sum(len(batch.calls) for batch in batches)
        print(
            f"dshtools demo on Ray ({'a local Ray started here' if started_ray else 'the connected Ray'}): "
            f"{ncalls} calls in {len(batches)} batches from {source}; "
            f"local server {server.base_url}; "
            + ("no cancellation" if cancel_after is None else f"cancel after {cancel_after:g}s")
            + f"; forced stop {KILL_AFTER:g}s after an abort",
            file=out,
            flush=True,
        )
        trace.start(registry, "dshtools demo")
        with trace.span():
            run = _run_batches(
                registry, batches, source=source, cancel_after=cancel_after, max_parallel=ns.max_parallel, meter=meter
            )
        remote.close()  # stops the MCP server and confirms it gone
        tasks = list(backend.tasks)
        _ready, pending = ray.wait(tasks, num_returns=len(tasks), timeout=0, fetch_local=False) if tasks else ([], [])
        killed = backend.tasks_killed - warm_killed
        killed_workers = _pids(workdir, "worker") if killed else []
        alive_workers = [pid for pid in killed_workers if group_alive(pid)]
        pgids = _pids(workdir, "pgid")
        alive = [pgid for pgid in pgids if group_alive(pgid)]
        checks = [
            (
                f"no Ray task of the run still running (Ray reports {len(tasks) - len(pending)} of {len(tasks)} ended)",
                not pending,
            ),
            (
                f"{killed} {'body' if killed == 1 else 'bodies'} stopped by force; "
                f"{'its worker is' if killed == 1 else 'their workers are'} gone "
                f"(pids: {', '.join(map(str, killed_workers)) or 'none'}; alive: "
                f"{', '.join(map(str, alive_workers)) or 'none'})",
                not alive_workers,
            ),
            (
                f"no process left in the {len(pgids)} process groups the shell tool created "
                f"(pgids: {', '.join(map(str, pgids)) or 'none'}; alive: {', '.join(map(str, alive)) or 'none'})",
                not alive,
            ),
        ]
        remote_check = remote.check()
        if remote_check is not None:
            checks.append(remote_check)
        status = report_run(ns, run, lambda row: meter.body_invoked(row.token, row.result), checks)
        trace.report(out)
        return status
    raise AssertionError("unreachable")  # pragma: no cover
