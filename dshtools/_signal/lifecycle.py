"""Process lifecycle signals for a user's own program (docs/contract.md#a13):
``abort_on_signals`` turns SIGTERM and SIGHUP (a service manager, a
container runtime, CI, ``timeout(1)``, a closed terminal) into an abort of
the program's ``AbortController``, so running tool bodies are cancelled
and joined instead of being killed with the interpreter and leaving their
child processes behind.

Guarantees:

* **Nothing runs inside the signal handler.** The handler only writes the
  signal number to a self-pipe (``os.write``, no lock). A watcher thread,
  started on entry and joined on exit, reads it and calls
  ``controller.abort(SignalReason(signum))``. The abort (and every listener
  it runs) therefore never interrupts the main thread in the middle of the
  signal machinery's own critical sections, where running it from the
  handler could deadlock.
* **Handlers restored.** On exit the previous handler of every signal is
  put back (the default, ``SIG_DFL``, where the previous one was not
  installed from Python), before the watcher thread is stopped and joined.
* **One abort.** The first signal aborts the controller; later ones are
  recorded in ``received`` and change nothing (the abort already
  happened). A program that must stop harder is stopped by SIGKILL, or
  Ctrl-\\ (SIGQUIT) at a terminal.
"""

from __future__ import annotations

import os
import signal as _os_signal
import threading
from collections.abc import Iterable
from types import FrameType
from typing import Any

from . import AbortController

__all__ = ["SignalReason", "abort_on_signals"]

_DEFAULT_SIGNALS = (_os_signal.SIGTERM, _os_signal.SIGHUP)
_STOP = 0  # the byte that tells the watcher thread to end (no signal is 0)


class SignalReason(Exception):
    """The reason ``abort_on_signals`` aborts its controller with:
    ``SignalReason(signum)``; ``signum`` is the signal's number (an ``int``,
    e.g. ``signal.SIGTERM`` = 15) and ``name`` its name (``"SIGTERM"``).
    A shell reports a process ended by a signal as ``128 + signum``; a
    program that stops cleanly on one conventionally exits with that
    status. Source: docs/contract.md#a13."""

    signum: int
    name: str

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = int(signum)
        try:
            self.name = _os_signal.Signals(signum).name
        except ValueError:
            self.name = f"signal {signum}"

    def __str__(self) -> str:
        return f"received {self.name}"

    def __repr__(self) -> str:
        return f"SignalReason({self.name})"


class abort_on_signals:
    """Context manager for the **main thread** of a user's program: while
    the block runs, each of ``signals`` (default SIGTERM and SIGHUP) aborts
    ``controller`` with ``SignalReason(signum)`` instead of ending the
    process at once.

    ``with abort_on_signals(controller) as guard:`` -- ``guard.received``
    lists the signal numbers received so far (in order, repeats included)
    and ``guard.exit_status`` (an ``int``) is ``128 + signum`` of the first
    one, or ``0`` while none came: ``return guard.exit_status`` or
    ``sys.exit(guard.exit_status)`` is right either way
    (docs/contract.md#a33).

    The abort runs on a watcher thread this context manager starts on entry
    and joins on exit, never inside the signal handler (see the module
    docstring). The previous handlers are restored on exit, whatever the
    block raised. Entering from another thread raises ``ValueError`` (only
    the main thread may install signal handlers); ``TypeError`` for a
    ``controller`` that is not an ``AbortController``; ``ValueError`` for
    an empty ``signals`` or SIGKILL/SIGSTOP (which cannot be caught).
    Not reentrant: one ``with`` per instance. Source: docs/contract.md#a13.
    """

    __slots__ = ("_controller", "_previous", "_read_fd", "_signals", "_thread", "_write_fd", "received")

    def __init__(self, controller: AbortController, signals: Iterable[int] = _DEFAULT_SIGNALS) -> None:
        if not isinstance(controller, AbortController):
            raise TypeError(f"controller must be an AbortController, not {type(controller).__name__}")
        chosen = tuple(_os_signal.Signals(s) for s in signals)
        if not chosen:
            raise ValueError("signals must name at least one signal")
        for s in chosen:
            if s in (_os_signal.SIGKILL, _os_signal.SIGSTOP):
                raise ValueError(f"{s.name} cannot be caught")
        self._controller = controller
        self._signals = tuple(dict.fromkeys(chosen))
        self._previous: dict[int, Any] = {}
        self._thread: threading.Thread | None = None
        self._read_fd = -1
        self._write_fd = -1
        self.received: list[int] = []

    @property
    def exit_status(self) -> int:
        """The exit status a program stopped by the first signal received
        gives by convention, ``128 + signum``; ``0`` (a normal exit) while
        none came."""
        return 128 + self.received[0] if self.received else 0

    def __enter__(self) -> abort_on_signals:
        if threading.current_thread() is not threading.main_thread():
            raise ValueError("abort_on_signals must be entered from the main thread")
        if self._thread is not None:
            raise RuntimeError("abort_on_signals is not reentrant")
        self._read_fd, self._write_fd = os.pipe()
        os.set_blocking(self._write_fd, False)
        self._thread = threading.Thread(target=self._watch, name="dshtools-abort-on-signals", daemon=True)
        self._thread.start()
        try:
            for s in self._signals:
                self._previous[s] = _os_signal.signal(s, self._handle)
        except BaseException:
            self._close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._close()

    def _close(self) -> None:
        for s, previous in self._previous.items():
            _os_signal.signal(s, previous if previous is not None else _os_signal.SIG_DFL)
        self._previous.clear()
        thread, self._thread = self._thread, None
        if thread is not None:
            os.write(self._write_fd, bytes([_STOP]))
            thread.join()
            os.close(self._write_fd)
            os.close(self._read_fd)

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        # Signal handler (main thread, between two bytecodes of whatever it
        # was doing): hand over, nothing else.
        try:
            os.write(self._write_fd, bytes([signum]))
        except BlockingIOError:
            pass  # 64 KiB of unread signals: the first one is already there

    def _watch(self) -> None:
        while True:
            data = os.read(self._read_fd, 512)
            for signum in data:
                if signum == _STOP:
                    return
                self.received.append(signum)
                if len(self.received) == 1:
                    self._controller.abort(SignalReason(signum))


class sigint_deferred:
    """``with sigint_deferred() as deferred:`` holds back a SIGINT (Ctrl-C)
    that arrives inside the block, so a step that must not be cut in half
    (handing work to a scheduler and keeping its handle) completes; on exit
    the previous handler is put back, and ``deferred.interrupt()`` then runs
    it for the held-back signal, returning what it raised (the
    ``KeyboardInterrupt`` of the default handler) or ``None``.

    Only the main thread receives signals, so elsewhere (and where the
    SIGINT handler was not installed from Python) this does nothing.
    Package-internal: the Ray backend's submit (docs/contract.md#backends)."""

    __slots__ = ("_frame", "_previous", "_signum")

    def __init__(self) -> None:
        self._previous: Any = None
        self._signum: int | None = None
        self._frame: FrameType | None = None

    def _hold(self, signum: int, frame: FrameType | None) -> None:
        self._signum = signum
        self._frame = frame

    def __enter__(self) -> sigint_deferred:
        if threading.current_thread() is threading.main_thread():
            previous = _os_signal.getsignal(_os_signal.SIGINT)
            if callable(previous):
                self._previous = previous
                _os_signal.signal(_os_signal.SIGINT, self._hold)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            _os_signal.signal(_os_signal.SIGINT, self._previous)

    def interrupt(self) -> BaseException | None:
        """Run the previous handler for a SIGINT held back (once); what it
        raised, else ``None``."""
        signum, self._signum = self._signum, None
        if signum is None or self._previous is None:
            return None
        try:
            self._previous(signum, self._frame)
        except BaseException as exc:
            return exc
        finally:
            self._frame = None
        return None
