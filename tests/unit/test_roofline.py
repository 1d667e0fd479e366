"""The memory-bandwidth roofline's weight bytes: an AWQ 4-bit checkpoint (the GPU matrix's
config-only 8B shape) is counted at 4 bits a weight plus its groups' fp16 scales and 4-bit zeros;
the norms, embeddings and LM head at the activation dtype.  No GPU: the peak bandwidth is given."""

import json
from pathlib import Path

import pytest

from llmgate.device import hardware as device
from llmgate.config import matrix
from llmgate.report import reference
from llmgate.models import tinymodel
from llmgate.config.matrix import MatrixError

ROOT = Path(__file__).resolve().parents[2]


def shape_sizes(cfg):
    h, layers, inter, vocab = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["intermediate_size"], cfg["vocab_size"]
    q = cfg["num_attention_heads"] * cfg["head_dim"]
    kv = cfg["num_key_value_heads"] * cfg["head_dim"]
    linear = layers * (2 * h * q + 2 * h * kv + 3 * h * inter)
    other = layers * 2 * h + h + vocab * h                       # norms + LM head (the embedding is a lookup)
    return linear, other


def test_checkpoint_quant_bytes_reads_what_vllms_awq_loader_reads():
    awq = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"}
    assert device.checkpoint_quant_bytes(awq, 2) == pytest.approx(0.5 + 2.5 / 128)
    assert device.checkpoint_quant_bytes({**awq, "zero_point": False}, 2) == pytest.approx(0.5 + 2 / 128)
    assert device.checkpoint_quant_bytes({"quant_method": "awq", "w_bit": 4, "q_group_size": 64,
                                          "zero_point": True}, 2) == pytest.approx(0.5 + 2.5 / 64)
    gptq = {"quant_method": "gptq", "bits": 8, "group_size": 128, "sym": True}
    assert device.checkpoint_quant_bytes(gptq, 2) == pytest.approx(1 + 2 / 128)
    assert device.checkpoint_quant_bytes({"quant_method": "fp8"}, 2) is None
    assert device.checkpoint_quant_bytes(None, 2) is None


def test_awq_entry_of_the_gpu_matrix_counts_four_bits(monkeypatch, tmp_path):
    monkeypatch.setenv("LLMGATE_CACHE", str(tmp_path))
    m = matrix.load(ROOT / "matrices" / "gpu.toml")
    awq, bf16 = m.by_id("h200-8b-awq4"), m.by_id("h200-8b-bf16")
    assert awq.reference == bf16.id and "quantization" in bf16.levers and awq.quantization is None
    folder = m.entry_model(awq)
    assert not (folder / "model.safetensors").exists()                 # config-only: vLLM draws the weights
    cfg = json.loads((folder / "config.json").read_text())
    q = cfg["quantization_config"]
    assert (q["quant_method"], q["bits"], q["group_size"], q["zero_point"], q["version"]) == ("awq", 4, 128, True, "gemm")
    linear, other = shape_sizes(cfg)
    monkeypatch.setattr(device, "peak_memory_bandwidth", lambda index=None: 4.8e12)
    roof = device.decode_roofline(folder, awq.dtype, awq.quantization, 300.0)
    assert roof["linear_bytes_per_param"] == pytest.approx(0.51953125)
    assert roof["bytes_per_token"] == pytest.approx(linear * 0.5 + linear / 128 * (2 + 0.5) + other * 2)
    assert roof["roofline_tok_s"] == pytest.approx(4.8e12 / roof["bytes_per_token"])
    full = device.decode_roofline(m.entry_model(bf16), bf16.dtype, bf16.quantization, 215.0)
    assert full["bytes_per_token"] == pytest.approx((linear + other) * 2)
    # 8B shape: 6.98e9 linear weights; a decode step reads 3.71 GB with AWQ where bf16 reads 14.05 GB
    assert linear == 6_979_321_856
    assert round(roof["bytes_per_token"] / 1e9, 2) == 3.71 and round(full["bytes_per_token"] / 1e9, 2) == 14.05
    # --quantization awq named on the entry as well: the same count (the checkpoint says the bits)
    assert device.weight_bytes_per_token(folder, "float16", "awq")["bytes_per_token"] == roof["bytes_per_token"]


def test_awq_shape_that_does_not_pack_is_refused_in_the_matrix(tmp_path):
    data = {"models": {"bad": {"hidden": 4096, "heads": 32, "kv_heads": 8, "intermediate": 14000, "weights": "awq4"}},
            "matrix": [{"id": "x", "engine": "vllm", "model": "bad"}]}
    with pytest.raises(MatrixError, match=r"models\.bad: weights = 'awq4' needs intermediate divisible by the AWQ group size 128"):
        matrix.parse(data, "m.toml", tmp_path)
    with pytest.raises(MatrixError, match=r"models\.bad: weights must be"):
        matrix.parse({**data, "models": {"bad": {"weights": "int3"}}}, "m.toml", tmp_path)
    assert tinymodel.TinySpec(hidden=4096, heads=32, kv_heads=8, intermediate=14336, weights="awq4")


def test_seed_awq_ratio_is_printed_beside_the_gpu_awq_entry():
    ref = reference.load("seed-rtx4070", (ROOT / "baselines" / "reference",))
    run = {"verdicts": [
        {"key": "speedup_vs_reference@quantization", "config": "h200-8b-awq4",
         "config_detail": {"model": "/c/models/llama3-8b-awq4-shape-0123456789abcdef-config", "engine": "vllm",
                           "quantization": None}, "now": {"median": 2.2}},
        {"key": "speedup_vs_reference@quantization", "config": "h200-12gb-fp8",
         "config_detail": {"model": "/c/models/qwen3-1.7b-shape-0123-config", "engine": "vllm",
                           "quantization": "fp8"}, "now": {"median": 1.2}}]}
    rows = {r[1]: r for r in reference.rows(ref, run)}
    assert rows["AWQ4 ÷ FP16 decode"][3] == "h200-8b-awq4 speedup_vs_reference@quantization: 2.200"
    assert rows["FP8 ÷ FP16 decode"][3] == "h200-12gb-fp8 speedup_vs_reference@quantization: 1.200"


def test_the_seed_mtp_speedup_is_not_set_beside_an_ngram_entry():
    ref = reference.load("seed-rtx4070", (ROOT / "baselines" / "reference",))

    def row(method, load_format=None):
        detail = {"model": "/m", "speculative": {"method": method}, "load_format": load_format}
        run = {"verdicts": [{"key": "speedup_vs_reference@speculative-p64", "config": f"e-{method}", "now": {"median": 1.3},
                             "config_detail": detail}]}
        return {r[1]: r for r in reference.rows(ref, run)}["FP16 + MTP n=1 ÷ FP16"][3]

    assert row("ngram") == "—"
    assert row("mtp") == "e-mtp speedup_vs_reference@speculative-p64: 1.300"
    assert row("qwen3_5_mtp").startswith("e-qwen3_5_mtp")
    assert row("mtp", "dummy") == "—"              # random MTP heads: their cost, not the seed's method


def _gguf(path, tensors):
    gguf = pytest.importorskip("gguf")
    import numpy as np

    w = gguf.GGUFWriter(str(path), "llama")
    for name, shape in tensors:
        w.add_tensor(name, np.zeros(shape, dtype=np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_a_gguf_is_sized_from_its_tensors_as_stored(tmp_path):
    """llama.cpp's entries on the H200 (2026-12-04) had no roofline ("model not sized": the model is a
    .gguf file, not a folder with config.json), so a decode at 87-89% GPU busy was 'unknown'.  A GGUF
    is sized from its tensors, each at its stored width; the token embedding is a lookup unless the
    file has no output tensor (tied)."""
    sep = _gguf(tmp_path / "m.gguf", [("token_embd.weight", (100, 16)), ("blk.0.attn_q.weight", (16, 16)),
                                      ("output.weight", (100, 16))])
    w = device.weight_bytes_per_token(sep)
    assert w == {"parameters": 1600 + 256 + 1600, "bytes_per_token": (256 + 1600) * 2, "source": "gguf tensors"}
    tied = _gguf(tmp_path / "t.gguf", [("token_embd.weight", (100, 16)), ("blk.0.attn_q.weight", (16, 16))])
    assert device.weight_bytes_per_token(tied)["bytes_per_token"] == (256 + 1600) * 2
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf")
    assert device.weight_bytes_per_token(bad) is None
