"""A/B mode's alternating boots as a same-session comparison, through pytester (no engine): with
--llmgate-ab and --llmgate-ab-mode alternate (the duet is the default: test_duet.py) the scenarios that
measure boots run on K boots a side, alternating A B A B …, each boot with its
side's launcher, and side B's boots are judged against side A's of this session."""

import json

import boot_runs

pytest_plugins = ["pytester"]

ENTRIES = """
[defaults]
engine = "vllm"
model = "tiny"

[[matrix]]
id = "first"
"""

PER_BOOT_TEST = """
import json, os
import pytest
from llmgate.core import metrics

@pytest.mark.boots
def test_measure(llmgate_config, llmgate_boot, gate):
    values = json.loads(os.environ["VALUES"])
    side = llmgate_boot.side
    cfg, name = llmgate_boot.plan.config(llmgate_config, llmgate_boot)
    assert name == side[0] and cfg.launcher == side[1]
    gate.record(metrics.DECODE_TOK_S, values[side[0]][side[2] - 1])
    # a latency figure: one statistic a boot, with its sampling variance
    gate.record(metrics.TTFT_C1, [values["ttft_" + side[0]][side[2] - 1]], "p128", sampling=0.0001, requests=400)
"""


def boots(level, spread=(1.0, 1.004, 0.996)):
    return [[level * s * r for r in (1.0, 1.002, 0.998, 1.001, 0.999)] for s in spread]


def run(pytester, values, *args):
    return boot_runs.run(pytester, ENTRIES, PER_BOOT_TEST, values, "--llmgate-ab", "A=/opt/pinned/python",
                         "--llmgate-ab", "B=/opt/nightly/python", "--llmgate-boots", "3", "--llmgate-ab-mode",
                         "alternate", *args)


def test_boots_alternate_between_the_sides_and_b_is_judged_against_a_of_this_session(pytester):
    pytester.makefile(".toml", llmgate=ENTRIES)
    pytester.makepyfile(test_rec=PER_BOOT_TEST)
    r = pytester.runpytest("--collect-only", "-q", "--llmgate-ab", "A=/x", "--llmgate-ab", "B=/y", "--llmgate-boots", "2",
                           "--llmgate-ab-mode", "alternate")
    ids = [ln.split("::", 1)[1] for ln in r.stdout.lines if ln.startswith("test_rec.py::")]
    assert ids == ["test_measure[first-boot1.A]", "test_measure[first-boot2.B]", "test_measure[first-boot3.A]",
                   "test_measure[first-boot4.B]"]

    # B 20% slower in decode and 20% slower to its first token: both regressed, against this session's A
    slow = {"A": boots(100), "B": boots(80), "ttft_A": [0.0200, 0.0201, 0.0199], "ttft_B": [0.0240, 0.0241, 0.0239]}
    r = run(pytester, slow, "--benchmark-save=ab")
    out = r.stdout.str()
    assert r.ret == 1, out[-3000:]
    assert "first decode_tok_s: boot 1 of 6 (side A, its boot 1)" in out, out[-3000:]
    report = json.loads((pytester.path / ".llmgate" / "report.json").read_text())
    by_key = {v["key"]: v for v in report["verdicts"] if v["key"] in ("decode_tok_s", "ttft_c1@p128")}
    for v in by_key.values():
        assert v["status"] == "regressed", v
        assert v["comparison"] == "same session" and v["baseline_in_run"], v
        assert v["baseline_source"] == "side A of this session", v
        assert v["boots"] == {"baseline": 3, "now": 3}, v
        assert "order ABABAB" in v["note"], v
    assert by_key["decode_tok_s"]["change"] < -0.15
    noise = by_key["ttft_c1@p128"]["noise"]
    assert noise["requests"] == 400 and abs(noise["sampling_cv"] - 0.01) < 1e-9, noise
    assert "sampling 1.00% + boot" in by_key["ttft_c1@p128"]["method"]
    # the noise report shows the two parts
    assert "noise of the latency figures" in out and "same session" in out
    # the saved baseline holds side B's boots under the usual key (no side in it)
    (saved,) = pytester.path.glob("baselines/*/0001_ab.json")
    names = {b["fullname"]: b for b in json.loads(saved.read_text())["benchmarks"]}
    assert "measure[first]::decode_tok_s" in names, list(names)
    ab = names["measure[first]::decode_tok_s"]["extra_info"]["llmgate"]["ab"]
    assert ab["baseline_side"] == "A" and ab["candidate_side"] == "B" and ab["order"] == "ABABAB"

    # A/A: the same engine on both sides passes
    same = {"A": boots(100), "B": boots(100, (0.998, 1.003, 1.0)), "ttft_A": [0.0200, 0.0201, 0.0199],
            "ttft_B": [0.0199, 0.0200, 0.0202]}
    r = run(pytester, same)
    assert r.ret == 0, r.stdout.str()[-3000:]
    report = json.loads((pytester.path / ".llmgate" / "report.json").read_text())
    assert {v["status"] for v in report["verdicts"] if v["key"] != "failed_requests"} == {"unchanged"}


def test_side_names_are_checked(pytester):
    pytester.makefile(".toml", llmgate=ENTRIES)
    pytester.makepyfile(test_rec=PER_BOOT_TEST)
    r = pytester.runpytest("--llmgate-ab", "A-1=/x", "--llmgate-ab", "B=/y")
    assert r.ret == 4
    r.stderr.fnmatch_lines(["*--llmgate-ab 'A-1=/x': a side's name is letters, digits and _ . + *"])
