"""Change-point detection on a metric's history, with the noise model of boot-level values.

The input is one point per run, each point a list of *boot-level values* (a boot's steady-state
figure: the median of its repeats), plus, per run, the within-boot spread of the repeats.  The
analysis is on the log scale, where a relative step is a shift and the noise is a CV.

Method: binary segmentation with a two-sample t-test (documented here because no library of
the field fits as it stands: ``ruptures`` penalises a cost without a significance level and
Hunter/Otava's E-divisive needs tens of points for its permutation test, where a gate has a
handful of nightly runs).

1. Each run i gives ``y_i`` = mean of its log boot values (k_i boots).
2. For a segment of runs and every split into a left part L and a right part R (each at least
   ``min_size`` runs), the step is ``d = mean(y_R) − mean(y_L)`` and its standard error is
   ``σ · sqrt(1/n_L + 1/n_R)``.  σ² is the larger of
   - the pooled variance of the run values about their side's mean (df = n − 2): the run-to-run
     noise seen in the series itself (a fresh server, another day, a busy neighbour);
   - the noise floor of a run value from within the runs: the pooled between-boot variance of the
     runs that had ≥ 2 boots divided by their boots, else the pooled within-boot variance of the
     repeats divided by the repeats (a boot's median is at least that noisy).  With a floor from
     repeats only, df is taken from the repeats.
3. The split with the largest |t| is tested: two-sided p from Student's t, times the number of
   splits tried (Bonferroni, so that scanning many splits does not manufacture a step).  When no
   single split is named, circular binary segmentation's candidate is tried: a stretch of runs
   against the runs around it (a step later undone), Bonferroni over all stretches.
4. The step is named when p < ``alpha`` **and** |exp(d) − 1| ≥ ``min_step``: a step that is
   significant but smaller than the minimum relative step (a tiny shift measured very precisely)
   is not called, nor is a large one inside the noise.  A named split's two sides are then
   searched again (the first step found is the largest, later ones are nested in its sides).

Each change point names the first run after the step, the relative step in natural units
(``exp(d) − 1``), its 95% interval from the t distribution, p and the confidence (1 − p).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

DEFAULT_ALPHA = 0.01
DEFAULT_MIN_STEP = 0.10


@dataclasses.dataclass(frozen=True)
class RunPoint:
    boots: tuple[float, ...]                 # boot-level values (natural units, > 0)
    within_var: float | None = None          # pooled variance of log repeat values within this run's boots
    repeats: int = 1                         # repeats per boot (for the floor from within-boot variance)

    @property
    def logs(self) -> list[float]:
        return [math.log(v) for v in self.boots]

    @property
    def y(self) -> float:
        ls = self.logs
        return sum(ls) / len(ls)


@dataclasses.dataclass(frozen=True)
class ChangePoint:
    index: int                 # first run after the step (0-based, in the series given)
    step: float                # exp(d) − 1: relative change of the typical value, after vs before
    ci: tuple[float, float]    # 95% interval of the relative step
    p_value: float             # Bonferroni-adjusted over the splits tried
    t: float
    df: int
    sigma: float               # noise of one run value on the log scale (≈ CV)
    before: float              # typical value before (geometric mean of run values), natural units
    after: float

    @property
    def confidence(self) -> float:
        return 1.0 - self.p_value


def log_var(values: Sequence[float]) -> float | None:
    """Sample variance of the logs (None below 2 values)."""
    if len(values) < 2:
        return None
    ls = [math.log(v) for v in values]
    m = sum(ls) / len(ls)
    return sum((x - m) ** 2 for x in ls) / (len(ls) - 1)


def noise_floor(runs: Sequence[RunPoint]) -> tuple[float, int]:
    """(variance of one run value on the log scale, its degrees of freedom) from within the runs."""
    num, df = 0.0, 0
    for r in runs:                                 # between-boot, within-run
        v = log_var(r.boots)
        if v is not None:
            num += v * (len(r.boots) - 1)
            df += len(r.boots) - 1
    if df:
        k = sum(len(r.boots) for r in runs) / len(runs)       # a run value is the mean of ~k boots
        return num / df / k, df
    num, df = 0.0, 0
    for r in runs:                                 # within-boot repeats: a boot median is at least this noisy
        if r.within_var is not None and r.repeats > 1:
            d = len(r.boots) * (r.repeats - 1)
            num += r.within_var / (r.repeats * len(r.boots)) * d
            df += d
    return (num / df, df) if df else (0.0, 0)


def _two_groups(runs: Sequence[RunPoint], inner: range, floor: float, floor_df: int, tests: int,
                index: int) -> ChangePoint | None:
    """Runs in ``inner`` against the others: the t-test of step 2-3 above."""
    from scipy import stats as st

    y = [r.y for r in runs]
    a = [v for i, v in enumerate(y) if i not in inner]          # before (and after, for a bump)
    b = [y[i] for i in inner]
    if not a or not b:
        return None
    n = len(y)
    ma, mb = sum(a) / len(a), sum(b) / len(b)
    ss = sum((v - ma) ** 2 for v in a) + sum((v - mb) ** 2 for v in b)
    resid_df = n - 2
    resid = ss / resid_df if resid_df > 0 else 0.0
    if resid_df > 0 and resid >= floor:
        var, df = resid, resid_df
    else:
        var, df = floor, (max(resid_df, 1) if resid_df > 0 else floor_df)
    if var <= 0 or df <= 0:
        return None
    se = math.sqrt(var * (1 / len(a) + 1 / len(b)))
    t = (mb - ma) / se
    p = min(1.0, 2 * st.t.sf(abs(t), df) * tests)
    q = st.t.ppf(0.975, df)
    d = mb - ma
    return ChangePoint(index=index, step=math.expm1(d), ci=(math.expm1(d - q * se), math.expm1(d + q * se)),
                       p_value=float(p), t=float(t), df=int(df), sigma=math.sqrt(var),
                       before=math.exp(ma), after=math.exp(mb))


def best_split(runs: Sequence[RunPoint], min_size: int = 1) -> ChangePoint | None:
    """The single split of ``runs`` with the largest |t| (p adjusted over the splits tried)."""
    n = len(runs)
    splits = list(range(min_size, n - min_size + 1))
    if n < 2 or not splits:
        return None
    floor, floor_df = noise_floor(runs)
    found = [c for s in splits if (c := _two_groups(runs, range(s, n), floor, floor_df, len(splits), s)) is not None]
    return max(found, key=lambda c: abs(c.t), default=None)


def best_bump(runs: Sequence[RunPoint], min_size: int = 1) -> tuple[ChangePoint, int] | None:
    """Circular binary segmentation's candidate: an inner stretch [i, j) of runs against the runs
    around it (a step that was later undone hides from every single split).  Returns the change
    point at i and the end j; p adjusted over all stretches tried."""
    n = len(runs)
    pairs = [(i, j) for i in range(min_size, n) for j in range(i + min_size, n - min_size + 1)]
    if not pairs:
        return None
    floor, floor_df = noise_floor(runs)
    best = None
    for i, j in pairs:
        c = _two_groups(runs, range(i, j), floor, floor_df, len(pairs), i)
        if c is not None and (best is None or abs(c.t) > abs(best[0].t)):
            best = (c, j)
    return best


def detect(runs: Sequence[RunPoint], alpha: float = DEFAULT_ALPHA, min_step: float = DEFAULT_MIN_STEP,
           min_size: int = 1) -> list[ChangePoint]:
    """Every change point beyond the noise, in series order (empty for a flat series)."""
    found: list[ChangePoint] = []

    def named(cp: ChangePoint | None) -> bool:
        return cp is not None and cp.p_value < alpha and abs(cp.step) >= min_step

    def search(lo: int, hi: int) -> None:
        seg = runs[lo:hi]
        cp = best_split(seg, min_size)
        if named(cp):
            found.append(dataclasses.replace(cp, index=cp.index + lo))
            search(lo, lo + cp.index)
            search(lo + cp.index, hi)
            return
        bump = best_bump(seg, min_size)
        if bump is not None and named(bump[0]):
            cp, j = bump
            found.append(dataclasses.replace(cp, index=cp.index + lo))
            if j < len(seg):                     # the step back at j: the same contrast, reversed
                found.append(dataclasses.replace(cp, index=j + lo, step=math.expm1(-math.log1p(cp.step)),
                                                 ci=(math.expm1(-math.log1p(cp.ci[1])),
                                                     math.expm1(-math.log1p(cp.ci[0]))),
                                                 before=cp.after, after=cp.before, t=-cp.t))
            search(lo, lo + cp.index)
            search(lo + cp.index, lo + j)
            search(lo + j, hi)

    search(0, len(runs))
    return sorted(found, key=lambda c: c.index)
