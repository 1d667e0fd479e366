"""Gate: decode speed of one request at a time with a long generation (seed lever 1's measure)."""

from llmgate import load, metrics

PROMPT_TOKENS = 64
OUTPUT_TOKENS = 256


def test_decode_c1(llmgate_server, llmgate_prompts, llmgate_settings, gate):
    s = llmgate_settings
    warm = load.fixed_requests(llmgate_server, llmgate_prompts, s.warmup, PROMPT_TOKENS, OUTPUT_TOKENS, "decode-warm")
    load.run(llmgate_server, warm, 1, s.request_timeout)
    reqs = load.fixed_requests(llmgate_server, llmgate_prompts, s.repeats, PROMPT_TOKENS, OUTPUT_TOKENS, "decode")
    result = load.run(llmgate_server, reqs, concurrency=1, timeout=s.request_timeout, label="decode c=1")

    assert not result.failures, [f.error for f in result.failures]
    assert [x.prompt_tokens for x in result.ok] == [PROMPT_TOKENS] * s.repeats
    assert [x.completion_tokens for x in result.ok] == [OUTPUT_TOKENS] * s.repeats
    gate.record(metrics.DECODE_TOK_S, [x.decode_tok_s for x in result.ok], raw=result.raw())
    gate.record(metrics.TTFT_C1, [x.ttft for x in result.ok])
