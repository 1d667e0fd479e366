"""The max_model_len probe's search steps, and the seed reference report."""

import json
from pathlib import Path

from llmgate.levers import probe
from llmgate import cli
from llmgate.report import reference
from llmgate.config.matrix import ServerConfig


def test_bisect_steps():
    assert probe._bisect(0, None, 16) is None               # nothing failed: nothing to search
    assert probe._bisect(4096, 4100, 16) is None            # within one step
    assert probe._bisect(0, 32768, 16) == 16384
    mid = probe._bisect(11520, 16384, 16)
    assert 11520 < mid < 16384 and mid % 16 == 0


def test_a_length_left_waiting_is_retried_at_what_one_request_can_hold(monkeypatch, tmp_path):
    """The search steps for vLLM 0.26.0 on the H200 (fp8 KV at 12 GB): a max_model_len of 160,208,
    the whole KV cache, booted, but its request waited; /metrics say 10,013 blocks of 16, one of
    them never given to a request.  The next boot is at 160,192 and nothing longer is tried.
    (The servers here are stand-ins: no engine on this machine boots at a length it cannot serve;
    tests/engine/test_probe_vllm.py runs the probe against real vLLM.)"""
    room, boots = 10_012 * 16, []

    class Handle:
        startup_s, engine_info = 1.0, type("Info", (), {"version": "0.26.0"})
        engine = type("Engine", (), {"read_log": staticmethod(lambda text: {"kv_cache_tokens": 160_208})})

        def log_tail(self, n):
            return ""

    class StandIn:
        def __init__(self, cfg, matrix, log_dir, boot_number, progress):
            boots.append(cfg.max_model_len)

        def start(self):
            return Handle()

        def stop(self):
            pass

    def serves(handle, prompts, n, output_tokens, timeout):
        return (n <= room), ("served" if n <= room else "request of %d tokens failed: timed out" % n)

    monkeypatch.setattr(probe, "Server", StandIn)
    monkeypatch.setattr(probe, "PromptMaker", lambda folder: None)
    monkeypatch.setattr(probe, "serves_full_length", serves)
    monkeypatch.setattr(probe, "request_room", lambda handle: room)
    cfg = ServerConfig(id="h200-12gb-kv-fp8", engine="vllm", model="m", kv_cache_dtype="fp8")
    matrix = type("M", (), {"tokenizer_folder": staticmethod(lambda c: tmp_path)})
    result = probe.probe_max_model_len(cfg, matrix, tmp_path, start=160_208)
    assert boots == [160_208, 160_192] and result.verified_max_model_len == 160_192
    assert "holds 160192 tokens for one request" in result.attempts[0].reason


def test_seed_reference_ships_with_conditions(tmp_path, capsys, monkeypatch):
    root = Path(__file__).resolve().parents[2] / "baselines" / "reference"
    ref = reference.load("seed-rtx4070", (root,))
    assert "RTX 4070" in ref["conditions"]["device"]
    whats = {f["what"]: f["value"] for f in ref["figures"]}
    assert whats["AWQ4 decode"] == 164.05 and whats["vLLM aggregate at 8 users"] == 277.66
    run = {"device": {"cpu": "test cpu"}, "verdicts": [
        {"config": "cpu-awq4", "config_detail": {"model": "/x/tiny-awq-123", "engine": "vllm"},
         "key": "speedup_vs_reference@quantization", "now": {"median": 1.9}},
        {"config": "cpu-bf16", "config_detail": {"model": "/x/tiny", "engine": "vllm"},
         "key": "aggregate_tok_s@c8", "now": {"median": 617.7}},
        {"config": "cpu-bf16", "config_detail": {"engine": "vllm"},
         "key": "prefix_ttft_reduction@prefix8192", "now": {"median": 0.959}},
        {"config": "cpu-bf16", "config_detail": {"engine": "vllm"},
         "key": "prefix_ttft_reduction@prefix512", "now": {"median": 0.636}},
    ]}
    text = reference.table(ref, run)
    awq = next(ln for ln in text.splitlines() if "AWQ4 ÷ FP16" in ln)
    assert "1.410x" not in awq and "1.41" in awq and "cpu-awq4 speedup_vs_reference@quantization: 1.900" in awq
    assert "cpu-bf16 aggregate_tok_s@c8: 617.7 tok/s" in text
    prefix = next(ln for ln in text.splitlines() if "cached prefix" in ln)
    assert "88.0 %" in prefix and "95.9 %" in prefix and "63.6" not in prefix   # best case against best case
    assert "this run:" in text and "test cpu" in text
    runfile = tmp_path / "last-run.json"
    runfile.write_text(json.dumps(run))
    monkeypatch.setattr(reference, "REFERENCE_DIRS", (root,))
    assert cli.main(["reference", "--run", str(runfile)]) == 0
    assert "SGLang aggregate at 8 users" in capsys.readouterr().out
