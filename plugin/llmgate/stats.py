"""Statistics over samples: percentiles, summaries with spread, and per-run metric values."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from .samples import LoadResult


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
    ttfts, itls, tpots, e2es = result.ttfts(), result.itls(), result.tpots(), result.e2es()
    if ttfts:
        out.update(ttft_p50=percentile(ttfts, 50), ttft_p95=percentile(ttfts, 95), ttft_p99=percentile(ttfts, 99))
    if itls:
        out.update(itl_p50=percentile(itls, 50), itl_p95=percentile(itls, 95), itl_p99=percentile(itls, 99))
    if tpots:
        out.update(tpot_median=median(tpots), decode_tok_s=1.0 / median(tpots))
    if e2es:
        out.update(e2e_p50=percentile(e2es, 50), e2e_p95=percentile(e2es, 95))
    return out
