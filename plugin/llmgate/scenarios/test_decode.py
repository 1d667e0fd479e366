"""Gate: decode speed of one request at a time with a long generation (seed lever 1's measure),
in a steady-state window: one stream always in flight, a warm-up until throughput stops rising,
then a window of at least `[scenarios] window_s` and `decode_window_requests` requests, cut into
`--llmgate-repeats` parts (the within-boot repeats).  Measured on each of the entry's boots.
On a GPU also: memory, utilisation, clocks and throttling while it runs; decode speed as a share
of the memory-bandwidth roofline; and the regime (GPU-bound or host-bound) that follows.
Beside the client's figures, the engine's own timers over the same window: its time per output
token and E2E (window means from its /metrics).  TTFT at c=1 and its parts (queue, prefill, front
end) are the latency lever's (``test_latency.py``): this window's few first tokens a boot could not
tell a 10% change from noise."""

import llmgate
from llmgate import device, figures, metrics

PROMPT_TOKENS = 64
OUTPUT_TOKENS = 256


@llmgate.scenario(boots=True)
def test_decode_c1(gate):
    cfg, h = gate.entry, gate.server
    on_gpu = cfg.device == "gpu"
    with device.GpuSampler(enabled=on_gpu) as gpu, h.cpu_meter() as cpu:
        result = gate.steady(PROMPT_TOKENS, OUTPUT_TOKENS, 1, seed="decode", label="decode c=1")
    assert {x.prompt_tokens for x in result.ok} == {PROMPT_TOKENS}
    assert {x.completion_tokens for x in result.ok} == {OUTPUT_TOKENS}
    whole = figures.whole(result)
    extra = {"window": result.window_info(), "engine_cpu": cpu.summary()}
    roof = None
    if on_gpu:
        extra["gpu_sampling"] = gpu.summary()
        roof = device.decode_roofline(h.model_path, cfg.dtype, cfg.quantization, whole["decode_tok_s"],
                                      gpus=cfg.tensor_parallel)
        if roof:
            extra["roofline"] = roof
            gate.note(f"decode {roof['decode_tok_s']:.0f} tok/s = {roof['efficiency']:.1%} of the memory-bandwidth "
                      f"roofline ({roof['roofline_tok_s']:.0f} tok/s: {roof['bytes_per_token'] / 1e9:.2f} GB of "
                      f"weights per token at {roof['peak_bandwidth_bytes_s'] / 1e12:.2f} TB/s over {roof['gpus']} GPU(s))")
        for line in device.sampling_notes(extra["gpu_sampling"], "decode"):
            gate.note(line)
    regime = device.classify(cfg.device, roof, extra.get("gpu_sampling"), extra["engine_cpu"])
    extra["regime"] = regime             # the entry's regime, beside its verdicts (gate.record's regime=)
    if regime.get("decided_by"):
        gate.note(f"regime {regime['regime']}: {regime['decided_by']}")
    gate.record(metrics.DECODE_TOK_S, figures.repeat_values(result, "decode_tok_s", gate.settings.repeats),
                raw=result.raw(), **extra)
    # the engine's own timers over the window: its time per output token (decode's part) and E2E.  Not
    # its TTFT, queue, prefill or front end: this window holds a few first tokens a boot (~8 on a GPU, 3
    # on the CPU), whose window means moved 3-5x between two quiet CPU boots and read an A/A regressed
    # or improved; test_latency.py's ttft_c1 measures them on purpose, over hundreds of requests
    gate.record_engine_parts(result, only=("tpot", "e2e"))
