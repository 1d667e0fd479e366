"""SIGTERM and SIGHUP handled like Ctrl-C.

``timeout``, a CI step's time limit and a job cancel send SIGTERM; a closed terminal or SSH
session sends SIGHUP.  By default either ends pytest at once, and its servers with it only
because the watchdog notices.  With these handlers the first such signal raises
KeyboardInterrupt in the main thread, so pytest's own interrupt path runs: the running test
stops, ``pytest_sessionfinish`` stops every server and writes the report of what was measured,
and pytest exits with status 2 (interrupted).

A second signal (SIGINT, SIGTERM or SIGHUP) after the first does not interrupt the stopping: it
makes it hurry (servers are killed at once instead of being given their grace period), so a
cancel sequence of SIGINT, SIGTERM, then SIGKILL a few seconds later still finds the servers
stopped and the report written.  That holds from the first signal on, not only once pytest has
begun to stop the session: a Ctrl-C during a boot stops that server as the boot unwinds
(``Server.start``), before pytest's interrupt hook runs, and a second Ctrl-C raised there broke
that stop off (pytest exited while vLLM was still shutting down, its record left behind).

Should the main thread not get to stop the servers (stuck in a call that does not return; seen
once in five SIGTERMs mid-measurement, cause not found), a helper thread does it ``STUCK_S``
seconds after the first signal: the callbacks in ``on_stuck`` (the plugin's: end every server not
yet signalled), then, if the session has still not begun to stop, the signal is raised in the
main thread once more (``_thread.interrupt_main``).
"""

from __future__ import annotations

import _thread
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

HURRY = threading.Event()       # set by a signal that arrives while the session is stopping
STUCK_S = 5.0                   # after the first signal: servers not signalled by then are ended from a thread


class Interrupts:
    def __init__(self) -> None:
        self.received: str | None = None      # the first signal's name
        self.stopping = False                 # the session is shutting down: later signals only hurry it
        self.on_stuck: list[Callable[[str], None]] = []
        self._previous: dict[int, Any] = {}
        self._timer: threading.Timer | None = None
        self._again = False                   # the stuck helper's own interrupt: raised like the first

    def install(self) -> bool:
        """Install the handlers (main thread only); False where they cannot be."""
        if threading.current_thread() is not threading.main_thread():
            return False
        # only default dispositions are replaced, never a handler someone else installed (or an
        # ignored signal); SIGINT keeps Python's behaviour (KeyboardInterrupt) until the session stops
        for sig, default in ((signal.SIGTERM, signal.SIG_DFL), (signal.SIGHUP, signal.SIG_DFL),
                             (signal.SIGINT, signal.default_int_handler)):
            try:
                if signal.getsignal(sig) is default:
                    self._previous[sig] = signal.signal(sig, self._handle)
            except (ValueError, OSError):
                pass
        HURRY.clear()
        return bool(self._previous)

    def uninstall(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
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
        if self.stopping or (self.received is not None and not self._again):
            HURRY.set()                         # the first one is being handled: hurry it, never break it off
            return
        self._again = False
        if self.received is None:
            self.received = name
            self._timer = threading.Timer(STUCK_S, self._stuck, (name,))
            self._timer.daemon = True
            self._timer.start()
        raise KeyboardInterrupt(f"llmgate: {name} received")

    def _stuck(self, name: str) -> None:
        for callback in self.on_stuck:
            try:
                callback(name)
            except Exception as e:              # a helper thread: say it, never raise
                print(f"llmgate: after {name}: {e!r}", file=sys.__stderr__, flush=True)
        if not self.stopping:                   # the main thread is still where the signal found it
            self._again = True                  # this one raises again (a later one from outside only hurries)
            try:
                _thread.interrupt_main(getattr(signal, name))
            except (ValueError, OSError, AttributeError):
                pass

    def begin_stopping(self) -> None:
        self.stopping = True
