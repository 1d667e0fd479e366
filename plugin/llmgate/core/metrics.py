"""What is measured: each metric declares its unit, which direction is worse, and the
smallest change that counts as a regression (its minimum effect)."""

from __future__ import annotations

import dataclasses


ZERO_COST = 1e9


@dataclasses.dataclass(frozen=True)
class Metric:
    """A measured quantity: ``Metric("my_ttft_ratio", "TTFT ÷ prompt length", "s", "lower", 0.10)``.

    ``better`` says which direction is better ("higher" or "lower"); ``min_effect`` is the
    smallest relative change in the worse direction that counts as a regression (0.10: 10%);
    ``min_abs_effect``, in the metric's own unit, must be exceeded as well (for a metric whose
    baseline can sit near zero).  Values are recorded in ``unit`` ("s", "tok/s", "ratio", "%",
    "tokens", "bytes", or any other name)."""

    name: str           # stable key used in storage and options
    label: str          # for people
    unit: str           # natural unit of stored values: "s", "tok/s", "ratio", "tokens", "bytes", "%"
    better: str         # "higher" or "lower"
    min_effect: float   # relative change in the worse direction that counts (0.05 = 5%)
    # and, for a metric whose baseline can sit near zero (where a relative change says little),
    # the change in its own unit that must be exceeded as well (0.10 of a "%" metric: 10 points)
    min_abs_effect: float = 0.0

    def __post_init__(self) -> None:
        if self.better not in ("higher", "lower"):
            raise ValueError(f"{self.name}: better must be 'higher' or 'lower'")
        if not self.name or "@" in self.name or "::" in self.name:
            raise ValueError(f"metric name {self.name!r}: a non-empty name without '@' or '::'")
        if self.min_effect < 0 or self.min_abs_effect < 0:
            raise ValueError(f"{self.name}: min_effect and min_abs_effect must be >= 0")

    def worse_change(self, baseline: float, now: float) -> float:
        """Relative change in this metric's worse direction (positive = worse)."""
        if baseline == 0:
            return 0.0 if now == 0 else float("inf")
        rel = (now - baseline) / abs(baseline)
        return rel if self.better == "lower" else -rel

    def cost(self, value: float) -> float:
        """The value in 'bigger is worse' form, as pytest-benchmark compares it (1/x for higher-is-better;
        a zero, the worst value there is, becomes 1e9: pytest-benchmark's statistics cannot take inf)."""
        if self.better == "lower":
            return value
        return 1.0 / value if value > 0 else ZERO_COST

    def display(self, value: float | None) -> str:
        if value is None:
            return "—"
        if self.unit == "s":
            return f"{value * 1000:.1f} ms" if abs(value) < 10 else f"{value:.1f} s"
        if self.unit == "tok/s":
            return f"{value:.1f} tok/s"
        if self.unit == "ratio":
            return f"{value:.3f}x" if self.name.endswith(("speedup", "_x")) else f"{value:.3f}"
        if self.unit == "%":
            return f"{value * 100:.1f} %"
        if self.unit == "bytes":
            return f"{value / 2**20:.0f} MiB"
        if self.unit == "tokens":
            return f"{value:,.0f} tok"
        if self.unit == "req/s":
            return f"{value:.2f} req/s"
        return f"{value:.4g} {self.unit}"


M = Metric
DECODE_TOK_S = M("decode_tok_s", "decode tok/s (c=1)", "tok/s", "higher", 0.05)
TTFT_C1 = M("ttft_c1", "TTFT (c=1)", "s", "lower", 0.10)
AGGREGATE_TOK_S = M("aggregate_tok_s", "aggregate tok/s", "tok/s", "higher", 0.05)
TTFT_P50 = M("ttft_p50", "TTFT p50", "s", "lower", 0.10)
TTFT_P95 = M("ttft_p95", "TTFT p95", "s", "lower", 0.10)
TTFT_P99 = M("ttft_p99", "TTFT p99", "s", "lower", 0.15)
ITL_P95 = M("itl_p95", "ITL p95", "s", "lower", 0.10)
TPOT = M("tpot", "TPOT median", "s", "lower", 0.05)
TPOT_P95 = M("tpot_p95", "TPOT p95", "s", "lower", 0.10)
TPOT_P99 = M("tpot_p99", "TPOT p99", "s", "lower", 0.15)
# requests a second that meet the entry's TTFT and TPOT targets at an arrival rate (`vllm bench serve
# --goodput`): the offered rate × the share of the window's requests that met both
GOODPUT = M("goodput", "goodput (requests/s meeting the TTFT and TPOT targets)", "req/s", "higher", 0.05)
E2E_P50 = M("e2e_p50", "E2E latency p50", "s", "lower", 0.10)
STARTUP_S = M("startup_s", "start-up time", "s", "lower", 0.25)
PEAK_RSS = M("peak_rss", "peak memory (RSS)", "bytes", "lower", 0.10)

# the engine's own per-request timers (window means from its /metrics histograms) and what the client
# sees beyond them: where a request's time went.  Queue and front end can sit near zero (an idle
# queue, a fast API server), so a change must also exceed 1 ms there.
ENGINE_TTFT = M("engine_ttft", "engine's own TTFT (mean)", "s", "lower", 0.10)
ENGINE_QUEUE = M("engine_queue", "engine queue time (mean)", "s", "lower", 0.10, min_abs_effect=0.001)
ENGINE_PREFILL = M("engine_prefill", "engine prefill time (mean)", "s", "lower", 0.10)
ENGINE_TPOT = M("engine_tpot", "engine time per output token (mean)", "s", "lower", 0.05)
ENGINE_E2E = M("engine_e2e", "engine E2E latency (mean)", "s", "lower", 0.10)
# (0.5 ms: a GPU host's front end is 3-6 ms at c=1, and a 1 ms slower request path is a change to see)
FRONTEND_TTFT = M("frontend_ttft", "TTFT beyond the engine's own (client − engine, mean)", "s", "lower", 0.10,
                  min_abs_effect=0.0005)
# part of engines.meters.ENGINE_PARTS (and the front end) → its metric
ENGINE_PART_METRICS = {"ttft": ENGINE_TTFT, "queue": ENGINE_QUEUE, "prefill": ENGINE_PREFILL, "tpot": ENGINE_TPOT,
                       "e2e": ENGINE_E2E, "frontend": FRONTEND_TTFT}

# lever scenarios
SPEEDUP = M("speedup_vs_reference", "decode speed ÷ reference entry's (same session)", "ratio", "higher", 0.05)
# the seed's engine comparison (lever 4): an entry whose reference is another engine, same model and budget
ENGINE_RATIO = M("engine_vs_reference", "aggregate tok/s ÷ the reference engine's (same session)", "ratio", "higher",
                 0.05)
# the seed's own figure of that comparison: TTFT p95 under 8 users (RTX 4070: SGLang 277 ms ÷ vLLM 2,295 ms = 0.12)
ENGINE_TTFT_P95_RATIO = M("engine_ttft_p95_vs_reference", "TTFT p95 ÷ the reference engine's (same session)", "ratio",
                          "lower", 0.10)
SPEC_ACCEPT_RATE = M("spec_acceptance_rate", "spec. acceptance rate (accepted/draft)", "ratio", "higher", 0.05)
SPEC_ACCEPT_LEN = M("spec_acceptance_length", "spec. mean acceptance length", "ratio", "higher", 0.05)
SPEC_POS_RATE = M("spec_position_acceptance", "spec. acceptance at draft position", "ratio", "higher", 0.10)
MAX_MODEL_LEN = M("max_model_len", "verified max_model_len", "tokens", "higher", 0.01)
KV_TOKENS = M("kv_cache_tokens", "KV cache capacity", "tokens", "higher", 0.01)
LEN_RATIO = M("max_len_vs_reference", "verified max_model_len ÷ reference entry's", "ratio", "higher", 0.01)
# a short prefix saves little on a fast engine (SGLang on an H200: 512 cached tokens, 22 ms cold
# and warm), so its reduction sits near zero: 5.2% → 1.5% is −72% but 3.7 points; a cache that
# stops working loses tens of points at the longest prefix
PREFIX_REDUCTION = M("prefix_ttft_reduction", "TTFT reduction, cached prefix vs cold", "%", "higher", 0.10,
                     min_abs_effect=0.10)
PREFIX_HITS = M("prefix_cache_hit_tokens", "prefix-cache hit tokens per warm request", "tokens", "higher", 0.05)
PREFILL_TOK_S = M("prefill_tok_s", "prefill tok/s (prompt tokens ÷ TTFT)", "tok/s", "higher", 0.10)

# quality
PASS_RATE = M("quality_pass_rate", "corpus cases passing their checks", "ratio", "higher", 0.0)
VALID_RATE = M("structured_valid_rate", "structured outputs valid (sampled)", "ratio", "higher", 0.0)
AGREEMENT = M("token_agreement", "greedy tokens equal to the reference entry's", "ratio", "higher", 0.05)
GREEDY = M("greedy_repeatable", "greedy outputs identical on repeat", "ratio", "higher", 0.0)
DIVERGENCE = M("first_divergence", "first greedy token that differs from the reference entry's", "tokens", "higher", 0.25)

# the client as a measuring instrument
CLIENT_OVERHEAD = M("client_ttft_overhead", "client TTFT − engine's own TTFT", "s", "lower", 1.0)
CLIENT_CPU = M("client_cpu_share", "client CPU time ÷ wall time", "ratio", "lower", 1.0)

# every request of a measurement must succeed: a failed one (HTTP 5xx, malformed stream,
# timeout) is a regression on its own, whatever the baseline
FAILED_SHARE = M("failed_requests", "requests that failed", "ratio", "lower", 0.0)

REGISTRY: dict[str, Metric] = {}


def register(metric: Metric) -> Metric:
    """Make a metric known by name (``--llmgate-min-effect NAME=…``, ``llmgate history``);
    a second, different metric of one name is refused."""
    known = REGISTRY.get(metric.name)
    if known is not None and known != metric:
        raise ValueError(f"metric {metric.name!r} is defined twice: {known} and {metric}; give yours another name")
    REGISTRY[metric.name] = metric
    return metric


for _m in (DECODE_TOK_S, TTFT_C1, AGGREGATE_TOK_S, TTFT_P50, TTFT_P95, TTFT_P99, ITL_P95, TPOT, TPOT_P95, TPOT_P99,
           GOODPUT, E2E_P50,
           STARTUP_S, PEAK_RSS, *ENGINE_PART_METRICS.values(), SPEEDUP, ENGINE_RATIO, ENGINE_TTFT_P95_RATIO, SPEC_ACCEPT_RATE, SPEC_ACCEPT_LEN,
           SPEC_POS_RATE, MAX_MODEL_LEN, KV_TOKENS, LEN_RATIO, PREFIX_REDUCTION, PREFIX_HITS, PREFILL_TOK_S,
           CLIENT_OVERHEAD, CLIENT_CPU, PASS_RATE, VALID_RATE, AGREEMENT, DIVERGENCE, GREEDY, FAILED_SHARE):
    register(_m)


def get(name: str) -> Metric:
    base = name.split("@", 1)[0]
    if base not in REGISTRY:
        raise KeyError(f"unknown metric {name!r} (known: {', '.join(sorted(REGISTRY))})")
    return REGISTRY[base]
