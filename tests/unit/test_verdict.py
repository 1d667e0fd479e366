"""Direction-aware verdicts."""

import pytest

from llmgate.core import metrics
from llmgate.analysis.verdict import INCONCLUSIVE, IMPROVED, NO_BASELINE, REGRESSED, UNCHANGED, judge, judge_paired

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
    # unpaired, the ±40% spread hides the slowdown: neither shown nor ruled out
    assert unpaired.status == INCONCLUSIVE
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
    from llmgate.analysis.verdict import INCONCLUSIVE, REGRESSED, UNCHANGED, judge, judge_paired

    m = metrics.PREFIX_REDUCTION
    # −72% relative, but every value within a few points of the baseline: the interval's worse bound,
    # in points, is under the metric's 10-point floor, so a regression is ruled out
    assert judge(m, m.name, "c", [0.015, 0.02, 0.01], [0.052, 0.06, 0.04]).status == UNCHANGED
    # one value 19 points down: not a regression (the median moved 3.7 points), nor ruled one out
    v = judge(m, m.name, "c", [0.015, 0.02, -0.19], [0.052, 0.06, 0.04])
    assert v.status == INCONCLUSIVE and not v.failed
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


# -- three outcomes: unchanged only when the interval rules a regression out --------------------
def one_boot_cpu(now: float):
    """One boot a side on a CPU entry (the embedded default): the between-boot noise is llmgate's prior
    for the CPU (CV 30%), so the comparison's MDE is ~65%."""
    from llmgate.analysis import noise_prior
    from llmgate.analysis.verdict import judge_boots

    return judge_boots(TOKS, "decode_tok_s", "cpu", [[now, now * 1.01, now * 0.99]], [[100.0, 101.0, 99.0]], None,
                       0.05, "0001_base", assumed=noise_prior.assumed("cpu", TOKS), comparison="stored")


def test_one_boot_a_side_on_the_cpu_is_inconclusive_not_unchanged():
    same, slower = one_boot_cpu(100.0), one_boot_cpu(65.0)
    for v in (same, slower):
        assert v.mde > 0.6 and v.mde > v.min_effect          # the CPU default's one boot a side
        assert v.status == INCONCLUSIVE and not v.failed and not v.gated
        assert v.worse_bound() > v.min_effect               # its interval reaches a regression
    # a −35% change reads "inconclusive" as no change does: never "unchanged"
    assert slower.change < -0.3
    line = slower.line()
    assert ": inconclusive (its 95% CI reaches " in line and "is not ruled out" in line
    assert "boots a side would be needed at this noise" in line or "boots a side would decide it" in line


def boots(centre: float, cv: float, k: int, seed: int) -> list[list[float]]:
    import random

    rng = random.Random(seed)
    return [[centre * rng.gauss(1, cv) for _ in range(3)] for _ in range(k)]


def test_a_tight_interval_is_unchanged_and_a_regression_still_regressed():
    from llmgate.analysis.verdict import judge_boots

    base = boots(100.0, 0.01, 5, 1)
    same = judge_boots(TOKS, "decode_tok_s", "c", boots(100.0, 0.01, 5, 2), base, 0.05)
    assert same.status == UNCHANGED and same.worse_bound() < 0.05 and same.mde < 0.05
    slower = judge_boots(TOKS, "decode_tok_s", "c", boots(80.0, 0.01, 5, 2), base, 0.05)
    assert slower.status == REGRESSED and slower.failed
    # higher latency: the worse bound is the interval's upper end
    lat = judge_boots(TTFT, "ttft_p95", "c", boots(0.1, 0.01, 5, 3), boots(0.1, 0.01, 5, 4), 0.10)
    assert lat.status == UNCHANGED and lat.worse_bound() == lat.ci[1]


def test_the_decision_on_figures():
    from llmgate.analysis.verdict import decide

    # a 2% worse change whose interval reaches 3%: ruled out at a 5% minimum effect
    assert decide(TOKS, -0.02, (-0.03, -0.01), 0.05, p_worse=0.01) == UNCHANGED
    # the same change measured loosely (interval to −12%): neither shown nor ruled out
    assert decide(TOKS, -0.02, (-0.12, 0.08), 0.05, p_worse=0.3) == INCONCLUSIVE
    # 20% worse, significant: regressed; not significant: inconclusive
    assert decide(TOKS, -0.20, (-0.25, -0.15), 0.05, p_worse=0.001) == REGRESSED
    assert decide(TOKS, -0.20, (-0.60, 0.40), 0.05, p_worse=0.2) == INCONCLUSIVE
    # no interval (one value a side): the effect size still decides a regression, nothing rules one out
    assert decide(TOKS, -0.20, None, 0.05, p_worse=None) == REGRESSED
    assert decide(TOKS, 0.0, None, 0.05, p_worse=None) == INCONCLUSIVE
    # better by more than the minimum effect, significantly: improved, whatever the interval
    assert decide(TTFT, -0.30, (-0.40, -0.20), 0.10, p_worse=0.99, p_better=0.001) == IMPROVED
    assert decide(TTFT, -0.30, (-0.80, 0.40), 0.10, p_worse=0.9, p_better=0.2) == INCONCLUSIVE
    # a metric near zero: a regression must exceed 10 points too; an interval whose worse end is
    # 3 points (60% of a 5-point baseline) rules it out
    m = metrics.PREFIX_REDUCTION
    assert decide(m, -0.3, (-0.6, 0.1), 0.10, p_worse=0.2, baseline=0.05) == UNCHANGED
    assert decide(m, -0.3, (-0.6, 0.1), 0.10, p_worse=0.2, baseline=0.45) == INCONCLUSIVE


def test_inconclusive_says_the_boots_that_would_decide_it():
    from llmgate.analysis.verdict import judge_boots

    # 5% noise, 2 boots a side, 5% min effect: the interval reaches beyond it; more boots would decide
    v = judge_boots(TOKS, "decode_tok_s", "c", boots(100.0, 0.05, 2, 5), boots(100.0, 0.05, 2, 6), 0.05)
    assert v.status == INCONCLUSIVE and v.boots_needed and v.boots_needed > 2
    assert f"{v.boots_needed} boots a side would decide it" in v.line()
    # paired (A/B rounds): the pairs that would
    base = [100.0, 160.0, 70.0, 130.0, 95.0]
    p = judge_paired(TOKS, "decode_tok_s", "c", [b * f for b, f in zip(base, (1.06, 0.93, 1.05, 0.96, 1.0))], base, 0.05)
    assert p.status == INCONCLUSIVE and p.boots_needed and f"{p.boots_needed} pairs would decide it" in p.line()


def test_engine_builds_of_both_sides_are_in_the_line_and_old_reports_still_load():
    import dataclasses
    import json

    from llmgate.analysis.verdict import Verdict

    v = dataclasses.replace(judge(TOKS, "decode_tok_s", "cfg", [80, 81, 79, 80, 82], [100, 101, 99, 100, 102]),
                            engine="vllm 0.32.0", baseline_engine="vllm 0.31.0")
    assert "engine vllm 0.31.0 → vllm 0.32.0" in v.line()
    old = json.loads(json.dumps(v.to_dict()))
    for k in ("engine", "baseline_engine"):
        del old[k]                                     # a report.json written before these fields
    old["status"] = "unchanged"
    back = Verdict.from_dict(old)
    assert back.status == UNCHANGED and back.engine == "" and "engine " not in back.line().split("]")[-1]
