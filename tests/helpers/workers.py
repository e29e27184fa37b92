"""Bodies a worker process runs (imported by reference in the worker).

``write_line`` (to a FIFO the test reads), ``blocked_until_released``,
``raises_worker_only`` with ``WORKER_ONLY_MODULE`` and the check
``assert_worker_only_errors_keep_name_message_and_code``,
``returns_worker_only_instance``, ``returns_exiting_value`` and
``raises_exiting_error`` (an outcome whose unpickling exits). A worker
imports this module, so it imports only ``dshtools``, the standard library
and ``tests.helpers.calls``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from dshtools import TOOL_ERROR
from tests.helpers.calls import call, error_of

if TYPE_CHECKING:  # only in annotations
    from dshtools import ToolRegistry, ToolRunContext


def write_line(path: str, text: str) -> None:
    """Write ``text`` and a newline to ``path`` (a FIFO a test blocks on
    reading: a body announces that it started)."""
    with open(path, "w", encoding="ascii") as f:
        f.write(text + "\n")


def blocked_until_released(args: Mapping[str, Any], run: ToolRunContext) -> object:
    """A body for a worker: writes its pid to the FIFO ``args["started"]``,
    then blocks reading the FIFO ``args["release"]`` (ignoring its signal)
    until the test writes a line; returns ``"released"``."""
    write_line(args["started"], str(os.getpid()))
    with open(args["release"], encoding="ascii") as f:
        f.readline()
    return "released"


WORKER_ONLY_MODULE = """\
from dshtools import ToolError

class WorkerOnlyError(Exception):
    pass

class WorkerOnlyQuotaError(ToolError):
    pass
"""


def raises_worker_only(args: Mapping[str, Any], run: ToolRunContext) -> object:
    """A body for a worker: imports the module ``args["module"]`` from the
    folder ``args["dir"]`` (a folder only the worker puts on its path, as
    ``runtime_env={"pip": [...]}`` installs a package only there) and raises
    its ``WorkerOnlyQuotaError`` (``args["coded"]``) or ``WorkerOnlyError``."""
    import importlib

    if args["dir"] not in sys.path:
        sys.path.insert(0, args["dir"])
    module = importlib.import_module(args["module"])
    if args["coded"]:
        raise module.WorkerOnlyQuotaError("3 of 3 calls used", "QUOTA_EXCEEDED")
    raise module.WorkerOnlyError("the index is 3 days old")


def assert_worker_only_errors_keep_name_message_and_code(registry: ToolRegistry, directory: str, module: str) -> None:
    """Write ``WORKER_ONLY_MODULE`` as ``module`` in ``directory`` (checking
    that this process cannot import it: the scenario is real), call the
    tool ``worker_only`` (``raises_worker_only`` on a worker) once for each
    exception, and assert the caller gets each one's class name, message and
    ``ToolError`` code, not the driver's failure to import the module."""
    with open(os.path.join(directory, f"{module}.py"), "w", encoding="utf-8") as f:
        f.write(WORKER_ONLY_MODULE)
    try:
        __import__(module)
    except ImportError:
        pass
    else:  # pragma: no cover - the scenario would not be what it claims
        raise AssertionError(f"{module} is importable here")
    plain, coded = (
        registry.execute(call("worker_only", {"dir": directory, "module": module, "coded": c}, call_id=f"wo{i}"))
        for i, c in enumerate((False, True))
    )
    assert plain.code == TOOL_ERROR, plain
    info = error_of(plain).info
    assert info is not None and info.name == "WorkerOnlyError"
    assert error_of(plain).message == "the index is 3 days old"
    assert coded.code == "QUOTA_EXCEEDED", coded
    assert error_of(coded).message == "3 of 3 calls used"


def returns_worker_only_instance(args: Mapping[str, Any], run: ToolRunContext) -> object:
    """A body for a worker: returns an instance of ``Receipt`` from the
    module ``args["module"]``, made in the worker's ``sys.modules`` only (it
    pickles there, by reference, and the caller cannot load it)."""
    import types

    module = types.ModuleType(args["module"])
    exec("class Receipt:\n    total = 7\n", module.__dict__)
    sys.modules[module.__name__] = module
    return module.Receipt()


def returns_exiting_value(args: object, run: object) -> object:
    """A body for a worker: returns a value whose unpickling, where the
    outcome is read, calls ``sys.exit(3)``."""

    class ExitsWhenLoaded:
        def __reduce__(self) -> tuple[object, tuple[int]]:
            return (sys.exit, (3,))

    return ExitsWhenLoaded()


def raises_exiting_error(args: object, run: object) -> object:
    """A body for a worker: raises ``ExitsWhenLoadedError("boom")``, whose
    unpickling, where the outcome is read, calls ``sys.exit(4)``."""

    class ExitsWhenLoadedError(Exception):
        def __reduce__(self) -> tuple[object, tuple[int]]:
            return (sys.exit, (4,))

    raise ExitsWhenLoadedError("boom")
