"""Lever 4, concurrency: a sweep over concurrency levels (default 1, 2, 4, 8; `[scenarios]
concurrency_levels`), each a steady-state window (N streams always in flight): aggregate tok/s,
TTFT p50/p95/p99, ITL p95 and TPOT per level.  Measured on each of the entry's boots.
The seed's engine comparison at 8 concurrent users (vLLM 277.66 vs SGLang 465.35 tok/s,
p95 TTFT 2295 vs 277 ms) is this scenario run on two engines in one matrix.
"""

import llmgate
from llmgate import figures, metrics


@llmgate.scenario("concurrency", boots=True)
def test_concurrency_sweep(gate):
    gate.levers.require("concurrency")
    sc, repeats = gate.matrix.scenarios, gate.settings.repeats
    kept = {}
    for n in sc.concurrency_levels:
        res = gate.steady(sc.concurrency_prompt_tokens, sc.concurrency_output_tokens, n, seed=f"sweep-c{n}",
                          label=f"sweep c={n}")
        v = f"c{n}"
        gate.record(metrics.AGGREGATE_TOK_S, figures.repeat_values(res, "aggregate_tok_s", repeats), v, raw=res.raw(),
                    window=res.window_info())
        gate.record(metrics.TTFT_P50, figures.repeat_values(res, "ttft_p50", repeats), v)
        gate.record(metrics.TTFT_P95, figures.repeat_values(res, "ttft_p95", repeats), v)
        gate.record(metrics.TTFT_P99, figures.repeat_values(res, "ttft_p99", repeats), v)
        gate.record(metrics.ITL_P95, figures.repeat_values(res, "itl_p95", repeats), v)
        gate.record(metrics.TPOT, figures.repeat_values(res, "tpot_median", repeats), v)
        whole = figures.whole(res)
        kept[n] = {k: whole[k] for k in ("aggregate_tok_s", "ttft_p95", "itl_p95") if k in whole}
    gate.levers.remember("concurrency", kept)
