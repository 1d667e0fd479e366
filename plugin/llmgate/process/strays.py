"""Records of running servers, and the sweep that stops a server an earlier run left behind.

Every server the gate starts has a record under the output folder while it runs,
``<--llmgate-out>/servers/<pid>.json`` (``gwN/servers/`` for a pytest-xdist worker): the
engine's pid, process group and start time (psutil's ``create_time``), its command line, the
matrix entry, the log, and the pid and start time of the pytest process that started it.  The
record goes when the server is stopped.  A record whose pytest process is gone belongs to a
run that was killed before it could stop its servers; the watchdog (``llmgate.process.watchdog``)
normally stopped them already, and when it could not (it was killed too), ``sweep`` does: it
stops the recorded process group, but only while the recorded process still exists with the
recorded start time, so a pid the system has since given to another process is never
signalled.

    llmgate strays [OUT]     # the same sweep outside pytest (default OUT: .llmgate)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import psutil

SCHEMA = "llmgate-server/1"
TOLERANCE_S = 0.05            # psutil's create_time is boot time + start ticks: stable to the tick


def folder(out_dir: Path) -> Path:
    return Path(out_dir) / "servers"


def _create_time(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def same_process(pid: int | None, create_time: float | None) -> bool:
    """The process ``pid`` exists (not a zombie) and is the one that started at ``create_time``."""
    if pid is None or create_time is None:
        return False
    try:
        p = psutil.Process(pid)
        return abs(p.create_time() - create_time) <= TOLERANCE_S and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def write(out_dir: Path, *, pid: int, entry: str, engine: str, cmdline: list[str], log: str,
          watchdog_pid: int | None = None) -> Path | None:
    """Record a server that just started (None if the folder cannot be written: the sweep is a
    safety net, never a reason for a boot to fail)."""
    me = os.getpid()
    rec: dict[str, Any] = {
        "schema": SCHEMA, "entry": entry, "engine": engine, "pid": pid, "pgid": pid,
        "create_time": _create_time(pid), "cmdline": cmdline, "log": log,
        "watchdog_pid": watchdog_pid, "watchdog_create_time": _create_time(watchdog_pid) if watchdog_pid else None,
        "pytest_pid": me, "pytest_create_time": _create_time(me),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    path = folder(out_dir) / f"{pid}.json"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(rec, indent=1), encoding="utf-8")
        tmp.replace(path)
    except OSError:
        return None
    return path


def remove(path: Path | None) -> None:
    if path is not None:
        try:
            Path(path).unlink()
        except OSError:
            pass


def records(out_dir: Path) -> list[Path]:
    """Every record under ``out_dir``: its own and its pytest-xdist workers' (``gw*/``)."""
    out_dir = Path(out_dir)
    return sorted([*folder(out_dir).glob("*.json"), *out_dir.glob("gw*/servers/*.json")])


def _group(pgid: int, leader_create_time: float) -> list[psutil.Process]:
    """The live processes of process group ``pgid`` that are the recorded group's.  Linux does
    not give a pid to a new process while a group of that id has members, so members found are
    the recorded group's, unless the leader's pid now belongs to another process (then it is
    that one's group, and nothing is returned)."""
    try:
        leader = psutil.Process(pgid)
        if abs(leader.create_time() - leader_create_time) > TOLERANCE_S:
            return []
    except psutil.Error:
        pass
    out = []
    for p in psutil.process_iter():
        try:
            if os.getpgid(p.pid) == pgid and p.status() != psutil.STATUS_ZOMBIE \
                    and p.create_time() >= leader_create_time - TOLERANCE_S:
                out.append(p)
        except (OSError, psutil.Error):
            pass
    return out


@dataclasses.dataclass
class Swept:
    """What a sweep did: one line per server it stopped or could not stop, and how many it could not."""

    lines: list[str] = dataclasses.field(default_factory=list)
    not_stopped: int = 0


def sweep(out_dir: Path, grace_s: float = 5.0) -> list[str]:
    """Stop every server whose record's pytest process is gone; return one line per server stopped."""
    return stop_strays(out_dir, grace_s).lines


def stop_strays(out_dir: Path, grace_s: float = 5.0) -> Swept:
    """``sweep``, with how many servers could not be stopped (the command's exit code)."""
    swept = Swept()
    lines = swept.lines
    for path in records(out_dir):
        try:
            rec = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            remove(path)                      # half-written or not ours: nothing can be done with it
            continue
        if rec.get("schema") != SCHEMA:
            continue
        started_by = rec.get("pytest_pid")
        if (same_process(started_by, rec.get("pytest_create_time")) if rec.get("pytest_create_time") is not None
                else started_by is not None and psutil.pid_exists(started_by)):
            continue                          # its session still runs (another one, or ours)
        victims: dict[int, psutil.Process] = {}
        if rec.get("create_time") is not None and rec.get("pgid") is not None:
            for p in _group(int(rec["pgid"]), float(rec["create_time"])):
                victims[p.pid] = p
        if same_process(rec.get("pid"), rec.get("create_time")):
            victims.setdefault(rec["pid"], psutil.Process(rec["pid"]))
            try:
                for c in victims[rec["pid"]].children(recursive=True):
                    victims.setdefault(c.pid, c)
            except psutil.Error:
                pass
        if same_process(rec.get("watchdog_pid"), rec.get("watchdog_create_time")):
            victims.setdefault(rec["watchdog_pid"], psutil.Process(rec["watchdog_pid"]))
        if victims:
            left = _stop(list(victims.values()), grace_s)
            what = f"a {rec.get('engine', 'engine')} server left by an earlier run (pid {rec.get('pid')}, " \
                   f"entry {rec.get('entry')}, started {rec.get('started')} by pytest pid {rec.get('pytest_pid')})"
            if left:
                lines.append(f"llmgate: could not stop {what}: {len(left)} process(es) still running: "
                             + ", ".join(str(p.pid) for p in left))
                swept.not_stopped += 1
                continue                      # keep the record: the next run tries again
            lines.append(f"llmgate: stopped {what}")
        remove(path)
    return swept


def _running(procs: list[psutil.Process]) -> list[psutil.Process]:
    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.Error:
            pass
    return out


def _wait(procs: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout
    left = _running(procs)
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = _running(left)
    return left


def _stop(procs: list[psutil.Process], grace_s: float) -> list[psutil.Process]:
    """SIGTERM, ``grace_s`` to end, then SIGKILL; what still runs after that."""
    for p in procs:
        try:
            p.send_signal(signal.SIGTERM)       # psutil checks the pid still is this process
        except psutil.Error:
            pass
    alive = _wait(procs, grace_s)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass
    return _wait(alive, 5)


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """``llmgate strays``'s arguments (llmgate.cli)."""
    ap.add_argument("out", nargs="?", type=Path, default=Path(".llmgate"),
                    help="the run's output folder, --llmgate-out (default .llmgate)")


def run(a: argparse.Namespace) -> int:
    """``llmgate strays [OUT]``: the sweep; exit 1 when a server could not be stopped."""
    out = a.out
    swept = stop_strays(out)
    for line in swept.lines:
        print(line)
    if not swept.lines:
        print(f"llmgate: no server left by an earlier run under {out}")
    return 1 if swept.not_stopped else 0
