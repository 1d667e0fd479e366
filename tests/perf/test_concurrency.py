"""Gate: N users at once — aggregate throughput, TTFT p50/p95 and ITL p95 (seed lever 4's measure)."""

import pytest

from llmgate import load, metrics, stats

PROMPT_TOKENS = 128
OUTPUT_TOKENS = 64
WAVE = 2  # requests per wave = WAVE × concurrency


@pytest.mark.lever("gate")
def test_concurrency(llmgate_server, llmgate_prompts, llmgate_settings, gate):
    s, n = llmgate_settings, llmgate_settings.concurrency
    warm = load.fixed_requests(llmgate_server, llmgate_prompts, n, PROMPT_TOKENS, OUTPUT_TOKENS, "conc-warm")
    load.run(llmgate_server, warm, n, s.request_timeout)

    per_wave: list[dict[str, float]] = []
    raws = []
    for r in range(s.repeats):
        reqs = load.fixed_requests(llmgate_server, llmgate_prompts, WAVE * n, PROMPT_TOKENS, OUTPUT_TOKENS,
                                   f"conc-c{n}-r{r}")
        result = load.run(llmgate_server, reqs, concurrency=n, timeout=s.request_timeout, label=f"c={n} wave {r}")
        gate.requests(result)
        assert all(x.completion_tokens == OUTPUT_TOKENS for x in result.ok)
        per_wave.append(stats.load_metrics(result))
        raws.append(result.raw())

    variant = f"c{n}"
    raw = {"waves": raws}
    gate.record(metrics.AGGREGATE_TOK_S, [w["aggregate_tok_s"] for w in per_wave], variant, raw=raw)
    gate.record(metrics.TTFT_P50, [w["ttft_p50"] for w in per_wave], variant)
    gate.record(metrics.TTFT_P95, [w["ttft_p95"] for w in per_wave], variant)
    gate.record(metrics.ITL_P95, [w["itl_p95"] for w in per_wave], variant)
