"""A ``--tools`` module that misbehaves while it is imported (or while its
factory runs) is still the documented usage error: exit 2 and one line on
stderr, for ``replay`` and ``mcp`` alike (docs/contract.md#interop-and-cli; field case
N13: ``sys.exit(3)`` at import exited 3 with nothing said, and an exception
whose ``__str__`` raises printed a 42-line traceback and exited 1)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

MODULES = {
    "exits_three": "import sys\nsys.exit(3)\n",
    "exits_with_text": 'import sys\nsys.exit("going\\naway")\n',
    "unprintable": (
        "class Unprintable(Exception):\n"
        "    def __str__(self):\n"
        "        raise RuntimeError('no text for you')\n"
        "raise Unprintable()\n"
    ),
    "base_exception": "class Odd(BaseException):\n    pass\nraise Odd('not an Exception')\n",
    "factory_exits": "def make():\n    raise SystemExit(4)\n",
    "factory_unprintable": (
        "class Unprintable(Exception):\n"
        "    def __str__(self):\n"
        "        raise RuntimeError('no text')\n"
        "def make():\n"
        "    raise Unprintable()\n"
    ),
    "getattr_exits": "def __getattr__(name):\n    raise SystemExit(5)\n",
    "interrupted": "raise KeyboardInterrupt\n",
}

CASES = {
    "exits_three:registry": "called sys.exit(3)",
    "exits_with_text:registry": "called sys.exit('going\\naway')",
    "unprintable:registry": "Unprintable: <Unprintable (str() failed)>",
    "base_exception:registry": "Odd: not an Exception",
    "factory_exits:make": "calling factory_exits:make() called sys.exit(4)",
    "factory_unprintable:make": "calling factory_unprintable:make() failed: Unprintable",
    "getattr_exits:registry": "called sys.exit(5)",
}


@pytest.fixture
def modules(tmp_path: Path) -> Path:
    for name, source in MODULES.items():
        (tmp_path / f"{name}.py").write_text(source)
    (tmp_path / "t.json").write_text(
        json.dumps(
            {
                "role": "assistant",
                "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "x", "arguments": "{}"}}],
            }
        )
    )
    return tmp_path


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "dshtools", *args],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
    )


def _command(command: str, spec: str) -> list[str]:
    return ["replay", "t.json", "--tools", spec] if command == "replay" else ["mcp", "--tools", spec]


@pytest.mark.timeout(40)
@pytest.mark.parametrize("command", ["replay", "mcp"])
@pytest.mark.parametrize("spec", sorted(CASES))
def test_n13_a_module_that_misbehaves_is_a_usage_error_with_one_line(modules: Path, command: str, spec: str) -> None:
    proc = _run(_command(command, spec), modules)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert line.startswith("dshtools: error: --tools: "), line
    assert CASES[spec] in line, line
    assert line.endswith("(--traceback shows where)"), line


@pytest.mark.timeout(40)
@pytest.mark.parametrize("command", ["replay", "mcp"])
def test_n13_the_traceback_behind_a_sys_exit_at_import_is_there(modules: Path, command: str) -> None:
    proc = _run([*_command(command, "exits_three:registry"), "--traceback"], modules)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert "Traceback (most recent call last)" in proc.stderr
    assert "SystemExit: 3" in proc.stderr
    assert proc.stderr.splitlines()[-1].startswith("dshtools: error: --tools: importing 'exits_three'")


@pytest.mark.timeout(40)
def test_ctrl_c_while_the_module_is_imported_stays_an_interrupt(modules: Path) -> None:
    proc = _run(_command("replay", "interrupted:registry"), modules)
    assert proc.returncode == 130
    assert proc.stderr.splitlines() == ["dshtools: interrupted"]
