"""SIGTERM and SIGHUP handled like Ctrl-C.

``timeout``, a CI step's time limit and a job cancel send SIGTERM; a closed terminal or SSH
session sends SIGHUP.  By default either ends pytest at once, and its servers with it only
because the watchdog notices.  With these handlers the first such signal raises
KeyboardInterrupt in the main thread, so pytest's own interrupt path runs: the running test
stops, ``pytest_sessionfinish`` stops every server and writes the report of what was measured,
and pytest exits with status 2 (interrupted).

A second signal (SIGINT, SIGTERM or SIGHUP) while the session is already stopping does not
interrupt the stopping: it makes it hurry (servers are killed at once instead of being given
their grace period), so a cancel sequence of SIGINT, SIGTERM, then SIGKILL a few seconds
later still finds the servers stopped and the report written.
"""

from __future__ import annotations

import signal
import threading
from typing import Any

HANDLED = (signal.SIGTERM, signal.SIGHUP)

HURRY = threading.Event()       # set by a signal that arrives while the session is stopping


class Interrupts:
    def __init__(self) -> None:
        self.received: str | None = None      # the first signal's name
        self.stopping = False                 # the session is shutting down: later signals only hurry it
        self._previous: dict[int, Any] = {}

    def install(self) -> bool:
        """Install the handlers (main thread only); False where they cannot be."""
        if threading.current_thread() is not threading.main_thread():
            return False
        for sig in HANDLED:
            try:
                self._previous[sig] = signal.signal(sig, self._handle)
            except (ValueError, OSError):
                pass
        # SIGINT keeps Python's behaviour (KeyboardInterrupt) until the session stops; only the
        # default handler is replaced, never one that someone else installed
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            self._previous[signal.SIGINT] = signal.signal(signal.SIGINT, self._handle)
        HURRY.clear()
        return bool(self._previous)

    def uninstall(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig, prev in self._previous.items():
            try:
                signal.signal(sig, prev if prev is not None else signal.SIG_DFL)
            except (ValueError, OSError, TypeError):
                pass
        self._previous.clear()

    def _handle(self, signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        if self.stopping:
            HURRY.set()
            return
        if self.received is None:
            self.received = name
        raise KeyboardInterrupt(f"llmgate: {name} received")

    def begin_stopping(self) -> None:
        self.stopping = True
