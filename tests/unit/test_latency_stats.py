"""The latency statistics (issue 35), engine-free: a boot value's sampling variance from resampling
its requests, the noise split into a sampling part and a boot part, the MDE with a machine or session offset,
and the noise report."""

import math
import random

import pytest

from llmgate.analysis import noise_prior, stats
from llmgate.analysis.stats import Noise
from llmgate.analysis.verdict import boots_needed, judge_boots
from llmgate.core import metrics
from llmgate.report import reports


def lognormal(n, cv, seed, level=0.02):
    rng = random.Random(seed)
    return [level * math.exp(rng.gauss(0, cv)) for _ in range(n)]


def test_sampling_variance_of_a_mean_is_cv_squared_over_n_and_repeatable():
    xs = lognormal(400, 0.10, 1)
    v = stats.sampling_log_var(xs, "mean")
    assert v == stats.sampling_log_var(xs, "mean")                    # seeded: the same figure twice
    assert 0.6 * 0.10 ** 2 / 400 < v < 1.6 * 0.10 ** 2 / 400
    # a median is less precise than a mean of normal-ish data, a p99 far less
    assert stats.sampling_log_var(xs, "median") > v
    assert stats.sampling_log_var(xs, 99) > 2 * stats.sampling_log_var(xs, "median")
    # four times the requests: about half the relative standard error
    big = lognormal(1600, 0.10, 2)
    assert 0.15 < stats.sampling_log_var(big, "median") / stats.sampling_log_var(xs, "median") < 0.45
    assert stats.sampling_log_var([0.02], "median") is None


def test_a_tie_is_not_a_zero_variance_and_a_share_has_one():
    assert stats.sampling_log_var([0.02] * 50, "median") == 0.0      # no spread at all
    assert stats.sampling_log_var([0.02] * 49 + [0.021], "median") > 0
    assert 0 < stats.fraction_log_var(100, 100) < stats.fraction_log_var(10, 10)
    assert stats.fraction_log_var(50, 100) > stats.fraction_log_var(99, 100)
    assert stats.fraction_log_var(0, 0) is None


def test_noise_splits_into_sampling_and_boot_parts():
    boots = [[0.020], [0.021], [0.019], [0.0205]]
    n = Noise.of(boots, sampling=[0.0001] * 4, requests=[400, 400, 380, 420])
    assert n.sampling == pytest.approx(0.0001) and n.requests == 400
    assert n.boot_cv == pytest.approx(math.sqrt(n.between - 0.0001))
    assert Noise.from_dict(n.as_dict()) == n
    # an old stored noise model (no sampling part) still reads
    old = {k: v for k, v in n.as_dict().items() if k not in ("sampling_log_var", "sampling_cv", "requests")}
    assert Noise.from_dict(old).sampling is None
    # pooled with a model that has no sampling part: the known one stays
    assert n.pooled(Noise.of([[1.0, 1.01], [1.02, 1.0]])).sampling == pytest.approx(0.0001)


def test_a_boot_shift_beyond_both_parts_is_caught_and_the_sampling_part_sets_a_floor():
    base = [[0.0200], [0.0202], [0.0199]]
    slow = [[0.0230], [0.0231], [0.0229]]
    samp = [0.005 ** 2] * 3                      # 0.5% sampling error a boot
    v = judge_boots(metrics.TTFT_C1, "ttft_c1@p128", "e", slow, base, now_sampling=samp, base_sampling=samp,
                    comparison="same session")
    assert v.status == "regressed" and v.comparison == "same session"
    assert "sampling 0.50% + boot" in v.method
    # boots that tie: the MDE rests on the sampling part, not on a zero variance
    tie = [[0.0200], [0.0200], [0.0200]]
    v = judge_boots(metrics.TTFT_C1, "ttft_c1@p128", "e", tie, tie, now_sampling=[0.01 ** 2] * 3,
                    base_sampling=[0.01 ** 2] * 3)
    assert v.status == "unchanged"
    assert 0.015 < v.mde < 0.05


def test_a_machine_offset_widens_the_mde_whatever_the_boots():
    base = [[0.0200], [0.0202], [0.0199]]
    now = [[0.0201], [0.0200], [0.0202]]
    plain = judge_boots(metrics.TTFT_P50, "ttft_p50@load30", "e", now, base, comparison="stored")
    offset = noise_prior.machine_offset("gpu", metrics.TTFT_P50)
    assert offset is not None and "machine offset" in offset[1]
    wide = judge_boots(metrics.TTFT_P50, "ttft_p50@load30", "e", now, base, offset=offset, comparison="stored")
    assert wide.mde > plain.mde + 0.2
    assert "includes the machine offset" in wide.line()
    # no number of boots averages a 20% machine offset below a 10% MDE
    assert boots_needed(metrics.TTFT_P50, 1e-4, 4, 3, 0.10, 0.05, offset[0]) is None
    assert boots_needed(metrics.TTFT_P50, 1e-4, 4, 3, 0.10, 0.05) is not None
    # throughput between machines moves far less than latency
    assert noise_prior.machine_offset("gpu", metrics.DECODE_TOK_S)[0] < offset[0] / 10
    assert noise_prior.machine_offset("gpu", metrics.PASS_RATE) is None


# an A/A on the H200 (2026-12-04, gpu/runs/2026-12-04-llamacpp-k3): the 8B shape on vLLM 0.26.0, 3 + 3
# boots, the second session minutes after the first on the same machine; these are its boot medians
AA_ENGINE_TTFT_C8 = ([0.0160, 0.0194, 0.0162], [0.0188, 0.0204, 0.0206])       # +16%, p = 0.048
AA_ENGINE_PREFILL_C8 = ([0.0106, 0.0131, 0.0110], [0.0136, 0.0134, 0.0136])    # +17%, p = 0.035


def test_an_earlier_session_of_this_machine_carries_the_session_offset():
    """Without it, the A/A above flags two host-side latency rows at c=8 (a false alarm: nothing
    changed but the session); with it, neither, while a real +60% still fails and decode keeps its
    1%-class MDE (decode did not move between the sessions)."""
    for metric, (base, now) in ((metrics.ENGINE_TTFT, AA_ENGINE_TTFT_C8),
                                (metrics.ENGINE_PREFILL, AA_ENGINE_PREFILL_C8)):
        b, n = [[x] for x in base], [[x] for x in now]
        plain = judge_boots(metric, metric.name + "@c8", "e", n, b, comparison="stored")
        assert plain.status == "regressed"                  # what the gate said before
        offset = noise_prior.stored_offset("gpu", metric, same_machine=True)
        assert offset is not None and "session offset" in offset[1]
        v = judge_boots(metric, metric.name + "@c8", "e", n, b, offset=offset, comparison="stored")
        # no false alarm: not regressed (nor improved).  Not "unchanged" either: with the session
        # offset, 3 boots a side cannot rule out a 10% move, and no number of boots would
        assert v.status == "inconclusive" and v.p_value > 0.05
        assert "includes the session offset" in v.line()
        assert v.boots_needed is None                       # no number of boots averages it away
        slow = [[x * 1.6] for x in base]
        assert judge_boots(metric, metric.name + "@c8", "e", slow, b, offset=offset,
                           comparison="stored").status == "regressed"
    # decode, TPOT and E2E did not move between the sessions: no session term; c=8 aggregate a small one
    for steady in (metrics.DECODE_TOK_S, metrics.ENGINE_TPOT, metrics.ENGINE_E2E, metrics.TPOT):
        assert noise_prior.stored_offset("gpu", steady, same_machine=True) is None
    agg = noise_prior.stored_offset("gpu", metrics.AGGREGATE_TOK_S, same_machine=True)
    assert agg is not None and agg[0] < noise_prior.stored_offset("gpu", metrics.TTFT_P50, True)[0] / 10
    # another machine: the larger of the two offsets (a machine is also another session)
    other = noise_prior.stored_offset("gpu", metrics.TTFT_P50, same_machine=False)
    assert other == noise_prior.machine_offset("gpu", metrics.TTFT_P50)
    assert noise_prior.stored_offset("gpu", metrics.AGGREGATE_TOK_S, same_machine=False) == agg
    assert noise_prior.stored_offset("gpu", metrics.DECODE_TOK_S, same_machine=False) == \
        noise_prior.machine_offset("gpu", metrics.DECODE_TOK_S)
    # ratios of one session, quality figures and the CPU (none measured there) carry none
    assert noise_prior.stored_offset("gpu", metrics.ENGINE_RATIO, same_machine=True) is None
    assert noise_prior.stored_offset("gpu", metrics.PASS_RATE, same_machine=True) is None
    assert noise_prior.stored_offset("cpu", metrics.TTFT_P50, same_machine=True) is None


def test_the_noise_report_prints_both_parts_and_the_boots_for_five_percent():
    base = [[0.0200], [0.0206], [0.0197]]
    now = [[0.0201], [0.0203], [0.0199]]
    v = judge_boots(metrics.TTFT_C1, "ttft_c1@p128", "e", now, base, now_sampling=[0.004 ** 2] * 3,
                    base_sampling=[0.004 ** 2] * 3, now_requests=[300] * 3, base_requests=[300] * 3,
                    comparison="same session")
    rows = reports.noise_rows([v])
    assert len(rows) == 1
    cfg, key, samp, boot, reqs, n, comparison, mde, k5 = rows[0]
    assert (cfg, key, samp, reqs, n, comparison) == ("e", "ttft_c1@p128", "0.40%", "300", "3+3", "same session")
    assert boot.endswith("%") and mde.endswith("%") and int(k5) >= 2
    # verdicts without a sampling part (throughput figures) are not in it
    d = judge_boots(metrics.DECODE_TOK_S, "decode_tok_s", "e", [[100, 101]] * 3, [[100, 99]] * 3)
    assert reports.noise_rows([d]) == []
    assert "Sampling" not in reports.noise_table([d])
