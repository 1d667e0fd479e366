"""Direction-aware verdicts."""

import pytest

from llmgate.core import metrics
from llmgate.analysis.verdict import IMPROVED, NO_BASELINE, REGRESSED, UNCHANGED, judge, judge_paired

TOKS = metrics.DECODE_TOK_S      # higher is better
TTFT = metrics.TTFT_P95          # lower is better


def test_lower_throughput_is_a_regression():
    v = judge(TOKS, "decode_tok_s", "cfg", [80, 81, 79, 80, 82], [100, 101, 99, 100, 102], min_effect=0.05)
    assert v.status == REGRESSED and v.failed
    assert v.change == pytest.approx(-0.2)
    assert v.p_value < 0.05
    line = v.line()
    assert "decode_tok_s" in line and "100.0 tok/s" in line and "80.0 tok/s" in line and "-20.0%" in line


def test_higher_throughput_is_an_improvement_not_a_failure():
    v = judge(TOKS, "decode_tok_s", "cfg", [120, 121, 119], [100, 101, 99])
    assert v.status == IMPROVED and not v.failed


def test_higher_latency_is_a_regression_lower_is_not():
    assert judge(TTFT, "ttft_p95", "c", [0.2, 0.21, 0.22], [0.1, 0.11, 0.1]).status == REGRESSED
    assert judge(TTFT, "ttft_p95", "c", [0.05, 0.05, 0.06], [0.1, 0.11, 0.1]).status == IMPROVED


def test_change_below_min_effect_is_unchanged():
    v = judge(TOKS, "decode_tok_s", "c", [97, 97, 97, 97], [100, 100, 100, 100], min_effect=0.05)
    assert v.status == UNCHANGED


def test_overlapping_noise_is_not_significant():
    # medians differ by 20% but the samples overlap completely: not a regression
    v = judge(TOKS, "decode_tok_s", "c", [60, 140, 80, 120, 100], [50, 150, 125, 75, 110], min_effect=0.05)
    assert v.status != REGRESSED
    assert v.p_value is not None and v.p_value > 0.05


def test_without_baseline():
    v = judge(TOKS, "decode_tok_s", "c", [1, 2, 3], None)
    assert v.status == NO_BASELINE and v.baseline is None and not v.failed


def test_too_few_values_decides_on_effect_alone():
    v = judge(TOKS, "decode_tok_s", "c", [50], [100])
    assert v.status == REGRESSED and v.p_value is None and "effect size only" in v.method
    # 3 against 3 can never reach p < 0.05 with an exact rank test: effect size decides, and says so
    v = judge(TOKS, "decode_tok_s", "c", [50, 51, 49], [100, 99, 101])
    assert v.status == REGRESSED and v.p_value is None and "3 vs 3" in v.method
    # 4 against 4 can: the test decides
    v = judge(TOKS, "decode_tok_s", "c", [50, 51, 49, 50], [100, 99, 101, 100])
    assert v.status == REGRESSED and v.p_value == pytest.approx(1 / 70, rel=0.05)


def test_cost_form_for_pytest_benchmark():
    assert TOKS.cost(200.0) == pytest.approx(0.005)  # tok/s stored as s/tok: bigger is worse
    assert TTFT.cost(0.1) == 0.1
    assert TOKS.cost(0.0) == metrics.ZERO_COST            # finite: pytest-benchmark's statistics reject inf


def test_bootstrap_interval_brackets_the_change_and_is_reproducible():
    v = judge(TOKS, "decode_tok_s", "c", [80, 82, 78, 81, 79, 80], [100, 102, 98, 101, 99, 100])
    lo, hi = v.ci
    assert lo <= v.change <= hi and hi < 0          # the whole interval says "slower"
    assert judge(TOKS, "decode_tok_s", "c", [80, 82, 78, 81, 79, 80], [100, 102, 98, 101, 99, 100]).ci == v.ci
    assert "95% CI" in v.line()
    noisy = judge(TOKS, "decode_tok_s", "c", [60, 140, 80, 120, 100], [50, 150, 125, 75, 110])
    assert noisy.ci[0] < 0 < noisy.ci[1]          # overlapping samples: the interval spans no change


def test_paired_comparison_sees_through_shared_noise():
    # boots that differ by ±40% from each other, each measured twice: the second path 20% slower
    boots = [100.0, 160.0, 70.0, 130.0, 95.0]
    slow = [b * 0.8 for b in boots]
    unpaired = judge(metrics.DECODE_TOK_S, "decode_tok_s", "c", slow, boots, 0.1)
    paired = judge_paired(metrics.DECODE_TOK_S, "decode_tok_s", "c", slow, boots, 0.1)
    assert unpaired.status == UNCHANGED
    assert paired.status == REGRESSED and abs(paired.change + 0.2) < 1e-9 and paired.p_value < 0.05
    assert "Wilcoxon signed-rank, 5 pairs, p=" in paired.line() and "MDE " in paired.line()
    # the same noise without a slowdown: no verdict either way
    same = judge_paired(metrics.DECODE_TOK_S, "decode_tok_s", "c", [b * f for b, f in zip(boots, (1.02, 0.97, 1.01, 0.99, 1.0))], boots, 0.1)
    assert same.status == UNCHANGED
    # four pairs cannot reach p < 0.05: the effect size decides, and the verdict says so
    four = judge_paired(metrics.DECODE_TOK_S, "decode_tok_s", "c", slow[:4], boots[:4], 0.1)
    assert four.status == REGRESSED and four.p_value is None and "4 pairs cannot reach" in four.method


def test_a_metric_near_zero_needs_an_absolute_move_too():
    """Seen in an A/A run on an H200: SGLang's TTFT reduction from 512 cached tokens went
    5.2% → 1.5% (−72% relative, 3.7 points): noise around zero, not a broken cache."""
    from llmgate.core import metrics
    from llmgate.analysis.verdict import REGRESSED, UNCHANGED, judge, judge_paired

    m = metrics.PREFIX_REDUCTION
    assert judge(m, m.name, "c", [0.015, 0.02, -0.19], [0.052, 0.06, 0.04]).status == UNCHANGED
    assert judge(m, m.name, "c", [0.01, 0.02, 0.0], [0.45, 0.44, 0.47]).status == REGRESSED
    assert judge_paired(m, m.name, "c", [0.01, 0.02, 0.0], [0.05, 0.06, 0.04]).status == UNCHANGED
    v = judge(m, m.name, "c", [0.01, 0.02, 0.0], [0.45, 0.44, 0.47])
    assert "min effect 10% and 10.0 %" in v.line()


@pytest.mark.parametrize("make", [
    lambda: judge_boots_example(),
    lambda: judge(metrics.TTFT_P95, "ttft_p95@c8", "cfg", [0.2, 0.21, 0.19], None),
    lambda: judge(CUSTOM, "my_ratio@x", "cfg", [1.0, 1.1, 0.9, 1.0], [2.0, 2.1, 1.9, 2.0]),
], ids=["boots", "no-baseline", "custom-metric"])
def test_a_verdict_round_trips_through_report_json(make):
    """report.json holds what a Verdict is: a pytest-xdist worker's verdicts are rebuilt on the
    controller (and by anyone reading the report) as the same objects, with the same line."""
    import dataclasses
    import json

    from llmgate.analysis.verdict import Verdict

    v = dataclasses.replace(make(), test="test_x", note="a note", regime="cpu")
    back = Verdict.from_dict(json.loads(json.dumps(v.to_dict())))
    assert back == v
    assert back.line() == v.line()
    assert (back.samples, back.baseline_samples, back.boot_values, back.noise) == \
        (v.samples, v.baseline_samples, v.boot_values, v.noise)


CUSTOM = metrics.Metric("my_ratio", "my ratio", "ratio", "higher", 0.2, min_abs_effect=0.1)


def judge_boots_example():
    from llmgate.analysis.verdict import judge_boots

    return judge_boots(metrics.DECODE_TOK_S, "decode_tok_s", "cfg", [[100, 101, 99], [98, 99, 97]],
                       [[110, 111, 109], [112, 110, 111]], 0.05, 0.05, "0001_x.json")
