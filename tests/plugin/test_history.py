"""Run history: records written atomically and schema-checked, a corrupt record named, and the
change-point detection on recorded values (a planted step is named, a flat noisy series is not)."""

import json
import math
import random

import pytest

from llmgate.analysis import changepoint
from llmgate import cli
from llmgate.report import trends
from llmgate.store import history

pytest_plugins = ["pytester"]

PROV = {"engine": {"engine": "vllm", "version": "0.32.0", "commit": None}, "device": {"cpu": "test cpu"},
        "model_hash": "ab" * 32, "config_fingerprint": "0123456789abcdef", "config": {"id": "e"}}


def write_runs(folder, run_values, key="decode_tok_s", better="higher", t0=1_800_000_000.0, versions=None):
    """One record per run; run_values[i] = boots of run i (each boot: its repeat values)."""
    paths = []
    for i, boots in enumerate(run_values):
        prov = json.loads(json.dumps(PROV))
        if versions:
            prov["engine"]["version"] = versions[i]
        s = history.make_series("e", "test_decode_c1", key, "tok/s", better, boots, prov)
        paths.append(history.write(history.make_record([s], t0 + 3600 * i, t0 + 3600 * i + 60, ["-q"]), folder))
    return paths


def noisy_run(rng, level, boots=1, repeats=3, boot_cv=0.06, rep_cv=0.04):
    out = []
    for _ in range(boots):
        b = level * math.exp(rng.gauss(0, boot_cv))
        out.append([b * math.exp(rng.gauss(0, rep_cv)) for _ in range(repeats)])
    return out


def test_record_round_trip_is_schema_checked_and_named_by_time(tmp_path):
    [p] = write_runs(tmp_path, [[[100.0, 101.0, 99.0], [97.0, 98.0, 99.5]]])
    assert p.name.startswith("20270115T") and p.suffix == ".json"
    assert not [f for f in tmp_path.iterdir() if f.name.startswith(".tmp-")]       # nothing half-written left
    [rec] = history.load(tmp_path)
    s = rec["series"][0]
    assert s["boots"] == [[100.0, 101.0, 99.0], [97.0, 98.0, 99.5]]
    assert s["noise"]["within_boot_cv"] > 0 and s["noise"]["between_boot_cv"] > 0
    assert rec["run"]["started"] == "2027-01-15T08:00:00.000Z"


def test_invalid_record_is_refused_before_writing(tmp_path):
    s = history.make_series("e", "t", "decode_tok_s", "tok/s", "higher", [[100.0]], PROV)
    s["better"] = "sideways"
    with pytest.raises(history.HistoryError, match="at series/0/better"):
        history.write(history.make_record([s], 1_800_000_000.0), tmp_path)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("content, problem", [
    ('{"schema": "llmgate-history/1", "run": {', "cannot read this history record"),
    ('{"schema": "llmgate-history/1", "run": {"id": "x", "started": "a", "finished": "b"}, "series": []}',
     "at run/id"),
    ('{"schema": "llmgate-history/1", "run": {"id": "20270101T000000000Z_00000000", "started": "a", "finished": "b"},'
     ' "series": [{"entry": "e"}]}', "at series/0"),
])
def test_corrupt_record_is_a_clear_error_naming_the_file_and_nothing_else_is_lost(tmp_path, capsys, content, problem):
    good = write_runs(tmp_path, [[[100.0]], [[101.0]]])
    before = {p: p.read_bytes() for p in good}
    bad = tmp_path / "20270101T000000000Z_deadbeef.json"
    bad.write_text(content)
    with pytest.raises(history.HistoryError) as e:
        history.load(tmp_path)
    assert str(bad) in str(e.value) and problem in str(e.value)
    assert cli.main(["history", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err
    assert {p: p.read_bytes() for p in good} == before and bad.read_text() == content


def test_planted_step_is_named_at_its_run_with_size_and_confidence(tmp_path, capsys):
    rng = random.Random(7)
    runs = [noisy_run(rng, 100) for _ in range(5)] + [noisy_run(rng, 70) for _ in range(3)]
    versions = ["0.28.0", "0.29.0", "0.29.0", "0.30.0", "0.30.0", "0.31.0", "0.31.0", "0.32.0"]
    paths = write_runs(tmp_path, runs, versions=versions)
    [f] = trends.analyse(history.load(tmp_path))
    [cp] = f.changes
    assert cp.index == 5 and f.points[5].run_id == paths[5].stem
    assert -0.4 < cp.step < -0.2 and cp.ci[0] < cp.step < cp.ci[1] < 0 and cp.p_value < 0.05
    assert f.worse(cp)
    assert cli.main(["history", str(tmp_path), "--metric", "decode_tok_s"]) == 0
    out = capsys.readouterr().out
    [line] = [x for x in out.splitlines() if "STEP at run" in x]
    assert paths[5].stem in line and "vllm 0.31.0" in line and "worse" in line and "confidence" in line
    assert "changed at this run: engine vllm 0.30.0 → vllm 0.31.0" in line


def test_flat_noisy_series_names_nothing():
    # 10 runs of 2 boots (6% boot-to-boot, 4% repeat noise), 6 runs of 1 boot: alpha 0.01 bounds the
    # share of flat series in which anything is named at 1% (seen: 1 in 300 of each kind)
    named = 0
    for seed in range(200):
        rng = random.Random(seed)
        two = [changepoint.RunPoint(tuple(sum(r) / len(r) for r in noisy_run(rng, 100, boots=2)), 0.04 ** 2, 3)
               for _ in range(10)]
        one = [changepoint.RunPoint((sorted(noisy_run(rng, 100)[0])[1],), 0.04 ** 2, 3) for _ in range(6)]
        named += bool(changepoint.detect(two)) + bool(changepoint.detect(one))
    assert named <= 4
    rng = random.Random(5)
    assert changepoint.detect([changepoint.RunPoint((100 * math.exp(rng.gauss(0, 0.05)),)) for _ in range(12)]) == []


def test_step_inside_the_noise_or_below_the_minimum_step_is_not_named():
    rng = random.Random(3)
    # a 4% step in 6% run-to-run noise: not beyond the noise
    runs = [changepoint.RunPoint((100 * (0.96 if i >= 4 else 1) * math.exp(rng.gauss(0, 0.06)),)) for i in range(8)]
    assert changepoint.detect(runs) == []
    # a 5% step measured very precisely is significant, but below a 10% minimum step
    precise = [changepoint.RunPoint((v * 1.001, v * 0.999)) for v in [100] * 4 + [95] * 4]
    assert changepoint.best_split(precise).p_value < 0.001
    assert changepoint.detect(precise, min_step=0.10) == []
    assert [c.index for c in changepoint.detect(precise, min_step=0.03)] == [4]


def test_noise_floor_comes_from_between_boot_spread_within_runs():
    # three runs, one boot each: run values alone cannot show the noise of a 2-run side;
    # with 3 boots per run that scatter by ±20%, a 10% step is inside the noise
    level = [100, 100, 100, 90, 90, 90]
    tight = [changepoint.RunPoint((v,), 0.001 ** 2, 3) for v in level]
    loose = [changepoint.RunPoint((v * 0.8, v, v * 1.25)) for v in level]
    assert [c.index for c in changepoint.detect(tight, min_step=0.05)] == [3]
    assert changepoint.detect(loose, min_step=0.05) == []


def test_two_steps_are_both_named_and_a_lower_is_better_metric_knows_worse(tmp_path):
    rng = random.Random(11)
    runs = ([noisy_run(rng, 0.05) for _ in range(4)] + [noisy_run(rng, 0.08) for _ in range(4)]
            + [noisy_run(rng, 0.05) for _ in range(4)])
    write_runs(tmp_path, runs, key="ttft_c1", better="lower")
    [f] = trends.analyse(history.load(tmp_path))
    assert [c.index for c in f.changes] == [4, 8]
    assert [f.worse(c) for c in f.changes] == [True, False]


def test_plot_is_written(tmp_path):
    rng = random.Random(1)
    write_runs(tmp_path / "h", [noisy_run(rng, 100, boots=2) for _ in range(3)] + [noisy_run(rng, 60, boots=2)] * 2)
    out = tmp_path / "p.png"
    assert cli.main(["history", str(tmp_path / "h"), "--plot", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


RECORDING_TEST = """
import json, os
from llmgate.core import metrics

def test_measure(gate):
    gate.record(metrics.DECODE_TOK_S, json.loads(os.environ["VALUES"]))
"""


def test_every_gate_run_appends_one_record_and_the_options_choose_the_folder(pytester):
    pytester.makepyfile(test_rec=RECORDING_TEST)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("VALUES", "[100, 102, 98]")
        pytester.runpytest_subprocess().assert_outcomes(passed=1)
        mp.setenv("VALUES", "[60, 61, 59]")
        pytester.runpytest_subprocess().assert_outcomes(passed=1)
        pytester.runpytest_subprocess("--llmgate-history", "elsewhere").assert_outcomes(passed=1)
        pytester.runpytest_subprocess("--llmgate-no-history").assert_outcomes(passed=1)
    default = sorted((pytester.path / ".llmgate" / "history").glob("*.json"))
    assert len(default) == 2 and len(list((pytester.path / "elsewhere").glob("*.json"))) == 1
    recs = history.load(pytester.path / ".llmgate" / "history")
    assert [r["series"][0]["boots"] for r in recs] == [[[100.0, 102.0, 98.0]], [[60.0, 61.0, 59.0]]]
    s = recs[0]["series"][0]
    assert (s["test"], s["key"], s["better"], s["unit"]) == ("test_measure", "decode_tok_s", "higher", "tok/s")
    assert s["provenance"]["device"]["cpu"]


PER_BOOT_TEST = """
import json, os
import pytest
from llmgate.core import metrics

@pytest.mark.boots
def test_measure(llmgate_config, llmgate_boot, gate):
    gate.record(metrics.DECODE_TOK_S, json.loads(os.environ["VALUES"])[llmgate_boot - 1])
"""


def test_a_run_of_k_boots_records_every_boots_values(pytester):
    pytester.makefile(".toml", llmgate='[[matrix]]\nid = "first"\nengine = "vllm"\nmodel = "tiny"\n')
    pytester.makepyfile(test_rec=PER_BOOT_TEST)
    values = [[100.0, 101.0, 99.0], [90.0, 91.0, 89.5], [110.0, 108.0, 109.0]]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("VALUES", json.dumps(values))
        pytester.runpytest_subprocess("-p", "no:cacheprovider", "--llmgate-boots", "3").assert_outcomes(passed=3)
    [rec] = history.load(pytester.path / ".llmgate" / "history")
    [s] = rec["series"]
    assert (s["entry"], s["key"], s["boots"]) == ("first", "decode_tok_s", values)
    assert s["noise"]["between_boot_cv"] > s["noise"]["within_boot_cv"] > 0
    assert isinstance(s["noise"].get("gate"), dict)               # the gate's noise model, as stored
