"""GPU entries of the embedded default, before any GPU: a budget in bytes becomes the fraction of
the card's memory the engines take (read through NVML at boot: here the card NVML would report
is given to ``device.gpus``), and a dummy-weights entry's model is made config-only on first use."""

import json

import pytest

from llmgate import engines
from llmgate.device import hardware as device
from llmgate.config import matrix
from llmgate.models import tinymodel
from llmgate.config.matrix import ServerConfig
from llmgate.process.server import BootError, Server

H200 = {"index": 0, "name": "NVIDIA H200", "memory_total": 150_754_820_096}          # as NVML reported it
RTX_4070 = {"index": 0, "name": "NVIDIA GeForce RTX 4070", "memory_total": 12_878_610_432}
SMALL = {"index": 1, "name": "NVIDIA T400", "memory_total": 4_294_967_296}


def gpu_cfg(engine="vllm", **kw):
    return ServerConfig(**{"id": "g", "engine": engine, "model": "tiny", "device": "gpu", **kw})


@pytest.mark.parametrize("card, fraction", [(H200, 0.079599), (RTX_4070, 0.931777)])
def test_twelve_gb_is_twelve_gb_on_any_card(monkeypatch, card, fraction):
    monkeypatch.setattr(device, "gpus", lambda: [card])
    assert device.memory_fraction(12_000_000_000) == fraction
    assert fraction * card["memory_total"] <= 12e9 < (fraction + 1e-6) * card["memory_total"]   # rounded down
    c = gpu_cfg(gpu_memory_bytes=12_000_000_000, load_format="dummy")
    vllm = engines.get("vllm").command(c, tinymodel.default_cache_dir(), "127.0.0.1", 1)
    assert vllm[vllm.index("--gpu-memory-utilization") + 1] == str(fraction)
    sglang = engines.get("sglang").command(gpu_cfg("sglang", gpu_memory_bytes=12_000_000_000),
                                           tinymodel.default_cache_dir(), "127.0.0.1", 1)
    assert sglang[sglang.index("--mem-fraction-static") + 1] == str(fraction)
    # a fraction given as such is passed as written
    full = engines.get("vllm").command(gpu_cfg(gpu_memory_utilization=0.9), tinymodel.default_cache_dir(), "h", 1)
    assert full[full.index("--gpu-memory-utilization") + 1] == "0.9"


def test_tensor_parallel_budget_is_taken_on_the_smallest_card_it_uses(monkeypatch):
    monkeypatch.setattr(device, "gpus", lambda: [H200, SMALL])
    assert device.memory_fraction(2_000_000_000, count=1) == 0.013266
    assert device.memory_fraction(2_000_000_000, count=2) == 0.465661


def test_a_budget_the_card_cannot_give_fails_the_boot_with_the_reason(monkeypatch, tmp_path):
    monkeypatch.setattr(device, "gpus", lambda: [SMALL])
    with pytest.raises(ValueError, match=r"gpu_memory_bytes = 12.00 GB is more than GPU 1 \(NVIDIA T400\) has: 4.29 GB"):
        device.memory_fraction(12_000_000_000)
    m = matrix.Matrix((), {"tiny": tinymodel.TinySpec()}, "x")
    server = Server(gpu_cfg(gpu_memory_bytes=12_000_000_000), m, tmp_path)
    monkeypatch.setattr(server.engine, "unavailable", lambda cfg: None)        # as with vLLM installed
    with pytest.raises(BootError, match=r"^g: gpu_memory_bytes = 12.00 GB is more than GPU 1 \(NVIDIA T400\)"):
        server.start()
    assert not list(tmp_path.iterdir())                                          # nothing was started


def test_without_a_gpu_the_budget_says_why(monkeypatch):
    monkeypatch.setattr(device, "gpus", lambda: [])
    with pytest.raises(ValueError, match="needs the GPU's total memory: "):
        device.memory_fraction(12_000_000_000)


def test_dummy_weights_entry_gets_a_config_only_model_on_first_use(monkeypatch, tmp_path):
    monkeypatch.setenv("LLMGATE_CACHE", str(tmp_path))
    toml = tmp_path / "llmgate.toml"
    toml.write_text('[models.shape]\nlayers = 2\nhidden = 256\nintermediate = 512\nheads = 4\nkv_heads = 2\n\n'
                    '[[matrix]]\nid = "g"\nengine = "vllm"\nmodel = "shape"\ndevice = "gpu"\nload_format = "dummy"\n'
                    '[[matrix]]\nid = "c"\nengine = "vllm"\nmodel = "shape"\n')
    m = matrix.load(toml)
    assert not (tmp_path / "models").exists()                      # loading the matrix builds nothing
    dummy = m.entry_model(m.by_id("g"))
    assert sorted(p.name for p in dummy.iterdir()) == sorted(
        ["config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
         "special_tokens_map.json", tinymodel.MANIFEST])
    assert json.loads((dummy / "config.json").read_text())["num_hidden_layers"] == 2
    assert m.tokenizer_folder(m.by_id("g")) == dummy
    full = m.entry_model(m.by_id("c"))                             # the same shape with weights: its own folder
    assert full != dummy and (full / "model.safetensors").is_file()
    assert tinymodel.model_hash(dummy) != tinymodel.model_hash(full)
    # config and tokenizer are the full build's, byte for byte
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        assert (dummy / name).read_bytes() == (full / name).read_bytes()
    assert m.entry_model(m.by_id("g")) == dummy                    # cached: made once


def test_config_only_hash_is_the_committed_h200_baselines(monkeypatch, tmp_path):
    """The default GPU entry's shape, made config-only here, has the model content hash the committed
    GPU baselines of that shape were recorded with (comparable without a preparation step)."""
    from pathlib import Path

    from llmgate.store import benchmark_files, fingerprint as fingerprints

    monkeypatch.setenv("LLMGATE_CACHE", str(tmp_path))
    m = matrix.load(matrix.DEFAULT_MATRIX)
    folder = m.entry_model(m.by_id("gpu-vllm-8b"))
    hashes = set()
    for f in benchmark_files.stored_files(Path(__file__).resolve().parents[2] / "baselines"):
        for b in json.loads(f.read_text())["benchmarks"]:
            fp = fingerprints.stored_fingerprint(b)
            cfg = fp.get("config") or {}
            # llama.cpp's entries of the shape hash their GGUF (written from the same seeded weights)
            if cfg.get("model") == "llama3-8b-shape" and cfg.get("engine") != "llamacpp":
                hashes.add(fp["model_hash"])
    if not hashes:
        pytest.skip("no committed baseline of the llama3-8b shape")
    assert hashes == {tinymodel.model_hash(folder)}
