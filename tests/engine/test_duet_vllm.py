"""A duet (``--llmgate-ab``, the default A/B mode) of two real vLLM servers on the CPU, both resident:
the packaged decode and TTFT c=1 scenarios take turns between them (rounds of windows, request by
request), side B is judged against side A on the boot pair, and nothing is left running.  The
statistics and the scheduling are checked engine-free (tests/unit/test_duet_stats.py,
tests/plugin/test_duet.py); what they measure is in docs/lab/cpu.md (tests/validation/cpu_duet.sh)."""

import json
import re
import shutil
import sys
from pathlib import Path

import cpu_vllm
from engine_procs import engine_processes

pytest_plugins = ["pytester"]

PERF = Path(__file__).resolve().parents[2] / "plugin" / "llmgate" / "scenarios"


def test_a_duet_of_two_resident_vllm_servers_takes_turns_and_judges_the_pair(pytester):
    for name in ("test_decode.py", "test_latency.py"):
        shutil.copy(PERF / name, pytester.path / name)
    pytester.makefile(".toml", llmgate=cpu_vllm.entry("cpu-duet", max_model_len=4096, kv_cache_bytes=200_000_000,
                                                      extra='levers = ["gate", "latency"]\n'))
    py = sys.executable                       # the same vLLM on both sides: an A/A
    r = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-k", "decode_c1 or ttft_c1",
                                      "--llmgate-ab", f"A={py}", "--llmgate-ab", f"B={py}", "--llmgate-boots", "1",
                                      "--llmgate-accept", "inconclusive", "--llmgate-alpha", "1e-6")
    out = r.stdout.str()
    assert r.ret == 0, out[-6000:]
    r.assert_outcomes(passed=2)
    # one boot pair: side A then side B, both up for both tests
    boots = re.findall(r"booting cpu-duet \(vllm, boot (\d) of this session, side (\w)", out)
    assert sorted(boots) == [("1", "A"), ("2", "B")] or sorted(boots) == [("1", "B"), ("2", "A")], boots
    # decode: 3 rounds a side, in turns; TTFT c=1: request by request, in turns.  (A side that holds the
    # machine past the grace lets the other go out of turn, counted: on CI's loaded 2 cores, 1 of 6 once.)
    assert re.search(r"test_decode_c1\[cpu-duet-pair1\]: duet turns [AB ]+ \(6 turns, \d+ out of turn\)", out), out[-6000:]
    m = re.search(r"test_ttft_c1\[cpu-duet-pair1\]: duet turns [AB …]+ \((\d+) turns, (\d+) out of turn\)", out)
    assert m and int(m.group(1)) >= 4 * 9 and int(m.group(2)) < int(m.group(1)) // 4, out[-6000:]   # 2 sizes × 2 sides
    report = json.loads((pytester.path / ".llmgate" / "report.json").read_text())
    by_key = {v["key"]: v for v in report["verdicts"]}
    decode, ttft = by_key["decode_tok_s"], by_key["ttft_c1@p128"]
    assert decode["comparison"] == "duet, 1 boot pair, 3 rounds a pair", decode
    assert "in rounds of windows" in decode["method"] and len(decode["now"]["values"]) == 3, decode
    assert ttft["comparison"] == "duet, 1 boot pair" and "request by request" in ttft["method"], ttft
    # one pair rests on the CPU's prior for its pair part; at this alpha nothing an A/A shows may read as a change
    # (what a duet sees at alpha 0.05 is measured in sessions of its own, not asserted here)
    assert not [v["key"] for v in report["verdicts"] if v["status"] in ("regressed", "improved")], report["counts"]
    # both sides' servers are named (the same build here), and the engine's own TTFT parts are read
    assert decode["engine"] == decode["baseline_engine"] and decode["engine"].startswith("vllm "), decode
    assert {"engine_prefill@c1-p128", "frontend_ttft@c1-p128"} <= set(by_key), sorted(by_key)
    # at this alpha one pair's MDE is astronomical (10^140 % once): shown as "> 1,000%", not as its digits
    summary = (pytester.path / ".llmgate" / "summary.md").read_text()
    assert "> 1,000%" in summary and not re.search(r"\d{5,}(\.\d)?%", summary), summary[-3000:]
    assert not engine_processes(pytester.path)
