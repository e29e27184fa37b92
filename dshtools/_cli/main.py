"""The command line: ``python -m dshtools demo`` and ``python -m dshtools
replay`` (docs/contract.md#interop-and-cli).

Guarantees:

* Every assistant message's ``tool_calls`` run as one ``execute_batch``, in
  transcript order, with one caller-owned ``AbortController`` for the whole
  run. ``--cancel-after S`` arms ``AbortSignal.timeout(S)`` whose listener
  (on the shared timer thread) aborts that controller mid-turn.
* Exactly one row per call: results are collected by a result observer, so
  a run interrupted by Ctrl-C still prints every call that was published
  (``execute_batch`` publishes every result before it re-raises
  ``KeyboardInterrupt``). Batches after an interruption still run, with the
  controller already aborted, so their calls are reported as
  ``ABORTED_BEFORE_DISPATCH``.
* Before exiting, quiescence is checked and printed: no live descendant
  process (every non-zombie process below this one in the parent tree,
  via psutil or ``/proc``; on Linux the run is a child subreaper, so a
  grandchild whose parent exited is re-parented here and still counts;
  ``replay`` names, and does not count, a process alive since before the
  run, such as an MCP server its ``--tools`` module started while loading),
  no dispatch (demo: no tool body) in flight, and no listener left on the
  caller's signal. A failed check exits 1.
* BODY (was the tool body invoked) is observed, not guessed: the demo's
  tools count themselves; ``replay`` installs its meter as the innermost
  around-dispatch wrapper (``_Meter.body_invoked`` states the rule).
* ``replay`` warns (one line on stderr) when a tool declares ``timeout``
  but the registry has no ``TimeoutPolicy``. Transcript errors name the
  message as ``message #N``, counting every message from 1.
* Progress (calls in flight and for how long) goes to stderr only while
  stderr is a terminal. Once the run is cancelled, a call still running a
  second later is named on stderr, terminal or not, with what cancelled
  it ("cancelling (Ctrl-C) — waiting for call_07 (shell); Ctrl-\\ quits
  now"; the way to quit at once only after a signal). The ticker thread is stopped
  and joined before the table is printed.
* SIGTERM and SIGHUP are handled like Ctrl-C (``dshtools._cli.signals``).

Command line::

    dshtools [demo] [--cancel-after S | --no-cancel] [--max-parallel N] [--json] [--wide]
                    [--backend thread|ray] [--trace [FILE]]
    dshtools replay TRANSCRIPT.json|- --tools MODULE:ATTRIBUTE [--format openai|anthropic]
                    [--cancel-after S] [--max-parallel N] [--json] [--wide] [--traceback] [--trace [FILE]]
    dshtools mcp --tools MODULE:ATTRIBUTE [--name N] [--traceback]   (see dshtools.mcp; exits 0 at
                    end of input, 128 + signum after SIGTERM/SIGINT)
                 [--http HOST:PORT [--token TOKEN] [--allow-remote] [--allow-host H]...
                    [--allow-origin O]... [--session-idle-timeout S]]   (streamable HTTP
                    instead of stdio; the token may come from $DSHTOOLS_MCP_TOKEN)

``--tools`` names a ``ToolRegistry`` or a zero-argument callable returning
one, or (``--tools MODULE``) a module whose ``@dshtools.tool`` functions
become a new registry's tools (``MODULE`` is imported with the current directory on ``sys.path``;
``ATTRIBUTE`` may be dotted; a closed registry is a usage error). ``-``
as the transcript reads it from standard input. The table (stdout; stderr under ``--json``,
where stdout carries the ``role: "tool"`` messages as one JSON list) has
one row per call: batch, call id, tool, outcome (``SUCCESS``, the code, or
``ERROR(<exception name>)`` for a failure without a code), whether the body
was invoked, the dispatch duration, the call's arguments (ARGS) and the
start of the model text (DETAIL; ``--wide`` prints ARGS and DETAIL whole),
then a line saying what BODY means; each quiescence line ends with what it
checks in plain words. Rows pair each model call with its own result by
identity, never by id (nested calls are not rows). A transcript is OpenAI
(``tool_calls``) or Anthropic (``tool_use`` blocks), detected or chosen with
``--format``; ``--json`` answers in its format. ``--traceback`` prints the
traceback behind a usage error caused by an exception (an import of
``--tools`` that failed).

Exit codes: 0 success (tool failures, timeouts and a ``--cancel-after``
cancellation are outcomes, not errors); 1 a quiescence check failed, or
stdout was closed early; 2 usage error (one line on stderr); 128 + signum
when a signal stopped the run: 130 Ctrl-C (SIGINT), 143 SIGTERM, 129
SIGHUP. SIGTERM and SIGHUP are handled exactly like Ctrl-C (cancel, join,
print the table and the quiescence report; docs/contract.md#a13).
``--trace`` (``dshtools._cli.trace``) makes every call an OpenTelemetry
``execute_tool`` span under one span for the run and prints the span tree
after the quiescence report (on the table's stream); ``--trace FILE``
writes the spans to FILE as OTLP JSON instead. ``FILE`` is the word after
``--trace``: give the transcript before it. Without the OpenTelemetry SDK it
is a usage error naming what to install.

``--version`` prints the version.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import math
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from importlib import resources
from typing import NoReturn

from .. import __version__
from .._os.descendants import _descendant_check, _left_behind_check, _subreaper, descendants_now
from .._registry.lifecycle import attach_journal
from .._registry.policies import TimeoutPolicy
from .._registry.registry import ToolRegistry, around_dispatch_hooks, registered
from .inputs import STDIN, UsageError, _numbered_batches, load_registry, load_transcript
from .journal import cmd_journal, open_journal
from .report import EXIT_BROKEN_PIPE, EXIT_USAGE, report_run
from .run import _Meter, _Row, _run_batches
from .signals import _interrupts
from .trace import tracing

# This module holds the commands, their argument parsing and exit statuses.
# The transcript and --tools loading live in dshtools._cli.inputs, the
# runner and its instrumentation in dshtools._cli.run, the result table in
# dshtools._cli.table, the report and exit statuses in dshtools._cli.report,
# the descendant check in dshtools._os.descendants.

__all__ = ["UsageError", "load_registry", "load_transcript", "main"]


DEFAULT_CANCEL_AFTER = 1.5


def _finite_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds >= 0, got {text!r}")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def cmd_demo(ns: argparse.Namespace) -> int:
    if ns.backend == "ray":
        from .demo_ray import cmd_demo_ray

        return cmd_demo_ray(ns)
    from .demo import (
        FORCED_STOP_AFTER,
        HTTP_TIMEOUT,
        READ_TIMEOUT,
        REMOTE_TIMEOUT,
        SHELL_TIMEOUT,
        SLEEP_TIMEOUT,
        STUBBORN_TIMEOUT,
        DemoServer,
        DemoTools,
        RemoteTool,
        dshtools_path,
        group_alive,
    )
    from .demo_crash import CrashedAgent, report_crash

    cancel_after: float | None = None if ns.no_cancel else ns.cancel_after
    trace = tracing(ns.trace)
    source = "demo_transcript.json"
    data = json.loads(resources.files("dshtools").joinpath("data").joinpath("demo_transcript.json").read_text("utf-8"))
    batches = _numbered_batches(data, source)
    meter = _Meter()
    with ExitStack() as stack:
        reaper = stack.enter_context(_subreaper())
        workdir = stack.enter_context(tempfile.TemporaryDirectory(prefix="dshtools-demo-"))
        with open(os.path.join(workdir, "notes.txt"), "w", encoding="utf-8") as f:
            f.write("TODO: ship the cancellable registry\n")
        remote = stack.enter_context(RemoteTool(workdir))  # starts the MCP server now, in the background
        # The journaled agent starts now too; it waits in its slow call until killed below.
        agent = stack.enter_context(CrashedAgent(workdir, dshtools_path()))
        server = stack.enter_context(DemoServer())
        tools = stack.enter_context(DemoTools(server.base_url, workdir))
        remote_ready = remote.register(tools.registry)
        out = sys.stderr if ns.json else sys.stdout
        ncalls = sum(len(batch.calls) for batch in batches)
        print(
            f"dshtools demo: {ncalls} calls in {len(batches)} batches from {source}; "
            f"local server {server.base_url}; "
            + ("no cancellation" if cancel_after is None else f"cancel after {cancel_after:g}s"),
            file=out,
        )
        print(
            f"tools: shell (exclusive unless read_only, timeout {SHELL_TIMEOUT:g}s), "
            f"http_get (parallel, timeout {HTTP_TIMEOUT:g}s), read_file (parallel, timeout {READ_TIMEOUT:g}s), "
            f"sleep (parallel, timeout {SLEEP_TIMEOUT:g}s), stubborn (parallel, timeout {STUBBORN_TIMEOUT:g}s, "
            f"ignores its signal; worker process, stopped by force {FORCED_STOP_AFTER:g}s after an abort), "
            + (
                f"remote_sleep (our own MCP server over stdio, pid {remote.server_pid}, timeout {REMOTE_TIMEOUT:g}s); "
                if remote_ready
                else f"no remote_sleep ({remote.unavailable}); "
            )
            + "TimeoutPolicy installed",
            file=out,
            flush=True,
        )
        trace.start(tools.registry, "dshtools demo")
        with trace.span():
            run = _run_batches(
                tools.registry,
                batches,
                source=source,
                cancel_after=cancel_after,
                max_parallel=ns.max_parallel,
                meter=meter,
            )
        # The agent is killed and reaped before the descendant check below
        # (at once when the run was interrupted: then nothing is resumed).
        if run.interrupted:
            agent.close()
        else:
            agent.kill()
        # Quiescence is checked right after the batches returned, before the
        # registry is closed: execute_batch itself must have joined every body.
        pgids = tools.process_groups
        alive = [pgid for pgid in pgids if group_alive(pgid)]
        listed = ", ".join(map(str, pgids)) or "none"
        checks = [
            (
                f"no process left in the {len(pgids)} process groups the shell tool created "
                f"(pgids: {listed}; alive: {', '.join(map(str, alive)) or 'none'})",
                not alive,
            ),
        ]
        # The stubborn tool's worker processes (docs/contract.md#forced-stop): none runs a
        # body, nothing a worker started is alive; then the idle worker is
        # stopped, so the descendant check below covers everything else.
        backend = tools.process_backend
        running = backend.bodies_running
        left = backend.left_behind()
        checks.append(
            (
                f"no worker process runs a tool body (bodies running: {running}; worker pids: "
                f"{', '.join(map(str, backend.workers_started)) or 'none'}; stopped by force: {backend.kills})",
                running == 0,
            )
        )
        checks.append(_left_behind_check(left))
        backend.close()
        # The MCP server is stopped (and confirmed gone) before the
        # descendant check; what its body did is read from its own record.
        remote.close()
        remote_check = remote.check()
        if remote_check is not None:
            checks.append(remote_check)
        checks += [
            _descendant_check(reaper),
            (f"no tool body running (bodies in flight: {tools.bodies_in_flight})", tools.bodies_in_flight == 0),
        ]

        def invoked(row: _Row) -> str:
            if row.name in tools.process_tools or row.name == "remote_sleep":  # its body runs elsewhere: the meter
                return meter.body_invoked(row.token, row.result)
            return "yes" if tools.body_invoked(row.call_id) else "no"

        status = report_run(ns, run, invoked, checks)
        trace.report(out)
        if not run.interrupted and not report_crash(agent, out) and status == 0:
            status = 1
        return status
    raise AssertionError("unreachable")  # pragma: no cover


def timeout_warning(registry: ToolRegistry) -> str | None:
    """One line when a registered tool declares ``timeout`` but no
    ``TimeoutPolicy`` is installed on ``registry`` (the timeout is then not
    enforced: docs/contract.md#timeout-policy makes the policy opt-in); else ``None``."""
    timed = sorted(d.name for d in registered(registry) if d.timeout is not None)
    if not timed or any(isinstance(fn, TimeoutPolicy) for fn in around_dispatch_hooks(registry)):
        return None
    listed = ", ".join(timed[:5]) + (f" and {len(timed) - 5} more" if len(timed) > 5 else "")
    return (
        f"dshtools: warning: {listed} declare{'s' if len(timed) == 1 else ''} timeout= but the registry has no "
        "TimeoutPolicy, so no timeout is enforced (add registry.add_around_dispatch(TimeoutPolicy()))"
    )


def cmd_replay(ns: argparse.Namespace) -> int:
    source = "<stdin>" if ns.transcript == STDIN else ns.transcript
    trace = tracing(ns.trace)
    batches = load_transcript(ns.transcript, ns.format)
    registry = load_registry(ns.tools)
    journal = None if ns.journal is None else open_journal(ns.journal, create=True)
    try:
        if journal is not None:
            attach_journal(registry, journal)
        trace.start(registry, "dshtools replay")
        warning = timeout_warning(registry)
        if warning is not None:
            print(warning, file=sys.stderr, flush=True)
        # Registered after the module's own hooks: the meter is the
        # innermost around-dispatch wrapper, as body_invoked requires.
        meter = _Meter()
        with _subreaper() as reaper:
            # Processes the tools module started while it was loaded (an
            # MCP server its registry's tools talk to) are not the run's.
            before = descendants_now()
            with trace.span():
                run = _run_batches(
                    registry,
                    batches,
                    source=source,
                    cancel_after=ns.cancel_after,
                    max_parallel=ns.max_parallel,
                    meter=meter,
                    session=ns.session,
                )
            in_flight = len(meter.in_flight())
            checks = [
                _descendant_check(reaper, before),
                (f"no dispatch in flight (in flight: {in_flight})", in_flight == 0),
            ]
        status = report_run(ns, run, lambda row: meter.body_invoked(row.token, row.result), checks)
        trace.report(sys.stderr if ns.json else sys.stdout)
        return status
    finally:
        registry.close()
        if journal is not None:
            journal.close()


def cmd_mcp(ns: argparse.Namespace) -> int:
    """Serve ``--tools`` as an MCP server on stdio (docs/contract.md#mcp-stdio; see
    ``dshtools.mcp``): 0 at end of input, 128 + signum after SIGTERM/SIGINT."""
    # A module that prints while it is imported must not corrupt the protocol.
    with contextlib.redirect_stdout(sys.stderr):
        registry = load_registry(ns.tools)
    try:
        try:
            from ..mcp import serve_stdio
        except ImportError as exc:
            if (exc.name or "").partition(".")[0] not in ("mcp", "mcp_types", "anyio"):
                raise
            raise UsageError(f"the mcp command needs the MCP SDK: pip install 'dshtools[mcp]' ({exc})") from None
        if ns.http is None:
            return serve_stdio(registry, name=ns.name)
        return _serve_http(registry, ns)
    finally:
        registry.close()


TOKEN_ENV = "DSHTOOLS_MCP_TOKEN"
"""The environment variable ``mcp --http`` reads its bearer token from when
``--token`` is not given (a token on the command line is visible to every
user of the machine in the process list)."""


def _http_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) as ``(host, port)``."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT (e.g. 127.0.0.1:8000), got {text!r}")
    return host.strip("[]"), int(port)


def _serve_http(registry: ToolRegistry, ns: argparse.Namespace) -> int:
    from ..mcp import serve_http

    host, port = ns.http
    token = ns.token if ns.token is not None else os.environ.get(TOKEN_ENV) or None
    if ns.session_idle_timeout is not None and not ns.session_idle_timeout > 0:
        raise UsageError(f"--session-idle-timeout must be a positive number of seconds, got {ns.session_idle_timeout}")

    def ready(url: str) -> None:
        auth = "a bearer token required" if token is not None else "no token: any local process may call its tools"
        print(f"dshtools: serving MCP on {url} ({auth})", file=sys.stderr, flush=True)

    try:
        return serve_http(
            registry,
            host,
            port,
            token=token,
            name=ns.name,
            allow_remote=ns.allow_remote,
            allowed_hosts=ns.allow_host,
            allowed_origins=ns.allow_origin,
            session_idle_timeout=ns.session_idle_timeout,
            on_ready=ready,
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


class _Parser(argparse.ArgumentParser):
    """argparse with a one-line usage error (docs/contract.md#replay: one line on
    stderr, exit 2); ``--help`` still prints the full usage."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="dshtools",
        description="Run LLM tool calls with cancellation, timeouts and joined, never abandoned, bodies.",
        epilog="Exit status: 0 success, 1 a quiescence check failed, 2 usage error, "
        "130 interrupted (Ctrl-C), 143 terminated (SIGTERM), 129 hung up (SIGHUP), "
        "141 stdout closed before the output was written (| head); "
        "SIGTERM and SIGHUP cancel and join like Ctrl-C. "
        "Without a command, runs the demo.",
    )
    parser.add_argument("--version", action="version", version=f"dshtools {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def common(p: argparse.ArgumentParser, cancel_default: float | None) -> None:
        p.add_argument(
            "--cancel-after",
            type=_finite_seconds,
            default=cancel_default,
            metavar="S",
            help="abort the run's caller signal after S seconds (mid-turn cancellation)"
            + (f"; default {cancel_default:g}" if cancel_default is not None else "; default: never"),
        )
        p.add_argument(
            "--max-parallel",
            type=_positive_int,
            default=10,
            metavar="N",
            help="how many parallel-safe calls may overlap (default 10)",
        )
        p.add_argument(
            "--json",
            action="store_true",
            help="print the answers to the model as a JSON list on stdout (the table goes to stderr): "
            'role "tool" messages (OpenAI) or role "user" messages of tool_result blocks (Anthropic)',
        )
        p.add_argument("--wide", action="store_true", help="print ARGS and DETAIL whole instead of shortening them")
        p.add_argument(
            "--trace",
            nargs="?",
            const="",
            default=None,
            metavar="FILE",
            help="trace the run with OpenTelemetry: print the span tree at the end (one execute_tool span per "
            "call under the run's span: outcome, duration, body_invoked, killed, overrun), or with FILE write "
            "the spans there as OTLP JSON; needs the SDK: pip install 'dshtools[otel]' opentelemetry-sdk",
        )

    def registry_arguments(p: argparse.ArgumentParser) -> None:
        """The registry a command serves or replays against: ``--tools``, and
        ``--traceback`` for when loading it fails."""
        p.add_argument(
            "--tools",
            required=True,
            metavar="MODULE:ATTRIBUTE",
            help="a ToolRegistry, or a zero-argument callable returning one; or MODULE alone, whose "
            "@dshtools.tool functions become the tools: a module name, not a file path (the current directory "
            "is importable)",
        )
        p.add_argument(
            "--traceback",
            action="store_true",
            help="on a usage error caused by an exception (importing --tools failed), print its traceback",
        )

    def command(
        name: str, func: Callable[[argparse.Namespace], int], *, help: str, description: str
    ) -> argparse.ArgumentParser:
        """The sub-command ``name``, which runs ``func(namespace)``; its own
        parser is ``namespace.subparser`` (for usage errors found after
        parsing)."""
        p = sub.add_parser(name, help=help, description=description)
        p.set_defaults(func=func, subparser=p)
        return p

    demo = command(
        "demo",
        cmd_demo,
        help="replay the bundled transcript against real blocking tools and a local HTTP server",
        description="Replay the bundled transcript (shell, http_get, read_file, sleep against a local "
        "server; stubborn in a worker process; remote_sleep on our own MCP server over stdio) with "
        "TimeoutPolicy and a mid-run cancellation, then prove quiescence, the remote call's on the server's side.",
    )
    common(demo, DEFAULT_CANCEL_AFTER)
    demo.add_argument(
        "--no-cancel",
        action="store_true",
        help="do not cancel; every call runs to its end or its timeout (not with --cancel-after)",
    )
    demo.add_argument(
        "--backend",
        choices=("thread", "ray"),
        default="thread",
        help="where tool bodies run: threads (default) or Ray tasks on a local Ray, started if none is "
        "connected (needs the 'ray' extra; the non-cooperative call is stopped by force)",
    )

    replay = command(
        "replay",
        cmd_replay,
        help="replay a transcript's tool calls against your own registry",
        description='Replay TRANSCRIPT.json (a message list, a {"messages": [...]} object, or one assistant '
        "message, in OpenAI Chat Completions or Anthropic Messages format; each assistant message's tool calls "
        "run as one batch, in order; a malformed call is answered with INVALID_ARGS or INVALID_CALL) "
        "against the registry named by --tools. Hooks already on that registry apply; no policy is added "
        "(install TimeoutPolicy yourself for per-tool timeouts; a one-line warning on stderr says when a tool "
        "declares timeout= and no TimeoutPolicy is installed). The registry is closed at the end. "
        "BODY in the table says whether the tool body was invoked, as observed by an innermost around-dispatch "
        "wrapper the replay installs ('?' only when no result was published). "
        "Ctrl-C cancels cooperatively, waits for running bodies (a second Ctrl-C does not stop that wait; "
        "Ctrl-\\ or SIGKILL does), prints the results and exits 130. SIGTERM and SIGHUP do the same and exit "
        "143 and 129; while a body ignores its cancellation, stderr names it.",
    )
    replay.add_argument(
        "transcript",
        metavar="TRANSCRIPT.json",
        help="the transcript file; '-' reads it from standard input",
    )
    registry_arguments(replay)
    replay.add_argument(
        "--format",
        choices=("openai", "anthropic"),
        default=None,
        help="the transcript's format: OpenAI tool_calls or Anthropic tool_use blocks (default: detected)",
    )
    common(replay, None)
    replay.add_argument(
        "--journal",
        metavar="DB",
        default=None,
        help="journal the calls in DB (a SQLite file, created if missing, or a postgresql:// DSN): calls settled "
        "there come back from it, calls a killed run left claimed are OUTCOME_UNKNOWN (docs/durable.md)",
    )
    replay.add_argument("--session", metavar="ID", default=None, help="with --journal: the session the calls belong to")
    mcp = command(
        "mcp",
        cmd_mcp,
        help="serve your registry's tools as a Model Context Protocol server over stdio or HTTP",
        description="Serve the registry named by --tools as an MCP server on stdin/stdout, or over streamable "
        "HTTP with --http (needs the mcp extra). "
        "Each tools/call runs through the registry with its own signal; notifications/cancelled aborts it and "
        "joins the body. Exit status: 0 at end of input; 128 + signum after SIGTERM or SIGINT, once every "
        "call in flight was aborted and joined.",
    )
    registry_arguments(mcp)
    mcp.add_argument("--name", default="dshtools", help="the server name announced to the client (default dshtools)")
    mcp.add_argument(
        "--http",
        type=_http_address,
        metavar="HOST:PORT",
        help="serve over streamable HTTP at http://HOST:PORT/mcp instead of stdio (HOST must be a loopback "
        "address unless --allow-remote; PORT 0 picks a free one); stops on SIGTERM/SIGINT",
    )
    mcp.add_argument(
        "--token",
        help=f"with --http: require 'Authorization: Bearer TOKEN' (default: ${TOKEN_ENV} when set)",
    )
    mcp.add_argument(
        "--allow-remote", action="store_true", help="with --http: allow a HOST that is not a loopback address"
    )
    mcp.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="HOST",
        help="with --http: also accept this Host header (NAME or NAME:* for any port; repeatable); others get 421",
    )
    mcp.add_argument(
        "--allow-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="with --http: also accept this Origin (e.g. https://app.example; repeatable); others get 403",
    )
    mcp.add_argument(
        "--session-idle-timeout",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="with --http: close a session after this long without a request in flight (default 600)",
    )
    journal = command(
        "journal",
        cmd_journal,
        help="list, show or purge what a durable-call journal holds",
        description="Read a journal (a SQLite file or a postgresql:// DSN): list its sessions with their calls "
        "per state, show one session's calls, or purge old settled records (docs/durable.md).",
    )
    journal.add_argument("action", choices=("list", "show", "purge"))
    journal.add_argument("db", metavar="DB", help="the SQLite journal file, or a postgresql:// DSN")
    journal.add_argument("session", nargs="?", metavar="SESSION", help="the session to show (show only)")
    journal.add_argument(
        "--older-than", type=_finite_seconds, default=None, metavar="S", help="purge: settled more than S seconds ago"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m dshtools`` and the ``dshtools`` script.
    Returns the exit status (see the module docstring)."""
    started = time.monotonic()
    parser = build_parser()
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or (args[0].startswith("-") and args[0] not in ("-h", "--help", "--version")):
        args = ["demo", *args]  # the demo is the default command
    try:
        ns = parser.parse_args(args)
        ns.started = started
        if ns.command == "demo" and ns.no_cancel and any(a.split("=", 1)[0] == "--cancel-after" for a in args):
            ns.subparser.error("--no-cancel and --cancel-after exclude each other")
        if ns.command == "replay" and (ns.journal is None) != (ns.session is None):
            ns.subparser.error("--journal and --session go together: give both or neither")
        if ns.command == "journal" and (ns.action == "show") != (ns.session is not None):
            ns.subparser.error("SESSION is needed by show, and taken only by show")
        if ns.command == "journal" and (ns.action == "purge") != (ns.older_than is not None):
            ns.subparser.error("--older-than is needed by purge, and taken only by purge")
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2)
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    with _interrupts() as interrupts:
        return _dispatch(ns, interrupts.exit_status)


def _dispatch(ns: argparse.Namespace, interrupted_status: Callable[[], int]) -> int:
    try:
        status: int = ns.func(ns)
        return status
    except UsageError as exc:
        if getattr(ns, "traceback", False) and exc.__cause__ is not None:
            traceback.print_exception(exc.__cause__, file=sys.stderr)
        text = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
        print(f"dshtools: error: {text}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:
        # stdout closed early (``| head``): the run itself finished; silence
        # the interpreter's final flush and exit as a process SIGPIPE ended.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_BROKEN_PIPE
    except OSError as exc:
        if exc.errno != errno.EIO:
            raise
        # The terminal hung up (SIGHUP after it closed): the run was
        # cancelled and joined, but nothing can be shown any more. Silence
        # the final flushes and exit with the signal's status.
        devnull = os.open(os.devnull, os.O_WRONLY)
        for stream in (sys.stdout, sys.stderr):
            try:
                os.dup2(devnull, stream.fileno())
            except (OSError, ValueError):
                pass
        os.close(devnull)
        return interrupted_status()
    except KeyboardInterrupt:
        # Ctrl-C (or SIGTERM/SIGHUP) outside a batch, e.g. while loading:
        # nothing was running.
        print("dshtools: interrupted", file=sys.stderr)
        return interrupted_status()
