"""The servers of this process that have not been stopped: where each is recorded while it runs
(``strays``' folder, set by the plugin), when the last one finished stopping, and stopping, signalling
or ending them all at once (a signal, an interrupted or stuck session, the session's end)."""

from __future__ import annotations

import signal
import time
import weakref
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from llmgate.process.server import Server

_records: dict[str, Path | None] = {"dir": None}      # where running servers are recorded (set by the plugin)
_live: weakref.WeakSet[Server] = weakref.WeakSet()     # Servers of this process not yet stopped
_last_stop = [0.0]        # time.monotonic() when a server of this process last finished stopping


def record_servers_in(out_dir: Path | None) -> None:
    """Record every server this process starts from now on under ``out_dir/servers/``."""
    _records["dir"] = Path(out_dir) if out_dir is not None else None


def records_dir() -> Path | None:
    """Where running servers are recorded; None: they are not."""
    return _records["dir"]


def add(server: Server) -> None:
    """``server`` is starting: it is live until ``discard``."""
    _live.add(server)


def discard(server: Server) -> None:
    _live.discard(server)


def note_stopped() -> None:
    """A server of this process has just finished stopping."""
    _last_stop[0] = time.monotonic()


def last_stop() -> float:
    """time.monotonic() when a server of this process last finished stopping; 0.0 if none has."""
    return _last_stop[0]


def stop_all_live(grace_s: float = 20.0) -> list[str]:
    """Stop every server of this process that is still running (probe and A/B servers too);
    the configuration ids of those stopped."""
    stopped = []
    for server in list(_live):
        server.stop(grace_s)
        stopped.append(server.cfg.id)
    return stopped


def signal_all_live(sig: int = signal.SIGTERM) -> None:
    """Tell every server of this process to stop, all at once (an interrupted session then waits
    for them together instead of one after the other)."""
    for s in list(_live):
        if not s.signalled:
            s.signal_group(sig)


def end_unsignalled(grace_s: float = 3.0) -> list[str]:
    """(any thread) End every server of this process that nobody has begun to stop: SIGTERM to its
    process group, SIGKILL after ``grace_s``.  For a session whose main thread is stuck after an
    interrupt; the configuration ids of the servers ended."""
    ended = [s for s in list(_live) if not s.signalled]
    for s in ended:
        s.signal_group(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(s.group_alive() for s in ended):
        time.sleep(0.1)
    for s in ended:
        s.signal_group(signal.SIGKILL)
    return [s.cfg.id for s in ended]
