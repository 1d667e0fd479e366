"""Progress lines on the terminal, visible even while pytest captures output."""

from __future__ import annotations

import pytest


def say(config: pytest.Config, line: str) -> None:
    """A progress line on the terminal, visible even while output is captured."""
    tr = config.pluginmanager.get_plugin("terminalreporter")
    if tr is None:
        return
    tw = getattr(tr, "_tw", None)
    if tw is not None and getattr(tw, "width_of_current_line", 0) and not getattr(tr, "currentfspath", None):
        # a line left open that pytest's own newline would not close: its last "[100%]" (written after
        # the last teardown said something) — "[100%]llmgate: run history: …" otherwise
        tw.line()
    capman = config.pluginmanager.get_plugin("capturemanager")
    if capman is not None:
        with capman.global_and_fixture_disabled():
            tr.write_line(line)
    else:
        tr.write_line(line)
