"""A duet's verdict: side B ÷ side A, paired by boot pair.

In a duet both sides are resident on one machine and every measurement is interleaved between them
(runner/duet.py), so what moves a boot pair's figures together (the machine's state, a warm or a
cold card, a neighbour's load) cancels in the pair's ratio.  The unit is the boot pair: its value
is log(B ÷ A) of the two sides' boot values (each the median of its repeats, or one statistic over
its requests).  Across K pairs, a one-sample t-test on those log ratios (df K − 1) with the variance
of the pairs; that variance is never taken below what the pairs' own requests (or repeats) say a
ratio is known to (the within-pair sampling part, from the pairs' requests or repeats), and the
pair part beyond it is pooled with a conservative prior for the device (``noise_prior.duet_assumed``,
its df counted as if measured), so that two or three pairs that agree by chance are not read as no
noise; with one pair the prior alone stands for it.  The verdict says both parts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from llmgate.analysis.stats import Noise, Summary, log_var, median
from llmgate.analysis.verdict import (DEFAULT_ALPHA, INCONCLUSIVE, MAX_BOOTS_ADVISED, POWER, UNCHANGED, MdeBasis,
                                      Verdict, _rel, _t, decide)
from llmgate.core.metrics import Metric


def _pair_mde(var: float, df: float, pairs: int, alpha: float) -> float:
    """The smallest worsening (log scale) a one-sided one-sample t-test at ``alpha`` finds with 80%
    power, over ``pairs`` log ratios of variance ``var``."""
    return (_t(1 - alpha, df) + _t(POWER, df)) * math.sqrt(var / pairs)


def pairs_needed(metric: Metric, var: float, df: int, min_effect: float, alpha: float) -> int | None:
    """Boot pairs whose MDE reaches ``min_effect`` at the pair-to-pair variance ``var`` (None: none up
    to MAX_BOOTS_ADVISED do)."""
    if min_effect <= 0 or var <= 0:
        return None
    for k in range(2, MAX_BOOTS_ADVISED + 1):
        if _rel(metric, _pair_mde(var, max(df, k - 1), k, alpha)) <= min_effect:
            return k
    return None


def _geomean(values: Sequence[float]) -> float:
    xs = [float(v) for v in values]
    if min(xs) <= 0:
        return median(xs)
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def _var(xs: Sequence[float]) -> float | None:
    if len(xs) < 2:
        return None
    m = sum(xs) / len(xs)
    return sum((x - m) ** 2 for x in xs) / (len(xs) - 1)


def _within(values: Sequence[float], sampling: float | None) -> float | None:
    """What one side's boot value is known to within, from inside the boot (log scale): its requests'
    sampling variance where the scenario gave it, else its repeats' variance ÷ their count."""
    if sampling is not None:
        return float(sampling)
    v = log_var(values)
    return v / len(values) if v is not None else None


def judge_duet(metric: Metric, key: str, config_id: str, a_boots: Sequence[Sequence[float]],
               b_boots: Sequence[Sequence[float]], min_effect: float | None = None, alpha: float = DEFAULT_ALPHA,
               baseline_source: str | None = None, a_sampling: Sequence[float | None] | None = None,
               b_sampling: Sequence[float | None] | None = None, requests: Sequence[float] | None = None,
               assumed: tuple[float, int, str] | None = None, paired_rounds: bool = False,
               pair_sampling: Sequence[float | None] | None = None) -> Verdict:
    """Side B (``b_boots``, the candidate) against side A (``a_boots``), boot pair by boot pair:
    ``a_boots[k]`` and ``b_boots[k]`` are the two sides' repeat values on pair k.  ``a_sampling`` /
    ``b_sampling``: each boot value's sampling variance (log scale) where it is one statistic over
    requests.  ``assumed``: (log-scale variance, df, in words) of the device's prior for the pair part
    (what a boot pair adds to its ratio beyond its sampling), pooled with the pairs' own.
    ``paired_rounds``: ``a_boots[k][i]`` and ``b_boots[k][i]`` are round i of pair k, run in turns (a
    test in rounds of windows): the pair's log ratio is the mean of its rounds' log ratios (each side's
    value the geometric mean of its rounds), and what it is known to within, their variance ÷ the rounds.
    ``pair_sampling``: per pair, the sampling variance of its log ratio from its requests resampled in
    pairs (``stats.paired_sampling_log_var``: the two sides' requests interleaved one by one share what
    moved the machine); where every pair has one, it is the sampling part, else the sides' own, summed.

    The verdict's change is exp(mean log ratio) − 1 with its 95% CI; its MDE and the pairs that would
    reach the minimum effect follow from the pair-to-pair variance; ``method`` names both parts of it."""
    if len(a_boots) != len(b_boots) or not a_boots:
        raise ValueError(f"{key}: a duet needs both sides' values on every boot pair ({len(a_boots)} vs {len(b_boots)})")
    eff = metric.min_effect if min_effect is None else min_effect
    if paired_rounds:
        if any(len(a) != len(b) or not a for a, b in zip(a_boots, b_boots)):
            raise ValueError(f"{key}: rounds paired by pair need as many rounds on both sides")
        a_vals = [_geomean(b) for b in a_boots]
        b_vals = [_geomean(b) for b in b_boots]
    else:
        a_vals = [median(list(map(float, b))) for b in a_boots]
        b_vals = [median(list(map(float, b))) for b in b_boots]
    flat_a = tuple(float(v) for b in a_boots for v in b)
    flat_b = tuple(float(v) for b in b_boots for v in b)
    k = len(a_vals)
    common = dict(samples=flat_b, baseline_samples=flat_a, boots=(k, k), boot_values=tuple(b_vals),
                  baseline_boot_values=tuple(a_vals), comparison=f"duet, {k} boot pair{'s' * (k != 1)}"
                  + (f", {len(a_boots[0])} rounds a pair" if paired_rounds else ""),
                  baseline_in_run=True)
    s_a, s_b = Summary.of(a_vals), Summary.of(b_vals)
    if min(a_vals + b_vals) <= 0:
        # a figure that can be zero (an idle queue): no ratio, and no test; the pairs' differences in the
        # metric's unit rule a change out only where they all stay within its absolute floor
        change = (s_b.median - s_a.median) / abs(s_a.median) if s_a.median else 0.0
        diffs = [b - a for a, b in zip(a_vals, b_vals)]
        within = metric.min_abs_effect > 0 and max(abs(x) for x in diffs) < metric.min_abs_effect
        return Verdict(metric, key, config_id, s_b, s_a, UNCHANGED if within else INCONCLUSIVE,
                       change, metric.worse_change(s_a.median, s_b.median), eff, None,
                       "duet: a value of zero, no ratio (the pairs' differences against the metric's absolute floor)",
                       baseline_source, mde=None, mde_basis="a zero value: no ratio", mde_kind=MdeBasis.UNKNOWN,
                       **common)  # type: ignore[arg-type]
    logs = [math.log(b / a) for a, b in zip(a_vals, b_vals)]
    d = sum(logs) / k
    a_samp = list(a_sampling) if a_sampling is not None else [None] * k
    b_samp = list(b_sampling) if b_sampling is not None else [None] * k
    if paired_rounds:
        within = [v / len(a_boots[i]) for i in range(k)
                  if (v := _var([math.log(y / x) for x, y in zip(a_boots[i], b_boots[i]) if x > 0 and y > 0])) is not None]
    elif pair_sampling is not None and len(pair_sampling) == k and all(v is not None for v in pair_sampling):
        within = [float(v) for v in pair_sampling if v is not None]
    else:
        within = [wa + wb for i in range(k)
                  if (wa := _within(a_boots[i], a_samp[i])) is not None and (wb := _within(b_boots[i], b_samp[i])) is not None]
    paired_requests = not paired_rounds and pair_sampling is not None and len(within) == k and \
        all(v is not None for v in pair_sampling)
    w = sum(within) / len(within) if within else None
    # the pair part (what a boot pair adds to its ratio beyond its requests' sampling): measured over the
    # pairs (their spread less the sampling part, K − 1 df), pooled with the device's prior where one
    # applies (its df as if measured), so that two pairs that agree by chance do not read as no noise
    s2 = sum((x - d) ** 2 for x in logs) / (k - 1) if k >= 2 else None
    excess = max(s2 - (w or 0.0), 0.0) if s2 is not None else None
    source = ""
    if assumed is not None:
        prior_var, prior_df, source = assumed
        df = prior_df + (k - 1)
        pair_var: float | None = (prior_df * prior_var + (k - 1) * (excess or 0.0)) / df
    elif s2 is not None:
        df, pair_var = k - 1, excess
    else:
        df, pair_var = 0, None
    noise = Noise(None if pair_var is None else max(pair_var + (w or 0.0), 1e-12), df, None, 0, 1.0, w,
                  sum(requests) / len(requests) if requests else 0.0)
    if pair_var is None:
        # one pair and no prior: only the sampling part is known; no test (said so), and no verdict but inconclusive
        status = decide(metric, math.expm1(d), None, eff, p_worse=1.0, p_better=1.0, alpha=alpha, baseline=s_a.median)
        return Verdict(metric, key, config_id, s_b, s_a, status, math.expm1(d), metric.worse_change(1.0, math.exp(d)),
                       eff, None, "duet, one boot pair: its pair part not measured and no prior for it (no test)",
                       baseline_source, mde=None, mde_basis="one boot pair and no prior: the pair part not measured",
                       mde_kind=MdeBasis.UNKNOWN, noise=noise, **common)  # type: ignore[arg-type]
    var = max(pair_var + (w or 0.0), 1e-12)
    se = math.sqrt(var / k)
    worse_log = d if metric.better == "lower" else -d
    from scipy.stats import t as t_dist

    p = float(t_dist.sf(worse_log / se, df))
    p_better = float(t_dist.cdf(worse_log / se, df))
    half = _t(0.975, df) * se
    change = math.expm1(d)
    worse = metric.worse_change(1.0, math.exp(d))
    ci = (math.expm1(d - half), math.expm1(d + half))
    status = decide(metric, change, ci, eff, p_worse=p, p_better=p_better, alpha=alpha, baseline=s_a.median)
    mde = _rel(metric, _pair_mde(var, df, k, alpha))
    need = pairs_needed(metric, var, df, eff, alpha) if mde > eff else None
    spread = f"pairs' spread {math.sqrt(s2):.2%}, " if s2 is not None else ""
    pooled = f", pooled with {source}" if source else ""
    part = ("within-pair rounds" if paired_rounds else "within-pair sampling (requests resampled in pairs)"
            if paired_requests else "within-pair sampling")
    sampling = f"{part} {math.sqrt(w):.2%}" if w is not None else f"{part} not known"
    method = (f"duet: t-test on {k} boot pair{'s' * (k != 1)}' log(B ÷ A) (df {df}): {spread}{sampling} + pair part "
              f"{math.sqrt(pair_var):.2%}{pooled}")
    basis = f"duet, {k} boot pair{'s' * (k != 1)}" + (", pair part pooled with a prior" if source else "")
    return Verdict(metric, key, config_id, s_b, s_a, status, change, worse, eff, p, method, baseline_source,
                   ci=ci, mde=mde, mde_basis=basis,
                   mde_kind=MdeBasis.PAIRS, boots_needed=need, noise=noise, noise_assumed=source if k == 1 else "",
                   **common)  # type: ignore[arg-type]
