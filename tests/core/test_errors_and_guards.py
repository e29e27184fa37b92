"""What ``dshtools._core.errors`` promises where the rest of the suite does
not look: the text of an ``AbortError`` for each kind of reason, the type
check of a ``TimeoutReason`` code, the stand-ins ``safe_repr`` and
``safe_str`` give for a ``__repr__``/``__str__`` that returns a non-``str``,
and ``report_unraisable`` when there is no ``sys.stderr``
(docs/contract.md#cancellation, docs/contract.md#a4)."""

from __future__ import annotations

import sys

import pytest

from dshtools import AbortError
from dshtools._core.errors import TimeoutReason, report_unraisable, safe_repr, safe_str


def test_abort_error_text_names_its_reason_or_says_it_has_none() -> None:
    assert str(AbortError()) == "operation aborted"
    assert str(AbortError("user pressed stop")) == "operation aborted: user pressed stop"
    inner = AbortError("deadline")
    outer = AbortError(inner)
    assert str(outer) == str(inner) == "operation aborted: deadline"  # not "aborted: aborted: ..."
    assert outer.__cause__ is inner and outer.reason is inner


def test_timeout_reason_code_must_be_a_str() -> None:
    with pytest.raises(TypeError, match="code must be a str, not int"):
        TimeoutReason(3, 1.0)  # type: ignore[arg-type]
    reason = TimeoutReason("TIMEOUT", 2)
    assert (reason.code, reason.seconds) == ("TIMEOUT", 2.0) and type(reason.seconds) is float


class _NotAStr(str):
    pass


class _Weird(Exception):
    def __repr__(self) -> str:
        return _NotAStr("a str subclass")

    def __str__(self) -> str:
        return _NotAStr("a str subclass")


def test_a_repr_or_str_that_returns_a_str_subclass_is_replaced_by_a_stand_in() -> None:
    # a str subclass can carry methods that run user code later; only a str crosses
    weird = _Weird()
    assert safe_repr(weird) == "<_Weird object (repr failed)>"
    assert safe_str(weird) == "<_Weird (str() failed)>"
    assert safe_repr("plain") == "'plain'" and safe_str(ValueError("plain")) == "plain"


def test_report_unraisable_without_stderr_writes_nothing_and_does_not_raise(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "unraisablehook", sys.__unraisablehook__)
    monkeypatch.setattr(sys, "stderr", None)
    report_unraisable(ValueError("lost"), "Exception ignored in listener", object())


def test_report_unraisable_with_the_builtin_hook_writes_message_object_and_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "unraisablehook", sys.__unraisablehook__)
    try:
        raise ValueError("from a listener")
    except ValueError as exc:
        report_unraisable(exc, "Exception ignored in listener", _Weird())
    err = capsys.readouterr().err
    assert err.startswith("Exception ignored in listener: <_Weird object (repr failed)>\n"), err
    assert "Traceback" in err and "ValueError: from a listener" in err
