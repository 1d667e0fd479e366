"""A busy machine is said, not judged: figures measured while other processes used a quarter of the
CPUs or more (``gate.watch``) carry that into the baseline they are stored as; a regression they
show, and a later run's improvement over them, read inconclusive with the reason, and are not
re-measured as regressions are."""

import json

import pytest

from llmgate.store import benchmark_files

pytest_plugins = ["pytester"]

BUSY_TEST = """
import json, os, subprocess, sys, time
from llmgate.core import metrics

def test_measure(gate):
    with gate.watch("measure"):
        if os.environ.get("BUSY"):
            # two loops that are not of this run (a shell starts them and exits): a busy machine
            loop = f"{sys.executable} -c 'import time\\nt=time.time()\\nwhile time.time()-t<3: pass' >/dev/null 2>&1 &"
            subprocess.run(["sh", "-c", loop + loop], check=True)
            time.sleep(0.3)
        time.sleep(2.0)
    gate.record(metrics.DECODE_TOK_S, json.loads(os.environ["VALUES"]))
"""


def run(pytester, values, *args, busy=False):
    pytester.makepyfile(test_rec=BUSY_TEST)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("VALUES", json.dumps(values))
        if busy:
            mp.setenv("BUSY", "1")
        else:
            mp.delenv("BUSY", raising=False)
        return pytester.runpytest_subprocess(*args)


def stored(pytester) -> dict:
    files = benchmark_files.stored_files(pytester.path / "baselines")
    (entry,) = [b for b in json.loads(files[-1].read_text())["benchmarks"] if b["fullname"] == "measure::decode_tok_s"]
    return entry["extra_info"]["llmgate"]


def test_a_baseline_measured_on_a_busy_machine_holds_a_later_improvement(pytester):
    run(pytester, [60, 61, 59, 60, 62], "--benchmark-save=busy", busy=True).assert_outcomes(passed=1)
    assert stored(pytester)["disturbed"].startswith("other processes used "), stored(pytester)
    r = run(pytester, [100, 101, 99, 100, 102], "--benchmark-compare")
    out = r.stdout.str()
    assert r.ret == 1, out                     # inconclusive: the run fails, it does not read as passed
    assert "improved" not in [v["status"] for v in json.loads((pytester.path / ".llmgate" / "report.json").read_text())["verdicts"]]
    assert "1 of them held: test_measure decode_tok_s: not called improved: the baseline's other processes used " in out, out


def test_a_regression_measured_on_a_busy_machine_is_held_not_failed_or_confirmed(pytester):
    run(pytester, [100, 101, 99, 100, 102], "--benchmark-save=quiet").assert_outcomes(passed=1)
    r = run(pytester, [70, 71, 69, 70, 72], "--benchmark-compare", "--llmgate-accept", "inconclusive", busy=True)
    out = r.stdout.str()
    r.assert_outcomes(passed=1)
    assert "confirmation run" not in out, out
    assert "1 of them held: test_measure decode_tok_s: not called regressed: this run's other processes used " in out, out
    assert "measure: other processes used " in out       # the note
    (v,) = [v for v in json.loads((pytester.path / ".llmgate" / "report.json").read_text())["verdicts"]
            if v["key"] == "decode_tok_s"]
    assert v["status"] == "inconclusive" and v["held"].startswith("not called regressed") and v["change"] < -0.25
