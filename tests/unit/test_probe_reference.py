"""The max_model_len probe's search steps, and the seed reference report."""

import json
from pathlib import Path

from llmgate import probe, reference


def test_bisect_steps():
    assert probe._bisect(0, None, 16) is None               # nothing failed: nothing to search
    assert probe._bisect(4096, 4100, 16) is None            # within one step
    assert probe._bisect(0, 32768, 16) == 16384
    mid = probe._bisect(11520, 16384, 16)
    assert 11520 < mid < 16384 and mid % 16 == 0


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
    assert reference.main(["--run", str(runfile)]) == 0
    assert "SGLang aggregate at 8 users" in capsys.readouterr().out
