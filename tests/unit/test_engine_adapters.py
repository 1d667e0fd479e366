"""The llama.cpp, MLX-LM and SGLang adapters: command lines per configuration, and what they read
from their engines' signals.  SGLang's are read from real SGLang 0.5.17 output recorded on an
H200 (tests/data/sglang-0.5.17-h200, see its README); the real runs of llama.cpp and
MLX-LM are the gate's CPU scenarios."""

import json
from pathlib import Path

import pytest

from llmgate import engines
from llmgate.engines import meters as signals
from llmgate.config.matrix import ServerConfig

DATA = Path(__file__).parents[1] / "data"
SGLANG = DATA / "sglang-0.5.17-h200"


def cfg(engine, **kw):
    return ServerConfig(**{"id": "x", "engine": engine, "model": "tiny", **kw})


def flags(cmd):
    return " ".join(cmd)


# -- llama.cpp ------------------------------------------------------------------------------
def test_llamacpp_command(monkeypatch, tmp_path):
    binary = tmp_path / "llama-server"
    binary.write_text("")
    a = engines.get("llamacpp")
    c = cfg("llamacpp", launcher=str(binary), max_model_len=8192, max_num_seqs=4, kv_cache_dtype="q8_0",
            prefix_caching=False, speculative={"method": "draft_model", "model": "/d.gguf", "num_speculative_tokens": 5})
    s = flags(a.command(c, Path("/m.gguf"), "127.0.0.1", 9000))
    assert s.startswith(f"{binary} -m /m.gguf --host 127.0.0.1 --port 9000 -c 32768 -np 4 ")
    for part in ("--metrics", "-ctk q8_0 -ctv q8_0 -fa on", "--no-cache-prompt --cache-ram 0",
                 "-md /d.gguf --spec-type draft-simple --spec-draft-n-max 5"):
        assert part in s
    ngram = flags(a.command(cfg("llamacpp", launcher=str(binary), speculative={"method": "ngram", "num_speculative_tokens": 3}),
                            Path("/m.gguf"), "127.0.0.1", 1))
    assert "--spec-type ngram-simple --spec-ngram-simple-size-m 3" in ngram
    assert a.api_key_env == "LLAMA_API_KEY"          # the server passes LLMGATE_API_KEY on in it


def test_llamacpp_limits_and_signals():
    a = engines.get("llamacpp")
    assert "no KV memory budget" in a.cannot("kv_max_len", cfg("llamacpp"))
    assert "kv_cache_dtype 'fp8'" in a.unavailable(cfg("llamacpp", kv_cache_dtype="fp8", launcher=None)) or \
        "llama-server not found" in a.unavailable(cfg("llamacpp", kv_cache_dtype="fp8"))
    before = signals.Scrape.parse("llamacpp:spec_decode_num_drafts_total 10\nllamacpp:spec_decode_num_draft_tokens_total 30\n"
                                  "llamacpp:spec_decode_num_accepted_tokens_total 12\nllamacpp:prompt_tokens_cached_total 100\n")
    after = signals.Scrape.parse("llamacpp:spec_decode_num_drafts_total 20\nllamacpp:spec_decode_num_draft_tokens_total 60\n"
                                 "llamacpp:spec_decode_num_accepted_tokens_total 27\nllamacpp:prompt_tokens_cached_total 612\n")
    d = signals.Delta(before, after)
    acc = a.spec_acceptance(d)
    assert acc.rate == pytest.approx(15 / 30) and acc.mean_length == pytest.approx(1 + 15 / 10)
    assert a.prefix_cache_hits(d) == 512
    assert a.read_log("srv    load_model: initializing, n_slots = 8, n_ctx_slot = 4096, kv_unified = 'true'") == \
        {"context_per_request": 4096}


# -- MLX-LM ---------------------------------------------------------------------------------
def test_mlx_command_and_fields():
    a = engines.get("mlx")
    c = cfg("mlx", max_num_seqs=8, prefix_caching=False, kv_cache_dtype="q8",
            speculative={"method": "draft_model", "model": "/draft", "num_speculative_tokens": 2})
    s = flags(a.command(c, Path("/m"), "127.0.0.1", 9001))
    for part in ("-m mlx_lm.server --model /m --host 127.0.0.1 --port 9001", "--prompt-cache-size 0",
                 "--decode-concurrency 8", "--kv-bits 8", "--draft-model /draft --num-draft-tokens 2"):
        assert part in s
    assert a.fixed_length_fields(c, 2) == {"logit_bias": {"2": -100}}      # it ignores ignore_eos
    assert a.stream_fields() == {"stream_options": {"include_usage": True}}  # an empty stream_options crashes it
    assert a.metrics_path is None
    env = a.environment(c)
    assert env["HF_HUB_OFFLINE"] == "1" and Path(env["HF_HOME"], "hub").is_dir()
    assert "context-length limit" in a.cannot("kv_max_len", c)
    d = signals.Delta(signals.scrape(None, "", None), signals.scrape(None, "", None))
    assert a.spec_acceptance(d) is None and a.prefix_cache_hits(d) is None and a.server_ttft(d) is None


# -- SGLang (real recorded output) ----------------------------------------------------------
def test_sglang_command():
    a = engines.get("sglang")
    c = cfg("sglang", device="gpu", max_model_len=32768, kv_cache_dtype="fp8", gpu_memory_utilization=0.5,
            prefix_caching=False, max_num_seqs=8, tensor_parallel=2, load_format="dummy",
            speculative={"method": "eagle", "model": "/draft", "num_speculative_tokens": 3})
    s = flags(a.command(c, Path("/m"), "127.0.0.1", 30000))
    for part in ("-m sglang.launch_server --model-path /m --host 127.0.0.1 --port 30000", "--context-length 32768",
                 "--enable-metrics", "--kv-cache-dtype fp8_e4m3", "--mem-fraction-static 0.5", "--disable-radix-cache",
                 "--max-running-requests 8", "--tp-size 2", "--load-format dummy", "--speculative-algorithm EAGLE",
                 "--speculative-draft-model-path /draft", "--speculative-num-steps 3",
                 "--speculative-num-draft-tokens 4", "--speculative-eagle-topk 1"):
        assert part in s
    assert "GPUs only" in a.unavailable(cfg("sglang"))


def test_sglang_server_info_recorded_on_h200():
    info = json.loads((SGLANG / "server_info.json").read_text())
    facts = engines.get("sglang").server_facts(info)
    assert facts["kv_cache_tokens"] == 624486 and facts["max_total_num_tokens"] == 624486
    assert facts["attention_backend"] == "fa3" and info["version"] == "0.5.17"
    assert "speculative_algorithm" not in facts          # null in the recording: no speculation


def test_sglang_metrics_recorded_on_h200():
    a = engines.get("sglang")
    scrape = signals.Scrape.parse((SGLANG / "metrics.txt").read_text())
    names = {n for n in scrape.values if n.startswith("sglang:")}
    assert {"sglang:time_to_first_token_seconds_sum", "sglang:cached_tokens_total",
            "sglang:spec_accept_length", "sglang:spec_accept_rate"} <= names
    zero = signals.Scrape({k: {lab: 0.0 for lab in v} for k, v in scrape.values.items()})
    d = signals.Delta(zero, scrape)
    ttft = a.server_ttft(d)
    # 3 requests at c=1 and 16 at c=8 (512 tokens each), plus SGLang's own warm-up requests
    assert scrape.total("sglang:time_to_first_token_seconds_count") >= 19
    assert 0.005 < ttft < 1.0        # the mean includes the warm-up's first-compile TTFT
    assert a.prefix_cache_hits(d) == scrape.total("sglang:cached_tokens_total")
    acc = a.spec_acceptance(d)                             # gauges, 0 without speculation
    assert acc.reported_rate == 0.0 and acc.rate == 0.0 and acc.mean_length == 0.0
