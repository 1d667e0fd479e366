"""Baseline keys name the scenario, the matrix entry and the metric, never a file path; files
stored with llmgate 0.1's keys (``tests/perf/test_decode.py::test_decode_c1[h200]::…``) are
read as today's keys and rewritten by ``llmgate migrate DIR``."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import baseline_files
from llmgate.store import benchmark_files, keys

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[2]
OLD = Path(__file__).parents[1] / "data" / "baseline-keys-0.1"       # an excerpt of a committed file before migration

MATRIX = """
[defaults]
engine = "vllm"
model = "tiny"

[[matrix]]
id = "cpu-a"
"""

# scenarios of the matrix that record given figures (llmgate_config, not llmgate.scenario(): no server is booted)
SCENARIO = """
import json, os
import pytest
from llmgate.core import metrics

def test_decode_c1(llmgate_config, gate):
    gate.record(metrics.DECODE_TOK_S, json.loads(os.environ["VALUES"]))

@pytest.mark.parametrize("size", ["short", "long"])
def test_sized(llmgate_config, gate, size):
    gate.record(metrics.TTFT_C1, [0.1, 0.1, 0.1], variant=size)
"""


@pytest.mark.parametrize("old, entry, new", [
    ("tests/perf/test_decode.py::test_decode_c1[h200-8b-bf16]::decode_tok_s", "h200-8b-bf16",
     "decode_c1[h200-8b-bf16]::decode_tok_s"),
    ("tests/perf/test_concurrency.py::test_concurrency[h200]::ttft_p95@c8", "h200", "concurrency[h200]::ttft_p95@c8"),
    ("test_rec.py::test_measure::decode_tok_s", None, "measure::decode_tok_s"),
    ("t.py::test_q[case3-h200]::ttft_c1", "h200", "q[case3][h200]::ttft_c1"),
    ("t.py::test_q[h200]@grp::ttft_c1", "h200", "q[h200]::ttft_c1"),
    ("decode_c1[h200]::decode_tok_s", "h200", "decode_c1[h200]::decode_tok_s"),         # current: unchanged
])
def test_old_names_become_scenario_entry_metric(old, entry, new):
    assert keys.current_key(old, entry) == new


def test_keys_do_not_depend_on_where_the_scenario_file_is(pytester):
    """The same scenario in two folders stores under the same key."""
    pytester.makefile(".toml", llmgate=MATRIX)
    for where in ("a/deep/folder", "elsewhere"):
        d = pytester.path / where
        d.mkdir(parents=True)
        (d / "test_gate.py").write_text(SCENARIO)
    names = []
    for n, where in enumerate(("a/deep/folder", "elsewhere")):
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("VALUES", "[100, 101, 99]")
            r = pytester.runpytest_subprocess(where, f"--benchmark-save=run{n}", "-p", "no:cacheprovider")
        r.assert_outcomes(passed=3)
        saved = benchmark_files.stored_files(pytester.path / "baselines")[-1]
        names.append(sorted(b["fullname"] for b in json.loads(saved.read_text())["benchmarks"]))
    assert names[0] == names[1] == ["decode_c1[cpu-a]::decode_tok_s", "sized[long][cpu-a]::ttft_c1@long",
                                    "sized[short][cpu-a]::ttft_c1@short"], names


def test_two_scenarios_of_one_name_are_refused(pytester):
    pytester.makefile(".toml", llmgate=MATRIX)
    for where in ("one", "two"):
        (pytester.path / where).mkdir()
        (pytester.path / where / f"test_{where}.py").write_text(SCENARIO)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("VALUES", "[100, 101, 99]")
        r = pytester.runpytest_subprocess("one", "two", "-p", "no:cacheprovider")
    r.assert_outcomes(passed=3, failed=3)
    assert "both record 'decode_c1[cpu-a]::decode_tok_s'" in r.stdout.str()


def test_an_old_file_is_compared_with_under_todays_key(pytester):
    """A file stored with 0.1's keys (test path in the name) is the baseline of today's scenario."""
    pytester.makefile(".toml", llmgate=MATRIX)
    pytester.makepyfile(test_gate=SCENARIO)
    fp = baseline_files.fingerprint_for(pytester.path / "llmgate.toml", "cpu-a")
    old = baseline_files.write(pytester.path, "old", {"tests/perf/test_decode.py::test_decode_c1[cpu-a]::decode_tok_s":
                                                      [100.0] * 5}, fingerprint=fp)
    before = old.read_bytes()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("VALUES", "[20, 20.5, 19.5, 20, 20]")      # far beyond one CPU boot's swing
        r = pytester.runpytest_subprocess("-k", "decode", "--benchmark-compare", "--llmgate-no-confirm",
                                          "-p", "no:cacheprovider")
    r.assert_outcomes(failed=1, deselected=2)
    r.stdout.fnmatch_lines([f"*performance regression against *{old.parent.name}/{old.name}:*",
                            "*cpu-a decode_tok_s (decode tok/s (c=1), higher is better): baseline 100.0 tok/s*"
                            "→ now 20.0 tok/s*regressed*"])
    assert old.read_bytes() == before                    # read as migrated; the file itself is not changed


def test_migrate_rewrites_old_keys_once_and_keeps_everything_else(tmp_path):
    root = tmp_path / "baselines"
    shutil.copytree(OLD, root)
    (f,) = benchmark_files.stored_files(root)
    before = json.loads(f.read_text())
    r = subprocess.run([sys.executable, "-m", "llmgate", "migrate", str(root)], capture_output=True,
                       text=True, check=True)
    assert f"{f}: 2 entries migrated" in r.stdout, r.stdout
    after = json.loads(f.read_text())
    assert sorted(b["fullname"] for b in after["benchmarks"]) == [
        "concurrency[h200-8b-bf16]::ttft_p95@c8", "decode_c1[h200-8b-bf16]::decode_tok_s"]
    for b0, b1 in zip(before["benchmarks"], after["benchmarks"]):
        assert b1["name"] == b1["fullname"]
        assert {k: v for k, v in b0.items() if k not in ("name", "fullname")} == \
            {k: v for k, v in b1.items() if k not in ("name", "fullname")}
    benchmark_files.validate_file(f)
    again = subprocess.run([sys.executable, "-m", "llmgate", "migrate", str(root)], capture_output=True,
                           text=True, check=True)
    assert f"{f}: already current" in again.stdout and "0 entries migrated" in again.stdout


def test_the_committed_baselines_are_migrated():
    """Every llmgate entry of baselines/ carries today's key (the migration was run and committed)."""
    files = benchmark_files.stored_files(REPO / "baselines")
    assert files
    for f in files:
        for b in json.loads(f.read_text())["benchmarks"]:
            assert keys.current_key(b["fullname"]) == b["fullname"], (f, b["fullname"])
            assert ".py::" not in b["fullname"]


def test_migrate_refuses_a_corrupt_file_and_leaves_it(tmp_path):
    bad = tmp_path / "0001_bad.json"
    bad.write_text("{not json")
    r = subprocess.run([sys.executable, "-m", "llmgate", "migrate", str(tmp_path)], capture_output=True,
                       text=True)
    assert r.returncode == 1 and "not valid JSON" in r.stdout
    assert bad.read_text() == "{not json"
