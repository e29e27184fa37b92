"""The built-in default of ``python -m dshtools demo`` (docs/contract.md#demo): a
local HTTP server and four real blocking tools.

Guarantees:

* ``DemoServer`` listens on ``127.0.0.1`` on an ephemeral port, serves from
  one thread it starts, and handles each request on its own thread.
  ``close()`` stops accepting, wakes every stalling handler and **joins**
  the serving thread and every handler thread: nothing of the server is left
  running afterwards.
* ``/fast`` answers at once. ``/stall`` sends nothing until the client
  disconnects or the server closes (the handler watches its socket, so a
  client that gives up ends the handler promptly).
* ``DemoTools`` builds a ``ToolRegistry`` whose four tools (``shell``,
  ``http_get``, ``read_file``, ``sleep``) delegate to the cancellable
  capabilities of ``dshtools.io`` with the signal they receive, and a fifth,
  ``stubborn``, that ignores its signal (a plain ``time.sleep``) and runs on
  a ``ProcessBackend`` with ``kill_after=FORCED_STOP_AFTER``: a cancel stops
  it by force (docs/contract.md#forced-stop). Every body
  is counted while it runs (``bodies_in_flight``), every call id whose body
  was invoked is recorded, and the process group of every shell the
  ``shell`` tool started is recorded, so the demo can prove quiescence
  afterwards without psutil.

Threads: tool bodies run on registry workers; the server runs on its own
threads; the bookkeeping is guarded by one lock.
"""

from __future__ import annotations

import http.server
import json
import os
import select
import shlex
import sys
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from typing import Annotated, Any

import attrs
from pydantic import Field

from .. import io as dio
from .._backends.process.backend import ProcessBackend
from .._core.closing import Closing
from .._io.session import _group_alive
from .._registry.policies import TimeoutPolicy
from .._registry.registry import ToolRegistry
from .._types.calls import ToolError
from .._types.hooks import ToolDefinition
from .._types.tools import ToolRunContext
from .demo_remote_tools import LOG_ENV

__all__ = ["DemoServer", "DemoTools", "RemoteTool", "dshtools_path", "group_alive", "missing_module_text"]

# Tool timeouts (seconds) enforced by TimeoutPolicy. The transcript is
# built around them: a GET of /stall outlives HTTP_TIMEOUT (TOOL_TIMEOUT);
# the long shell call outlives the default --cancel-after (ABORTED) but is
# bounded by SHELL_TIMEOUT when the demo runs with --no-cancel.
HTTP_TIMEOUT = 0.5
SHELL_TIMEOUT = 3.0
SLEEP_TIMEOUT = 2.0
READ_TIMEOUT = 2.0
STUBBORN_TIMEOUT = 2.0
REMOTE_TIMEOUT = 3.0
# How long a cancelled remote call waits for the server's answer (seconds):
# our server sends none for a cancelled request, so this is how long the
# call's result waits after the cancel went out.
REMOTE_GRACE = 0.5
# SIGTERM -> SIGKILL grace of the shell tool (seconds).
SHELL_GRACE = 1.0
# kill_after of the stubborn tool's ProcessBackend (seconds).
FORCED_STOP_AFTER = 1.0
# How long a stalling handler waits for its client at most (seconds).
_STALL_LIMIT = 60.0
_POLL_SLICE = 0.05
# How often the sleep tool reports its progress (seconds slept).
_PROGRESS_STEP = 0.25


# ---------------------------------------------------------------------------
# HTTP server


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        path = urllib.parse.urlsplit(self.path).path
        if path == "/fast":
            self._send(200, b'{"ok": true, "endpoint": "fast"}\n')
        elif path == "/stall":
            self._stall()
        else:
            self._send(404, b'{"ok": false, "error": "not found"}\n')

    def _send(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)
        self.close_connection = True

    def _stall(self) -> None:
        """Send nothing; return when the client closes its end, when the
        server closes, or after _STALL_LIMIT seconds."""
        self.close_connection = True
        conn = self.connection
        stop = self.server.stop
        end = time.monotonic() + _STALL_LIMIT
        while not stop.is_set() and time.monotonic() < end:
            readable, _, _ = select.select([conn], [], [], _POLL_SLICE)
            if readable:
                try:
                    if not conn.recv(4096):
                        return  # the client hung up
                except OSError:
                    return

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the demo prints its own table


class _Server(http.server.ThreadingHTTPServer):
    # Handler threads are joined by server_close() (block_on_close).
    daemon_threads = False
    block_on_close = True

    def __init__(self) -> None:
        self.stop = threading.Event()
        super().__init__(("127.0.0.1", 0), _Handler)


class DemoServer(Closing):
    """Local HTTP server with ``/fast`` and ``/stall`` endpoints; use as a
    context manager. ``base_url`` is ``http://127.0.0.1:<port>``."""

    def __init__(self) -> None:
        self._server = _Server()
        host, port = self._server.server_address[:2]
        self.base_url = f"http://{host!s}:{port}"
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": _POLL_SLICE},
            name="dshtools-demo-http",
        )
        self._thread.start()

    def close(self) -> None:
        """Stop serving and join the serving thread and every handler
        thread. Idempotent."""
        self._server.stop.set()
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join()
        self._server.server_close()


# ---------------------------------------------------------------------------
# Process-group liveness (no psutil)


def group_alive(pgid: int) -> bool:
    """Whether process group ``pgid`` still has a member that is not a
    zombie: ``os.killpg(pgid, 0)`` raising ``ProcessLookupError`` proves it
    empty; otherwise (Linux) ``/proc`` is consulted so that a zombie waiting
    for init to reap it does not count. The same test ``run_process`` uses
    before it returns (``dshtools.io``)."""
    return _group_alive(pgid)


# ---------------------------------------------------------------------------
# Tools


def _stubborn(seconds: Annotated[float, Field(ge=0)]) -> dict[str, float]:
    """Sleep for some seconds, ignoring cancellation (runs in a worker process, stopped by force)."""
    # Ignores its signal (it takes no run context): only a forced stop ends
    # it early. Module-level, so it pickles by reference for the worker.
    time.sleep(seconds)
    return {"slept": seconds}


class DemoTools(Closing):
    """The demo's registry and the bookkeeping that proves quiescence.

    ``base_url``: where ``http_get`` resolves relative URLs. ``workdir``: a
    directory the demo owns; ``read_file`` reads relative paths there and
    the ``shell`` tool runs there. Use as a context manager: ``close()``
    closes the registry (joining any body still running)."""

    def __init__(self, base_url: str, workdir: str) -> None:
        self.base_url = base_url
        self.workdir = workdir
        self._lock = threading.Lock()
        self._in_flight = 0
        self._invoked: set[str] = set()
        self._pgids: list[int] = []
        # One worker process for the stubborn tool; closed with the registry.
        self.process_backend = ProcessBackend(1, kill_after=FORCED_STOP_AFTER)
        self.process_tools = frozenset({"stubborn"})
        self.registry = ToolRegistry()
        self.registry.add_around_dispatch(TimeoutPolicy())
        for definition in self._definitions():
            self.registry.register(definition)

    # ------------------------------------------------------------ bookkeeping

    @property
    def bodies_in_flight(self) -> int:
        """How many tool bodies are running right now."""
        with self._lock:
            return self._in_flight

    def body_invoked(self, call_id: str) -> bool:
        """Whether the body of ``call_id`` was invoked."""
        with self._lock:
            return call_id in self._invoked

    @property
    def process_groups(self) -> list[int]:
        """Process group ids of every shell the ``shell`` tool started."""
        with self._lock:
            return list(self._pgids)

    def _tracked(self, fn: Callable[[Any, ToolRunContext], object]) -> Callable[[Any, ToolRunContext], object]:
        def body(args: Any, run: ToolRunContext) -> object:
            with self._lock:
                self._in_flight += 1
                self._invoked.add(run.call_id)
            try:
                return fn(args, run)
            finally:
                with self._lock:
                    self._in_flight -= 1

        return body

    # ------------------------------------------------------------------ tools

    def _shell(self, command: str, read_only: bool = False, *, run: ToolRunContext) -> dict[str, Any]:
        """Run a POSIX shell command in the demo's work directory. Exclusive unless read_only is true."""
        # The shell writes its own pid first: it is the leader of the new
        # session/process group run_process creates, so pid == pgid. The
        # file exists only if the shell got that far, and nothing can have
        # been started in the group before it did.
        fd, pidfile = tempfile.mkstemp(prefix="pgid-", dir=self.workdir)
        os.close(fd)
        script = f"echo $$ > {shlex.quote(pidfile)}\n{command}"
        try:
            done = dio.run_process(["/bin/sh", "-c", script], run.signal, grace=SHELL_GRACE, cwd=self.workdir)
        finally:
            self._record_pgid(pidfile)
        if done.returncode != 0:
            raise ToolError(
                f"exit status {done.returncode}: {done.stderr.decode(errors='replace').strip()}",
                "EXIT_STATUS",
            )
        return {"exit_code": done.returncode, "stdout": done.stdout.decode(errors="replace")}

    def _record_pgid(self, pidfile: str) -> None:
        try:
            with open(pidfile, encoding="ascii") as f:
                text = f.read().strip()
            os.unlink(pidfile)
        except OSError:
            return
        if text.isdigit():
            with self._lock:
                self._pgids.append(int(text))

    def _http_get(self, url: str, *, run: ToolRunContext) -> dict[str, Any]:
        """GET a URL; relative URLs resolve against the demo's local server."""
        response = dio.http_request("GET", urllib.parse.urljoin(self.base_url + "/", url), run.signal)
        return {"status": response.status, "body": response.body.decode(errors="replace")}

    def _read_file(self, path: str, *, run: ToolRunContext) -> dict[str, str]:
        """Read a text file from the demo's work directory."""
        try:
            data = dio.read_file(os.path.join(self.workdir, path), run.signal)
        except OSError as exc:
            # The model sees the error's text: name the file as it asked for
            # it, never by the work directory's absolute path.
            raise type(exc)(exc.errno, exc.strerror, path) from None
        return {"path": path, "text": data.decode(errors="replace")}

    def _sleep(self, seconds: Annotated[float, Field(ge=0)], *, run: ToolRunContext) -> dict[str, float]:
        """Sleep for some seconds (cancellable), reporting progress every quarter of a second."""
        slept = 0.0
        while slept < seconds:
            step = min(_PROGRESS_STEP, seconds - slept)
            dio.sleep(step, run.signal)
            slept += step
            run.report_progress(round(slept, 2), seconds, "sleeping")
        return {"slept": seconds}

    def _definitions(self) -> Iterator[ToolDefinition]:
        # Typed tools; the counted ones get their body wrapped by _tracked.
        shell = ToolDefinition.from_function(self._shell, name="shell", timeout=SHELL_TIMEOUT)
        yield attrs.evolve(
            shell,
            execute=self._tracked(shell.execute),
            is_concurrency_safe=lambda args: args.get("read_only") is True,
        )
        for fn, name, timeout in (
            (self._http_get, "http_get", HTTP_TIMEOUT),
            (self._read_file, "read_file", READ_TIMEOUT),
            (self._sleep, "sleep", SLEEP_TIMEOUT),
        ):
            typed = ToolDefinition.from_function(fn, name=name, timeout=timeout, concurrency_safe=True)
            yield attrs.evolve(typed, execute=self._tracked(typed.execute))
        yield ToolDefinition.from_function(
            _stubborn, name="stubborn", timeout=STUBBORN_TIMEOUT, concurrency_safe=True, backend=self.process_backend
        )

    def close(self) -> None:
        """Close the registry (waits for any body still running) and with
        it the process backend."""
        self.registry.close()
        self.process_backend.close()


# ---------------------------------------------------------------------------
# The remote tool: our own MCP server over stdio


def missing_module_text(exc: ImportError) -> str:
    """Why ``dshtools.mcp`` could not be imported, naming what is missing:
    the MCP SDK only when the module missing is ``mcp`` itself."""
    missing = exc.name if isinstance(exc, ModuleNotFoundError) else None
    top = None if missing is None else missing.split(".")[0]
    if top == "mcp":
        return f"the MCP SDK is not installed: pip install 'dshtools[mcp]' ({exc})"
    if missing is not None and top != "dshtools":
        return f"module {missing!r}, which the MCP client needs, is not installed: pip install 'dshtools[mcp]' ({exc})"
    return f"the MCP client could not be imported ({exc})"


def dshtools_path() -> str:
    """A ``PYTHONPATH`` under which a child Python imports this very
    dshtools, whatever the interpreter's own path says: the directory
    holding this package, then the current ``PYTHONPATH``."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)


REMOTE_MODULE = "dshtools._cli.demo_remote_tools"
REMOTE_TOOL = "remote_sleep"


class RemoteTool(Closing):
    """The demo's remote tool: ``remote_sleep`` of our own MCP server
    (``python -m dshtools mcp --tools dshtools._cli.demo_remote_tools``),
    started over stdio by ``MCPClient.stdio`` and registered as a registry
    tool whose calls are sent to that server.

    The server starts (and the MCP SDK is imported) on a thread of its own
    from the constructor on, so it overlaps the rest of the demo's setup;
    ``register(registry)`` waits for it. The server writes what happened to
    each call's body on its side to ``log_path``
    (``dshtools._cli.demo_remote_tools``); ``check()`` reads it after
    ``close()``, which stops the server and confirms its process group gone.
    Without the MCP SDK (the ``mcp`` extra), or when the server cannot be
    started, ``register`` registers nothing and ``unavailable`` says why."""

    def __init__(self, workdir: str) -> None:
        self.log_path = os.path.join(workdir, "remote.log")
        self.unavailable: str | None = None
        self.server_pid: int | None = None
        self._client: Any = None
        self._thread: threading.Thread | None = threading.Thread(target=self._connect, name="dshtools-demo-mcp")
        self._thread.start()

    def _connect(self) -> None:
        try:
            from ..mcp import MCPClient
        except ImportError as exc:
            self.unavailable = missing_module_text(exc)
            return
        path = dshtools_path()
        try:
            self._client = MCPClient.stdio(
                [sys.executable, "-m", "dshtools", "mcp", "--tools", REMOTE_MODULE, "--name", "dshtools-demo"],
                env={"PYTHONPATH": path, LOG_ENV: self.log_path},
                cancel_grace=REMOTE_GRACE,
            )
            self.server_pid = self._client.server_pid
        except Exception as exc:
            self.unavailable = f"the MCP server did not start: {exc}"

    def _join(self) -> None:
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join()

    def register(self, registry: ToolRegistry) -> bool:
        """Wait for the server, then register its ``remote_sleep`` on
        ``registry`` (parallel-safe, ``REMOTE_TIMEOUT``). Whether it did."""
        self._join()
        if self._client is None:
            return False
        self._client.register_tools(
            registry, include=[REMOTE_TOOL], timeout=REMOTE_TIMEOUT, is_concurrency_safe=lambda args: True
        )
        return True

    def events(self) -> list[dict[str, Any]]:
        """What the server wrote about its bodies, in order."""
        try:
            with open(self.log_path, encoding="utf-8") as f:
                return [json.loads(line) for line in f if line.strip()]
        except (OSError, ValueError):
            return []

    def check(self) -> tuple[str, bool] | None:
        """The quiescence check of the remote call, once ``close()`` ran:
        every body the server started returned there. ``None`` when no
        remote call was made."""
        events = self.events()
        started = [e for e in events if e.get("event") == "started"]
        if not started:
            return None
        returned = [e for e in events if e.get("event") == "returned"]
        aborted = [e for e in events if e.get("event") == "aborted"]
        server = f"MCP server pid {self.server_pid}, stopped" if self.server_pid is not None else "MCP server stopped"
        if aborted and returned:
            what = (
                f"aborted on the server after {aborted[0]['after_ms']:.0f} ms, body returned "
                f"{max(0.0, returned[0]['after_ms'] - aborted[0]['after_ms']):.0f} ms later"
            )
        elif returned:
            what = f"body returned on the server after {returned[0]['after_ms']:.0f} ms"
        else:
            what = "body did not return on the server"
        label = f"remote: {REMOTE_TOOL} {what} ({len(returned)} of {len(started)} bodies returned; {server})"
        return label, len(returned) == len(started)

    def close(self) -> None:
        """Stop the server (the client's ``close()``: calls in flight are
        cancelled, its process group is stopped and confirmed gone).
        Idempotent."""
        self._join()
        client, self._client = self._client, None
        if client is not None:
            client.close()
