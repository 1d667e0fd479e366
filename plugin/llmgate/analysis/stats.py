"""Statistics over samples: percentiles, summaries with spread, and per-run metric values."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

from llmgate.load.samples import LoadResult, Sample, SteadyResult


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) with linear interpolation between closest ranks (numpy's default)."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError("q must be within 0..100")
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    if lo == hi:
        return float(xs[lo])
    return float(xs[lo] + (xs[hi] - xs[lo]) * (pos - lo))


def median(values: Sequence[float]) -> float:
    return percentile(values, 50)


@dataclasses.dataclass(frozen=True)
class Summary:
    """Median and spread of repeated measurements of one quantity."""

    n: int
    median: float
    mean: float
    min: float
    max: float
    q1: float
    q3: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Summary:
        if not values:
            raise ValueError("summary of no values")
        return cls(len(values), median(values), sum(values) / len(values), min(values), max(values),
                   percentile(values, 25), percentile(values, 75))

    @property
    def iqr(self) -> float:
        return self.q3 - self.q1

    @property
    def rel_spread(self) -> float:
        """Interquartile range relative to the median (0.1 = ±5% around the median)."""
        return self.iqr / abs(self.median) if self.median else float("inf")

    def as_dict(self) -> dict[str, float]:
        return {**dataclasses.asdict(self), "iqr": self.iqr}


def load_metrics(result: LoadResult) -> dict[str, float]:
    """The standard per-run figures of a load result (seconds and tokens per second)."""
    out: dict[str, float] = {
        "aggregate_tok_s": result.aggregate_tok_s,
        "requests_ok": float(len(result.ok)),
        "requests_failed": float(len(result.failures)),
        "wall_s": result.wall_s,
    }
    out.update(_request_figures(result.ok))
    return out


def _request_figures(requests: Sequence[Sample]) -> dict[str, float]:
    out: dict[str, float] = {}
    ttfts = [s.ttft for s in requests if s.ttft is not None]
    itls = [x for s in requests for x in s.itl]
    tpots = [t for s in requests if (t := s.tpot) is not None]
    e2es = [s.e2e for s in requests]
    if ttfts:
        out.update(ttft_p50=percentile(ttfts, 50), ttft_p95=percentile(ttfts, 95), ttft_p99=percentile(ttfts, 99))
    if itls:
        out.update(itl_p50=percentile(itls, 50), itl_p95=percentile(itls, 95), itl_p99=percentile(itls, 99))
    if tpots:
        out.update(tpot_median=median(tpots), decode_tok_s=1.0 / median(tpots))
    if e2es:
        out.update(e2e_p50=percentile(e2es, 50), e2e_p95=percentile(e2es, 95))
    return out


def window_metrics(result: SteadyResult, a: float | None = None, b: float | None = None) -> dict[str, float]:
    """The figures of a steady run over [a, b) (default: its whole window): aggregate tok/s from
    the tokens emitted inside it; latency figures from the requests that lived inside it."""
    a = result.window[0] if a is None else a
    b = result.window[1] if b is None else b
    lived = result.lived_in(a, b)
    out = {"aggregate_tok_s": result.tokens_between(a, b) / (b - a) if b > a else 0.0,
           "requests_ok": float(len(lived)), "window_s": b - a,
           "request_rate": len([s for s in result.ok if a <= s.end < b]) / (b - a) if b > a else 0.0}
    out.update(_request_figures(lived))
    return out


def repeat_metrics(result: SteadyResult, repeats: int) -> list[dict[str, float]]:
    """The window cut into ``repeats`` equal consecutive parts, the figures of each (a part in
    which no request lived has throughput figures only): the within-boot repeats whose spread
    gives a boot value's precision."""
    a, b = result.window
    if b <= a or repeats < 1:
        return []
    step = (b - a) / repeats
    return [window_metrics(result, a + i * step, a + (i + 1) * step) for i in range(repeats)]


def values_of(parts: Sequence[dict[str, float]], key: str) -> list[float]:
    return [p[key] for p in parts if key in p]


# -- the noise model: boots and repeats on the log scale --------------------------------------
def log_var(values: Sequence[float]) -> float | None:
    """Sample variance of log(values) (≈ CV² for small spreads); None for fewer than 2 positive values."""
    logs = [math.log(v) for v in values if v > 0]
    if len(logs) < 2:
        return None
    m = sum(logs) / len(logs)
    return sum((x - m) ** 2 for x in logs) / (len(logs) - 1)


@dataclasses.dataclass(frozen=True)
class Noise:
    """Variation of one metric of one configuration, on the log scale (a CV for small spreads).

    ``between``: the variance of boot values (each boot's steady-state figure), with ``df``
    degrees of freedom: what a value from another boot moves by, within-boot noise included.
    ``within``: the variance of repeats around their boot's value (``within_df``), the
    precision of one boot's figure comes from it.  ``repeats``: repeats per boot."""

    between: float | None
    df: int
    within: float | None
    within_df: int
    repeats: float
    # the sampling part, where a boot's value is one statistic over its requests (a latency scenario's
    # median or p95 over hundreds of requests): the log-scale variance of that statistic from resampling
    # the boot's requests (``sampling_log_var``), averaged over the boots; and the requests a boot held
    sampling: float | None = None
    requests: float = 0.0

    @property
    def between_cv(self) -> float | None:
        return None if self.between is None else math.sqrt(self.between)

    @property
    def within_cv(self) -> float | None:
        return None if self.within is None else math.sqrt(self.within)

    @property
    def sampling_cv(self) -> float | None:
        """The sampling part: how far a boot's value moves from the requests it happened to draw."""
        return None if self.sampling is None else math.sqrt(self.sampling)

    @property
    def value_var(self) -> float:
        """What one boot's value is known to within, from inside the boot: its requests' sampling
        variance, or its repeats' variance ÷ repeats (the larger where both are known)."""
        return max(self.sampling or 0.0, (self.within or 0.0) / max(self.repeats, 1.0))

    @property
    def boot_cv(self) -> float | None:
        """Boot-to-boot variation beyond what one boot's own sampling explains (σ_B): the boot part."""
        if self.between is None:
            return None
        return math.sqrt(max(self.between - self.value_var, 0.0))

    def as_dict(self) -> dict[str, Any]:
        return {"between_log_var": self.between, "df": self.df, "within_log_var": self.within,
                "within_df": self.within_df, "repeats": self.repeats, "between_cv": self.between_cv,
                "within_cv": self.within_cv, "boot_cv": self.boot_cv, "sampling_log_var": self.sampling,
                "sampling_cv": self.sampling_cv, "requests": self.requests}

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> Noise | None:
        if not isinstance(d, dict):
            return None
        try:
            return cls(d.get("between_log_var"), int(d.get("df") or 0), d.get("within_log_var"),
                       int(d.get("within_df") or 0), float(d.get("repeats") or 1), d.get("sampling_log_var"),
                       float(d.get("requests") or 0.0))
        except (TypeError, ValueError):
            return None

    @classmethod
    def of(cls, boots: Sequence[Sequence[float]], sampling: Sequence[float | None] | None = None,
           requests: Sequence[float] | None = None) -> Noise:
        """The noise of one run's boots (each a list of repeat values), with, where the scenario gave
        them, each boot's sampling variance (log scale) and request count."""
        known = [float(x) for x in (sampling or ()) if x is not None]
        samp = sum(known) / len(known) if known else None
        reqs = sum(requests) / len(requests) if requests else 0.0
        boots = [list(b) for b in boots if b]
        vals = [median(b) for b in boots]
        between = log_var(vals) if len(vals) >= 2 else None
        ss, dfw = 0.0, 0
        for b in boots:
            v = log_var(b)
            if v is not None:
                ss += v * (len(b) - 1)
                dfw += len(b) - 1
        reps = sum(len(b) for b in boots) / len(boots) if boots else 1.0
        return cls(between, len(vals) - 1 if between is not None else 0, ss / dfw if dfw else None, dfw, reps,
                   samp, reqs)

    def pooled(self, other: Noise | None) -> Noise:
        """Both estimates together, weighted by their degrees of freedom."""
        if other is None:
            return self

        def pool(a, da, b, db):
            if not da and not db:
                return None, 0
            return ((a or 0.0) * da + (b or 0.0) * db) / (da + db), da + db

        between, df = pool(self.between, self.df, other.between, other.df)
        within, wdf = pool(self.within, self.within_df, other.within, other.within_df)
        reps = (self.repeats + other.repeats) / 2
        known = [x for x in (self.sampling, other.sampling) if x is not None]
        reqs = [x for x in (self.requests, other.requests) if x]
        return Noise(between, df, within, wdf, reps, sum(known) / len(known) if known else None,
                     sum(reqs) / len(reqs) if reqs else 0.0)


# -- the sampling part: what a statistic over one boot's requests is known to ------------------
def sampling_log_var(values: Sequence[float], statistic: str | float = "median", resamples: int = 1000,
                     seed: int | str = 0) -> float | None:
    """The log-scale variance of ``statistic`` ("mean", "median", or a percentile 0..100) of
    ``values`` (one boot's requests) under resampling of those requests (a seeded bootstrap: the
    same values always give the same figure) — the sampling part of that boot value's noise, its
    relative standard error squared.  A resampled statistic that never moves (every request alike)
    is floored at one request's share of the spread, so that a tie is not a zero variance.  None
    for fewer than 2 positive values."""
    import numpy as np

    xs = np.asarray([v for v in values if v > 0], dtype=float)
    if xs.size < 2:
        return None
    import zlib

    rng = np.random.default_rng(seed if isinstance(seed, int) else zlib.crc32(str(seed).encode()))
    draws = rng.choice(xs, (resamples, xs.size))
    if statistic == "mean":
        stat = draws.mean(axis=1)
    else:
        q = 50.0 if statistic == "median" else float(statistic)
        stat = np.percentile(draws, q, axis=1)
    logs = np.log(stat[stat > 0])
    var = float(logs.var(ddof=1)) if logs.size > 1 else 0.0
    floor = (float(np.log(xs).std(ddof=1)) / xs.size) ** 2
    return max(var, floor)


def paired_sampling_log_var(a: Sequence[float], b: Sequence[float], statistic: str = "median",
                            resamples: int = 1000, seed: int | str = 0) -> float | None:
    """The log-scale variance of statistic(``b``) ÷ statistic(``a``) under resampling of request pairs:
    ``a[i]`` and ``b[i]`` are the two sides' i-th requests of a duet, sent one after the other, so
    whatever moved the machine between them moved both; resampling the pairs (the same indices for
    both sides) keeps that, where resampling each side alone (``sampling_log_var`` of each, summed)
    counts it twice.  The sampling part of a boot pair's log(B ÷ A), floored at one pair's share of
    the ratios' spread.  Pairs where either value is not positive are left out; None for fewer than 3."""
    import numpy as np

    pairs = [(x, y) for x, y in zip(a, b) if x > 0 and y > 0]
    if len(pairs) < 3:
        return None
    import zlib

    xa = np.asarray([p[0] for p in pairs], dtype=float)
    xb = np.asarray([p[1] for p in pairs], dtype=float)
    rng = np.random.default_rng(seed if isinstance(seed, int) else zlib.crc32(str(seed).encode()))
    idx = rng.integers(0, len(pairs), (resamples, len(pairs)))
    if statistic == "mean":
        sa, sb = xa[idx].mean(axis=1), xb[idx].mean(axis=1)
    else:
        q = 50.0 if statistic == "median" else float(statistic)
        sa, sb = np.percentile(xa[idx], q, axis=1), np.percentile(xb[idx], q, axis=1)
    logs = np.log(sb / sa)
    var = float(logs.var(ddof=1))
    floor = (float(np.log(xb / xa).std(ddof=1)) / len(pairs)) ** 2
    return max(var, floor)


def fraction_log_var(hits: int, n: int) -> float | None:
    """The log-scale sampling variance of a share ``hits / n`` (binomial, with a half request added to
    each count so that 0 and n are not exact): the sampling part of a goodput figure."""
    if n < 1:
        return None
    p = (hits + 0.5) / (n + 1.0)
    return (1.0 - p) / (p * (n + 1.0))
