"""The tiny-model builder: deterministic, cached by content, loadable, no hub."""

import json

import pytest

from llmgate import cli
from llmgate.models import tinymodel
from llmgate.models.tinymodel import TinySpec

SMALL = TinySpec(hidden=64, layers=1, heads=2, kv_heads=1, intermediate=128, vocab=1024, max_position=2048)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMGATE_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_deterministic_and_cached(cache, tmp_path):
    a = tinymodel.build(spec=SMALL, name="t")
    mtime = (a / "model.safetensors").stat().st_mtime_ns
    again = tinymodel.build(spec=SMALL, name="t")
    assert again == a and (a / "model.safetensors").stat().st_mtime_ns == mtime  # reused, not rebuilt
    # an independent build in another cache gives byte-identical files
    other = tinymodel.build(tmp_path / "copy", spec=SMALL, name="t")
    assert tinymodel.content_hash(other) == tinymodel.content_hash(a) == tinymodel.model_hash(a)


def test_different_seed_different_model(cache):
    a = tinymodel.build(spec=SMALL, name="t")
    b = tinymodel.build(spec=TinySpec(**{**SMALL.__dict__, "seed": 1}), name="t")
    assert a != b and tinymodel.model_hash(a) != tinymodel.model_hash(b)


def test_folder_is_a_llama_checkpoint_with_tokenizer(cache):
    folder = tinymodel.build(spec=SMALL, name="t")
    config = json.loads((folder / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and config["num_hidden_layers"] == 1
    tok_cfg = json.loads((folder / "tokenizer_config.json").read_text())
    assert tok_cfg["bos_token"] == "<s>" and tok_cfg["eos_token"] == "</s>" and "chat_template" in tok_cfg
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    assert tok.get_vocab_size() == config["vocab_size"]  # every id the model samples decodes
    ids = tok.encode("hello world").ids
    assert ids[0] == config["bos_token_id"]


def test_weights_load_in_transformers(cache):
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    folder = tinymodel.build(spec=SMALL, name="t")
    model = transformers.AutoModelForCausalLM.from_pretrained(folder)
    assert model.dtype == torch.bfloat16
    n = sum(p.numel() for p in model.parameters())
    assert n == json.loads((folder / tinymodel.MANIFEST).read_text())["parameters"]
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert text.startswith("<s><|user|>") and text.endswith("<|assistant|>\n")


def test_bf16_rounding():
    import numpy as np
    raw = tinymodel.to_bf16_bytes(np.array([1.0, -2.0, 1.00390625, 3.1415927], np.float32))
    vals = np.frombuffer(raw, "<u2").astype(np.uint32) << 16
    back = vals.view(np.float32)
    assert list(back[:2]) == [1.0, -2.0]
    assert abs(back[3] - 3.1415927) < 0.02


def test_command_line(cache, tmp_path, capsys):
    assert cli.main(["tinymodel", str(tmp_path / "out"), "--layers", "1", "--hidden", "64", "--heads", "2", "--kv-heads", "1",
                           "--intermediate", "128", "--vocab", "1024", "--max-position", "2048"]) == 0
    assert (tmp_path / "out" / "model.safetensors").is_file()
    assert str(tmp_path / "out") in capsys.readouterr().out


def test_fewer_layers_is_an_exact_truncation():
    import numpy as np
    deep = tinymodel.random_weights(SMALL.__class__(**{**SMALL.__dict__, "layers": 3}), 1024)
    shallow = tinymodel.random_weights(SMALL, 1024)
    for name, w in shallow.items():
        assert np.array_equal(w, deep[name]), name  # embeddings, head and layer 0 are the same tensors
    assert "model.layers.2.mlp.up_proj.weight" in deep and "model.layers.2.mlp.up_proj.weight" not in shallow


def test_awq_pack_round_trip():
    import numpy as np
    rng = np.random.default_rng(0)
    w = rng.standard_normal((256, 384)).astype(np.float32) * 0.02   # torch layout [out, in]
    t = tinymodel.awq_quantize(w)
    assert t["qweight"].shape == (384, 32) and t["qweight"].dtype == np.int32
    assert t["qzeros"].shape == (3, 32) and t["scales"].shape == (3, 256) and t["scales"].dtype == np.float16
    back = tinymodel.awq_dequantize(t)
    assert back.shape == w.shape
    step = t["scales"].astype(np.float32).max()
    assert np.abs(back - w).max() <= step * 0.51 + 1e-6   # within half a quantization step


def test_awq_checkpoint(cache):
    spec = TinySpec(**{**SMALL.__dict__, "hidden": 128, "heads": 2, "intermediate": 256, "weights": "awq4"})
    folder = tinymodel.build(spec=spec, name="t-awq")
    config = json.loads((folder / "config.json").read_text())
    assert config["quantization_config"]["quant_method"] == "awq" and config["quantization_config"]["bits"] == 4
    import struct
    raw = (folder / "model.safetensors").read_bytes()
    header = json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])
    assert header["model.layers.0.mlp.down_proj.qweight"]["dtype"] == "I32"
    assert header["model.layers.0.mlp.down_proj.scales"]["dtype"] == "F16"
    assert header["model.embed_tokens.weight"]["dtype"] == "F16"
    assert "model.layers.0.mlp.down_proj.weight" not in header
