"""Failures that explain themselves, each against a real vLLM process on the CPU (pytester
sessions that boot it):

- session 1: vLLM's EngineCore is killed (kill -9) mid-run: its running test fails naming the
  dead process, its exit code, the first error of the server's log since it was last seen alive
  (vLLM's own line about the engine core, not a later request's EngineDeadError) and the log's
  tail; the entry's next two tests error in one line each, pointing to that report (the tail is
  shown once); the other configuration (on a port that was already taken: it moves to another)
  still runs, and no process is left behind; a boot that exceeds boot_timeout_s and a missing
  engine binary error with the reason and the install hint;
- session 2: started with an API key from LLMGATE_API_KEY (requests without it get 401; the
  key is in no log, report or baseline), HTTP 500s and malformed events through a fault
  proxy are counted as failed requests in the verdict, a hung stream (server stopped with
  SIGSTOP) times out and is recorded as failed, and the server serves again afterwards;
- a model path that does not exist fails collection in one line.
"""

import json
import re
import shutil
import socket
from pathlib import Path

import psutil

import cpu_vllm
from engine_procs import engine_processes
from stand_ins import kernel_tells_exit_codes

pytest_plugins = ["pytester"]

HERE = Path(__file__).resolve().parent

KILL_TESTS = """
import os, signal, threading
from pathlib import Path
import psutil
from llmgate.load import workloads as load
from llmgate.core import metrics

def kill_engine_core(h):
    core = [p for p in psutil.Process(h.pid).children(recursive=True) if "EngineCore" in " ".join(p.cmdline())][0]
    Path("core.pid").write_text(str(core.pid))
    os.kill(core.pid, signal.SIGKILL)

def test_1_decode(llmgate_config, llmgate_server, llmgate_prompts, gate):
    h = llmgate_server
    if llmgate_config.id == "victim":
        threading.Timer(1.0, kill_engine_core, (h,)).start()
    res = load.decode_run(h, llmgate_prompts, 32, 400, 2, 0, 300, "decode")
    gate._recorder.account(res)
    gate.record(metrics.DECODE_TOK_S, [s.decode_tok_s for s in res.ok])

def test_2_next(llmgate_server, llmgate_prompts, gate):
    gate._recorder.account(load.decode_run(llmgate_server, llmgate_prompts, 32, 16, 1, 0, 300, "short"))

def test_3_after(llmgate_server, llmgate_prompts, gate):
    gate._recorder.account(load.decode_run(llmgate_server, llmgate_prompts, 32, 16, 1, 0, 300, "short"))
"""


def test_killed_engine_boot_timeout_missing_binary_and_busy_port(pytester):
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    port = busy.getsockname()[1]
    try:
        pytester.makefile(".toml", llmgate="\n".join([
            cpu_vllm.entry("victim"),
            cpu_vllm.entry("survivor") + f"port = {port}\n",
            cpu_vllm.entry("slow") + "boot_timeout_s = 4\n",
            '[[matrix]]\nid = "no-binary"\nengine = "llamacpp"\nmodel = "tiny"\nlauncher = "/nonexistent/llama-server"\n',
        ]))
        pytester.makepyfile(test_kill=KILL_TESTS)
        r = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rA")
    finally:
        busy.close()
    out = r.stdout.str()
    print(out)
    outcomes = r.parseoutcomes()
    assert outcomes.get("passed") == 3, out                       # the survivor's three tests
    assert outcomes.get("failed") == 1 and outcomes.get("errors") == 8, out    # victim 2, slow 3, no-binary 3
    r.stdout.fnmatch_lines([f"*port {port} is in use on 127.0.0.1; using * instead*"])
    # the killed EngineCore: the running test fails naming it, the log's first error since the server
    # was last seen alive (vLLM's line about its engine core, not a later request's EngineDeadError)
    # and the log's tail, once; the entry's later tests say so in one line each
    core = int((pytester.path / "core.pid").read_text())
    code = "exit code -9 (SIGKILL)" if kernel_tells_exit_codes() else "exit code not known"
    lines = out.splitlines()
    (at,) = [i for i, ln in enumerate(lines) if f"victim: the vllm server's process VLLM::EngineCore (pid {core}) "
             f"ended during the run: {code}; the server (pid " in ln]
    assert lines[at + 1].startswith("its log's first error since it was last seen alive: "), lines[at:at + 3]
    first_error = lines[at + 1]
    # vLLM 0.32's own line about it (a WARNING), before the first request's EngineDeadError
    assert "engine core exited unexpectedly" in first_error and "EngineDead" not in first_error, first_error
    (log,) = re.findall(r"^last lines of (\S+/\.llmgate/logs/victim\.boot1\.[\d-]+\.log):$", out, re.M)
    assert lines[at + 2] == f"last lines of {log}:"
    assert out.count("last lines of " + log) == 1, out           # the tail once
    later = [ln for ln in lines if ln.startswith("victim: the server died earlier in this session")]
    assert len(later) == 2 and all(ln.endswith(f"(VLLM::EngineCore (pid {core}) ended: {code}); its log's first "
                                               f"error and tail are in the report of test_kill.py::test_1_decode"
                                               f"[victim]; the log: {log}") for ln in later), later
    # no traceback of pytest's through the gate's code (the engine's log tail may hold the engine's own)
    assert not re.search(r"^\S+\.py:\d+: \w", out, re.M) and "During handling" not in out
    assert "slow: vllm server not ready after 4 s (boot_timeout_s); last lines of" in out
    assert "launcher '/nonexistent/llama-server' (a llama-server binary) does not exist" in out
    assert not engine_processes(pytester.path), "engine processes left behind"
    assert not [p for p in psutil.process_iter(["cmdline"]) if "/nonexistent/" in " ".join(p.info["cmdline"] or [])]
    # never green: the summary's headline and llmgate's section say the run failed, with the reports
    summary = (pytester.path / ".llmgate" / "summary.md").read_text()
    assert summary.startswith("## llmgate: ❌ failed: 1 failed, 8 error(s)"), summary[:400]
    r.stdout.fnmatch_lines(["llmgate: FAILED: 1 failed, 8 error(s)*", "reports: *report.json*summary.md*"])


PROXY_TESTS = """
import dataclasses, os, signal, threading, time
import httpx, pytest
from delay_proxy import DelayProxy
from llmgate.load import workloads as load
from llmgate.core import metrics

def test_a_api_key(llmgate_server, llmgate_prompts, gate):
    h = llmgate_server
    assert h.api_key
    r = httpx.post(h.base_url + "/v1/completions", json={"model": h.model_name, "prompt": "hi", "max_tokens": 2})
    assert r.status_code == 401, r.text
    res = load.decode_run(h, llmgate_prompts, 32, 32, 2, 0, 60, "decode")
    gate._recorder.account(res)
    gate.record(metrics.DECODE_TOK_S, [s.decode_tok_s for s in res.ok])

def test_b_faults_are_counted(llmgate_server, llmgate_prompts, gate):
    proxy = DelayProxy(llmgate_server.base_url, fail_every=3, corrupt_every=4)
    h = dataclasses.replace(llmgate_server, base_url=proxy.start())
    try:
        reqs = load.fixed_requests(h, llmgate_prompts, 8, 32, 16, "faults")
        gate._recorder.account(load.run(h, reqs, 2, 60, label="through the fault proxy"))
    finally:
        proxy.stop()

def test_c_hung_stream_times_out(llmgate_server, llmgate_prompts, gate):
    h = llmgate_server
    threading.Timer(0.5, os.kill, (h.pid, signal.SIGSTOP)).start()
    threading.Timer(6.0, os.kill, (h.pid, signal.SIGCONT)).start()
    try:
        gate._recorder.account(load.decode_run(h, llmgate_prompts, 32, 400, 1, 0, 3, "hung"))
    finally:
        time.sleep(max(0.0, 6.5))

def test_d_serves_again(llmgate_server, llmgate_prompts, gate):
    gate._recorder.account(load.decode_run(llmgate_server, llmgate_prompts, 32, 16, 1, 0, 60, "after"))
"""


def test_api_key_faults_and_hung_stream(pytester, monkeypatch):
    secret = "llmgate-test-key-8c1f0e"
    monkeypatch.setenv("LLMGATE_API_KEY", secret)
    shutil.copy(HERE.parent / "support" / "delay_proxy.py", pytester.path / "delay_proxy.py")
    pytester.makefile(".toml", llmgate=cpu_vllm.entry("keyed"))
    pytester.makepyfile(test_proxy=PROXY_TESTS)
    r = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rA", "--benchmark-save=keyed")
    out = r.stdout.str()
    print(out)
    r.assert_outcomes(passed=2, failed=2)
    # every 3rd POST answered 500 (requests 3 and 6), the 2nd event of every 4th stream not JSON
    assert "keyed: 3 of 8 requests failed (through the fault proxy)" in out, out
    assert "HTTP 500" in out and "injected by the test proxy" in out
    assert "malformed" in out.lower()
    assert "keyed: 1 of 1 requests failed (decode p=32 out=400)" in out
    assert "timeout: no complete response within 3 s (request timeout)" in out
    report = json.loads((pytester.path / ".llmgate" / "report.json").read_text())
    failed = [v for v in report["verdicts"] if v["metric"] == "failed_requests" and v["status"] == "regressed"]
    assert {v["test"] for v in failed} == {"test_b_faults_are_counted", "test_c_hung_stream_times_out"}
    assert report["counts"]["regressed"] == 2
    # the key is in no log, report, summary or baseline file
    for f in [*(pytester.path / ".llmgate").rglob("*"), *(pytester.path / "baselines").rglob("*.json")]:
        if f.is_file():
            assert secret not in f.read_text(errors="replace"), f"API key found in {f}"
    assert not engine_processes(pytester.path)


def test_missing_model_path_stops_the_session_in_one_line(pytester):
    pytester.makefile(".toml", llmgate=cpu_vllm.entry("lost", model="/no/such/model"))
    pytester.makepyfile("def test_x(llmgate_server):\n    pass\n")
    r = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert r.ret == 4                                       # a usage error, before collection and any boot
    r.stderr.fnmatch_lines(["*llmgate.toml: matrix entry 'lost': key 'model'*/no/such/model*"])
    assert not engine_processes(pytester.path)
