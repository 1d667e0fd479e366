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
        return cls(_parse(text))

    @classmethod
    def deferred(cls, text: str) -> Scrape:
        """A reading kept as its text and parsed when first read: a scenario that reads /metrics after
        every request (TTFT c=1) keeps the parsing, and the objects it makes, out of its loop."""
        return cls(_Deferred(text))

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


def _parse(text: str) -> dict[str, dict[LabelKey, float]]:
    out: dict[str, dict[LabelKey, float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = float(s.value)
    return out


class _Deferred(Mapping[str, Mapping[LabelKey, float]]):
    """A /metrics text parsed on first read (``Scrape.deferred``)."""

    def __init__(self, text: str):
        self._text: str | None = text
        self._values: dict[str, dict[LabelKey, float]] | None = None

    def _parsed(self) -> dict[str, dict[LabelKey, float]]:
        if self._values is None:
            self._values, self._text = _parse(self._text or ""), None
        return self._values

    def __getitem__(self, key: str) -> Mapping[LabelKey, float]:
        return self._parsed()[key]

    def __iter__(self):
        return iter(self._parsed())

    def __len__(self) -> int:
        return len(self._parsed())


def scrape(http: httpx.Client, base_url: str, path: str | None = "/metrics",
           headers: dict[str, str] | None = None, deferred: bool = False) -> Scrape:
    """Read /metrics; an engine without one (``path`` None) reads as empty, so every signal of
    it is reported as unsupported (None), never as zero.  ``deferred``: parsed when first read.
    Uncompressed: the server need not gzip what crosses the loopback."""
    if path is None:
        return Scrape({})
    r = _get(http, base_url + path, headers)
    r.raise_for_status()
    return Scrape.deferred(r.text) if deferred else Scrape.parse(r.text)


def scrape_filtered(http: httpx.Client, base_url: str, path: str, headers: dict[str, str] | None = None,
                    deferred: bool = False) -> Scrape | None:
    """Read a filtered /metrics path (``Engine.timers_path``); None, not an exception, where it does
    not answer 200 with histogram samples (an engine build that does not serve it)."""
    r = _get(http, base_url + path, headers)
    if r.status_code != 200 or "_count" not in r.text:
        return None
    return Scrape.deferred(r.text) if deferred else Scrape.parse(r.text)


def _get(http: httpx.Client, url: str, headers: dict[str, str] | None) -> httpx.Response:
    return http.get(url, headers={**(headers or {}), "Accept-Encoding": "identity"})


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

    def histogram_mean(self, name: str, **match: str) -> float | None:
        """Mean of the observations added to histogram ``name`` (over the label sets that contain
        ``match``) between the scrapes; None when it is absent or saw nothing."""
        s, c = self.counter(name + "_sum", **match), self.counter(name + "_count", **match)
        if s is None or not c or c < 0:
            return None
        return s / c

    def histogram_means(self, names: Mapping[str, tuple[str, dict[str, str]]]) -> dict[str, float]:
        """``{part: mean}`` for ``{part: (histogram name, label match)}``, the parts that saw observations."""
        out = {}
        for part, (name, match) in names.items():
            m = self.histogram_mean(name, **match)
            if m is not None:
                out[part] = m
        return out


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


# -- the engine's own timers over a run: /metrics read every few tenths of a second ------------
ENGINE_PARTS = ("ttft", "queue", "prefill", "decode", "tpot", "itl", "e2e")
"""The per-request timers an engine may keep (window means, seconds): time to first token as the
engine counts it, time waiting to be scheduled, prefill (scheduled → first token), decode
(first → last token), time per output token, inter-token latency, end to end."""


class Poller:
    """Reads an engine's /metrics every ``interval`` seconds on a thread while a run is in flight,
    keeping ``(time.perf_counter(), text)``; parsing waits until the run is over, so that the
    thread takes as little as it can from a client measuring in the same process.

    ``deltas(edges)`` then gives the change between the readings nearest each pair of
    consecutive times in ``edges`` (a window's repeat boundaries), with the times actually used."""

    def __init__(self, http: httpx.Client, url: str | None, headers: dict[str, str] | None = None,
                 interval: float = 0.25):
        import threading

        self.http, self.url, self.headers, self.interval = http, url, headers, interval
        self.texts: list[tuple[float, str]] = []
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="llmgate-metrics-poller", daemon=True)
        self._parsed: dict[int, Scrape] = {}

    def _read(self) -> None:
        import time

        try:
            r = self.http.get(self.url, headers=self.headers)
            if r.status_code == 200:
                self.texts.append((time.perf_counter(), r.text))
                return
        except httpx.HTTPError:
            pass
        self.errors += 1

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._read()

    def __enter__(self) -> Poller:
        if self.url is not None:
            self._read()
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.url is not None:
            self._stop.set()
            self._thread.join(timeout=5 * self.interval + 10)
            self._read()

    @property
    def times(self) -> list[float]:
        return [t for t, _ in self.texts]

    def reading(self, i: int) -> Scrape:
        if i not in self._parsed:
            self._parsed[i] = Scrape.parse(self.texts[i][1])
        return self._parsed[i]

    def nearest(self, t: float) -> int | None:
        if not self.texts:
            return None
        return min(range(len(self.texts)), key=lambda i: abs(self.texts[i][0] - t))

    def deltas(self, edges: list[float]) -> list[tuple[float, float, Delta] | None]:
        """One (t0, t1, delta) per consecutive pair of ``edges``: the readings nearest to them (None
        where both edges fall on one reading: the interval is shorter than the polling)."""
        out: list[tuple[float, float, Delta] | None] = []
        for a, b in zip(edges, edges[1:]):
            i, j = self.nearest(a), self.nearest(b)
            if i is None or j is None or j <= i:
                out.append(None)
                continue
            out.append((self.texts[i][0], self.texts[j][0], Delta(self.reading(i), self.reading(j))))
        return out
