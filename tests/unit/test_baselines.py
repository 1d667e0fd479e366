"""Stored baselines: validated on load (a corrupt file stops the run with its name and is left
untouched), written atomically, compared only when the fingerprint matches, and a regression
is re-measured once before it fails (confirmation run)."""

import json
import os

import pytest

import baseline_files
from llmgate import baseline, device

RECORDING_TEST = """
import json, os, pathlib
from llmgate import metrics

def test_measure(gate):
    runs = pathlib.Path("runs.txt")
    n = int(runs.read_text()) + 1 if runs.exists() else 1
    runs.write_text(str(n))
    values = json.loads(os.environ["VALUES"])
    gate.record(metrics.DECODE_TOK_S, values[min(n, len(values)) - 1])
"""
NAME = "test_rec.py::test_measure::decode_tok_s"


def here_fingerprint(**override):
    fp = baseline.fingerprint(None, None, device.describe(), None)
    fp.update(override)
    return fp


def run(pytester, runs, *args):
    """``runs``: the values the test records on its 1st, 2nd… execution in this session."""
    pytester.makepyfile(test_rec=RECORDING_TEST)
    (pytester.path / "runs.txt").unlink(missing_ok=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("VALUES", json.dumps(runs))
        return pytester.runpytest_subprocess(*args)


def test_corrupt_baseline_stops_the_run_and_is_left_untouched(pytester):
    run(pytester, [[100] * 5], "--benchmark-save=base").assert_outcomes(passed=1)
    (saved,) = baseline.stored_files(pytester.path / "baselines")
    saved.write_text(saved.read_text()[:500])          # cut short, as a crash or a bad merge would
    before = saved.read_bytes()
    r = run(pytester, [[100] * 5], "--benchmark-compare")
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    r.stderr.fnmatch_lines([f"*{saved}: not valid JSON: * at line * column *the file was left untouched*"])
    assert saved.read_bytes() == before
    # saving is refused too while the storage holds a corrupt file
    r = run(pytester, [[100] * 5], "--benchmark-save=again")
    assert r.ret == pytest.ExitCode.USAGE_ERROR and saved.read_bytes() == before
    assert len(baseline.stored_files(pytester.path / "baselines")) == 1


@pytest.mark.parametrize("mutate, problem", [
    (lambda b: b["extra_info"]["llmgate"].pop("fingerprint"), "no fingerprint"),
    (lambda b: b["extra_info"]["llmgate"].update(values=[]), "'values' must be a non-empty list of numbers"),
    (lambda b: b["extra_info"]["llmgate"].update(schema=1), "llmgate schema 1"),
    (lambda b: b["extra_info"]["llmgate"].update(better="bigger"), "'better' must be 'higher' or 'lower'"),
    (lambda b: b.pop("stats"), "has no numeric 'stats'"),
])
def test_schema_problems_are_named(pytester, mutate, problem):
    path = baseline_files.write(pytester.path, "base", {NAME: [100] * 5}, fingerprint=here_fingerprint())
    data = json.loads(path.read_text())
    mutate(data["benchmarks"][0])
    path.write_text(json.dumps(data))
    r = run(pytester, [[100] * 5], "--benchmark-compare")
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    r.stderr.fnmatch_lines([f"*{path}: benchmark '{NAME}'*{problem}*"])


def test_other_device_is_refused_unless_allowed(pytester):
    other = here_fingerprint(device={"cpu": "Some Other CPU @ 5 GHz"})
    baseline_files.write(pytester.path, "base", {NAME: [100] * 5}, fingerprint=other)
    r = run(pytester, [[100] * 5], "--benchmark-compare")
    r.assert_outcomes(failed=1)
    r.stdout.fnmatch_lines(["*refusing to compare with *0001_base.json (pass --llmgate-allow-mismatch*",
                            "*decode_tok_s: now 100.0 tok/s; not compared: device differs: baseline *Some Other CPU*"])
    r = run(pytester, [[60] * 5], "--benchmark-compare", "--llmgate-allow-mismatch", "--llmgate-no-confirm")
    r.assert_outcomes(failed=1)  # compared anyway: a 40% slowdown is still a regression, with the warning
    out = r.stdout.str()
    assert "NOT COMPARABLE, compared anyway" in out and "regressed" in out


def test_other_model_is_refused(pytester):
    baseline_files.write(pytester.path, "base", {NAME: [100] * 5}, fingerprint=here_fingerprint(model_hash="abc123"))
    r = run(pytester, [[100] * 5], "--benchmark-compare")
    r.assert_outcomes(failed=1)
    r.stdout.fnmatch_lines(["*model differs: baseline content hash abc123*"])


def test_engine_change_is_what_is_compared(pytester):
    old = here_fingerprint(engine={"engine": "vllm", "version": "0.31.0", "commit": None})
    baseline_files.write(pytester.path, "base", {NAME: [100] * 5}, fingerprint=old)
    r = run(pytester, [[99, 101, 100, 102, 98]], "--benchmark-compare")
    r.assert_outcomes(passed=1)


def test_confirmation_run_clears_a_one_off(pytester):
    run(pytester, [[100, 101, 99, 100, 102]], "--benchmark-save=base").assert_outcomes(passed=1)
    r = run(pytester, [[70, 71, 69, 70, 72], [100, 99, 101, 100, 98]], "--benchmark-compare", "-W", "default")
    r.assert_outcomes(passed=1, warnings=1)
    out = r.stdout.str()
    assert "confirmation run once more" in out
    assert "decode_tok_s: first measurement regressed (-30.0%), the confirmation run once more did not" in out
    assert (pytester.path / "runs.txt").read_text() == "2"


def test_confirmed_regression_fails_and_says_so(pytester):
    run(pytester, [[100, 101, 99, 100, 102]], "--benchmark-save=base").assert_outcomes(passed=1)
    r = run(pytester, [[70, 71, 69, 70, 72], [75, 74, 76, 75, 73]], "--benchmark-compare", "--benchmark-save=after")
    r.assert_outcomes(failed=1)
    out = r.stdout.str()
    assert "first measurement and the confirmation run once more both regressed" in out
    assert "now 70.0 tok/s" in out and "now 75.0 tok/s" in out
    # what is stored is the confirmation run, once
    files = baseline.stored_files(pytester.path / "baselines")
    after = json.loads(files[-1].read_text())
    entries = [b for b in after["benchmarks"] if b["fullname"] == NAME]
    assert len(entries) == 1 and entries[0]["extra_info"]["llmgate"]["values"] == [75, 74, 76, 75, 73]


def test_atomic_save_never_overwrites(tmp_path):
    target = tmp_path / "0001_x.json"
    baseline.atomic_write(target, b"{}")
    assert target.read_bytes() == b"{}"
    with pytest.raises(FileExistsError):
        baseline.atomic_write(target, b"{new}")
    assert target.read_bytes() == b"{}"
    assert [p.name for p in tmp_path.iterdir()] == ["0001_x.json"]   # no temporary file left behind
