"""The report page (report.html) opened in a real browser: Debian's ``chromium`` package, headless
(``.ci/run`` installs it; the tests that use it skip, saying so, where it is absent).

``open_page`` runs Chromium twice on the file: ``--dump-dom`` gives the DOM after the page's script
ran, with the browser's console on stderr (``--enable-logging=stderr``: a script error is a
``CONSOLE`` line, "Uncaught …"), and ``--screenshot`` at 1280×2000.  No network: the flags turn off
everything Chromium would fetch by itself, and the page fetches nothing (it is self-contained).
``rows`` reads the verdict table out of the DOM."""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-default-apps", "--disable-extensions", "--mute-audio"]
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}
CONSOLE = re.compile(r":(INFO|WARNING|ERROR|FATAL):CONSOLE[^\]]*\] (.*)")


def chromium() -> str | None:
    """The browser, or None: ``$LLMGATE_CHROMIUM``, else ``chromium`` on PATH or /usr/bin/chromium (Debian's),
    else another build of it on PATH (``chromium-browser``, ``google-chrome``: the same flags)."""
    for cand in (os.environ.get("LLMGATE_CHROMIUM"), shutil.which("chromium"), "/usr/bin/chromium",
                 shutil.which("chromium-browser"), shutil.which("google-chrome")):
        if cand and Path(cand).is_file() and os.access(cand, os.X_OK):
            return cand
    return None


WHY_SKIPPED = "no chromium (Debian's package; .ci/run installs it: apt-get install -y chromium)"


@dataclasses.dataclass
class Opened:
    dom: str
    console: list[tuple[str, str]]          # (level, message) of each console line
    stderr: str
    screenshot: Path | None

    def script_errors(self) -> list[str]:
        """Console lines that are errors: "Uncaught …", or logged at level ERROR/WARNING."""
        return [msg for level, msg in self.console if level in ("ERROR", "WARNING", "FATAL") or "Uncaught" in msg]


def open_page(page: Path, work: Path, screenshot: Path | None = None, timeout: float = 90) -> Opened:
    exe = chromium()
    assert exe is not None, WHY_SKIPPED
    work.mkdir(parents=True, exist_ok=True)
    url = page.resolve().as_uri()
    common = [exe, *FLAGS, "--enable-logging=stderr", "--v=0"]
    r = subprocess.run([*common, f"--user-data-dir={work / 'profile-dom'}", "--dump-dom", url],
                       capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"chromium --dump-dom exited {r.returncode}:\n{r.stderr[-3000:]}"
    console = [(m.group(1), m.group(2)) for m in CONSOLE.finditer(r.stderr)]
    shot = None
    if screenshot is not None:
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        s = subprocess.run([*common, f"--user-data-dir={work / 'profile-shot'}", "--window-size=1280,2000",
                            "--hide-scrollbars", f"--screenshot={screenshot}", url],
                           capture_output=True, text=True, timeout=timeout)
        assert s.returncode == 0 and screenshot.is_file(), f"chromium --screenshot exited {s.returncode}:\n{s.stderr[-3000:]}"
        console += [(m.group(1), m.group(2)) for m in CONSOLE.finditer(s.stderr)]
        shot = screenshot
    return Opened(r.stdout, console, r.stderr, shot)


class _Reader(HTMLParser):
    """The verdict table's rows (their data-* attributes, in order), the chart cards, the texts of
    elements by id, and the attributes of <html>."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.rows: list[dict[str, str | None]] = []
        self.cards: list[dict[str, str | None]] = []
        self.texts: dict[str, str] = {}
        self.root: dict[str, str | None] = {}
        self.external: list[str] = []
        self._in_table = False
        self._open: list[tuple[str, str | None]] = []        # (tag, id) of the open elements with an id

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "html":
            self.root = a
        if tag == "table" and a.get("id") == "verdicts":
            self._in_table = True
        if tag == "tr" and self._in_table and "data-status" in a:
            self.rows.append(a)
        if tag == "div" and (a.get("id") or "").startswith("chart-"):
            self.cards.append(a)
        for attr in ("src", "href"):
            if re.match(r"\s*(https?:)?//", a.get(attr) or ""):
                self.external.append(f"<{tag} {attr}={a[attr]}>")
        if tag in ("link", "iframe", "img", "object", "embed") and a.get("src" if tag != "link" else "href"):
            self.external.append(f"<{tag}> {a}")
        if a.get("id"):
            self.texts[a["id"]] = ""
        if tag not in VOID:
            self._open.append((tag, a.get("id")))

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        if tag not in VOID:
            self.handle_endtag(tag)

    def handle_endtag(self, tag):
        if tag == "table":
            self._in_table = False
        if any(t == tag for t, _ in self._open):
            while self._open and self._open.pop()[0] != tag:
                pass

    def handle_data(self, data):
        for _, ident in self._open:
            if ident:
                self.texts[ident] += data


def read(dom: str) -> _Reader:
    r = _Reader()
    r.feed(dom)
    r.close()
    return r
