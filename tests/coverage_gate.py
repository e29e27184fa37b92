"""The coverage threshold gates the whole suite, not a part of it.

``python -m pytest`` measures branch coverage of ``dshtools/`` (pytest-cov,
configured in ``pyproject.toml``) and fails when the total is under
``[tool.coverage.report] fail_under``. A run of chosen paths
(``python -m pytest tests/signal``) or of a selection (``-k``, ``-m``,
``--lf``) still measures and prints the table, but its total says nothing
about the suite, so the threshold is not applied to it: such a run fails only
when a test fails. Loaded by ``-p tests.coverage_gate`` in ``setup.cfg``
(docs/decisions/0057-the-coverage-threshold-gates-the-whole-suite.md).
"""

from __future__ import annotations

from typing import Any

import pytest

_SKIPPED = pytest.StashKey[float]()
_DESELECTED = pytest.StashKey[list[pytest.Item]]()


def _coverage_plugin(config: pytest.Config) -> Any:
    """pytest-cov's plugin object when it measures this run, else ``None``."""
    plugin = config.pluginmanager.getplugin("_cov")
    if plugin is None or getattr(plugin, "_disabled", True):
        return None
    return plugin


def whole_suite(config: pytest.Config, deselected: int) -> bool:
    """``True`` when the run collected the configured ``testpaths`` and kept
    every collected test."""
    return config.args_source is pytest.Config.ArgsSource.TESTPATHS and deselected == 0


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    plugin = _coverage_plugin(session.config)
    if plugin is None:
        return
    threshold = plugin.options.cov_fail_under
    deselected = len(session.config.stash.get(_DESELECTED, []))
    if threshold and not whole_suite(session.config, deselected):
        session.config.stash[_SKIPPED] = threshold
        plugin.options.cov_fail_under = None


def pytest_deselected(items: list[pytest.Item]) -> None:
    config = items[0].config if items else None
    if config is not None:
        config.stash.setdefault(_DESELECTED, []).extend(items)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    threshold = config.stash.get(_SKIPPED, None)
    if threshold is not None:
        terminalreporter.write_line(
            f"coverage threshold ({threshold:g} %) not checked: it applies to a run of the whole suite", yellow=True
        )
