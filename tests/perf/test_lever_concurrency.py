"""Lever 4, concurrency: a sweep over concurrency levels (default 1, 2, 4, 8; `[scenarios]
concurrency_levels`), each a steady-state window (N streams always in flight): aggregate tok/s,
TTFT p50/p95/p99, ITL p95 and TPOT per level.  Measured on each of the entry's boots.
The seed's engine comparison at 8 concurrent users (vLLM 277.66 vs SGLang 465.35 tok/s,
p95 TTFT 2295 vs 277 ms) is this scenario run on two engines in one matrix.
"""

import pytest

from llmgate import load, metrics, stats


@pytest.mark.boots
@pytest.mark.lever("concurrency")
def test_concurrency_sweep(llmgate_config, llmgate_server, llmgate_settings, llmgate_session, gate):
    gate.require_lever("concurrency")
    sc, st, h = llmgate_session.matrix.scenarios, llmgate_settings, llmgate_server
    figures = {}
    for n in sc.concurrency_levels:
        steady = load.Steady(**sc.steady(llmgate_config.device, n))
        res = load.steady(h, load.spec(h, sc.concurrency_prompt_tokens, sc.concurrency_output_tokens, f"sweep-c{n}",
                                       sc.output_spread if n > 1 else 0.0),
                          n, steady, st.request_timeout, label=f"sweep c={n}")
        gate.requests(res)
        assert all(x.completion_tokens == x.requested_output_tokens for x in res.ok)
        parts = stats.repeat_metrics(res, st.repeats)
        for note in res.notes:
            gate.note(f"sweep c={n} window: {note}")
        v = f"c{n}"
        gate.record(metrics.AGGREGATE_TOK_S, stats.values_of(parts, "aggregate_tok_s"), v, raw=res.raw(),
                    window=res.window_info())
        gate.record(metrics.TTFT_P50, stats.values_of(parts, "ttft_p50"), v)
        gate.record(metrics.TTFT_P95, stats.values_of(parts, "ttft_p95"), v)
        gate.record(metrics.TTFT_P99, stats.values_of(parts, "ttft_p99"), v)
        gate.record(metrics.ITL_P95, stats.values_of(parts, "itl_p95"), v)
        gate.record(metrics.TPOT, stats.values_of(parts, "tpot_median"), v)
        whole = stats.window_metrics(res)
        figures[n] = {k: whole[k] for k in ("aggregate_tok_s", "ttft_p95", "itl_p95") if k in whole}
    gate.remember("concurrency", figures)
