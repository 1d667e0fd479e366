"""Resource meters of a running server: ``MemorySampler`` samples the resident memory of its whole
process tree a few times a second (the peak a scenario reports), ``EngineCpu`` measures the CPU time
each of its processes used over a ``with`` block, ``MachineLoad`` the CPU every other process of the
machine used over one (a busy machine reads an engine slower than it is)."""

from __future__ import annotations

import os
import threading
import time

import psutil


class MemorySampler(threading.Thread):
    """Resident memory of the server's whole process tree, sampled a few times a second."""

    def __init__(self, pid: int, interval: float = 0.25):
        super().__init__(daemon=True, name=f"llmgate-rss-{pid}")
        self.pid, self.interval = pid, interval
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._procs: list[psutil.Process] = []
        self._tree_age = 0

    def tree_rss(self) -> int:
        # the process tree is re-read every 8th sample: finding children scans every process of
        # the host, which costs the measuring process real CPU on a busy many-core machine
        if self._tree_age % 8 == 0 or not self._procs:
            try:
                root = psutil.Process(self.pid)
                self._procs = [root, *root.children(recursive=True)]
            except psutil.Error:
                return 0
        self._tree_age += 1
        total = 0
        for p in self._procs:
            try:
                total += p.memory_info().rss
            except psutil.Error:
                pass
        return total

    def run(self) -> None:
        while not self._stop.is_set():
            rss = self.tree_rss()
            if rss:
                self.samples.append((time.monotonic(), rss))
            self._stop.wait(self.interval)

    def peak(self, since: float = 0.0, until: float = float("inf")) -> int | None:
        vals = [rss for t, rss in list(self.samples) if since <= t <= until]
        return max(vals) if vals else None

    def stop(self) -> None:
        self._stop.set()


def tree_cpu_times(roots: list[int | None], reaped: bool = False) -> dict[int, tuple[str, float]]:
    """Each process of the trees of ``roots`` (each counted once; a root that is gone adds nothing):
    pid → (name, CPU seconds, user + system).  ``reaped``: each also carries its children that ended
    and were waited for, so that a tree's sum does not drop when one of its processes exits (an xdist
    worker's engine, a compile job) - only a process orphaned to init takes its time out of the tree."""
    procs: dict[int, psutil.Process] = {}
    for pid in roots:
        if pid is None:
            continue
        try:
            root = psutil.Process(pid)
            for p in [root, *root.children(recursive=True)]:
                procs.setdefault(p.pid, p)
        except psutil.Error:
            pass
    out: dict[int, tuple[str, float]] = {}
    for p in procs.values():
        try:
            t = p.cpu_times()
            gone = getattr(t, "children_user", 0.0) + getattr(t, "children_system", 0.0) if reaped else 0.0
            out[p.pid] = (p.name(), t.user + t.system + gone)
        except psutil.Error:
            pass
    return out


class EngineCpu:
    """CPU time of each process of a server's tree over a ``with`` block, as a share of one core:
    an engine process near 100% is what makes a small model on a big GPU host-bound."""

    def __init__(self, pid: int):
        self.pid = pid
        self.t0 = self.t1 = 0.0
        self.before: dict[int, tuple[str, float]] = {}
        self.after: dict[int, tuple[str, float]] = {}

    def _read(self) -> dict[int, tuple[str, float]]:
        return tree_cpu_times([self.pid])

    def __enter__(self) -> EngineCpu:
        self.before, self.t0 = self._read(), time.monotonic()
        return self

    def __exit__(self, *exc) -> None:
        self.after, self.t1 = self._read(), time.monotonic()

    def summary(self) -> dict[str, object]:
        """Per process (name and pid): CPU seconds ÷ wall seconds; and the busiest one."""
        wall = self.t1 - self.t0
        shares = {f"{name} ({pid})": round((cpu - self.before.get(pid, (name, 0.0))[1]) / wall, 4)
                  for pid, (name, cpu) in self.after.items()} if wall > 0 else {}
        busiest = max(shares.items(), key=lambda kv: kv[1]) if shares else None
        return {"wall_s": round(wall, 3), "processes": shares,
                "busiest": busiest[0] if busiest else None, "busiest_share": busiest[1] if busiest else None,
                "total_share": round(sum(shares.values()), 4)}


class MachineLoad:
    """CPU the rest of the machine used over a ``with`` block: the CPUs this process may run on,
    busy (user, nice, system, interrupts, and steal: a hypervisor's other guests), less what the
    engine's process tree and this run's own used.  This run's own: the tree of the outermost Python
    process this one descends from (``run_root``: pytest, its xdist workers and their engines, the
    client processes, a tox around them), so that entries measured side by side on pytest-xdist
    workers are not each other's "others".  A compiler, another job of a shared CI runner or a busy
    neighbour VM shows here; its share of those CPUs is what ``disturbed`` judges (on the 2-core
    machine, two busy loops beside a vLLM decode at c=1 cut it from ~130 to 37 tok/s and its engine
    prefill from 16 to 58 ms)."""

    FIELDS = ("user", "nice", "system", "irq", "softirq", "steal")

    def __init__(self, engine_pid: int | None):
        self.engine_pid = engine_pid
        self.cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
        self.others_s = 0.0
        self.wall_s = 0.0
        self.root = run_root()
        self._start: tuple[float, float, float] | None = None

    def _busy(self) -> float:
        per = psutil.cpu_times(percpu=True)
        cpus = [i for i in self.cpus if i < len(per)] or range(len(per))
        return sum(getattr(per[i], f, 0.0) for i in cpus for f in self.FIELDS)

    def _read(self) -> tuple[float, float, float]:
        own = tree_cpu_times([self.engine_pid, self.root], reaped=True)
        return time.monotonic(), self._busy(), sum(cpu for _, cpu in own.values())

    def __enter__(self) -> MachineLoad:
        self._start = self._read()
        return self

    def __exit__(self, *exc) -> None:
        if self._start is None:
            return
        t1, busy1, own1 = self._read()
        t0, busy0, own0 = self._start
        self.wall_s = t1 - t0
        self.others_s = max(0.0, (busy1 - busy0) - (own1 - own0))

    @property
    def ncpus(self) -> int:
        return len(self.cpus) or (psutil.cpu_count() or 1)

    @property
    def others_cores(self) -> float:
        """The other processes' CPU, in cores (CPU seconds ÷ wall seconds)."""
        return self.others_s / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def share(self) -> float:
        """The other processes' share of the CPUs this process may run on."""
        return self.others_cores / self.ncpus

    def disturbed(self, limit: float = 0.25) -> str:
        """Why what was measured may read slower than the engine is, in words ("" where the machine
        was quiet enough): other processes used ``limit`` or more of the CPUs."""
        if self.wall_s < 0.5 or self.share < limit:
            return ""
        return (f"other processes used {self.others_cores:.2f} of {self.ncpus} CPU(s) ({self.share:.0%}) "
                f"while it measured")


def _pythonic(p: psutil.Process) -> bool:
    name = p.name().lower()
    return name.startswith("python") or name in ("pytest", "py.test", "tox")


def run_root() -> int:
    """The outermost Python process this one descends from (pytest, an xdist controller, a tox):
    its tree is this run's own processes."""
    pid = os.getpid()
    try:
        p = psutil.Process(pid)
        while (parent := p.parent()) is not None and parent.pid > 1 and _pythonic(parent):
            p = parent
        return p.pid
    except psutil.Error:
        return pid
