"""The engine's own signals: Prometheus text from /metrics (parsed with prometheus_client)
and counter/histogram deltas around a run."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import httpx
from prometheus_client.parser import text_string_to_metric_families

LabelKey = tuple[tuple[str, str], ...]


@dataclasses.dataclass(frozen=True)
class Scrape:
    """One /metrics reading: sample name → {labels → value}."""

    values: Mapping[str, Mapping[LabelKey, float]]

    @classmethod
    def parse(cls, text: str) -> Scrape:
        out: dict[str, dict[LabelKey, float]] = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = float(s.value)
        return cls(out)

    def has(self, name: str) -> bool:
        return name in self.values

    def total(self, name: str, **match: str) -> float | None:
        """Sum of a sample over label sets that contain ``match``; None when the series is absent."""
        series = self.values.get(name)
        if series is None:
            return None
        return sum(v for labels, v in series.items() if all(dict(labels).get(k) == m for k, m in match.items()))

    def by_label(self, name: str, label: str) -> dict[str, float]:
        out: dict[str, float] = {}
        for labels, v in (self.values.get(name) or {}).items():
            d = dict(labels)
            if label in d:
                out[d[label]] = out.get(d[label], 0.0) + v
        return out


def scrape(http: httpx.Client, base_url: str, path: str | None = "/metrics",
           headers: dict[str, str] | None = None) -> Scrape:
    """Read /metrics; an engine without one (``path`` None) reads as empty, so every signal of
    it is reported as unsupported (None), never as zero."""
    if path is None:
        return Scrape({})
    r = http.get(base_url + path, headers=headers)
    r.raise_for_status()
    return Scrape.parse(r.text)


@dataclasses.dataclass(frozen=True)
class Delta:
    """What changed between two scrapes (counters and histogram sums/counts only grow)."""

    before: Scrape
    after: Scrape

    def counter(self, name: str, **match: str) -> float | None:
        a, b = self.after.total(name, **match), self.before.total(name, **match)
        if a is None:
            return None
        return a - (b or 0.0)

    def by_label(self, name: str, label: str) -> dict[str, float]:
        a, b = self.after.by_label(name, label), self.before.by_label(name, label)
        return {k: v - b.get(k, 0.0) for k, v in a.items()}

    def histogram_mean(self, name: str) -> float | None:
        """Mean of the observations added to histogram ``name`` between the scrapes."""
        s, c = self.counter(name + "_sum"), self.counter(name + "_count")
        if s is None or not c:
            return None
        return s / c


@dataclasses.dataclass(frozen=True)
class SpecAcceptance:
    """Speculative-decoding acceptance over a run, from the engine's own signals: counter
    deltas where the engine keeps counters (vLLM, llama.cpp), else the figures it reports
    (SGLang publishes acceptance rate and length as gauges)."""

    drafts: float | None = None          # verification steps that carried draft tokens
    draft_tokens: float | None = None    # tokens proposed
    accepted: float | None = None        # tokens accepted
    per_position: tuple[float, ...] = ()  # accepted tokens at draft position 0, 1, …
    reported_rate: float | None = None
    reported_length: float | None = None

    @property
    def rate(self) -> float | None:
        """Accepted / proposed tokens."""
        if self.draft_tokens and self.accepted is not None:
            return self.accepted / self.draft_tokens
        return self.reported_rate

    @property
    def mean_length(self) -> float | None:
        """Tokens produced per verification step: 1 + accepted / drafts."""
        if self.drafts and self.accepted is not None:
            return 1.0 + self.accepted / self.drafts
        return self.reported_length

    @property
    def proposed(self) -> bool:
        """Whether any draft was proposed in the interval (None-safe)."""
        return bool(self.drafts) or self.reported_rate is not None

    @property
    def position_rates(self) -> tuple[float, ...]:
        """Share of drafts whose token at each position was accepted."""
        return tuple(a / self.drafts for a in self.per_position) if self.drafts else ()
