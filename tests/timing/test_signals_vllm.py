"""No engine outlives the gate, against real vLLM on the CPU (one boot per scenario, five in all):

- SIGTERM to pytest mid-measurement: handled like Ctrl-C: exit status 2, the output says
  interrupted, report.json holds what was measured (the test that ran) and names the test
  that was running and the one not run, and within 10 s no engine process of the run is left;
- SIGKILL to pytest mid-measurement: nothing of pytest runs any more, yet within 10 s no engine
  process of the run is left (the watchdog stops the engine's tree);
- SIGKILL to a pytest-xdist worker (-n 1): the same;
- Ctrl-C twice, 1 s apart, during a boot: exit status 2, and when pytest has exited no engine
  process of the run is left and no server record stays behind (the second signal hurries the
  boot's stop; it used to break it off, leaving vLLM to the watchdog and its record in place);
- a stale record of a killed run with a stray server still running (a stand-in process group
  whose record's pytest pid is dead and whose start time matches) and a record whose pid now
  belongs to another process: the next session stops the stray and says so in one line, and
  leaves the other process alone; in that session vLLM's EngineCore is killed (kill -9)
  mid-run: the failure names EngineCore, its pid and exit code, the next test of the entry
  says the server died earlier, and no process of it is left, not even a zombie.

"Mid-measurement" is read off the server's log (the measured test's first request), never
guessed from a sleep.  The run's engine processes are the ones its server records name, their
descendants, and any process whose environment carries the run's marker (the matrix entry's
``env``), so other servers on a shared machine never count.
"""

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

from llmgate.process import strays
from stand_ins import SLEEP, SLEEP_SH, ended_process, kernel_tells_exit_codes, marked, plant, wait_until

pytest_plugins = ["pytester"]

pytestmark = pytest.mark.real_engine      # (and timing: its folder)

MARK = "LLMGATE_SELFTEST_RUN"
ENTRY = """
[[matrix]]
id = "{id}"
engine = "vllm"
model = "tiny"
dtype = "float32"
max_model_len = 1024
kv_cache_bytes = 200_000_000
env = {{ {mark} = "{run}" }}
"""

MEASURE = """
from llmgate.load import workloads as load
from llmgate.core import metrics

def test_1_short(llmgate_server, llmgate_prompts, gate):
    res = load.decode_run(llmgate_server, llmgate_prompts, 16, 8, 1, 0, 120, "short")
    gate._recorder.account(res)
    gate.record(metrics.DECODE_TOK_S, [s.decode_tok_s for s in res.ok])

def test_2_long(llmgate_server, llmgate_prompts, gate):
    res = load.decode_run(llmgate_server, llmgate_prompts, 32, 800, 20, 0, 300, "long")
    gate._recorder.account(res)
    gate.record(metrics.DECODE_TOK_S, [s.decode_tok_s for s in res.ok])

def test_3_never(llmgate_server, gate):
    pass
"""

KILL_CORE = """
import os, signal, threading, time
from pathlib import Path
import psutil
from llmgate.load import workloads as load
from llmgate.core import metrics

def _kill_core_once_streaming(h):
    # once a request streams and the outer test has seen the engine's processes ("go"), never
    # on a timer: on a fast machine a fixed wait ran out before the outer test looked
    deadline = time.monotonic() + 300
    while h.log_path.read_text(errors="replace").count("POST /v1/completions") < 1 or not Path("go").exists():
        if time.monotonic() > deadline:
            return
        time.sleep(0.05)
    time.sleep(1.0)
    core = [p for p in psutil.Process(h.pid).children(recursive=True) if "EngineCore" in " ".join(p.cmdline())][0]
    Path("core.pid").write_text(str(core.pid))
    os.kill(core.pid, signal.SIGKILL)

def test_1_core_dies(llmgate_server, llmgate_prompts, gate):
    threading.Thread(target=_kill_core_once_streaming, args=(llmgate_server,), daemon=True).start()
    res = load.decode_run(llmgate_server, llmgate_prompts, 32, 800, 4, 0, 120, "decode")
    gate._recorder.account(res)

def test_2_next(llmgate_server, llmgate_prompts, gate):
    gate._recorder.account(load.decode_run(llmgate_server, llmgate_prompts, 32, 16, 1, 0, 60, "short"))
"""


def setup_run(pytester, test_source: str, entry: str = "sig", env: dict[str, str] | None = None) -> str:
    """The run's marker and its entry; ``env``: more of the entry's environment."""
    run = uuid.uuid4().hex
    text = ENTRY.format(id=entry, mark=MARK, run=run)
    if env:
        more = "".join(f', {k} = "{v}"' for k, v in env.items())
        text = text.replace(f'{MARK} = "{run}" }}', f'{MARK} = "{run}"{more} }}')
    pytester.makefile(".toml", llmgate=text)
    pytester.makepyfile(test_sig=test_source)
    return run


def _as_from_a_terminal() -> None:
    """In the child before it runs pytest: SIGINT as a terminal gives it.  A shell without job
    control starts a background command (`cmd &`) with SIGINT ignored, its children inherit that,
    and Python then leaves it ignored; llmgate never replaces an ignored disposition (so a Ctrl-C
    would do nothing: two fresh-machine runs started with `&` failed the double-Ctrl-C test so)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start(pytester, *args) -> subprocess.Popen:
    out = open(pytester.path / "out.txt", "wb")
    env = dict(os.environ, PYTHONFAULTHANDLER="1")       # a session that hangs shows where (SIGABRT)
    return subprocess.Popen([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", *args],
                            cwd=pytester.path, stdout=out, stderr=subprocess.STDOUT, process_group=0, env=env,
                            preexec_fn=_as_from_a_terminal)


def output(pytester) -> str:
    return (pytester.path / "out.txt").read_text(errors="replace")


def wait_or_show(pytester, p: subprocess.Popen, timeout: float) -> int:
    """pytest's exit status; a session still running after ``timeout`` is made to show where it
    hangs (faulthandler on SIGABRT) and fails the test."""
    try:
        return p.wait(timeout)
    except subprocess.TimeoutExpired:
        p.send_signal(signal.SIGABRT)
        time.sleep(2)
        pytest.fail(f"the session did not end within {timeout:.0f} s:\n{output(pytester)}")


def wait_for_log(pytester, p: subprocess.Popen, text: str, n: int = 1, timeout: float = 600) -> None:
    """Until the server log shows ``text`` ``n`` times (``POST /v1/completions``: the n-th request is
    being streamed; ``GET /version``: the gate found the server ready)."""
    def seen():
        assert p.poll() is None, f"pytest ended early ({p.returncode}):\n{output(pytester)}"
        return sum(f.read_text(errors="replace").count(text)
                   for f in (pytester.path / ".llmgate").glob("**/logs/*.log")) >= n
    assert wait_until(seen, timeout, 0.1) is not None, f"no {text!r} ×{n} within {timeout} s:\n{output(pytester)}"


def wait_for_requests(pytester, p: subprocess.Popen, n: int) -> None:
    wait_for_log(pytester, p, "POST /v1/completions", n)


def run_processes(pytester, run: str) -> list[psutil.Process]:
    """The run's engine processes: those its records name and their descendants, and any process
    whose environment carries the run's marker."""
    out: dict[int, psutil.Process] = {}
    for f in strays.records(pytester.path / ".llmgate"):
        rec = json.loads(f.read_text())
        for pid, created in ((rec["pid"], rec["create_time"]), (rec["watchdog_pid"], rec["watchdog_create_time"])):
            if strays.same_process(pid, created):
                p = psutil.Process(pid)
                out[pid] = p
                for c in p.children(recursive=True):
                    out.setdefault(c.pid, c)
    for p in psutil.process_iter():
        try:
            if p.environ().get(MARK) == run:
                out.setdefault(p.pid, p)
        except psutil.Error:
            pass
    return list(out.values())


def left(procs: list[psutil.Process], run: str) -> list[str]:
    """What still runs of ``procs`` (zombies included: a defunct process is left too) or carries the marker."""
    out = []
    for p in procs:
        try:
            if p.is_running():
                out.append(f"{p.pid} {p.status()} {' '.join(p.cmdline())[:80]}")
        except psutil.Error:
            pass
    for p in psutil.process_iter():
        try:
            if p.environ().get(MARK) == run and p.pid not in {q.pid for q in procs}:
                out.append(f"{p.pid} {p.status()} {' '.join(p.cmdline())[:80]}")
        except psutil.Error:
            pass
    return out


def gone_within(procs: list[psutil.Process], run: str, t0: float, limit: float = 10.0) -> float:
    """Seconds from ``t0`` until nothing of the run is left; fails past ``limit``."""
    wait_until(lambda: not left(procs, run), limit - (time.monotonic() - t0), 0.1)
    took = time.monotonic() - t0
    still = left(procs, run)
    assert not still, f"{took:.1f} s after the signal still running: {still}"
    return took


def engine_tree(procs: list[psutil.Process]) -> set[str]:
    names = set()
    for p in procs:
        try:
            cmd = " ".join(p.cmdline())
        except psutil.Error:
            continue
        names.add("watchdog" if "watchdog.py" in cmd else "api_server" if "vllm.entrypoints" in cmd else
                  cmd.split()[0] if cmd.startswith("VLLM::") else "other")
    return names


def test_sigterm_mid_measurement_stops_the_servers_and_reports_what_was_measured(pytester):
    run = setup_run(pytester, MEASURE)
    p = start(pytester, "test_sig.py")
    try:
        wait_for_requests(pytester, p, 2)               # test_2_long's first request is streaming
        procs = run_processes(pytester, run)
        assert {"api_server", "VLLM::EngineCore", "VLLM::Worker", "watchdog"} <= engine_tree(procs), procs
        t0 = time.monotonic()
        p.send_signal(signal.SIGTERM)
        try:
            took = gone_within(procs, run, t0)
        except AssertionError:
            p.send_signal(signal.SIGABRT)               # where it hangs, in out.txt
            time.sleep(2)
            print(output(pytester))
            raise
        rc = wait_or_show(pytester, p, 120)
    finally:
        p.kill()
    out = output(pytester)
    print(out)
    print(f"SIGTERM: no engine process left after {took:.1f} s")
    assert rc == 2, out
    assert "KeyboardInterrupt: llmgate: SIGTERM received" in out
    assert "interrupted by SIGTERM during test_sig.py::test_2_long" in out
    rep = json.loads((pytester.path / ".llmgate" / "report.json").read_text())
    assert rep["exit_status"] == 2
    assert rep["interrupted"]["signal"] == "SIGTERM"
    assert rep["interrupted"]["during"] == "test_sig.py::test_2_long[sig]"
    assert rep["interrupted"]["not_run"] == ["test_sig.py::test_3_never[sig]"]
    assert {(v["test"], v["key"]) for v in rep["verdicts"]} >= {("test_1_short", "decode_tok_s")}
    assert rep["boots"]["sig"][0]["startup_s"] > 0
    assert "Interrupted by SIGTERM" in (pytester.path / ".llmgate" / "summary.md").read_text()
    assert not strays.records(pytester.path / ".llmgate"), "a server record was left behind"


def test_sigkill_mid_measurement_leaves_no_engine(pytester):
    run = setup_run(pytester, MEASURE)
    p = start(pytester, "test_sig.py")
    try:
        wait_for_requests(pytester, p, 2)
        procs = run_processes(pytester, run)
        assert {"api_server", "VLLM::EngineCore", "VLLM::Worker", "watchdog"} <= engine_tree(procs), procs
        t0 = time.monotonic()
        p.kill()
        p.wait()
        took = gone_within(procs, run, t0)
    finally:
        p.kill()
    print(f"SIGKILL of pytest: no engine process left after {took:.1f} s")
    # the record stays (pytest had no chance to remove it); the next sweep finds nothing running and drops it
    assert len(strays.records(pytester.path / ".llmgate")) == 1
    sweep = subprocess.run([sys.executable, "-m", "llmgate", "strays", ".llmgate"], cwd=pytester.path,
                           capture_output=True, text=True)
    assert sweep.returncode == 0 and "no server left by an earlier run" in sweep.stdout, sweep.stdout
    assert not strays.records(pytester.path / ".llmgate")


def test_sigkill_of_an_xdist_worker_leaves_no_engine(pytester):
    pytest.importorskip("xdist")
    run = setup_run(pytester, MEASURE)
    p = start(pytester, "-n", "1", "--max-worker-restart", "0", "test_sig.py")
    try:
        wait_for_requests(pytester, p, 2)
        procs = run_processes(pytester, run)
        (rec,) = [json.loads(f.read_text()) for f in strays.records(pytester.path / ".llmgate")]
        worker = psutil.Process(rec["pytest_pid"])
        assert worker.pid != p.pid and psutil.Process(rec["watchdog_pid"]).ppid() == worker.pid
        assert worker.ppid() == p.pid                   # the controller's worker process
        t0 = time.monotonic()
        worker.kill()
        took = gone_within(procs, run, t0)
        rc = wait_or_show(pytester, p, 180)
    finally:
        p.kill()
    out = output(pytester)
    print(out)
    print(f"SIGKILL of the xdist worker: no engine process left after {took:.1f} s")
    assert rc != 0 and "gw0" in out and ("crashed" in out or "node down" in out), out


def test_stale_record_is_swept_and_a_dead_engine_core_explains_itself(pytester):
    run = setup_run(pytester, KILL_CORE, entry="victim")
    token = f"llmgate-test-{uuid.uuid4().hex[:8]}"
    dead_pid, dead_created = ended_process()
    out_dir = pytester.path / ".llmgate"
    stray = subprocess.Popen(["sh", "-c", f"{SLEEP_SH} {token}-child & wait", f"{token}-stray"], process_group=0)
    reused = subprocess.Popen([*SLEEP, f"{token}-reused"])
    try:
        assert wait_until(lambda: marked(f"{token}-child") and marked(f"{token}-stray"), 10)
        plant(out_dir, stray.pid, psutil.Process(stray.pid).create_time(), dead_pid, dead_created, "stray")
        plant(out_dir, reused.pid, psutil.Process(reused.pid).create_time() - 1000, dead_pid, dead_created, "reused")
        p = start(pytester, "test_sig.py")
        try:
            wait_for_log(pytester, p, "GET /version")   # ready; the test kills EngineCore once it streams
            procs = run_processes(pytester, run)
            assert {"api_server", "VLLM::EngineCore", "VLLM::Worker"} <= engine_tree(procs), procs
            (pytester.path / "go").touch()              # seen: now the session may kill EngineCore
            rc = wait_or_show(pytester, p, 600)
        finally:
            p.kill()
        out = output(pytester)
        print(out)
        # the sweep: one line, the stray's group stopped, the reused pid spared, both records gone
        lines = [ln for ln in out.splitlines() if "left by an earlier run" in ln]
        assert lines == [f"llmgate: stopped a vllm server left by an earlier run (pid {stray.pid}, entry stray, "
                         f"started 2026-01-01 00:00:00 by pytest pid {dead_pid})"], lines
        assert stray.wait(10) is not None and not marked(f"{token}-child") and not marked(f"{token}-stray")
        assert reused.poll() is None
        # the dead EngineCore names itself; the next test says the server died earlier
        core = int((pytester.path / "core.pid").read_text())
        code = "exit code -9 (SIGKILL)" if kernel_tells_exit_codes() else "exit code not known"
        assert rc == 1, out
        assert (f"victim: the vllm server's process VLLM::EngineCore (pid {core}) ended during the run: {code}; "
                f"the server (pid ") in out
        assert f"victim: the server died earlier in this session (VLLM::EngineCore (pid {core}) ended: {code})" in out
        assert "ConnectError" not in out
        assert not left(procs, run), "a process of the server (or a zombie of it) was left"
        assert not strays.records(out_dir)
    finally:
        for q in (stray, reused):
            q.kill()
            q.wait()


def test_double_sigint_during_a_boot_leaves_no_engine_and_no_record(pytester):
    # the API server is held before it listens (tests/support/hold_ready), so the boot is still on
    # when the signals come, however slow the machine (a fresh 2-core machine beside a llama.cpp
    # build once finished the boot, in 27 s, before the two signals arrived: rc 0)
    hold = Path(__file__).resolve().parents[1] / "support" / "hold_ready"
    run = setup_run(pytester, "def test_boot(llmgate_server):\n    pass\n", env={"PYTHONPATH": str(hold)})
    p = start(pytester, "test_sig.py")
    try:
        # mid-boot: vLLM's EngineCore has started and the API server waits in serve_http
        def booting():
            assert p.poll() is None, f"pytest ended early ({p.returncode}):\n{output(pytester)}"
            logs = list((pytester.path / ".llmgate" / "logs").glob("sig.*.log"))
            return bool(logs) and "llmgate hold: serve_http waits" in logs[0].read_text(errors="replace")
        assert wait_until(booting, 300, 0.5) is not None, output(pytester)
        assert "VLLM::EngineCore" in engine_tree(run_processes(pytester, run)), output(pytester)
        procs = run_processes(pytester, run)
        assert {"api_server", "watchdog"} <= engine_tree(procs), procs
        p.send_signal(signal.SIGINT)
        time.sleep(1.0)
        p.send_signal(signal.SIGINT)
        rc = wait_or_show(pytester, p, 60)
        still = left(procs, run)                         # at pytest's exit, not a moment later
        records = strays.records(pytester.path / ".llmgate")
    finally:
        p.kill()
    out = output(pytester)
    print(out)
    assert rc == 2, out
    assert not still, f"when pytest had exited, still running: {still}"
    assert not records, f"server records left behind: {records}"
