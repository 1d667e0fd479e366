"""The sensitivity machinery on known numbers (no engine): steady-state windows, window
figures from token timestamps, the noise model, boot-level verdicts and their MDE."""

import math
import random

import pytest

from llmgate.core import metrics
from llmgate.load.steady import Steady, _Controller
from llmgate.load.samples import Sample, SteadyResult
from llmgate.analysis.stats import Noise, repeat_metrics, window_metrics
from llmgate.analysis.verdict import REGRESSED, UNCHANGED, judge_boots


def _sample(start, ttft, n_tokens, gap):
    offs = [ttft + i * gap for i in range(n_tokens)]
    return Sample(ok=True, start=start, e2e=offs[-1] + 0.001, ttft=ttft, chunk_offsets=offs,
                  chunk_tokens=[1] * n_tokens, completion_tokens=n_tokens, prompt_tokens=8)


def test_window_counts_tokens_emitted_inside_it_and_requests_that_lived_inside_it():
    # 4 streams back to back: each request 10 tokens, 0.1 s apart after a 0.05 s TTFT
    samples = []
    for stream in range(4):
        t = 0.0
        while t < 20:
            s = _sample(t, 0.05, 10, 0.1)
            samples.append(s)
            t = s.end
    res = SteadyResult(samples, 20.0, 4, mode="closed", window=(5.0, 15.0))
    w = window_metrics(res)
    # 4 streams × 10 tokens per 0.951 s
    assert w["aggregate_tok_s"] == pytest.approx(4 * 10 / 0.951, rel=0.02)
    assert w["ttft_p50"] == pytest.approx(0.05)
    assert all(5.0 <= s.start and s.end <= 15.0 for s in res.lived_in(5.0, 15.0))
    parts = repeat_metrics(res, 5)
    assert len(parts) == 5 and all(p["window_s"] == pytest.approx(2.0) for p in parts)
    assert [round(p["decode_tok_s"]) for p in parts] == [10] * 5


def _drive(ctl: _Controller, rates: list[float], n=4, step=0.25):
    """Completions of n streams whose throughput follows ``rates`` (tok/s, one per second)."""
    t = 0.0
    while not ctl.stop_now(t):
        rate = rates[min(int(t), len(rates) - 1)]
        tokens = rate * step
        ctl.add(t - 1.0, t + step, tokens, True)
        t += step
        if t > 200:
            raise AssertionError("never stopped")
    return t


def test_warmup_lasts_until_throughput_stops_rising_then_window_has_its_length_and_requests():
    ctl = _Controller(Steady(min_s=5, min_requests=10, max_s=30, warm_segment_s=1.0, warm_max_s=20), 1, "closed", None, 0.0)
    end = _drive(ctl, [20, 40, 60, 80, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100], n=1)
    assert ctl.window_start is not None and ctl.window_start >= 5.0      # not while it still rose
    assert ctl.ended_by == "throughput stopped rising"
    assert end - ctl.window_start >= 5.0 and ctl.in_window >= 10
    assert not ctl.notes


def test_warmup_cap_and_window_cap_are_said():
    ctl = _Controller(Steady(min_s=2, min_requests=10_000, max_s=4, warm_segment_s=1.0, warm_max_s=3), 1, "closed", None, 0.0)
    _drive(ctl, [10 * (i + 1) for i in range(100)], n=1)
    assert any("warm-up ended at its cap" in n for n in ctl.notes)
    assert any("window closed at its cap" in n for n in ctl.notes)


def test_noise_model_separates_within_and_between_boot_variation():
    rng = random.Random(3)
    boots = []
    for _ in range(40):
        level = math.exp(rng.gauss(0, 0.05))                  # 5% between boots
        boots.append([100 * level * math.exp(rng.gauss(0, 0.02)) for _ in range(5)])  # 2% within
    n = Noise.of(boots)
    assert n.df == 39
    assert n.within_cv == pytest.approx(0.02, rel=0.2)
    assert n.boot_cv == pytest.approx(0.05, rel=0.3)
    assert Noise.from_dict(n.as_dict()) == n
    pooled = n.pooled(Noise.of(boots[:3]))
    assert pooled.df == 41


def _run(rng, k, level=1.0, between=0.01, within=0.01, reps=5):
    return [[100 * level * math.exp(rng.gauss(0, between)) * math.exp(rng.gauss(0, within)) for _ in range(reps)]
            for _ in range(k)]


def test_boot_level_verdict_false_alarms_stay_at_alpha_and_a_big_regression_is_caught():
    """A/A over many simulated runs: the t-test on boot values, not repeats, keeps false alarms
    near alpha (a within-boot test over 5 repeats a side would flag ~40% of these), and a
    regression of twice the MDE is caught nearly always."""
    rng = random.Random(7)
    m = metrics.DECODE_TOK_S
    alarms = caught = 0
    mdes = []
    trials = 300
    for _ in range(trials):
        base, now = _run(rng, 3, between=0.03), _run(rng, 3, between=0.03)
        v = judge_boots(m, "decode_tok_s", "e", now, base, min_effect=0.0)
        alarms += v.status == REGRESSED
        mdes.append(v.mde)
    assert alarms / trials < 0.09
    mde = sorted(mdes)[trials // 2]
    for _ in range(100):
        base, now = _run(rng, 3, between=0.03), _run(rng, 3, level=1 - 2 * mde, between=0.03)
        caught += judge_boots(m, "decode_tok_s", "e", now, base, min_effect=0.0).status == REGRESSED
    assert caught >= 85


def test_mde_is_shown_with_the_boots_that_would_reach_the_minimum_effect():
    rng = random.Random(1)
    base, now = _run(rng, 3, between=0.06), _run(rng, 3, between=0.06)
    v = judge_boots(metrics.AGGREGATE_TOK_S, "aggregate_tok_s@c8", "e", now, base)
    assert v.mde is not None and v.mde > 0.05 and v.status == UNCHANGED
    assert v.boots_needed is not None and v.boots_needed > 3
    line = v.line()
    assert f"MDE {v.mde:.1%} > min effect: {v.boots_needed} boots a side would reach it" in line
    assert "t-test on boot values" in line and "(3 boots)" in line


def test_one_boot_a_side_says_its_mde_is_a_lower_bound_and_a_stored_noise_model_makes_it_real():
    rng = random.Random(2)
    base, now = _run(rng, 1), _run(rng, 1)
    v = judge_boots(metrics.DECODE_TOK_S, "decode_tok_s", "e", now, base)
    assert "lower bound" in v.mde_basis and "repeats within one boot" in v.method
    prior = Noise.of(_run(rng, 5, between=0.04))
    v = judge_boots(metrics.DECODE_TOK_S, "decode_tok_s", "e", now, base, prior=prior)
    assert v.method.startswith("t-test on boot values") and "noise model" in v.method
    assert v.mde > 0.04


def test_one_boot_a_side_assumes_the_devices_prior_and_does_not_cry_wolf():
    """The A/A a new user saw: TTFT c=1 +13.8% on one boot a side, called "regressed" from the
    repeats of each boot alone.  With the CPU prior standing in for the between-boot noise no boot
    measured, that is no regression (inconclusive: one boot a side cannot rule one out either); a 5×
    slowdown (the scratch project's slowed engine) still regresses."""
    from llmgate.analysis import noise_prior

    rng = random.Random(3)
    base = [[0.0249 * (1 + rng.gauss(0, 0.01)) for _ in range(5)]]
    now = [[0.0249 * 1.138 * (1 + rng.gauss(0, 0.01)) for _ in range(5)]]
    without = judge_boots(metrics.TTFT_C1, "ttft_c1", "e", now, base)
    assert without.status == "regressed"                        # what the user saw: a false alarm
    assumed = noise_prior.assumed("cpu", metrics.TTFT_C1)
    assert assumed is not None and "prior for a cpu entry" in assumed[1]
    v = judge_boots(metrics.TTFT_C1, "ttft_c1", "e", now, base, assumed=assumed)
    assert v.status == "inconclusive" and not v.failed and v.noise_assumed == assumed[1]
    assert v.method.startswith("t-test on boot values") and "assumed: llmgate's prior" in v.method
    assert v.mde > 0.5 and "assumed" in v.mde_basis
    slowed = [[x * 5 for x in now[0]]]
    assert judge_boots(metrics.TTFT_C1, "ttft_c1", "e", slowed, base, assumed=assumed).status == "regressed"
    dec = noise_prior.assumed("cpu", metrics.DECODE_TOK_S)
    d_base, d_slow = [[138.1] * 5], [[19.9] * 5]                 # 40 ms more a model step, as in that project
    assert judge_boots(metrics.DECODE_TOK_S, "decode_tok_s", "e", d_slow, d_base, assumed=dec).status == "regressed"
    # measured noise wins: a baseline with a stored noise model, or boots on either side, ignore the prior
    prior = Noise.of(_run(rng, 5, between=0.02))
    v = judge_boots(metrics.TTFT_C1, "ttft_c1", "e", now, base, prior=prior, assumed=assumed)
    assert not v.noise_assumed and "noise model" in v.method
    # quality figures are not timing: no prior, they keep their repeats
    assert noise_prior.assumed("cpu", metrics.PASS_RATE) is None and noise_prior.assumed("tpu", metrics.TTFT_C1) is None
    # and the GPU's prior (used only with --llmgate-boots 1 there) is its own
    assert noise_prior.assumed("gpu", metrics.DECODE_TOK_S)[0].between != assumed[0].between
