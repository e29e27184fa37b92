"""A user's type checker finds dshtools after the README's editable install.

``pip install -e ".[test]"`` must leave dshtools where ``mypy`` looks: a
plain path entry (setup.cfg's ``[editable_wheel] mode = compat``), not
setuptools' import-hook finder, which only the interpreter can follow. The
check runs ``mypy --strict`` the way a user would, on scripts in a
temporary directory outside the checkout and without its configuration.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

USER_SCRIPT = textwrap.dedent(
    """
    from collections.abc import Mapping
    from typing import Any

    from dshtools import AbortController, FrozenDict, ToolDefinition, ToolExecutionInput, ToolRegistry, ToolRunContext


    def greet(args: Mapping[str, Any], run: ToolRunContext) -> dict[str, str]:
        run.signal.throw_if_aborted()
        return {"greeting": f"hello {args['name']}"}


    def size(args: FrozenDict, run: ToolRunContext) -> int:
        return len(args)


    def main() -> None:
        with ToolRegistry() as registry:
            registry.register(ToolDefinition("greet", "Greet someone.", {"type": "object"}, greet))
            registry.register(ToolDefinition("size", "Count keys.", {"type": "object"}, size))
            controller = AbortController()
            result = registry.execute(ToolExecutionInput("c1", "greet", {"name": "ada"}, controller.signal))
            code: str | None = result.code
            print(code)
    """
)

# The negative control: if mypy could not see dshtools' types (a missing
# module silenced, or everything Any), this error would not be reported.
WRONG_SCRIPT = textwrap.dedent(
    """
    from dshtools import AbortController, ToolExecutionInput

    ToolExecutionInput("c1", "greet", {}, AbortController())
    """
)


@pytest.mark.timeout(300)
def test_mypy_strict_outside_the_checkout_finds_dshtools_and_its_types(tmp_path: Path) -> None:
    (tmp_path / "agent.py").write_text(USER_SCRIPT, encoding="utf-8")
    (tmp_path / "wrong.py").write_text(WRONG_SCRIPT, encoding="utf-8")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--no-incremental",
            "--cache-dir",
            str(tmp_path / ".mypy_cache"),
            "agent.py",
            "wrong.py",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=290,
    )
    out = proc.stdout + proc.stderr
    assert "Cannot find implementation or library stub" not in out, out
    assert "agent.py" not in out, out  # the user's script type-checks as written
    errors = re.findall(r"^wrong\.py:(\d+): error: .*\[(\S+)\]$", proc.stdout, re.M)
    assert errors == [("4", "arg-type")], out
    assert proc.returncode == 1
