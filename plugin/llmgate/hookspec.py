"""llmgate's hooks, for other plugins (a ``conftest.py``, a package with a ``pytest11`` entry
point), in the manner of pytest-benchmark's ``hookspec.py``.  Implement them as plain
functions named like these; pytest checks the signatures."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from llmgate.config.matrix import Matrix, ServerConfig
    from llmgate.analysis.verdict import Verdict


@pytest.hookspec
def pytest_llmgate_matrix(config: pytest.Config, matrix: Matrix) -> Matrix | None:
    """The matrix was loaded (and validated): return a changed one (``dataclasses.replace``:
    entries added, dropped or adjusted), or None to leave it.  Called once per session, before
    collection parametrizes any test; with several implementations each non-None result replaces
    the matrix, in pluggy's call order."""


@pytest.hookspec
def pytest_llmgate_provenance(item: pytest.Item, entry: ServerConfig | None, provenance: dict[str, Any]) -> None:
    """Add to ``provenance`` (a dict: device, settings, configuration, engine, model …) what every
    stored result of ``item`` should carry: a build id, a cluster name, a commit.  Stored in
    the baseline's ``extra_info["llmgate"]`` and in report.json; it is not part of the fingerprint,
    so it never makes two runs incomparable."""


@pytest.hookspec
def pytest_llmgate_verdicts(config: pytest.Config, verdicts: list[Verdict]) -> None:
    """Every verdict of the session (under pytest-xdist, on the controller: the workers' rebuilt
    from their reports), before report.json and the summary are written: post them to a
    dashboard, open an issue, page someone.  The list is a copy: changing it changes nothing."""
