"""No engine outlives the gate, without an engine: the watchdog, the process tree's deaths,
the server records and the sweep of an earlier run's leftovers, the SIGTERM/SIGHUP handlers
(and a whole pytester session interrupted by SIGTERM: report.json says so), and the busy-GPU
check against NVML answers recorded on an H200 (tests/validation/busy_gpu.py --record: a
second process held 100 GiB there).

Stand-in processes carry a unique marker on their command line, so that only this test's
processes are ever counted or signalled on a machine shared with other runs."""

import json
import os
import signal
import subprocess
import sys
import time
import types
import uuid
from importlib.resources import files
from pathlib import Path

import jsonschema
import psutil
import pytest

from llmgate.device import gpu_room as device
from llmgate.process import interrupts as interrupt
from llmgate.process import proctree
from llmgate.process import strays
from llmgate.process import watchdog
from llmgate.engines import vllm
from llmgate.config.matrix import Matrix, ServerConfig

from stand_ins import SLEEP, SLEEP_SH, ended_process, kernel_tells_exit_codes, marked, plant, wait_until

pytest_plugins = ["pytester"]

HERE = Path(__file__).resolve().parent
H200 = json.loads((HERE.parent / "data" / "nvml-h200-busy.json").read_text())


def tree_cmd(marker: str, code: str = "wait") -> list[str]:
    """An 'engine': a shell with two children, all marked; ``code`` ends the shell."""
    return ["sh", "-c", f"{SLEEP_SH} {marker}-a & {SLEEP_SH} {marker}-b & {code}", marker]


# -- the watchdog ----------------------------------------------------------------------------
GATE = """
import subprocess, sys, time
sys.path.insert(0, {plugin!r})
from llmgate.process import watchdog
p = subprocess.Popen(watchdog.command({cmd!r}), process_group=0)
print(p.pid, flush=True)
time.sleep(300)
"""


def test_watchdog_stops_the_engine_tree_when_its_parent_is_killed(tmp_path):
    marker = f"llmgate-test-{uuid.uuid4().hex[:8]}"
    gate = subprocess.Popen([sys.executable, "-c", GATE.format(plugin=str(HERE.parents[1] / "plugin"),
                                                              cmd=tree_cmd(marker))],
                            stdout=subprocess.PIPE, text=True)
    dog = int(gate.stdout.readline())
    assert wait_until(lambda: marked(f"{marker}-a") and marked(f"{marker}-b"), 10), "the engine tree did not start"
    gate.kill()                                          # SIGKILL: nothing of the gate runs any more
    gate.wait()
    took = wait_until(lambda: not marked(marker) and not psutil.pid_exists(dog), 10)
    assert took is not None, f"left running: {[p.cmdline() for p in marked(marker)]}"


def test_watchdog_exits_as_the_engine_did_and_reaps_its_orphans(tmp_path):
    marker = f"llmgate-test-{uuid.uuid4().hex[:8]}"
    log = tmp_path / "log"
    # the shell is killed: its two children become the watchdog's (subreaper), which stops and reaps them
    with open(log, "wb") as f:
        p = subprocess.Popen(watchdog.command(tree_cmd(marker, "kill -9 $$")), stdout=f, stderr=subprocess.STDOUT)
    assert p.wait(30) == -9
    assert not marked(marker)
    text = log.read_text()
    assert "the engine (pid" in text and "ended with exit code -9 (SIGKILL)" in text
    assert text.count("llmgate-watchdog: reaped ") == 2 and text.count(" of the engine's tree: exit code -15") == 2, text
    assert p.pid not in [c.pid for c in psutil.Process().children()]       # collected: no zombie
    # a plain exit code comes through as it is
    q = subprocess.Popen(watchdog.command(["sh", "-c", "exit 3"]), stdout=subprocess.DEVNULL)
    assert q.wait(30) == 3


def test_watchdog_passes_a_sigterm_to_the_engine():
    marker = f"llmgate-test-{uuid.uuid4().hex[:8]}"
    p = subprocess.Popen(watchdog.command([*SLEEP, marker]), stdout=subprocess.DEVNULL)
    assert wait_until(lambda: marked(marker), 10)
    p.terminate()
    assert p.wait(30) == -signal.SIGTERM
    assert not marked(marker)


# -- the process tree: which process died, with its exit code ---------------------------------
def test_tree_names_the_first_process_that_died():
    marker = f"llmgate-test-{uuid.uuid4().hex[:8]}"
    root = subprocess.Popen(["sh", "-c", f"{SLEEP_SH} {marker}-child & {SLEEP_SH} {marker}-other & wait", marker])
    try:
        assert wait_until(lambda: marked(f"{marker}-child") and marked(f"{marker}-other"), 10)
        child, other = marked(f"{marker}-child")[0], marked(f"{marker}-other")[0]
        child_title = proctree.title(child)
        tree = proctree.Tree(root.pid)
        tree.adopt(settled_s=0)
        assert set(tree.members) == {root.pid, child.pid, other.pid}
        assert tree.first_death() is None
        child.kill()
        assert wait_until(lambda: tree.first_death() is not None, 5)
        d = tree.first_death()
        assert (d.pid, d.root, d.title) == (child.pid, False, child_title)
        # the kernel tells a non-child's exit code from Linux 6.15 (PIDFD_INFO_EXIT); the shell collected it
        assert d.code == (-9 if kernel_tells_exit_codes() else None)
        assert ("exit code -9 (SIGKILL)" if d.code else "exit code not known") in d.exit_words()
        time.sleep(0.3)
        assert [x.pid for x in tree.deaths] == [child.pid]         # the shell still waits for the other
        tree.close()
        other.kill()                                    # ends after close(): the stop, not a death of the run
        root.wait(10)
        time.sleep(0.2)
        assert [x.pid for x in tree.deaths] == [child.pid]
    finally:
        for p in marked(marker):
            p.kill()
        root.kill()
        root.wait()


# -- server records and the sweep ---------------------------------------------------------------
def _stray(marker: str) -> subprocess.Popen:
    """A stand-in server left running: a process group of a leader and its child."""
    p = subprocess.Popen(["sh", "-c", f"{SLEEP_SH} {marker}-child & wait", f"{marker}-leader"], process_group=0)
    assert wait_until(lambda: marked(f"{marker}-child") and marked(f"{marker}-leader"), 10)
    return p


def test_record_is_written_while_a_server_runs(tmp_path):
    p = subprocess.Popen(["sleep", "30"])
    try:
        path = strays.write(tmp_path, pid=p.pid, entry="e", engine="vllm", cmdline=["sleep", "30"], log="l")
        rec = json.loads(path.read_text())
        assert path == tmp_path / "servers" / f"{p.pid}.json"
        assert rec["pytest_pid"] == os.getpid() and rec["pgid"] == p.pid
        assert rec["create_time"] == pytest.approx(psutil.Process(p.pid).create_time())
        assert strays.sweep(tmp_path) == [] and path.exists()      # our own session still runs: untouched
        strays.remove(path)
        assert not path.exists()
    finally:
        p.kill()
        p.wait()


def test_sweep_stops_a_stray_of_a_dead_run_and_spares_a_reused_pid(tmp_path):
    marker = f"llmgate-test-{uuid.uuid4().hex[:8]}"
    dead_pid, dead_created = ended_process()
    stray = _stray(f"{marker}-stray")
    reused = subprocess.Popen([*SLEEP, f"{marker}-reused"])
    live = subprocess.Popen([*SLEEP, f"{marker}-live"])
    try:
        stray_rec = plant(tmp_path, stray.pid, psutil.Process(stray.pid).create_time(), dead_pid, dead_created,
                           "stray")
        # the recorded process started 1000 s earlier than the one that has its pid now: not ours
        reused_rec = plant(tmp_path, reused.pid, psutil.Process(reused.pid).create_time() - 1000, dead_pid,
                            dead_created, "reused")
        # a record of a session that still runs (this one): never touched
        me = psutil.Process()
        live_rec = plant(tmp_path / "gw0", live.pid, psutil.Process(live.pid).create_time(), me.pid,
                          me.create_time(), "live")
        gone_rec = plant(tmp_path, dead_pid, dead_created, dead_pid, dead_created, "gone")
        (strays.folder(tmp_path) / "garbage.json").write_text("{not json")

        lines = strays.sweep(tmp_path)
        assert lines == [f"llmgate: stopped a vllm server left by an earlier run (pid {stray.pid}, entry stray, "
                         f"started 2026-01-01 00:00:00 by pytest pid {dead_pid})"]
        assert stray.wait(10) is not None
        assert wait_until(lambda: not marked(f"{marker}-stray"), 10) is not None
        assert reused.poll() is None and live.poll() is None
        assert not stray_rec.exists() and not reused_rec.exists() and not gone_rec.exists()
        assert live_rec.exists()
        assert not (strays.folder(tmp_path) / "garbage.json").exists()
        # the command line for a CI step after a cancelled job says the same
        out = subprocess.run([sys.executable, "-m", "llmgate", "strays", str(tmp_path)], capture_output=True, text=True)
        assert out.returncode == 0 and "no server left by an earlier run" in out.stdout
    finally:
        for p in (stray, reused, live):
            p.kill()
            p.wait()


# -- SIGTERM / SIGHUP like Ctrl-C --------------------------------------------------------------
@pytest.fixture
def default_signals():
    """The dispositions a fresh process has (this session's own llmgate handlers set aside)."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)}
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    for s, h in saved.items():
        signal.signal(s, h)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_signal_raises_keyboard_interrupt_then_only_hurries(sig, default_signals):
    before = signal.getsignal(sig)
    it = interrupt.Interrupts()
    assert it.install()
    try:
        with pytest.raises(KeyboardInterrupt, match=f"llmgate: {sig.name} received"):
            os.kill(os.getpid(), sig)
            time.sleep(2)
        assert it.received == sig.name
        it.begin_stopping()
        assert not interrupt.HURRY.is_set()
        os.kill(os.getpid(), sig)                      # while stopping: no exception, the stop hurries
        time.sleep(0.1)
        assert interrupt.HURRY.is_set()
    finally:
        it.uninstall()
        interrupt.HURRY.clear()
    assert signal.getsignal(sig) is before


def test_a_second_ctrl_c_before_the_session_stops_only_hurries(default_signals):
    """A Ctrl-C during a boot stops that server as the boot unwinds, before pytest's interrupt hook
    (begin_stopping): a second one then must not break that stop off, only hurry it."""
    it = interrupt.Interrupts()
    assert it.install()
    try:
        with pytest.raises(KeyboardInterrupt, match="llmgate: SIGINT received"):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(2)
        assert not it.stopping and not interrupt.HURRY.is_set()
        os.kill(os.getpid(), signal.SIGINT)            # the unwinding goes on, hurried
        time.sleep(0.1)
        assert interrupt.HURRY.is_set()
    finally:
        it.uninstall()
        interrupt.HURRY.clear()


def test_a_handler_someone_else_installed_is_kept(default_signals):
    mine = lambda signum, frame: None                      # noqa: E731
    signal.signal(signal.SIGTERM, mine)
    it = interrupt.Interrupts()
    it.install()
    try:
        assert signal.getsignal(signal.SIGTERM) is mine
        assert signal.getsignal(signal.SIGHUP) == it._handle
    finally:
        it.uninstall()
    assert signal.getsignal(signal.SIGHUP) is signal.SIG_DFL


INTERRUPTED_SESSION = """
import os, time
from pathlib import Path
from llmgate.core import metrics

def test_1_measured(gate):
    gate.record(metrics.DECODE_TOK_S, [100.0, 101.0, 99.0])

def test_2_running(gate):
    Path("running").write_text("x")
    time.sleep(120)

def test_3_never(gate):
    pass
"""


def test_sigterm_ends_the_session_like_ctrl_c_and_the_report_says_so(pytester):
    """(no engine) SIGTERM mid-test: exit status 2, report.json and summary.md written with what
    was measured, the running test and the tests not run named."""
    pytester.makepyfile(test_int=INTERRUPTED_SESSION)
    with open(pytester.path / "out.txt", "wb") as out:
        p = subprocess.Popen([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "test_int.py"],
                             cwd=pytester.path, stdout=out, stderr=subprocess.STDOUT)
        assert wait_until(lambda: (pytester.path / "running").exists() or p.poll() is not None, 120)
        p.send_signal(signal.SIGTERM)
        rc = p.wait(60)
    text = (pytester.path / "out.txt").read_text()
    assert rc == 2, text
    assert "KeyboardInterrupt" in text and "llmgate: SIGTERM received" in text
    assert "interrupted by SIGTERM during test_int.py::test_2_running" in text
    rep = json.loads((pytester.path / ".llmgate" / "report.json").read_text())
    schema = json.loads(files("llmgate").joinpath("data/report.schema.json").read_text())
    jsonschema.validate(rep, schema)
    assert rep["exit_status"] == 2
    assert rep["interrupted"] == {"signal": "SIGTERM", "during": "test_int.py::test_2_running",
                                  "reason": "llmgate: SIGTERM received", "not_run": ["test_int.py::test_3_never"]}
    assert [v["test"] for v in rep["verdicts"]] == ["test_1_measured"]
    md = (pytester.path / ".llmgate" / "summary.md").read_text()
    assert "Interrupted by SIGTERM during `test_int.py::test_2_running`" in md and "`test_int.py::test_3_never`" in md
    assert "the rest was not run" in md


def test_a_report_that_ran_to_its_end_says_it_was_not_interrupted(pytester):
    pytester.makepyfile(test_ok="from llmgate import metrics\n\ndef test_m(gate):\n"
                                "    gate.record(metrics.DECODE_TOK_S, [1.0, 2.0])\n")
    pytester.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=1)
    rep = json.loads((pytester.path / ".llmgate" / "report.json").read_text())
    assert rep["interrupted"] is None
    jsonschema.validate(rep, json.loads(files("llmgate").joinpath("data/report.schema.json").read_text()))


# -- a busy GPU is named before a boot: NVML answers recorded on an H200 ------------------------
def fake_nvml(rec: dict, pids: dict[int, int] | None = None, devices: int | None = None) -> types.ModuleType:
    """A pynvml that answers what the recording says (``pids`` maps recorded pids to local ones)."""
    m = types.ModuleType("pynvml")
    pids = pids or {}

    class NVMLError(Exception):
        pass

    devs = [dict(rec["devices"][0], index=i) for i in range(devices)] if devices else rec["devices"]
    m.NVMLError = NVMLError
    m.nvmlInit = lambda: None
    m.nvmlDeviceGetCount = lambda: len(devs)
    m.nvmlDeviceGetHandleByIndex = lambda i: devs[i]
    m.nvmlDeviceGetName = lambda h: h["name"]
    if "error" not in devs[0]["memory_v2"]:
        m.nvmlMemory_v2 = object()

    def memory(h, version=None):
        d = h["memory_v2"] if version is not None and version is getattr(m, "nvmlMemory_v2", None) else h["memory"]
        return types.SimpleNamespace(**d)

    m.nvmlDeviceGetMemoryInfo = memory
    for fn in H200["devices"][0]:
        if not fn.startswith("nvmlDevice"):
            continue

        def call(h, fn=fn):
            ans = h[fn]
            if isinstance(ans, dict) and "error" in ans:
                raise NVMLError(ans["error"])
            return [types.SimpleNamespace(**dict(p, pid=pids.get(p["pid"], p["pid"]))) for p in ans]
        if not (isinstance(devs[0][fn], dict) and devs[0][fn].get("missing")):
            setattr(m, fn, call)
    return m


def vllm_budget(util):
    cfg = ServerConfig(id="e", engine="vllm", model="m", device="gpu", gpu_memory_utilization=util)
    return lambda total: vllm.Adapter().gpu_budget_bytes(cfg, total)


def _unused_pid() -> int:
    pid = max(psutil.pids()) + 10_000
    while psutil.pid_exists(pid):
        pid += 1
    return pid


def test_busy_gpu_names_the_process_holding_it():
    holder = H200["holder"]["pid"]
    # named python3 on its command line, whatever the interpreter's path: a longer one (a clone in a
    # temporary folder) had the line cut at 100 characters before the name this test looks for
    stand_in = subprocess.Popen(["python3", "-c", "import time; time.sleep(60)", "gpu-holder-stand-in"],
                                executable=sys.executable)
    try:
        nvml = fake_nvml(H200, {holder: stand_in.pid})
        msg = device.busy_gpu("h200-entry", {}, 1, vllm_budget(0.9), nvml)
        assert msg is not None
        lines = msg.splitlines()
        assert lines[0] == "h200-entry: not booted: the GPU is busy"
        # CUDA's total (NVML's less the reserved 615 MiB) and free, as vLLM reads them: 139.8 / 39.3 GiB
        assert lines[1] == ("GPU 0 (NVIDIA H200) has 39.3 GiB free of 139.8 GiB; the entry needs 125.8 GiB "
                            "(gpu_memory_utilization 0.9 × 139.8 GiB)")
        assert lines[3].startswith(f"    pid {stand_in.pid}: 100.5 GiB: python3 -c import time; "
                                   f"time.sleep(60) gpu-holder-stand-in (user ")
    finally:
        stand_in.kill()
        stand_in.wait()


def test_busy_gpu_boundary_is_vllms_own():
    """vLLM refuses to start when free < ceil(total × gpu_memory_utilization): 39.29 GiB free of
    139.80 GiB fits 0.281 (39.28 GiB) and not 0.2811 (39.30 GiB)."""
    nvml = fake_nvml(H200)
    free, total = 42183294976, 150754820096 - 644939776
    assert free / total == pytest.approx(0.28102, abs=1e-5)
    assert device.busy_gpu("e", {}, 1, vllm_budget(0.281), nvml) is None
    assert device.busy_gpu("e", {}, 1, vllm_budget(0.2811), nvml) is not None
    assert device.busy_gpu("e", {}, 1, vllm_budget(0.2), nvml) is None


def test_busy_gpu_holder_not_visible_here_and_unknown_budget():
    nvml = fake_nvml(H200, {H200["holder"]["pid"]: _unused_pid()})
    msg = device.busy_gpu("e", {}, 1, vllm_budget(None), nvml)       # vLLM's default: 0.9 at least
    assert "the entry needs 125.8 GiB (vLLM's default gpu_memory_utilization, 0.9 or more × 139.8 GiB)" in msg
    assert "(not visible from here: another container or pid namespace?)" in msg
    # an engine that does not say its budget (llama.cpp allocates what it is asked): no check
    assert device.busy_gpu("e", {}, 1, lambda total: None, nvml) is None


def test_busy_gpu_checks_the_gpus_the_entry_will_use(monkeypatch):
    nvml = fake_nvml(H200, devices=4)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert device.entry_gpus({}, 1, nvml) == [2]
    assert device.entry_gpus({}, 2, nvml) == [2, 3]
    assert device.entry_gpus({"CUDA_VISIBLE_DEVICES": "1"}, 1, nvml) == [1]
    msg = device.busy_gpu("tp2", {}, 2, vllm_budget(0.5), nvml)
    assert "GPU 2 (NVIDIA H200)" in msg and "GPU 3 (NVIDIA H200)" in msg and "GPU 0" not in msg


def test_busy_gpu_without_nvml_leaves_it_to_the_engine(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)                 # import pynvml fails
    assert device.busy_gpu("e", {}, 1, vllm_budget(0.9)) is None


def test_a_gpu_entry_on_a_busy_gpu_fails_before_any_process_starts(monkeypatch, tmp_path):
    from llmgate.process import server

    monkeypatch.setattr(device, "_nvml", lambda: fake_nvml(H200))
    monkeypatch.setattr(vllm.Adapter, "unavailable", lambda self, cfg: None)   # installed or not: the GPU decides
    started = []
    monkeypatch.setattr(server.subprocess, "Popen", lambda *a, **k: started.append(a) or pytest.fail("started"))
    cfg = ServerConfig(id="busy", engine="vllm", model="tiny", device="gpu", gpu_memory_utilization=0.9)
    with pytest.raises(server.BootError, match=r"busy: not booted: the GPU is busy\nGPU 0 \(NVIDIA H200\) has 39.3 GiB"):
        server.Server(cfg, Matrix(entries=(cfg,), models={}, source="test"), tmp_path).start()
    assert not started


def test_a_stuck_session_has_its_servers_ended_from_a_helper_thread(monkeypatch, tmp_path, default_signals):
    """Should the main thread not get to stop the servers after the signal, a helper thread
    ends those nobody began to stop (interrupt.STUCK_S later); one being stopped is left alone."""
    from llmgate.process import registry, server

    monkeypatch.setattr(interrupt, "STUCK_S", 0.2)
    called = []
    it = interrupt.Interrupts()
    it.on_stuck.append(called.append)
    assert it.install()
    try:
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(2)
        # the session has not begun to stop: the helper ends its servers, then interrupts it again
        with pytest.raises(KeyboardInterrupt, match="llmgate: SIGTERM received"):
            time.sleep(5)
        assert called == ["SIGTERM"]
    finally:
        it.uninstall()
        interrupt.HURRY.clear()

    marker = f"llmgate-test-{uuid.uuid4().hex[:8]}"
    cfg = ServerConfig(id="stuck", engine="vllm", model="tiny")
    servers, procs = [], []
    for name in ("left", "being-stopped"):
        p = subprocess.Popen([*SLEEP, f"{marker}-{name}"], process_group=0)
        s = server.Server(cfg, Matrix(entries=(cfg,), models={}, source="test"), tmp_path)
        s.proc, s.pid = p, p.pid
        registry.add(s)
        servers.append(s)
        procs.append(p)
    servers[1].signalled = True                     # the main thread is stopping this one itself
    try:
        assert wait_until(lambda: marked(f"{marker}-left") and marked(f"{marker}-being-stopped"), 10)
        assert registry.end_unsignalled(grace_s=3) == ["stuck"]
        assert procs[0].wait(10) == -signal.SIGTERM and procs[1].poll() is None
    finally:
        for s, p in zip(servers, procs):
            registry.discard(s)
            p.kill()
            p.wait()


def test_right_after_a_stop_the_busy_check_waits_for_the_memory_to_show_free(monkeypatch, tmp_path):
    """The next entry of a one-GPU session boots right after the previous server stopped: while
    NVML still counts that memory the check re-reads it (up to server.GPU_SETTLE_S), and boots once
    it is free; without a recent stop it refuses at once, as above."""
    from llmgate.process import registry, server

    answers = ["busy: not booted: the GPU is busy (1)", "busy: not booted: the GPU is busy (2)", None]
    reads = []
    monkeypatch.setattr(device, "busy_gpu", lambda *a, **k: reads.append(1) or answers[min(len(reads), 3) - 1])
    monkeypatch.setattr(server.time, "sleep", lambda s: None)
    monkeypatch.setattr(server.Server, "_resolved", lambda self: (_ for _ in ()).throw(RuntimeError("past the check")))
    cfg = ServerConfig(id="next", engine="vllm", model="tiny", device="gpu", gpu_memory_utilization=0.3)
    s = server.Server(cfg, Matrix(entries=(cfg,), models={}, source="test"), tmp_path)
    monkeypatch.setattr(s.engine, "unavailable", lambda cfg: None)
    monkeypatch.setattr(registry, "_last_stop", [time.monotonic()])
    with pytest.raises(RuntimeError, match="past the check"):
        s.start()
    assert len(reads) == 3
    reads.clear()
    monkeypatch.setattr(registry, "_last_stop", [time.monotonic() - server.GPU_SETTLE_S - 1])
    with pytest.raises(server.BootError, match=r"busy \(1\)"):
        s.start()
    assert len(reads) == 1
