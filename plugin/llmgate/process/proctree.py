"""The processes of one running server, and how each of them ended.

vLLM's API server may outlive its EngineCore (seen: ``kill -9`` of EngineCore mid-run; the
API server answered the streams with an error event, then exited with code 0 four seconds
later), so the server's own exit code does not say what happened.  ``Tree`` remembers the
processes the server runs with once it is ready, and a thread waits on them (pidfds on Linux,
which wake it the moment one ends; a poll elsewhere) and notes each death in order: which
process, when, and its exit code where the kernel tells it (``PIDFD_GET_INFO`` with
``PIDFD_INFO_EXIT``, Linux 6.15 and later, even for a process that is not our child; or the
exit code field of a zombie's ``/proc/PID/stat``).
"""

from __future__ import annotations

import dataclasses
import fcntl
import os
import select
import struct
import sys
import threading
import time

import psutil

# a wait status as Popen.returncode reads it; the watchdog holds it, as it runs as a file with the stdlib only
from llmgate.process.watchdog import status_to_code

PIDFD_INFO_EXIT = 1 << 3
PIDFD_GET_INFO = 0xC040FF0B          # _IOWR(0xFF, 11, struct pidfd_info), 64 bytes (PIDFD_INFO_SIZE_VER0)
SETTLED_S = 2.0                      # processes younger than this at readiness are helpers that may come and go


@dataclasses.dataclass
class Member:
    pid: int
    title: str
    create_time: float
    root: bool
    depth: int = 0              # 0: the root, 1: its children …
    pidfd: int | None = None


@dataclasses.dataclass(frozen=True)
class Death:
    pid: int
    title: str
    root: bool
    code: int | None            # as Popen.returncode reads it (-9: killed by SIGKILL); None: not known
    seen: float                 # time.time() when it was noticed

    def exit_words(self) -> str:
        if self.code is None:
            return "exit code not known (its parent collected it)"
        if self.code < 0:
            try:
                import signal
                return f"exit code {self.code} ({signal.Signals(-self.code).name})"
            except ValueError:
                pass
        return f"exit code {self.code}"


def title(p: psutil.Process) -> str:
    """A process in a few words: its command line as it shows itself (vLLM retitles its
    processes ``VLLM::EngineCore``, ``VLLM::Worker``)."""
    try:
        cmd = p.cmdline()
        t = " ".join(" ".join(cmd).split()) if cmd else p.name()     # setproctitle pads with spaces
    except psutil.Error:
        return "?"
    return t if len(t) <= 80 else t[:77] + "…"


def pidfd_exit_code(pidfd: int) -> int | None:
    """The exit code of the process behind ``pidfd`` once it has ended and been reaped
    (Linux 6.15+); None where the kernel does not tell."""
    buf = bytearray(64)
    struct.pack_into("Q", buf, 0, PIDFD_INFO_EXIT)
    try:
        fcntl.ioctl(pidfd, PIDFD_GET_INFO, buf)
    except OSError:
        return None
    mask, = struct.unpack_from("Q", buf, 0)
    if not mask & PIDFD_INFO_EXIT:
        return None
    status, = struct.unpack_from("i", buf, 60)
    return status_to_code(status)


def zombie_exit_code(pid: int) -> int | None:
    """The exit code of a zombie (ended, not yet collected by its parent), from /proc."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode("utf-8", "replace")
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2:].split()
    if not fields or fields[0] != "Z" or len(fields) < 50:
        return None
    try:
        return status_to_code(int(fields[49]))        # field 52 of proc(5): exit_code
    except ValueError:
        return None


class Tree:
    """The processes of one server (``root``: the engine process the gate started)."""

    def __init__(self, root: int):
        self.root = root
        self.members: dict[int, Member] = {}
        self.deaths: list[Death] = []
        self._ended_members: dict[int, Member] = {}
        self.stopping = False
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._wake_r, self._wake_w = os.pipe()
        self._closed = False

    def adopt(self, settled_s: float = SETTLED_S) -> None:
        """Take the root and its descendants as the server's processes (descendants started
        less than ``settled_s`` ago are left out: helpers that come and go), then watch them."""
        now = time.time()
        try:
            root = psutil.Process(self.root)
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            procs = []
        parents = {}
        for p in procs:
            try:
                parents[p.pid] = p.ppid()
            except psutil.Error:
                pass

        def depth(pid: int) -> int:
            d = 0
            while pid != self.root and pid in parents and d < 64:
                pid, d = parents[pid], d + 1
            return d

        for p in procs:
            try:
                created = p.create_time()
                if p.pid != self.root and now - created < settled_s:
                    continue
                if p.status() == psutil.STATUS_ZOMBIE:
                    continue
                m = Member(p.pid, title(p), created, p.pid == self.root, depth(p.pid))
            except psutil.Error:
                continue
            if hasattr(os, "pidfd_open"):
                try:
                    m.pidfd = os.pidfd_open(p.pid)
                except OSError:
                    m.pidfd = None
            with self._lock:
                old = self.members.get(p.pid)
                if old is not None and old.pidfd is not None:
                    os.close(old.pidfd)
                self.members[p.pid] = m
        if self._thread is None:
            self._thread = threading.Thread(target=self._watch, daemon=True, name=f"llmgate-tree-{self.root}")
            self._thread.start()
        else:
            os.write(self._wake_w, b"x")

    @staticmethod
    def _code(m: Member) -> int | None:
        code = zombie_exit_code(m.pid)
        if code is None and m.pidfd is not None:
            code = pidfd_exit_code(m.pidfd)
        return code

    def _ended(self, m: Member) -> int | None:
        """Note that ``m`` has ended, at once (its exit code if it is known already); the index of
        its Death, None when another thread noted it first or the server is being stopped.  Its
        pidfd stays open (closed by close()): the code can show later, and another thread may be
        waiting on the descriptor."""
        with self._lock:
            if self.members.get(m.pid) is not m:
                return None
            del self.members[m.pid]
            self._ended_members[m.pid] = m
            if self.stopping:
                return None
            self.deaths.append(Death(m.pid, m.title, m.root, self._code(m), time.time()))
            return len(self.deaths) - 1

    def settle(self, death: Death, timeout_s: float = 1.0) -> Death:
        """``death`` with its exit code once the kernel tells it (its parent collects it first),
        waiting up to ``timeout_s``; as it is when the code stays unknown."""
        m = self._ended_members.get(death.pid)
        deadline = time.monotonic() + timeout_s
        while death.code is None and m is not None and time.monotonic() < deadline:
            code = self._code(m)
            if code is not None:
                with self._lock:
                    death = dataclasses.replace(death, code=code)
                    for i, d in enumerate(self.deaths):
                        if d.pid == death.pid and d.code is None:
                            self.deaths[i] = death
                return death
            time.sleep(0.05)
        return death

    def poll_now(self) -> None:
        """(the caller's thread) Note at once every process that has ended: a failed request may
        be seen before the watching thread had its turn."""
        with self._lock:
            members = [m for m in self.members.values() if m.pidfd is not None]
        if not members:
            return
        try:
            ready, _, _ = select.select([m.pidfd for m in members], [], [], 0)
        except (OSError, ValueError):
            return
        for m in sorted((m for m in members if m.pidfd in ready), key=lambda m: -m.depth):
            self._ended(m)

    def _gone(self, m: Member) -> bool:
        try:
            p = psutil.Process(m.pid)
            return abs(p.create_time() - m.create_time) > 0.05 or p.status() == psutil.STATUS_ZOMBIE
        except psutil.Error:
            return True

    def _watch(self) -> None:
        while not self._closed:
            with self._lock:
                members = list(self.members.values())
            with_fd = {m.pidfd: m for m in members if m.pidfd is not None}
            timeout = 1.0 if len(with_fd) < len(members) else None
            try:
                ready, _, _ = select.select([self._wake_r, *with_fd], [], [], timeout)
            except (OSError, ValueError):
                if self._closed:
                    return
                ready = []
                time.sleep(0.2)
            if self._wake_r in ready:
                try:
                    os.read(self._wake_r, 512)
                except OSError:
                    pass
            ended = [with_fd[fd] for fd in ready if fd in with_fd]
            ended += [m for m in members if m.pidfd is None and self._gone(m)]
            # seen at the same moment: the deepest first (a parent waiting on a child ends because of it)
            for m in sorted(ended, key=lambda m: -m.depth):
                index = self._ended(m)
                if index is not None:
                    self.settle(self.deaths[index])

    def first_death(self) -> Death | None:
        """The first process of the server that ended while it was in use, if one did."""
        self.poll_now()
        deaths = self.deaths
        return deaths[0] if deaths else None

    def close(self) -> None:
        """The server is being stopped: what ends from now on is no failure."""
        self.stopping = True
        self._closed = True
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass
        if self._thread is not None:
            self._thread.join(2)
            if self._thread.is_alive():
                return                  # still in _ended(): it closes its own descriptors; leave the rest
        for m in [*self.members.values(), *self._ended_members.values()]:
            if m.pidfd is not None:
                try:
                    os.close(m.pidfd)
                except OSError:
                    pass
                m.pidfd = None
        self.members.clear()
        self._ended_members.clear()
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass


if sys.platform == "win32":        # pragma: no cover - llmgate runs its servers on Linux and macOS
    raise ImportError("llmgate.process.proctree needs a POSIX system")
