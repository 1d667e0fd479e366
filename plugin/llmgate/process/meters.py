"""Resource meters of a running server: ``MemorySampler`` samples the resident memory of its whole
process tree a few times a second (the peak a scenario reports), ``EngineCpu`` measures the CPU time
each of its processes used over a ``with`` block."""

from __future__ import annotations

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


class EngineCpu:
    """CPU time of each process of a server's tree over a ``with`` block, as a share of one core:
    an engine process near 100% is what makes a small model on a big GPU host-bound."""

    def __init__(self, pid: int):
        self.pid = pid
        self.t0 = self.t1 = 0.0
        self.before: dict[int, tuple[str, float]] = {}
        self.after: dict[int, tuple[str, float]] = {}

    def _read(self) -> dict[int, tuple[str, float]]:
        out: dict[int, tuple[str, float]] = {}
        try:
            root = psutil.Process(self.pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            return out
        for p in procs:
            try:
                t = p.cpu_times()
                out[p.pid] = (p.name(), t.user + t.system)
            except psutil.Error:
                pass
        return out

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
