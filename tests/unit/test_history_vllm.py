"""The run history end to end against real vLLM on the CPU: two short gate sessions of the tiny
model each append one record (boot values and provenance from the running engine), and
``python -m llmgate.history`` prints both runs with the engine release that served them."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from llmgate import history

pytestmark = pytest.mark.engine

PERF = Path(__file__).resolve().parents[2] / "plugin" / "llmgate" / "scenarios"
ENTRY = """
[[matrix]]
id = "cpu-vllm-tiny"
engine = "vllm"
model = "tiny"
dtype = "bfloat16"
max_model_len = 1024
kv_cache_bytes = 400_000_000
levers = ["gate"]
"""


def test_two_gate_runs_append_records_and_the_history_command_prints_both(pytester):
    shutil.copy(PERF / "test_decode.py", pytester.path / "test_decode.py")
    pytester.makefile(".toml", llmgate=ENTRY)
    for _ in range(2):
        r = pytester.runpytest_subprocess("--llmgate-repeats", "2", "-p", "no:cacheprovider",
                                          "--llmgate-history", "hist")
        r.assert_outcomes(passed=1)
        r.stdout.fnmatch_lines(["*llmgate: run history: *hist*"])
    records = history.load(pytester.path / "hist")
    assert len(records) == 2 and records[0]["run"]["id"] != records[1]["run"]["id"]
    by_key = {s["key"]: s for s in records[1]["series"]}
    dec = by_key["decode_tok_s"]
    assert len(dec["boots"]) == 1 and len(dec["boots"][0]) == 2 and all(v > 0 for v in dec["boots"][0])
    engine = dec["provenance"]["engine"]
    assert engine["engine"] == "vllm" and engine["version"]
    assert dec["provenance"]["model_hash"] and dec["provenance"]["config_fingerprint"]
    assert records[0]["series"][0]["provenance"]["config_fingerprint"] == dec["provenance"]["config_fingerprint"]

    out = subprocess.run([sys.executable, "-m", "llmgate.history", str(pytester.path / "hist"), "--metric",
                          "decode_tok_s"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "cpu-vllm-tiny test_decode_c1 decode_tok_s (tok/s, higher is better): 2 run(s)" in out.stdout
    for rec in records:
        assert rec["run"]["id"] in out.stdout
    assert f"vllm {engine['version']}" in out.stdout
    assert "too few runs to tell" in out.stdout
