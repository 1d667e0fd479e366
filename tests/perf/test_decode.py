"""Gate: decode speed of one request at a time with a long generation (seed lever 1's measure),
in a steady-state window: one stream always in flight, a warm-up until throughput stops rising,
then a window of at least `[scenarios] window_s` and `decode_window_requests` requests, cut into
`--llmgate-repeats` parts (the within-boot repeats).  Measured on each of the entry's boots.
On a GPU also: memory, utilisation, clocks and throttling while it runs; decode speed as a share
of the memory-bandwidth roofline; and the regime (GPU-bound or host-bound) that follows."""

import pytest

from llmgate import device, load, metrics, stats

PROMPT_TOKENS = 64
OUTPUT_TOKENS = 256


@pytest.mark.boots
@pytest.mark.lever("gate")
def test_decode_c1(llmgate_config, llmgate_server, llmgate_settings, llmgate_session, gate):
    s, sc, h = llmgate_settings, llmgate_session.matrix.scenarios, llmgate_server
    on_gpu = llmgate_config.device == "gpu"
    steady = load.Steady(**sc.steady(llmgate_config.device, 1))
    with device.GpuSampler(enabled=on_gpu) as gpu, h.cpu_meter() as cpu:
        result = load.steady(h, load.spec(h, PROMPT_TOKENS, OUTPUT_TOKENS, "decode"), 1, steady,
                             s.request_timeout, label="decode c=1")
    gate.requests(result)
    assert {x.prompt_tokens for x in result.ok} == {PROMPT_TOKENS}
    assert {x.completion_tokens for x in result.ok} == {OUTPUT_TOKENS}
    parts = stats.repeat_metrics(result, s.repeats)
    tok_s = stats.values_of(parts, "decode_tok_s")
    whole = stats.window_metrics(result)
    extra = {"window": result.window_info(), "engine_cpu": cpu.summary()}
    roof = None
    if on_gpu:
        extra["gpu_sampling"] = gpu.summary()
        roof = device.decode_roofline(h.model_path, llmgate_config.dtype, llmgate_config.quantization,
                                      whole["decode_tok_s"], gpus=llmgate_config.tensor_parallel)
        if roof:
            extra["roofline"] = roof
            gate.note(f"decode {roof['decode_tok_s']:.0f} tok/s = {roof['efficiency']:.1%} of the memory-bandwidth "
                      f"roofline ({roof['roofline_tok_s']:.0f} tok/s: {roof['bytes_per_token'] / 1e9:.2f} GB of "
                      f"weights per token at {roof['peak_bandwidth_bytes_s'] / 1e12:.2f} TB/s over {roof['gpus']} GPU(s))")
        for line in device.sampling_notes(extra["gpu_sampling"], "decode"):
            gate.note(line)
    r = device.classify(llmgate_config.device, roof, extra.get("gpu_sampling"), extra["engine_cpu"])
    llmgate_session.regimes[llmgate_config.id] = r
    extra["regime"] = r
    for n in result.notes:
        gate.note(f"decode window: {n}")
    gate.record(metrics.DECODE_TOK_S, tok_s, raw=result.raw(), **extra)
    gate.record(metrics.TTFT_C1, stats.values_of(parts, "ttft_p50"))
