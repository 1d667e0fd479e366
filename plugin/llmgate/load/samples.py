"""Typed records of what was measured: one ``Sample`` per request, one ``LoadResult`` per workload run.

Timing definitions (the same for every engine):

- TTFT: from sending the request to the arrival of the first chunk that carries a token.
- Token counts come from the engine's ``usage`` (never from counting chunks: one
  chunk may carry several tokens, e.g. accepted speculative tokens).
- ITL: the gap between consecutive token-carrying chunks, divided evenly over the
  tokens the later chunk carries, so there is one ITL value per token after the
  first chunk.  When the engine does not say how many tokens each chunk carries,
  the tokens after the first chunk are spread evenly over the chunks.
- TPOT: (time of the last token − TTFT) / (completion tokens − tokens of the first chunk).
- Decode tok/s: 1 / TPOT.  E2E: send to end of stream.
"""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass
class Sample:
    """One streamed request."""

    ok: bool
    start: float                          # time.perf_counter() at send
    e2e: float                            # seconds, send → end of stream (or failure)
    ttft: float | None = None
    chunk_offsets: list[float] = dataclasses.field(default_factory=list)  # token-carrying chunks, s after start
    chunk_tokens: list[int] | None = None  # tokens per such chunk, when the engine reports it
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    requested_prompt_tokens: int | None = None
    requested_output_tokens: int | None = None
    finish_reason: str | None = None
    status: int | None = None
    error: str | None = None
    error_type: str | None = None          # the exception that ended it ("RemoteProtocolError", "TimeoutError"…)
    retries: int = 0
    text: str = ""
    engine_fields: dict[str, Any] = dataclasses.field(default_factory=dict)  # e.g. llama.cpp "timings"

    # -- derived ---------------------------------------------------------------------
    def _per_chunk_tokens(self) -> list[float] | None:
        n = len(self.chunk_offsets)
        if n == 0 or not self.completion_tokens:
            return None
        if self.chunk_tokens is not None and len(self.chunk_tokens) == n and sum(self.chunk_tokens) == self.completion_tokens:
            return [float(k) for k in self.chunk_tokens]
        if n == 1:
            return [float(self.completion_tokens)]
        rest = (self.completion_tokens - 1) / (n - 1)
        return [1.0] + [rest] * (n - 1)

    @property
    def itl(self) -> list[float]:
        """Inter-token latencies in seconds, one per token after the first chunk."""
        per = self._per_chunk_tokens()
        if not per:
            return []
        out: list[float] = []
        for i in range(1, len(self.chunk_offsets)):
            gap = self.chunk_offsets[i] - self.chunk_offsets[i - 1]
            k = per[i]
            if k <= 0:
                continue
            whole = int(round(k)) if abs(k - round(k)) < 1e-9 else None
            if whole:
                out.extend([gap / whole] * whole)
            else:  # spread evenly: one value per chunk, weighted as the mean
                out.append(gap / k)
        return out

    def token_times(self) -> list[tuple[float, float]]:
        """(time, tokens) per token-carrying chunk, on the perf_counter clock (comparable between
        the processes of one machine)."""
        per = self._per_chunk_tokens()
        if not per:
            return []
        return [(self.start + off, k) for off, k in zip(self.chunk_offsets, per)]

    @property
    def end(self) -> float:
        return self.start + self.e2e

    @property
    def decode_tokens(self) -> float | None:
        per = self._per_chunk_tokens()
        return None if not per else self.completion_tokens - per[0]

    @property
    def tpot(self) -> float | None:
        """Mean time per output token after the first chunk, seconds."""
        n = self.decode_tokens
        if not self.ok or not n or n <= 0 or self.ttft is None or len(self.chunk_offsets) < 2:
            return None
        return (self.chunk_offsets[-1] - self.chunk_offsets[0]) / n

    @property
    def decode_tok_s(self) -> float | None:
        t = self.tpot
        return None if not t else 1.0 / t

    def as_dict(self, with_chunks: bool = True) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        if not with_chunks:
            d.pop("chunk_offsets")
            d.pop("chunk_tokens")
        return d


@dataclasses.dataclass
class LoadResult:
    """A workload run: its samples and the wall time around all of them."""

    samples: list[Sample]
    wall_s: float
    concurrency: int
    label: str = ""

    @property
    def ok(self) -> list[Sample]:
        return [s for s in self.samples if s.ok]

    @property
    def failures(self) -> list[Sample]:
        return [s for s in self.samples if not s.ok]

    @property
    def output_tokens(self) -> int:
        return sum(s.completion_tokens or 0 for s in self.ok)

    @property
    def aggregate_tok_s(self) -> float:
        """Output tokens of successful requests per second of wall time."""
        return self.output_tokens / self.wall_s if self.wall_s > 0 else 0.0

    def ttfts(self) -> list[float]:
        return [s.ttft for s in self.ok if s.ttft is not None]

    def itls(self) -> list[float]:
        return [x for s in self.ok for x in s.itl]

    def tpots(self) -> list[float]:
        return [t for s in self.ok if (t := s.tpot) is not None]

    def e2es(self) -> list[float]:
        return [s.e2e for s in self.ok]

    def raw(self) -> dict[str, Any]:
        """Per-request arrays, so any statistic can be recomputed from a stored result."""
        return {
            "concurrency": self.concurrency, "wall_s": round(self.wall_s, 6),
            "ttft_s": [round(s.ttft, 6) if s.ttft is not None else None for s in self.samples],
            "e2e_s": [round(s.e2e, 6) for s in self.samples],
            "itl_s": [[round(x, 6) for x in s.itl] for s in self.samples],
            "prompt_tokens": [s.prompt_tokens for s in self.samples],
            "completion_tokens": [s.completion_tokens for s in self.samples],
            "errors": [s.error for s in self.samples if s.error],
        }


@dataclasses.dataclass
class SteadyResult(LoadResult):
    """A steady-state run: streams kept busy (closed loop: ``concurrency`` always in flight; or
    requests arriving at a fixed Poisson ``rate``) through a discarded warm-up, a measured window
    and a drain.  ``samples`` holds every request; figures come from the window only:
    tokens emitted inside it, and requests that lived inside it (sent after it opened, ended
    before it closed)."""

    mode: str = "closed"                           # "closed" | "poisson"
    rate: float | None = None                      # requests/s (poisson)
    window: tuple[float, float] = (0.0, 0.0)       # perf_counter times
    warmup: dict[str, Any] = dataclasses.field(default_factory=dict)
    notes: list[str] = dataclasses.field(default_factory=list)
    observed: dict[str, Any] = dataclasses.field(default_factory=dict)   # GPU clocks, engine CPU… during the run
    # the engine's /metrics read through the run (an ``engines.meters.Poller``), None when it has none
    engine_readings: Any = dataclasses.field(default=None, repr=False, compare=False)

    @property
    def window_s(self) -> float:
        return self.window[1] - self.window[0]

    def lived_in(self, a: float, b: float) -> list[Sample]:
        """Successful requests sent in [a, b) that ended before the window closed."""
        return [s for s in self.ok if a <= s.start < b and s.end <= self.window[1]]

    def tokens_between(self, a: float, b: float) -> float:
        return sum(k for s in self.ok for t, k in s.token_times() if a <= t < b)

    def window_info(self) -> dict[str, Any]:
        return {"mode": self.mode, "concurrency": self.concurrency, "rate": self.rate,
                "window_s": round(self.window_s, 3), "requests_in_window": len(self.lived_in(*self.window)),
                "requests_total": len(self.samples), "warmup": self.warmup, "notes": list(self.notes)}

    def raw(self) -> dict[str, Any]:
        t0 = min((s.start for s in self.samples), default=0.0)
        out = super().raw()
        out.update(window=self.window_info(), window_from_s=round(self.window[0] - t0, 6),
                   window_to_s=round(self.window[1] - t0, 6),
                   start_s=[round(s.start - t0, 6) for s in self.samples])
        return out
