"""Gate: N users at once — aggregate throughput, TTFT p50/p95 and ITL p95 (seed lever 4's measure),
in a steady-state window: N streams always in flight (closed loop; output lengths mixed by
`[scenarios] output_spread`), a warm-up until throughput
stops rising, then a window of at least `[scenarios] window_s` and `window_requests` requests.
Aggregate tok/s counts the tokens emitted inside the window; latency percentiles take the
requests that lived inside it.  And the same load as users make it: Poisson arrivals at
`[scenarios] arrival_rate` requests/s (like `vllm bench serve --request-rate`), where TTFT is
what a user waits.  Both measured on each of the entry's boots."""

import pytest

from llmgate import device, load, metrics, stats

PROMPT_TOKENS = 128
OUTPUT_TOKENS = 64


def _measure(gate, cfg, h, settings, steady, variant, rate=None, spread=0.0):
    with device.GpuSampler(enabled=cfg.device == "gpu") as gpu:
        result = load.steady(h, load.spec(h, PROMPT_TOKENS, OUTPUT_TOKENS, f"conc-{variant}", spread),
                             settings.concurrency, steady, settings.request_timeout, rate=rate, label=variant)
    gate.requests(result)
    assert all(x.completion_tokens == x.requested_output_tokens for x in result.ok)
    parts = stats.repeat_metrics(result, settings.repeats)
    info = {"window": result.window_info()}
    if cfg.device == "gpu":
        info["gpu_sampling"] = gpu.summary()
        for line in device.sampling_notes(info["gpu_sampling"], variant):
            gate.note(line)
    for n in result.notes:
        gate.note(f"{variant} window: {n}")
    return result, parts, info


@pytest.mark.boots
@pytest.mark.lever("gate")
def test_concurrency(llmgate_config, llmgate_server, llmgate_settings, llmgate_session, gate):
    s, n = llmgate_settings, llmgate_settings.concurrency
    steady = load.Steady(**llmgate_session.matrix.scenarios.steady(llmgate_config.device, n))
    variant = f"c{n}"
    spread = llmgate_session.matrix.scenarios.output_spread if n > 1 else 0.0
    result, parts, info = _measure(gate, llmgate_config, llmgate_server, s, steady, variant, spread=spread)
    gate.record(metrics.AGGREGATE_TOK_S, stats.values_of(parts, "aggregate_tok_s"), variant, raw=result.raw(), **info)
    gate.record(metrics.TTFT_P50, stats.values_of(parts, "ttft_p50"), variant)
    gate.record(metrics.TTFT_P95, stats.values_of(parts, "ttft_p95"), variant)
    gate.record(metrics.ITL_P95, stats.values_of(parts, "itl_p95"), variant)


@pytest.mark.boots
@pytest.mark.lever("gate")
def test_arrival_rate(llmgate_config, llmgate_server, llmgate_settings, llmgate_session, gate):
    sc = llmgate_session.matrix.scenarios
    rate = sc.rate(llmgate_config.device)
    steady = load.Steady(**sc.steady(llmgate_config.device, max(2, llmgate_settings.concurrency)))
    variant = f"rate{rate:g}"
    result, parts, info = _measure(gate, llmgate_config, llmgate_server, llmgate_settings, steady, variant, rate)
    gate.record(metrics.TTFT_P50, stats.values_of(parts, "ttft_p50"), variant, raw=result.raw(), **info)
    gate.record(metrics.TTFT_P95, stats.values_of(parts, "ttft_p95"), variant)
    gate.record(metrics.E2E_P50, stats.values_of(parts, "e2e_p50"), variant)
