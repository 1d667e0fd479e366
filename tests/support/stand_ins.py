"""Stand-in processes and server records for the tests of what is left behind (tests/plugin/
test_leftovers.py, without an engine, and tests/timing/test_signals_vllm.py, with vLLM): each
stand-in carries a unique marker on its command line, so that only a test's own processes are ever
counted or signalled on a machine shared with other runs."""

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import psutil

from llmgate.process import proctree, strays


def marked(token: str) -> list[psutil.Process]:
    """Live (not zombie) processes with an argument that is ``token`` or starts with ``token-``."""
    out = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if any(a == token or a.startswith(token + "-") for a in p.info["cmdline"] or []) \
                    and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.Error:
            pass
    return out


def wait_until(cond, timeout: float, step: float = 0.05) -> float | None:
    """Seconds until ``cond()`` held, None if it did not within ``timeout``."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if cond():
            return time.monotonic() - t0
        time.sleep(step)
    return None


SLEEP = [sys.executable, "-c", "import time; time.sleep(300)"]      # + a marker: a recognisable stand-in
SLEEP_SH = " ".join(shlex.quote(a) for a in SLEEP)


def kernel_tells_exit_codes() -> bool:
    q = subprocess.Popen(["sleep", "0.2"])
    fd = os.pidfd_open(q.pid)
    q.wait()
    try:
        return proctree.pidfd_exit_code(fd) == 0
    finally:
        os.close(fd)



def ended_process() -> tuple[int, float]:
    """A pid and start time of a process that has ended (a pytest run killed with SIGKILL)."""
    q = subprocess.Popen(["sleep", "5"])
    created = psutil.Process(q.pid).create_time()
    q.kill()
    q.wait()
    return q.pid, created


def plant(out: Path, proc_pid: int, create_time: float, pytest_pid: int, pytest_created: float, entry: str) -> Path:
    rec = {"schema": strays.SCHEMA, "entry": entry, "engine": "vllm", "pid": proc_pid, "pgid": proc_pid,
           "create_time": create_time, "cmdline": ["stand-in"], "log": "x.log", "watchdog_pid": None,
           "watchdog_create_time": None, "pytest_pid": pytest_pid, "pytest_create_time": pytest_created,
           "started": "2026-01-01 00:00:00"}
    path = strays.folder(out) / f"{proc_pid}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rec))
    return path


def recording_launcher(folder: Path, record: Path) -> Path:
    """An engine ``launcher`` that serves nothing: each start appends its arguments to ``record``
    and exits 1 (a boot that was attempted fails at once).  ``record`` absent: nothing was started."""
    folder.mkdir(parents=True, exist_ok=True)
    launcher = folder / "engine-stand-in"
    launcher.write_text(f'#!/bin/sh\necho "$*" >> {shlex.quote(str(record))}\nexit 1\n')
    launcher.chmod(0o755)
    return launcher
