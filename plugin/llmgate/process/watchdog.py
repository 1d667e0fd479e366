"""The process between the gate and an engine server: no engine outlives the process that
started it, whatever ends that process (SIGKILL, the OOM killer, a cancelled CI job).

    python -P watchdog.py --parent PID -- ENGINE COMMAND...

It is run as a file by the gate's own interpreter (stdlib and psutil only: the engine may live
in another interpreter, or be a binary), in a process group of its own (a Ctrl-C at the
terminal reaches pytest only, which stops the servers itself).  It

- starts the engine in a new process group (the gate signals that group to stop it, as it
  always did) with a parent-death signal (Linux ``PR_SET_PDEATHSIG``: SIGTERM, so that vLLM
  still shuts its own children down) should the watchdog itself be killed;
- is a child subreaper (Linux ``PR_SET_CHILD_SUBREAPER``): when a process of the engine dies,
  its orphans become the watchdog's instead of PID 1's, and it reaps them (no defunct
  ``VLLM::Worker`` left behind) and says in the log how each ended;
- watches its parent: ``PR_SET_PDEATHSIG`` (SIGUSR1) tells it at once, a one-second poll of
  ``getppid()`` covers the rest (another OS; a parent thread that ended while its process
  lives on, which PDEATHSIG also signals).  When the parent is gone it stops the engine's
  group (SIGTERM, a grace period, SIGKILL) and every process left in its subtree, and exits;
- when the engine ends on its own it stops what is left of its group and subtree too, and
  exits the way the engine did (the same exit code, or killed by the same signal), so the
  gate's ``Popen.poll()`` reads the engine's own end.

PDEATHSIG alone could not do this: it covers the direct child only, while vLLM's EngineCore
and workers are grandchildren of the gate, and they survived the API server's SIGKILL.
"""

from __future__ import annotations

import ctypes
import os
import select
import signal
import subprocess
import sys
import time

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
PREFIX = "llmgate-watchdog:"


def _prctl(option: int, arg: int) -> bool:
    """Linux prctl(2); False where there is none (another OS) or it failed."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(option, ctypes.c_ulong(arg), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def describe_status(status: int) -> str:
    """A wait status in words: ``exit code 1`` or ``exit code -9 (SIGKILL)``."""
    code = status_to_code(status)
    return f"exit code {code}" + (f" ({signal.Signals(-code).name})" if code < 0 and -code in _SIGNUMS else "")


def status_to_code(status: int) -> int:
    """A wait status as Popen.returncode reads it: the exit code, or minus the signal number."""
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    if os.WIFEXITED(status):
        return os.WEXITSTATUS(status)
    return status


_SIGNUMS = {s.value for s in signal.Signals}


def say(line: str) -> None:
    sys.stdout.write(f"{PREFIX} {line}\n")
    sys.stdout.flush()


class Watchdog:
    def __init__(self, parent: int, cmd: list[str], grace_s: float):
        self.parent, self.cmd, self.grace_s = parent, cmd, grace_s
        self.child: subprocess.Popen | None = None
        self.child_status: int | None = None
        self.pgid: int | None = None
        self.signalled: list[int] = []
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)
        self.names: dict[int, str] = {}

    # -- signals ------------------------------------------------------------------------
    def _on_signal(self, signum: int, frame) -> None:
        self.signalled.append(signum)

    def install(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGCHLD):
            signal.signal(sig, self._on_signal)
        signal.set_wakeup_fd(self.wake_w)

    def parent_gone(self) -> bool:
        return os.getppid() != self.parent

    # -- the engine -----------------------------------------------------------------------
    def start(self) -> None:
        def in_child() -> None:                    # after fork, before exec: single-threaded here
            _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        self.child = subprocess.Popen(self.cmd, process_group=0, preexec_fn=in_child,
                                      stdin=subprocess.DEVNULL)
        self.pgid = self.child.pid

    def reap(self) -> None:
        """Collect every child that has ended: the engine (its status is kept) and orphans of the
        engine's tree that were handed to this subreaper (each said in the log)."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if self.child is not None and pid == self.child.pid:
                self.child_status = status
                self.child.returncode = status_to_code(status)      # Popen must not wait for it again
            else:
                say(f"reaped {self.names.get(pid, 'a process')} (pid {pid}) of the engine's tree: "
                    f"{describe_status(status)}")

    def members(self) -> list:
        """Processes left of the engine: its process group, and this process's descendants."""
        import psutil

        out: dict[int, psutil.Process] = {}
        try:
            for p in psutil.Process().children(recursive=True):
                out[p.pid] = p
        except psutil.Error:
            pass
        if self.pgid is not None:
            for p in psutil.process_iter():
                try:
                    if p.pid not in out and os.getpgid(p.pid) == self.pgid:
                        out[p.pid] = p
                except (OSError, psutil.Error):
                    pass
        alive = []
        for p in out.values():
            try:
                if p.status() != psutil.STATUS_ZOMBIE:
                    alive.append(p)
                    self.names.setdefault(p.pid, _title(p))
            except psutil.Error:
                pass
        return alive

    def stop_all(self, why: str, grace_s: float) -> None:
        """SIGTERM to what is left, ``grace_s`` to go, then SIGKILL; every child reaped."""
        left = self.members()
        if not left:
            self.reap()
            return
        say(f"{why}: stopping {len(left)} process(es): " + ", ".join(f"{self.names.get(p.pid)} (pid {p.pid})"
                                                                     for p in left))
        for p in left:
            try:
                p.terminate()
            except Exception:
                pass
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            self.reap()
            left = self.members()
            if not left:
                time.sleep(0.05)
                self.reap()
                return
            time.sleep(0.1)
        for p in left:
            try:
                p.kill()
                say(f"killed {self.names.get(p.pid)} (pid {p.pid}): still running {grace_s:.0f} s after SIGTERM")
            except Exception:
                pass
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and self.members():
            self.reap()
            time.sleep(0.05)
        self.reap()

    def run(self) -> int | None:
        """The engine's wait status once it ended; None when this process stopped it because its
        parent is gone (or the parent was gone before it started)."""
        self.install()
        _prctl(PR_SET_CHILD_SUBREAPER, 1)
        _prctl(PR_SET_PDEATHSIG, signal.SIGUSR1)
        if self.parent_gone():                     # the parent died before PDEATHSIG was armed
            return None
        self.start()
        assert self.child is not None
        forwarded = False
        while True:
            self.reap()
            if self.child_status is not None:
                self.stop_all(f"the engine (pid {self.child.pid}) ended with {describe_status(self.child_status)}",
                              self.grace_s)
                return self.child_status
            if self.parent_gone():
                self.stop_all(f"the process that started the engine (pid {self.parent}) is gone", self.grace_s)
                return None
            pending, self.signalled = self.signalled, []
            if any(s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP) for s in pending) and not forwarded:
                forwarded = True                   # this process was asked to stop: so is the engine
                try:
                    os.killpg(self.pgid, signal.SIGTERM)
                except OSError:
                    pass
            try:
                select.select([self.wake_r], [], [], 1.0)
                os.read(self.wake_r, 512)
            except (BlockingIOError, InterruptedError):
                pass


def _title(p) -> str:
    try:
        cmd = p.cmdline()
        title = " ".join(" ".join(cmd).split()) if cmd else p.name()     # setproctitle pads with spaces
    except Exception:
        return "a process"
    return title if len(title) <= 80 else title[:77] + "…"


def exit_like(status: int) -> None:
    """End this process the way the engine ended: its exit code, or the same signal."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        sys.stdout.flush()
        signal.set_wakeup_fd(-1)
        try:
            signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError):
            pass
        os.kill(os.getpid(), sig)
        time.sleep(1)                              # a stop signal would leave us here
        os._exit(128 + sig)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


def main(argv: list[str]) -> None:
    parent, grace = os.getppid(), 5.0
    args = list(argv)
    while args and args[0] != "--":
        opt = args.pop(0)
        if opt == "--parent":
            parent = int(args.pop(0))
        elif opt == "--grace":
            grace = float(args.pop(0))
        else:
            sys.exit(f"{PREFIX} unknown option {opt!r}; usage: watchdog.py [--parent PID] [--grace S] -- CMD...")
    cmd = args[1:]
    if not cmd:
        sys.exit(f"{PREFIX} no command; usage: watchdog.py [--parent PID] [--grace S] -- CMD...")
    dog = Watchdog(parent, cmd, grace)
    try:
        status = dog.run()
    except OSError as e:                           # the engine could not be started at all
        say(f"could not start {cmd[0]!r}: {e}")
        os._exit(127)
    if status is None:
        os._exit(1)
    exit_like(status)


def command(cmd: list[str], parent: int | None = None, grace_s: float = 5.0) -> list[str]:
    """The command line that runs ``cmd`` under the watchdog, watching ``parent`` (default: this process)."""
    # -P: this file's folder (llmgate's modules) is not put first on sys.path
    return [sys.executable, "-P", os.path.abspath(__file__), "--parent", str(parent or os.getpid()),
            "--grace", str(grace_s), "--", *cmd]


if __name__ == "__main__":
    main(sys.argv[1:])
