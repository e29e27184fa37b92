"""The command line's edges, run in this process (docs/contract.md#interop-and-cli):
option values out of range are one-line usage errors, the ``mcp`` command
without the MCP SDK names the extra to install while any other import
failure is not disguised as that, a Ctrl-C while ``--tools`` loads exits
130 after saying so, and a terminal that hung up while the report was
written exits with the signal's status even when the streams have no file
descriptor. Transcript and ``--tools`` inputs: a directory or a file that is
not UTF-8 is a usage error, an Anthropic message without ``tool_use``
blocks is no batch, the current directory is importable even when it is
not on ``sys.path``, and a file path in ``--tools`` gets the module form to
write instead. Table cells: a call without a result, a failure without a
code and arguments that cannot be shown as JSON."""

from __future__ import annotations

import argparse
import errno
import io
import os
import sys
from pathlib import Path

import pytest

from dshtools import ToolFailure
from dshtools._cli.inputs import UsageError, load_registry, load_transcript
from dshtools._cli.main import _dispatch, main
from dshtools._cli.table import arguments_text, outcome_of
from dshtools._core.freeze import freeze
from dshtools._types.calls import ErrorDetail

TOOLS = """\
from dshtools import ToolRegistry

registry = ToolRegistry()
"""


@pytest.fixture
def tools_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory holding ``edge_tools.py`` (a registry), made the current
    directory and importable; the module is forgotten afterwards."""
    (tmp_path / "edge_tools.py").write_text(TOOLS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("edge_tools", "interrupting_tools"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    return tmp_path


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--cancel-after", "soon", "not a number of seconds: 'soon'"),
        ("--cancel-after", "inf", "must be a finite number of seconds >= 0, got 'inf'"),
        ("--cancel-after", "nan", "must be a finite number of seconds >= 0, got 'nan'"),
        ("--max-parallel", "many", "not an integer: 'many'"),
        ("--max-parallel", "0", "must be >= 1, got 0"),
    ],
)
def test_an_option_value_out_of_range_is_a_one_line_usage_error(
    option: str, value: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["replay", "t.json", "--tools", "m:r", option, value]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err


def test_valid_option_values_are_accepted_and_the_run_goes_on_to_its_inputs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "missing.json"
    assert main(["replay", str(missing), "--tools", "m:r", "--max-parallel", "3", "--cancel-after", "0.5"]) == 2
    assert capsys.readouterr().err == f"dshtools: error: transcript not found: {missing}\n"


@pytest.mark.timeout(30)
def test_the_mcp_command_without_the_sdk_names_the_extra_to_install(
    tools_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delitem(sys.modules, "dshtools.mcp", raising=False)
    monkeypatch.setitem(sys.modules, "mcp_types", None)  # "import mcp_types" raises ImportError
    assert main(["mcp", "--tools", "edge_tools:registry"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dshtools: error: the mcp command needs the MCP SDK: pip install 'dshtools[mcp]' ("), err
    assert err.count("\n") == 1


@pytest.mark.timeout(30)
def test_an_import_failure_of_dshtools_itself_is_not_reported_as_the_missing_extra(
    tools_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "dshtools.mcp", None)
    with pytest.raises(ImportError) as info:
        main(["mcp", "--tools", "edge_tools:registry"])
    assert info.value.name == "dshtools.mcp"


@pytest.mark.timeout(30)
def test_ctrl_c_while_the_tools_load_says_interrupted_and_exits_130(
    tools_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tools_dir / "interrupting_tools.py").write_text("raise KeyboardInterrupt\n")
    (tools_dir / "t.json").write_text('{"role": "assistant", "tool_calls": []}')
    # the transcript has no calls: an error only once the tools loaded, so 130 proves the order
    (tools_dir / "t.json").write_text(
        '{"role": "assistant", "tool_calls": [{"id": "c", "type": "function", '
        '"function": {"name": "t", "arguments": "{}"}}]}'
    )
    assert main(["replay", "t.json", "--tools", "interrupting_tools:registry"]) == 130
    assert capsys.readouterr().err == "dshtools: interrupted\n"


def _raising(exc: BaseException) -> argparse.Namespace:
    def func(_ns: argparse.Namespace) -> int:
        raise exc

    return argparse.Namespace(func=func)


def test_a_hang_up_while_writing_exits_with_the_signal_status_even_without_file_descriptors(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    out, err = io.StringIO(), io.StringIO()  # fileno() raises io.UnsupportedOperation
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    assert _dispatch(_raising(OSError(errno.EIO, "Input/output error")), lambda: 129) == 129
    assert out.getvalue() == err.getvalue() == ""


def test_a_write_error_other_than_a_hang_up_is_not_hidden() -> None:
    with pytest.raises(OSError) as info:
        _dispatch(_raising(OSError(errno.ENOSPC, "No space left on device")), lambda: 129)
    assert info.value.errno == errno.ENOSPC


def test_a_transcript_that_is_a_directory_or_not_utf8_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="transcript is a directory, not a file: "):
        load_transcript(str(tmp_path))
    latin = tmp_path / "latin1.json"
    latin.write_bytes('{"role": "assistant", "content": "café"}'.encode("latin-1"))
    with pytest.raises(UsageError, match=r"cannot read transcript .*latin1\.json: 'utf-8' codec can't decode"):
        load_transcript(str(latin))


def test_an_anthropic_message_without_tool_use_blocks_is_no_batch(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text(
        '[{"role": "assistant", "content": [{"type": "text", "text": "thinking"}]},'
        ' {"role": "assistant", "content": [{"type": "tool_use", "id": "u1", "name": "t", "input": {}}]}]'
    )
    batches = load_transcript(str(path))
    assert [(batch.number, batch.fmt, len(batch.calls)) for batch in batches] == [(2, "anthropic", 1)]


def test_the_current_directory_is_importable_even_when_it_is_not_on_sys_path(
    tools_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tools_dir), os.getcwd())])
    registry = load_registry("edge_tools:registry")
    try:
        assert sys.path[0] == os.getcwd() == str(tools_dir)
    finally:
        registry.close()


@pytest.mark.parametrize(
    ("spec", "suggested"),
    [
        ("missing_tools.py:registry", "--tools missing_tools.py:registry"),
        ("pkg/tools:registry", "--tools pkg.tools:registry (the current directory is importable)"),
    ],
)
def test_a_file_like_tools_spec_gets_the_module_form(tools_dir: Path, spec: str, suggested: str) -> None:
    with pytest.raises(UsageError) as info:
        load_registry(spec)
    text = str(info.value)
    assert text.startswith("--tools takes a module name, not a file path: "), text
    if spec.endswith(".py:registry"):  # not a file here: the stem is the module
        assert "use --tools missing_tools:registry" in text, text
    else:
        assert f"use {suggested}" in text, text


def test_a_row_without_a_result_prints_no_result_and_an_empty_detail() -> None:
    """The rows of a batch that never started (a Ctrl-C between batches)."""
    from dshtools._cli.run import _Row
    from dshtools._cli.table import print_table
    from dshtools._types.hooks import ProgressUpdate

    out = io.StringIO()
    row = _Row(2, "c9", "dl", None, arguments={"n": 1}, progress=ProgressUpdate(1, 2))
    print_table([row], lambda row: "?", out)
    header, line = out.getvalue().splitlines()[:2]
    assert header.split() == ["BATCH", "CALL", "ID", "TOOL", "OUTCOME", "BODY", "DURATION", "ARGS", "DETAIL"]
    assert line.split() == ["2", "c9", "dl", "NO", "RESULT", "?", "-", '{"n":', "1}"]  # nothing under DETAIL


def test_table_cells_for_no_result_a_codeless_failure_and_unprintable_arguments() -> None:
    assert outcome_of(None) == "NO RESULT"
    codeless = ToolFailure(ErrorDetail("hook said no", None), content="Error: hook said no")
    assert codeless.code is None
    assert outcome_of(codeless) == "ERROR(?)"
    assert arguments_text(None) == "-"
    deep: object = 0
    for _ in range(100_000):
        deep = [deep]
    assert arguments_text(freeze(deep)) == "<tuple>"  # too deep for json.dumps
