"""``Closing`` (``dshtools._core.closing``): ``with obj:`` returns ``obj``
and closes it however the block ends, never suppressing an exception."""

from __future__ import annotations

import pytest

from dshtools._core.closing import Closing


class _Recording(Closing):
    __slots__ = ("closed",)

    def __init__(self) -> None:
        self.closed = 0

    def close(self) -> None:
        self.closed += 1


def test_the_block_gets_the_object_itself_and_it_is_closed_once_at_the_end() -> None:
    obj = _Recording()
    with obj as entered:
        assert entered is obj and obj.closed == 0
    assert obj.closed == 1


def test_an_exception_in_the_block_closes_the_object_and_propagates() -> None:
    obj = _Recording()
    with pytest.raises(KeyError, match="inside"), obj:
        raise KeyError("inside")
    assert obj.closed == 1


def test_the_base_has_no_close_of_its_own() -> None:
    with pytest.raises(NotImplementedError):
        Closing().close()
    with pytest.raises(NotImplementedError), Closing():
        pass
