"""--llmgate-shard K/N and llmgate merge, end to end without an engine (pytester): two
shards, each its own pytest process, merge to the verdict set of one unsharded run; their saved parts
are one baseline to a later comparison; a missing shard fails the merge, named; a share the split
leaves empty passes."""

import json
import subprocess
import sys

import boot_runs
import browser

pytest_plugins = ["pytester"]

ENTRIES = """
[defaults]
model = "tiny"

[[matrix]]
id = "a-vllm"
engine = "vllm"

[[matrix]]
id = "b-sglang"
engine = "sglang"
reference = "a-vllm"

[[matrix]]
id = "c-vllm"
engine = "vllm"

[[matrix]]
id = "d-vllm"
engine = "vllm"
"""

PER_BOOT_TEST = """
import json, os
import pytest

@pytest.mark.boots
def test_c8(llmgate_config, llmgate_boot, gate):
    from llmgate.core import metrics
    values = json.loads(os.environ["VALUES"])[llmgate_config.id][llmgate_boot - 1]
    gate.record(metrics.AGGREGATE_TOK_S, values, "c8")
    gate.levers.versus_reference_engine(values, "c8")
"""

VALUES = {cid: [[level * s * r for r in (1.0, 1.002, 0.998)] for s in (1.0, 1.01, 0.99)]
          for cid, level in (("a-vllm", 100), ("b-sglang", 150), ("c-vllm", 90), ("d-vllm", 80))}


def run(pytester, *args):
    return boot_runs.run(pytester, ENTRIES, PER_BOOT_TEST, VALUES, "--llmgate-boots", "3", *args)


def verdicts(path):
    rep = json.loads(path.read_text())
    return {(v["config"], v["key"], v["status"]) for v in rep["verdicts"]}


def merge(pytester, *args):
    return subprocess.run([sys.executable, "-m", "llmgate", "merge", *map(str, args)], cwd=pytester.path,
                          capture_output=True, text=True)


def stored_keys(folder):
    return {b["fullname"] for f in folder.rglob("*.json") for b in json.loads(f.read_text())["benchmarks"]}


def test_two_shards_merge_to_the_unsharded_run_and_save_one_baseline(pytester):
    r = run(pytester, "--llmgate-out", "whole", "--benchmark-storage=file://store-whole", "--benchmark-save=base")
    r.assert_outcomes(passed=12)
    whole = verdicts(pytester.path / "whole" / "report.json")
    assert ("b-sglang", "engine_vs_reference@c8", "no baseline") in whole

    # the whole run's history timed every entry: the shards balance by those seconds
    record = json.loads(next((pytester.path / ".llmgate" / "history").glob("*.json")).read_text())
    assert set(record["run"]["entry_seconds"]) == {"a-vllm", "b-sglang", "c-vllm", "d-vllm"}
    ran = []
    for k in (1, 2):
        r = run(pytester, "--llmgate-shard", f"{k}/2", "--llmgate-out", f"sh{k}", "--llmgate-shard-durations",
                ".llmgate/history", "--benchmark-storage=file://store-parts", "--benchmark-save=base")
        assert r.ret == 0, r.stdout.str()
        ran.append(json.loads((pytester.path / f"sh{k}" / "report.json").read_text())["shard"]["entries"])
    assert sorted(ran[0] + ran[1]) == ["a-vllm", "b-sglang", "c-vllm", "d-vllm"]
    assert not set(ran[0]) & set(ran[1])
    assert any({"a-vllm", "b-sglang"} <= set(e) for e in ran)          # the chain stays in one share

    m = merge(pytester, "--out", "merged", "sh1/report.json", "sh2/report.json")
    assert m.returncode == 0, m.stderr
    assert verdicts(pytester.path / "merged" / "report.json") == whole
    md = (pytester.path / "merged" / "summary.md").read_text()
    assert "| 1/2 |" in md and "| 2/2 |" in md
    # the merged page: every verdict of the whole run a row (tests/unit/test_report_html.py reads it further)
    rows = browser.read((pytester.path / "merged" / "report.html").read_text()).rows
    assert {(r["data-entry"], r["data-key"], r["data-status"]) for r in rows} == whole
    assert len(rows) == len(json.loads((pytester.path / "merged" / "report.json").read_text())["verdicts"])
    assert "**Report page:** `report.html`" in md

    # the shards' saved parts hold the keys of the whole run's baseline, and compare as one
    parts = sorted(p.name for p in (pytester.path / "store-parts").rglob("*.json"))
    assert len(parts) == 2 and all("_base-sh" in p for p in parts), parts
    assert stored_keys(pytester.path / "store-parts") == stored_keys(pytester.path / "store-whole")
    r = run(pytester, "--llmgate-out", "again", "--benchmark-storage=file://store-parts", "--benchmark-compare=0001")
    r.assert_outcomes(passed=12)
    statuses = {s for _, _, s in verdicts(pytester.path / "again" / "report.json")}
    assert statuses == {"unchanged"}, statuses


def test_a_missing_shard_fails_the_merge_naming_it_and_an_empty_share_passes(pytester):
    r = run(pytester, "--llmgate-shard", "1/2", "--llmgate-out", "sh1", "-k", "c-vllm")
    assert r.ret == 0, r.stdout.str()
    m = merge(pytester, "--out", "merged", "sh1/report.json")
    assert m.returncode == 1 and "shard 2/2 missing" in m.stderr
    assert "missing shard(s) 2/2" in (pytester.path / "merged" / "summary.md").read_text()
    # one entry selected, two shares: the second has nothing to do, and says so by passing
    r = run(pytester, "--llmgate-shard", "2/2", "--llmgate-out", "sh2", "-k", "c-vllm")
    assert r.ret == 0, r.stdout.str()
    assert json.loads((pytester.path / "sh2" / "report.json").read_text())["shard"]["entries"] == []
    m = merge(pytester, "--out", "merged", "sh1/report.json", "sh2/report.json")
    assert m.returncode == 0, m.stderr
    # bad input: one line, exit 2
    m = merge(pytester, "--out", "merged", "sh1/report.json", "sh1/report.json")
    assert m.returncode == 2 and "given twice" in m.stderr
    r = run(pytester, "--llmgate-shard", "3/2")
    assert r.ret == 4 and "1 ≤ K ≤ N" in r.stderr.str() + r.stdout.str()
    r = run(pytester, "--llmgate-shard", "1/2", "--llmgate-shard-durations", "no-such-folder")
    assert r.ret == 4 and "no such folder" in r.stderr.str() + r.stdout.str()
