"""Gate: N users at once — aggregate throughput, TTFT p50/p95 and ITL p95 (seed lever 4's measure),
in a steady-state window: N streams always in flight (closed loop; output lengths mixed by
`[scenarios] output_spread`), a warm-up until throughput
stops rising, then a window of at least `[scenarios] window_s` and `window_requests` requests.
Aggregate tok/s counts the tokens emitted inside the window; latency percentiles take the
requests that lived inside it.  And the same load as users make it: Poisson arrivals at
`[scenarios] arrival_rate` requests/s (like `vllm bench serve --request-rate`), where TTFT is
what a user waits.  Both measured on each of the entry's boots, with the engine's own timers over
the same window beside the client's figures (``gate.record_engine_parts``).  An entry whose
``reference`` is another engine (the seed's vLLM-vs-SGLang comparison, `matrices/gpu-engines-1gpu.toml`)
also gets its aggregate tok/s ÷ the reference's, measured in the same session (`engine_vs_reference`),
and its TTFT p95 ÷ the reference's (`engine_ttft_p95_vs_reference`, lower is better: the seed's
figure, SGLang 277 ms ÷ vLLM 2,295 ms at 8 users on an RTX 4070)."""

import llmgate
from llmgate import device, figures, metrics

PROMPT_TOKENS = 128
OUTPUT_TOKENS = 64


def _measure(gate, variant, concurrency, rate=None):
    with device.GpuSampler(enabled=gate.entry.device == "gpu") as gpu:
        result = gate.steady(PROMPT_TOKENS, OUTPUT_TOKENS, concurrency, rate=rate, seed=f"conc-{variant}",
                             label=variant)
    info = {"window": result.window_info()}
    if gate.entry.device == "gpu":
        info["gpu_sampling"] = gpu.summary()
        for line in device.sampling_notes(info["gpu_sampling"], variant):
            gate.note(line)
    return result, info


@llmgate.scenario(boots=True)
def test_concurrency(gate):
    n, repeats = gate.settings.concurrency, gate.settings.repeats
    variant = f"c{n}"
    result, info = _measure(gate, variant, n)
    aggregate = figures.repeat_values(result, "aggregate_tok_s", repeats)
    gate.record(metrics.AGGREGATE_TOK_S, aggregate, variant, raw=result.raw(), **info)
    gate.levers.versus_reference_engine(aggregate, variant)      # an entry whose reference is another engine
    parts = gate.record_engine_parts(result, variant)
    gate.record(metrics.TTFT_P50, figures.repeat_values(result, "ttft_p50", repeats), variant, parts=parts)
    ttft_p95 = figures.repeat_values(result, "ttft_p95", repeats)
    gate.record(metrics.TTFT_P95, ttft_p95, variant, parts=parts)
    gate.levers.versus_reference_engine(ttft_p95, variant, metrics.ENGINE_TTFT_P95_RATIO)   # the seed's own figure
    gate.record(metrics.ITL_P95, figures.repeat_values(result, "itl_p95", repeats), variant)


@llmgate.scenario(boots=True)
def test_arrival_rate(gate):
    rate, repeats = gate.matrix.scenarios.rate(gate.entry.device), gate.settings.repeats
    variant = f"rate{rate:g}"
    result, info = _measure(gate, variant, gate.settings.concurrency, rate)
    parts = gate.record_engine_parts(result, variant)
    gate.record(metrics.TTFT_P50, figures.repeat_values(result, "ttft_p50", repeats), variant, raw=result.raw(),
                parts=parts, **info)
    gate.record(metrics.TTFT_P95, figures.repeat_values(result, "ttft_p95", repeats), variant, parts=parts)
    gate.record(metrics.E2E_P50, figures.repeat_values(result, "e2e_p50", repeats), variant)
