"""Lever 4, concurrency: a sweep over concurrency levels (default 1, 2, 4, 8; `[scenarios]
concurrency_levels`): aggregate tok/s, TTFT p50/p95/p99, ITL p95 and TPOT per level.
The seed's engine comparison at 8 concurrent users (vLLM 277.66 vs SGLang 465.35 tok/s,
p95 TTFT 2295 vs 277 ms) is this scenario run on two engines in one matrix.
"""

import pytest

from llmgate import load, metrics, stats


@pytest.mark.lever("concurrency")
def test_concurrency_sweep(llmgate_config, llmgate_server, llmgate_prompts, llmgate_settings, llmgate_session, gate):
    gate.require_lever("concurrency")
    sc, st, h = llmgate_session.matrix.scenarios, llmgate_settings, llmgate_server
    figures = {}
    for n in sc.concurrency_levels:
        load.run(h, load.fixed_requests(h, llmgate_prompts, n, sc.concurrency_prompt_tokens,
                                        sc.concurrency_output_tokens, f"sweep-warm-c{n}"), n, st.request_timeout)
        waves = []
        raws = []
        for r in range(st.repeats):
            res = load.run(h, load.fixed_requests(h, llmgate_prompts, 2 * n, sc.concurrency_prompt_tokens,
                                                  sc.concurrency_output_tokens, f"sweep-c{n}-r{r}"),
                           n, st.request_timeout, label=f"sweep c={n} wave {r}")
            gate.requests(res)
            waves.append(stats.load_metrics(res))
            raws.append(res.raw())
        v = f"c{n}"
        gate.record(metrics.AGGREGATE_TOK_S, [w["aggregate_tok_s"] for w in waves], v, raw={"waves": raws})
        gate.record(metrics.TTFT_P50, [w["ttft_p50"] for w in waves], v)
        gate.record(metrics.TTFT_P95, [w["ttft_p95"] for w in waves], v)
        gate.record(metrics.TTFT_P99, [w["ttft_p99"] for w in waves], v)
        gate.record(metrics.ITL_P95, [w["itl_p95"] for w in waves], v)
        gate.record(metrics.TPOT, [w["tpot_median"] for w in waves], v)
        figures[n] = {k: stats.median([w[k] for w in waves]) for k in ("aggregate_tok_s", "ttft_p95", "itl_p95")}
    gate.remember("concurrency", figures)
