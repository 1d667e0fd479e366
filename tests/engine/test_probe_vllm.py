"""The max_model_len probe against real vLLM on the CPU, started at the whole KV cache, and
what the server's /metrics say one request can hold.

vLLM 0.26.0 on the H200 booted with a max_model_len equal to its whole KV cache (its own fp8
estimate, 160,208 tokens) and then never scheduled a request of that length: it keeps one block
back as its null block, and that release's boot check did not count it.  vLLM 0.32 (this CPU
build) counts it: the same boot fails with an estimate one block lower.  Either way the length
that serves is what ``vllm:cache_config_info`` gives: (blocks − 1) × block size.
"""


import cpu_vllm
from llmgate.config import matrix
from llmgate.levers import probe
from llmgate.process.server import Server

MATRIX = cpu_vllm.entry("cpu-probe", kv_cache_bytes=48_000_000)


def test_the_length_one_request_can_hold_is_the_longest_served(tmp_path):
    (tmp_path / "llmgate.toml").write_text(MATRIX)
    m = matrix.load(tmp_path / "llmgate.toml")
    cfg = m.entries[0]

    # the KV cache this budget gives, as the log states it, and what one request can hold
    server = Server(cfg, m, tmp_path / "logs")
    handle = server.start()
    try:
        kv_tokens = handle.engine.read_log(handle.log_tail(2000))["kv_cache_tokens"]
        room = probe.request_room(handle)
    finally:
        server.stop()
    block = kv_tokens - room
    assert block in (16, 32, 64, 128, 256) and kv_tokens % block == 0, (kv_tokens, room)

    result = probe.probe_max_model_len(cfg, m, tmp_path / "probe", start=kv_tokens, timeout=60.0)
    steps = [(a.max_model_len, a.booted, a.served) for a in result.attempts]
    assert steps == [(kv_tokens, False, None), (room, True, True)], result.attempts
    assert result.used_engine_estimate and result.verified_max_model_len == room
