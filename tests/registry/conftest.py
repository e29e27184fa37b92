"""Fixtures of the registry's tests."""

from __future__ import annotations

import pytest


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Every ``pytest.mark.anyio`` test of this folder runs under asyncio
    and under trio (the awaited entry points promise both)."""
    return str(request.param)
