"""An engine's log files: their names (one per boot, per session: a later session does not
overwrite an earlier one's), the pruning of old sessions' logs, and reading a log's tail.

Within a session (``name_by_session``) a boot's log is ``<entry>.boot<N>.<session>.log``, where
``<session>`` is the session's start (``YYYYMMDD-HHMMSS``) and its pid, so that the logs of a
session sort together by time; outside one (a script that makes its own ``Server``) it is
``<entry>.<N>.log``.  ``prune`` keeps the logs of the last ``KEEP_SESSIONS`` sessions of a folder
(and of its subfolders: the probes' and A/B mode's servers).
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

KEEP_SESSIONS = 10
_SESSION_RE = re.compile(r"\.(\d{8}-\d{6}-\d+)\.log$")       # the session part of a log's name
_session: dict[str, str | None] = {"stamp": None}


def session_stamp(started: float | None = None, pid: int | None = None) -> str:
    """A session's part of its logs' names: its local start time and its pid (two sessions that
    start in the same second are told apart)."""
    t = time.localtime(time.time() if started is None else started)
    return f"{time.strftime('%Y%m%d-%H%M%S', t)}-{os.getpid() if pid is None else pid}"


def name_by_session(stamp: str | None) -> None:
    """The logs of every server this process starts from now on carry ``stamp`` (None: none)."""
    _session["stamp"] = stamp


def log_name(entry: str, boot: int, attempt: int = 0) -> str:
    """The file name of entry ``entry``'s ``boot``-th boot's log (``attempt``: a retry on another port)."""
    retry = f"-retry{attempt}" if attempt else ""
    stamp = _session["stamp"]
    return f"{entry}.boot{boot}{retry}.{stamp}.log" if stamp else f"{entry}.{boot}{retry}.log"


def _stamp_key(stamp: str) -> tuple[str, int]:
    when, _, pid = stamp.rpartition("-")
    return when, int(pid)


def prune(folder: Path, keep: int = KEEP_SESSIONS) -> list[Path]:
    """Remove the logs (``*.log`` named by session, in ``folder`` and below) of all but the last
    ``keep`` sessions, the current one always kept; the files removed.  Logs named otherwise (an
    older llmgate's, a script's) are left alone."""
    try:
        files = [p for p in Path(folder).rglob("*.log") if _SESSION_RE.search(p.name)]
    except OSError:
        return []
    by_stamp: dict[str, list[Path]] = {}
    for p in files:
        m = _SESSION_RE.search(p.name)
        assert m is not None
        by_stamp.setdefault(m.group(1), []).append(p)
    current = _session["stamp"]
    older = sorted((s for s in by_stamp if s != current), key=_stamp_key, reverse=True)
    removed = []
    for stamp in older[max(0, keep - 1 if current else keep):]:          # the current session is one of them
        for p in by_stamp[stamp]:
            try:
                p.unlink()
                removed.append(p)
            except OSError:
                pass
    return removed


def size(path: Path) -> int:
    """How many bytes the log holds now (0 when it cannot be read)."""
    try:
        return Path(path).stat().st_size
    except OSError:
        return 0


def read_from(path: Path, offset: int, limit: int = 4_000_000) -> str:
    """The log from byte ``offset`` on (at most ``limit`` bytes), as text."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read(limit).decode("utf-8", "replace")
    except OSError:
        return ""


def tail(path: Path, lines: int = 25) -> str:
    """The last ``lines`` lines of a log ("" when it cannot be read)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64_000))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])
