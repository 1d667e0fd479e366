"""Progress lines on the terminal, visible even while pytest captures output."""

from __future__ import annotations

import re

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


WIDTH = 120          # a progress line's most characters (the live "booting …" line)
_ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|[\x00-\x08\x0b-\x1f\x7f]")


def ending(text: str, room: int) -> str:
    """The end of ``text`` (an engine's log line: its message is at its end) in at most ``room``
    characters, whole words only: "…" before the first one where the start was cut.  A last word
    longer than that (a path) is shown from its start instead, "…" after it."""
    text = " ".join(_ESCAPES.sub(" ", text).split())
    if len(text) <= room:
        return text
    if room < 2:
        return ""
    kept = text[len(text) - (room - 1):]                    # room for "…"
    if not text[len(text) - room].isspace():                # the first word kept is cut: drop it
        kept = kept.partition(" ")[2]
    if kept:
        return "…" + kept.lstrip()
    head = text[:room - 1]
    return (head.rpartition(" ")[0] or head) + "…"


def boot_progress(entry: str, elapsed: float, last_line: str, width: int = WIDTH) -> str:
    """The live line of a booting server: the entry, the seconds so far and the end of the log's
    last line, at most ``width`` characters (the entry in full, whatever its length)."""
    head = f"llmgate: booting {entry}: {elapsed:.0f} s"
    rest = ending(last_line, width - len(head) - len(", log: "))
    return f"{head}, log: {rest}" if rest else head
