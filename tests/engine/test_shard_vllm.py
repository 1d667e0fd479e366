"""--llmgate-shard on real vLLM (CPU): two entries, two shards, each its own pytest process; each share
boots only its own entry, saves its part of the baseline, and the merge holds both entries' verdicts.
(The equality with an unsharded run is checked engine-free in tests/plugin/test_shard.py.)"""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import cpu_vllm
from engine_procs import engine_processes

pytest_plugins = ["pytester"]

PERF = Path(__file__).resolve().parents[2] / "plugin" / "llmgate" / "scenarios"


def test_two_shards_boot_their_own_entry_and_merge(pytester):
    shutil.copy(PERF / "test_decode.py", pytester.path / "test_decode.py")
    pytester.makefile(".toml", llmgate=cpu_vllm.entry("tiny-a") + cpu_vllm.entry("tiny-b"))
    entries = []
    for k in (1, 2):
        r = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--llmgate-repeats", "3", "--llmgate-shard",
                                          f"{k}/2", "--llmgate-out", f"sh{k}", "--benchmark-save=cpu")
        r.assert_outcomes(passed=1)
        rep = json.loads((pytester.path / f"sh{k}" / "report.json").read_text())
        entries.append(rep["shard"]["entries"])
        assert list(rep["boots"]) == rep["shard"]["entries"]            # booted only its own entry
    assert sorted(entries) == [["tiny-a"], ["tiny-b"]]
    saved = sorted(p.name for p in (pytester.path / "baselines").rglob("*.json"))
    assert [n.split("_", 1)[1] for n in saved] == ["cpu-sh1.json", "cpu-sh2.json"], saved
    m = subprocess.run([sys.executable, "-m", "llmgate", "merge", "--out", "merged", "sh1/report.json",
                        "sh2/report.json"], cwd=pytester.path, capture_output=True, text=True)
    assert m.returncode == 0, m.stderr
    merged = json.loads((pytester.path / "merged" / "report.json").read_text())
    assert {v["config"] for v in merged["verdicts"] if v["key"] == "decode_tok_s"} == {"tiny-a", "tiny-b"}
    assert not engine_processes(pytester.path)
