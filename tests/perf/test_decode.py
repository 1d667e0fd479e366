"""Gate: decode speed of one request at a time with a long generation (seed lever 1's measure).
On a GPU also: memory used and utilisation while it runs, and the decode speed as a share of
the memory-bandwidth roofline (weights read once per token)."""

import pytest

from llmgate import device, load, metrics, stats

PROMPT_TOKENS = 64
OUTPUT_TOKENS = 256


@pytest.mark.lever("gate")
def test_decode_c1(llmgate_config, llmgate_server, llmgate_prompts, llmgate_settings, gate):
    s = llmgate_settings
    on_gpu = llmgate_config.device == "gpu"
    with device.GpuSampler(enabled=on_gpu) as gpu:
        result = load.decode_run(llmgate_server, llmgate_prompts, PROMPT_TOKENS, OUTPUT_TOKENS, s.repeats, s.warmup,
                                 s.request_timeout, "decode")

    gate.requests(result)
    assert [x.prompt_tokens for x in result.ok] == [PROMPT_TOKENS] * s.repeats
    assert [x.completion_tokens for x in result.ok] == [OUTPUT_TOKENS] * s.repeats
    tok_s = [x.decode_tok_s for x in result.ok]
    extra = {}
    if on_gpu:
        extra["gpu_sampling"] = gpu.summary()
        roof = device.decode_roofline(llmgate_server.model_path, llmgate_config.dtype, llmgate_config.quantization,
                                      stats.median(tok_s), gpus=llmgate_config.tensor_parallel)
        if roof:
            extra["roofline"] = roof
            gate.note(f"decode {roof['decode_tok_s']:.0f} tok/s = {roof['efficiency']:.1%} of the memory-bandwidth "
                      f"roofline ({roof['roofline_tok_s']:.0f} tok/s: {roof['bytes_per_token'] / 1e9:.2f} GB of "
                      f"weights per token at {roof['peak_bandwidth_bytes_s'] / 1e12:.2f} TB/s over {roof['gpus']} GPU(s))")
        for i, g in extra["gpu_sampling"].items():
            gate.note(f"GPU {i} during decode: memory used {g['memory_used_start'] / 2**30:.1f} GiB at start, peak "
                      f"{g['memory_used_peak'] / 2**30:.1f} GiB; utilisation mean {g['utilization_mean']:.0f}%, "
                      f"max {g['utilization_max']}%")
    gate.record(metrics.DECODE_TOK_S, tok_s, raw=result.raw(), **extra)
    gate.record(metrics.TTFT_C1, [x.ttft for x in result.ok])
