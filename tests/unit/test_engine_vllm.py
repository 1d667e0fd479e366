"""The vLLM adapter: its command line per configuration, and what it reads from real failed-boot logs."""

from pathlib import Path

from llmgate import engines
from llmgate.matrix import ServerConfig

DATA = Path(__file__).parent / "data"
vllm = engines.get("vllm")


def cfg(**kw):
    return ServerConfig(**{"id": "x", "engine": "vllm", "model": "tiny", **kw})


def test_cpu_command():
    cmd = vllm.command(cfg(dtype="bfloat16", max_model_len=4096, kv_cache_bytes=10**9, max_num_seqs=8),
                       Path("/m"), "127.0.0.1", 8000)
    assert cmd[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    s = " ".join(cmd)
    for part in ("--model /m", "--host 127.0.0.1", "--port 8000", "--dtype bfloat16", "--max-model-len 4096",
                 "--kv-cache-memory-bytes 1000000000", "--max-num-seqs 8", "--enforce-eager", "--enable-prefix-caching"):
        assert part in s
    assert "--gpu-memory-utilization" not in s
    env = vllm.environment(cfg())
    assert env["VLLM_TARGET_DEVICE"] == "cpu" and env["VLLM_HOST_IP"] == "127.0.0.1"
    assert env["VLLM_SERVER_DEV_MODE"] == "1" and env["HF_HUB_OFFLINE"] == "1"


def test_gpu_command_with_levers():
    c = cfg(device="gpu", quantization="fp8", kv_cache_dtype="fp8", prefix_caching=False, tensor_parallel=2,
            gpu_memory_utilization=0.0857, load_format="dummy",
            speculative={"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4},
            args=("--max-num-batched-tokens", "8192"))
    s = " ".join(vllm.command(c, Path("/m"), "127.0.0.1", 1))
    for part in ("--quantization fp8", "--kv-cache-dtype fp8", "--no-enable-prefix-caching", "--tensor-parallel-size 2",
                 "--gpu-memory-utilization 0.0857", "--load-format dummy",
                 '--speculative-config {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}',
                 "--max-num-batched-tokens 8192"):
        assert part in s
    assert "--enforce-eager" not in s and "VLLM_TARGET_DEVICE" not in vllm.environment(c)


def test_request_fields():
    assert vllm.fixed_length_fields(cfg(), 2) == {"ignore_eos": True}
    assert vllm.stream_fields()["stream_options"]["continuous_usage_stats"] is True


def test_diagnose_kv_too_small_from_a_real_log():
    d = vllm.diagnose_boot((DATA / "vllm-0.32.0-boot-kv-too-small.log").read_text())
    assert d.estimated_max_model_len == 4736
    assert "4736" in d.reason


def test_diagnose_config_error_from_a_real_log():
    d = vllm.diagnose_boot((DATA / "vllm-0.32.0-boot-max-len-over-positions.log").read_text())
    assert d.estimated_max_model_len is None
    assert d.reason.startswith("User-specified max_model_len (65536) is greater than the derived max_model_len")


def test_diagnose_ignores_warnings():
    log = "WARNING ... can cause fd limit errors like `OSError: [Errno 24] Too many open files`.\nall fine\n"
    assert vllm.diagnose_boot(log) is None


def test_kv_capacity_is_the_blocks_less_the_null_block():
    from llmgate import signals
    text = ('# TYPE vllm:cache_config_info gauge\n'
            'vllm:cache_config_info{block_size="16",cache_dtype="fp8",engine="0",num_gpu_blocks="10013",'
            'prefix_caching_hash_algo="sha256"} 1.0\n')
    assert vllm.kv_capacity(signals.Scrape.parse(text)) == 160_192
    assert vllm.kv_capacity(signals.Scrape.parse(text.replace('"10013"', '"None"'))) is None
    assert vllm.kv_capacity(signals.Scrape.parse("vllm:num_requests_running 0\n")) is None
