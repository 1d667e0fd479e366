"""Progress lines on the terminal, visible even while pytest captures output."""

from __future__ import annotations

import pytest


def say(config: pytest.Config, line: str) -> None:
    """A progress line on the terminal, visible even while output is captured."""
    tr = config.pluginmanager.get_plugin("terminalreporter")
    if tr is None:
        return
    capman = config.pluginmanager.get_plugin("capturemanager")
    if capman is not None:
        with capman.global_and_fixture_disabled():
            tr.write_line(line)
    else:
        tr.write_line(line)
