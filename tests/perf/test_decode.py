"""Gate: decode speed of one request at a time with a long generation (seed lever 1's measure)."""

import pytest

from llmgate import load, metrics

PROMPT_TOKENS = 64
OUTPUT_TOKENS = 256


@pytest.mark.lever("gate")
def test_decode_c1(llmgate_server, llmgate_prompts, llmgate_settings, gate):
    s = llmgate_settings
    result = load.decode_run(llmgate_server, llmgate_prompts, PROMPT_TOKENS, OUTPUT_TOKENS, s.repeats, s.warmup,
                             s.request_timeout, "decode")

    assert not result.failures, [f.error for f in result.failures]
    assert [x.prompt_tokens for x in result.ok] == [PROMPT_TOKENS] * s.repeats
    assert [x.completion_tokens for x in result.ok] == [OUTPUT_TOKENS] * s.repeats
    gate.record(metrics.DECODE_TOK_S, [x.decode_tok_s for x in result.ok], raw=result.raw())
    gate.record(metrics.TTFT_C1, [x.ttft for x in result.ok])
