"""Direction-aware verdicts: did a metric move in its worse direction, by more than
its minimum effect, and is the move real rather than noise?"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from .metrics import Metric
from .stats import Summary, median

REGRESSED, IMPROVED, UNCHANGED, NO_BASELINE = "regressed", "improved", "unchanged", "no baseline"
REFUSED = "refused: not comparable"
DEFAULT_ALPHA = 0.05


@dataclasses.dataclass(frozen=True)
class Verdict:
    metric: Metric
    key: str                       # metric name with its variant, e.g. "ttft_p95@c8"
    config_id: str
    now: Summary
    baseline: Summary | None
    status: str
    change: float | None           # relative change of medians, now vs baseline (signed, natural units)
    worse_change: float | None     # the same, positive when worse
    min_effect: float
    p_value: float | None
    method: str                    # which significance test decided
    baseline_source: str | None = None
    note: str = ""
    test: str = ""                 # the test that measured it
    ci: tuple[float, float] | None = None   # 95% bootstrap interval of the change of medians
    samples: tuple[float, ...] = dataclasses.field(default=(), repr=False, compare=False)           # now
    baseline_samples: tuple[float, ...] = dataclasses.field(default=(), repr=False, compare=False)

    @property
    def failed(self) -> bool:
        return self.status == REGRESSED

    def line(self) -> str:
        m = self.metric
        if self.status == REFUSED:
            return f"{self.config_id} {self.key}: now {m.display(self.now.median)}; not compared: {self.note}"
        if self.baseline is None:
            return f"{self.config_id} {self.key}: {m.display(self.now.median)} (no baseline)" + \
                (f"; {self.note}" if self.note else "")
        test = "Wilcoxon (paired)" if self.method.startswith("Wilcoxon") else "Mann-Whitney"
        sig = f"{test} p={self.p_value:.3g}" if self.p_value is not None else self.method
        ci = f" (95% CI {self.ci[0]:+.1%} … {self.ci[1]:+.1%})" if self.ci else ""
        return (f"{self.config_id} {self.key} ({m.label}, {m.better} is better): baseline {m.display(self.baseline.median)} "
                f"(n={self.baseline.n}) → now {m.display(self.now.median)} (n={self.now.n}), change {self.change:+.1%}{ci}; "
                f"{self.status} [min effect {self.min_effect:.0%}"
                + (f" and {m.display(m.min_abs_effect)}" if m.min_abs_effect else "")
                + f", {sig}]" + (f"; {self.note}" if self.note else ""))


def smallest_p(n1: int, n2: int) -> float:
    """The smallest one-sided p-value an exact Mann–Whitney U test can give for these sample sizes."""
    return 1.0 / math.comb(n1 + n2, n1)


def mann_whitney_worse(metric: Metric, baseline: Sequence[float], now: Sequence[float],
                       alpha: float = DEFAULT_ALPHA) -> float | None:
    """One-sided Mann–Whitney U p-value for 'now is worse than baseline'; None when the sample
    sizes cannot reach ``alpha`` at all (3 vs 3 gives at best p = 0.05)."""
    if len(baseline) < 2 or len(now) < 2 or smallest_p(len(baseline), len(now)) >= alpha:
        return None
    from scipy.stats import mannwhitneyu

    alternative = "greater" if metric.better == "lower" else "less"
    return float(mannwhitneyu(list(now), list(baseline), alternative=alternative).pvalue)


def bootstrap_change_ci(baseline: Sequence[float], now: Sequence[float], n_boot: int = 2000,
                        level: float = 0.95, seed: int = 0) -> tuple[float, float] | None:
    """Percentile bootstrap interval of median(now) / median(baseline) − 1 (seeded: the same
    data always give the same interval).  None with fewer than 2 values a side."""
    if len(baseline) < 2 or len(now) < 2:
        return None
    import numpy as np

    rng = np.random.default_rng(seed)
    b, n = np.asarray(baseline, float), np.asarray(now, float)
    mb = np.median(rng.choice(b, (n_boot, b.size)), axis=1)
    mn = np.median(rng.choice(n, (n_boot, n.size)), axis=1)
    ok = mb != 0
    ratios = mn[ok] / mb[ok] - 1.0
    if ratios.size == 0:
        return None
    lo, hi = np.percentile(ratios, [(1 - level) / 2 * 100, (1 + level) / 2 * 100])
    return float(lo), float(hi)


def _status(worse: float, min_effect: float, significant: bool, worse_abs: float = math.inf,
            min_abs_effect: float = 0.0) -> str:
    """Regressed: moved the worse way by more than the minimum effect (relative, and in the
    metric's own unit where it sets ``min_abs_effect``), significantly; improved: moved the
    better way by more than both; else unchanged."""
    if worse > min_effect and worse_abs > min_abs_effect and significant:
        return REGRESSED
    if -worse > min_effect and -worse_abs > min_abs_effect:
        return IMPROVED
    return UNCHANGED


def _worse_abs(metric: Metric, baseline: float, now: float) -> float:
    return (now - baseline) if metric.better == "lower" else (baseline - now)


def judge(metric: Metric, key: str, config_id: str, now: Sequence[float], baseline: Sequence[float] | None,
          min_effect: float | None = None, alpha: float = DEFAULT_ALPHA, baseline_source: str | None = None) -> Verdict:
    """Regressed only if the median moved the worse way by more than ``min_effect`` AND the
    move is significant (one-sided Mann–Whitney U at ``alpha``); when the sample sizes are too
    small for the test to ever reach ``alpha``, the effect size alone decides and the verdict says so."""
    eff = metric.min_effect if min_effect is None else min_effect
    s_now = Summary.of(now)
    if not baseline:
        return Verdict(metric, key, config_id, s_now, None, NO_BASELINE, None, None, eff, None, "none", baseline_source,
                       samples=tuple(now))
    s_base = Summary.of(baseline)
    change = (s_now.median - s_base.median) / abs(s_base.median) if s_base.median else 0.0
    worse = metric.worse_change(s_base.median, s_now.median)
    p = mann_whitney_worse(metric, baseline, now, alpha)
    method = ("Mann-Whitney U" if p is not None else
              f"effect size only ({len(baseline)} vs {len(now)} values cannot reach p<{alpha:g})")
    status = _status(worse, eff, p is None or p < alpha, _worse_abs(metric, s_base.median, s_now.median),
                     metric.min_abs_effect)
    return Verdict(metric, key, config_id, s_now, s_base, status, change, worse, eff, p, method, baseline_source,
                   ci=bootstrap_change_ci(baseline, now), samples=tuple(now), baseline_samples=tuple(baseline))


def judge_paired(metric: Metric, key: str, config_id: str, now: Sequence[float], baseline: Sequence[float],
                 min_effect: float | None = None, alpha: float = DEFAULT_ALPHA,
                 baseline_source: str | None = None) -> Verdict:
    """Like ``judge``, for values that come in pairs (``now[i]`` measured beside ``baseline[i]``:
    the same boot through two paths, or the two boots of one A/B round), so that what the
    pairs share (the boot, the machine's drift) cancels.  The change is the median of the
    per-pair ratios; significance: one-sided Wilcoxon signed-rank test on their logarithms
    (5 pairs are the fewest that can reach p < 0.05; with fewer the effect size decides)."""
    if len(now) != len(baseline) or not now:
        raise ValueError(f"{key}: paired values need equal, non-empty lists ({len(now)} vs {len(baseline)})")
    eff = metric.min_effect if min_effect is None else min_effect
    ratios = [n / b for n, b in zip(now, baseline) if b]
    change = median(ratios) - 1.0 if ratios else 0.0
    worse = change if metric.better == "lower" else -change
    p = None
    if len(ratios) >= 2 and 0.5 ** len(ratios) < alpha:
        from scipy.stats import wilcoxon

        logs = [math.log(r) for r in ratios if r > 0]
        if any(logs):
            p = float(wilcoxon(logs, alternative="greater" if metric.better == "lower" else "less").pvalue)
        else:
            p = 1.0
    method = (f"Wilcoxon signed-rank, {len(ratios)} pairs" if p is not None else
              f"effect size only ({len(ratios)} pairs cannot reach p<{alpha:g})")
    status = _status(worse, eff, p is None or p < alpha,
                     median([_worse_abs(metric, b, n) for n, b in zip(now, baseline)]), metric.min_abs_effect)
    ci = None
    if len(ratios) >= 2:
        import numpy as np

        rng = np.random.default_rng(0)
        boot = np.median(rng.choice(np.asarray(ratios), (2000, len(ratios))), axis=1) - 1.0
        ci = (float(np.percentile(boot, 2.5)), float(np.percentile(boot, 97.5)))
    return Verdict(metric, key, config_id, Summary.of(now), Summary.of(baseline), status, change, worse, eff, p,
                   method, baseline_source, ci=ci, samples=tuple(now), baseline_samples=tuple(baseline))
