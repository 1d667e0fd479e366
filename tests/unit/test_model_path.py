"""A model folder given by path (what a team with real weights writes): it resolves for every
engine that can load it, with the tokenizer found in it, and a folder that lacks something fails
at matrix load in one line that names what is missing.  The folders are llmgate's tiny model
copied to a tmp path without llmgate's manifest, as a Hugging Face folder would be."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from llmgate import engines
from llmgate.config import matrix
from llmgate.models import tinymodel
from llmgate.models import tokenizer
from llmgate.load.workloads import PromptMaker
from llmgate.process.server import BootError, Server


@pytest.fixture(scope="module")
def tiny() -> Path:
    return tinymodel.build()


def hf_folder(tiny: Path, dest: Path, drop: tuple[str, ...] = ()) -> Path:
    """The tiny model as a plain Hugging Face folder: its files but llmgate's manifest (and ``drop``)."""
    dest.mkdir(parents=True)
    for p in tiny.iterdir():
        if p.name != tinymodel.MANIFEST and p.name not in drop:
            shutil.copy2(p, dest / p.name)
    return dest


def load(tmp_path: Path, entry: str) -> matrix.Matrix:
    (tmp_path / "llmgate.toml").write_text("[[matrix]]\nid = \"x\"\n" + entry + "\n")
    return matrix.load(tmp_path / "llmgate.toml")


def error(tmp_path: Path, entry: str) -> str:
    with pytest.raises(matrix.MatrixError) as e:
        load(tmp_path, entry)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{tmp_path / 'llmgate.toml'}: matrix entry 'x': ")
    return msg


@pytest.mark.parametrize("engine", ["vllm", "sglang", "mlx", "llamacpp"])
def test_a_model_folder_given_by_a_relative_path_resolves_with_its_tokenizer(tiny, tmp_path, engine):
    folder = hf_folder(tiny, tmp_path / "models" / "my-model")
    if engine == "llamacpp":                   # a folder holding a .gguf (and the tokenizer beside it)
        for p in folder.glob("*.safetensors"):
            p.unlink()
        shutil.copy2(tinymodel.gguf_path(tiny), folder / "my-model.bf16.gguf")
    m = load(tmp_path, f'engine = "{engine}"\nmodel = "models/my-model"')
    cfg = m.entries[0]
    assert cfg.model == str(folder) and m.entry_model(cfg) == folder
    assert m.tokenizer_folder(cfg) == folder
    prompts = PromptMaker(m.tokenizer_folder(cfg))
    assert prompts.count(prompts.text(40, "seed")) == 40
    adapter = engines.get(engine)
    loaded = adapter.prepare_model(cfg, folder) if engine in ("vllm", "sglang", "llamacpp") else folder
    assert loaded == (folder / "my-model.bf16.gguf" if engine == "llamacpp" else folder)
    assert str(loaded) in adapter.command(cfg, loaded, "127.0.0.1", 8000)
    assert tokenizer.eos_token_id(folder) == json.loads((tiny / "config.json").read_text())["eos_token_id"]


def test_what_a_hugging_face_engine_needs_is_named(tiny, tmp_path):
    hf_folder(tiny, tmp_path / "noconfig", drop=("config.json",))
    hf_folder(tiny, tmp_path / "noweights", drop=("model.safetensors",))
    assert error(tmp_path, 'engine = "vllm"\nmodel = "noconfig"') == (
        f"{tmp_path / 'llmgate.toml'}: matrix entry 'x': key 'model': {tmp_path / 'noconfig'} has no config.json: "
        f"vLLM loads a Hugging Face model folder (config.json, weights, tokenizer)")
    assert "SGLang loads a Hugging Face model folder" in error(tmp_path, 'engine = "sglang"\nmodel = "noconfig"')
    assert "has no weights (*.safetensors or *.bin" in error(tmp_path, 'engine = "vllm"\nmodel = "noweights"')
    assert "has no weights (*.safetensors); give load_format" in error(tmp_path, 'engine = "mlx"\nmodel = "noweights"')
    # random weights need no weights file
    assert load(tmp_path, 'engine = "vllm"\nmodel = "noweights"\nload_format = "dummy"').entries[0].model == \
        str(tmp_path / "noweights")
    assert "is a file: MLX-LM loads a Hugging Face model folder" in \
        error(tmp_path, f'engine = "mlx"\nmodel = "{tmp_path / "noweights" / "config.json"}"')


def test_what_llamacpp_needs_is_named(tiny, tmp_path):
    hf = hf_folder(tiny, tmp_path / "hf")
    assert f"{hf} has no .gguf file: llama.cpp loads GGUF (convert" in error(tmp_path, 'engine = "llamacpp"\nmodel = "hf"')
    assert f"{hf / 'model.safetensors'} is not a .gguf file" in \
        error(tmp_path, 'engine = "llamacpp"\nmodel = "hf/model.safetensors"')
    gguf = tinymodel.gguf_path(tiny)
    shutil.copy2(gguf, hf / "a.gguf")
    shutil.copy2(gguf, hf / "b.gguf")
    assert "holds 2 .gguf files (a.gguf, b.gguf): name one in model" in error(tmp_path, 'engine = "llamacpp"\nmodel = "hf"')
    # a split GGUF loads from its first part
    (hf / "a.gguf").rename(hf / "m-00001-of-00002.gguf")
    (hf / "b.gguf").rename(hf / "m-00002-of-00002.gguf")
    cfg = load(tmp_path, 'engine = "llamacpp"\nmodel = "hf"').entries[0]
    assert engines.get("llamacpp").prepare_model(cfg, hf) == hf / "m-00001-of-00002.gguf"
    # a .gguf file given by path: its tokenizer beside it, or named by `tokenizer`
    lone = tmp_path / "lone"
    lone.mkdir()
    shutil.copy2(gguf, lone / "m.gguf")
    msg = error(tmp_path, 'engine = "llamacpp"\nmodel = "lone/m.gguf"')
    assert msg.endswith(f"key 'model': {lone} has no tokenizer.json (nor tokenizer_config.json with its vocabulary "
                        f"files): needed for exact-length prompts (set tokenizer = \"FOLDER\" to a folder that has one)")
    cfg = load(tmp_path, 'engine = "llamacpp"\nmodel = "lone/m.gguf"\ntokenizer = "hf"').entries[0]
    assert cfg.tokenizer == str(hf) and matrix.load(tmp_path / "llmgate.toml").tokenizer_folder(cfg) == hf


def test_a_folder_without_a_tokenizer_is_named(tiny, tmp_path):
    hf_folder(tiny, tmp_path / "notok", drop=("tokenizer.json", "tokenizer_config.json"))
    hf_folder(tiny, tmp_path / "configonly", drop=("tokenizer.json",))
    assert error(tmp_path, 'engine = "vllm"\nmodel = "notok"').endswith(
        f"key 'model': {tmp_path / 'notok'} has no tokenizer.json (nor tokenizer_config.json with its vocabulary files): "
        f"needed for exact-length prompts (set tokenizer = \"FOLDER\" to a folder that has one)")
    assert "has tokenizer_config.json but neither tokenizer.json nor the files of a slow tokenizer (tokenizer.model " \
        "or vocab.json and merges.txt" in error(tmp_path, 'engine = "vllm"\nmodel = "configonly"')
    assert "key 'tokenizer': path" in error(tmp_path, 'engine = "vllm"\nmodel = "notok"\ntokenizer = "nowhere"')
    assert f"key 'tokenizer': {tmp_path / 'configonly'} has tokenizer_config.json but" in \
        error(tmp_path, 'engine = "vllm"\nmodel = "notok"\ntokenizer = "configonly"')
    with pytest.raises(FileNotFoundError, match="has no tokenizer.json .*: needed for exact-length prompts"):
        PromptMaker(tmp_path / "notok")


def test_a_slow_tokenizer_is_read_through_transformers(tiny, tmp_path):
    """tokenizer_config.json with vocab.json and merges.txt (no tokenizer.json): transformers
    converts it; the prompts are exact by that tokenizer."""
    pytest.importorskip("transformers")
    folder = hf_folder(tiny, tmp_path / "slow", drop=("tokenizer.json",))
    model = json.loads((tiny / "tokenizer.json").read_text())["model"]
    (folder / "vocab.json").write_text(json.dumps(model["vocab"]))
    (folder / "merges.txt").write_text("#version: 0.2\n" + "\n".join(
        m if isinstance(m, str) else " ".join(m) for m in model["merges"]) + "\n")
    cfg_text = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**cfg_text, "tokenizer_class": "GPT2Tokenizer"}))
    assert tokenizer.missing(folder) is None
    load(tmp_path, 'engine = "vllm"\nmodel = "slow"')
    prompts = PromptMaker(folder)
    assert prompts.count(prompts.text(30, 1)) == 30
    fast = PromptMaker(tiny)
    assert prompts.tok.encode("hello world").tokens == fast.tok.encode("hello world").tokens == ["<s>", "hel", "lo", "Ġworld"]


def test_a_folder_that_changed_after_the_matrix_was_loaded_fails_before_the_boot(tiny, tmp_path):
    folder = hf_folder(tiny, tmp_path / "m")
    m = load(tmp_path, 'engine = "vllm"\nmodel = "m"')
    (folder / "config.json").unlink()
    with pytest.raises(BootError, match=r"^x: .*/m has no config.json: vLLM loads a Hugging Face model folder"):
        Server(m.entries[0], m, tmp_path / "logs")._resolved()


def test_a_folder_hash_is_its_content(tiny, tmp_path):
    folder = hf_folder(tiny, tmp_path / "m")
    h = tinymodel.model_hash(folder)
    assert h == tinymodel.content_hash(folder) == tinymodel.model_hash(folder)
    (folder / "generation_config.json").write_text("{}")
    assert tinymodel.model_hash(folder) != h


def test_the_eos_id_of_a_folder_without_config_comes_from_its_tokenizer(tiny, tmp_path):
    folder = hf_folder(tiny, tmp_path / "t", drop=("config.json", "generation_config.json"))
    eos = json.loads((tiny / "config.json").read_text())["eos_token_id"]
    assert tokenizer.eos_token_id(folder) == eos
    assert tokenizer.eos_token_id(tmp_path) is None


@pytest.mark.parametrize("style", ["metaspace", "llama2-normalizer"])
def test_exact_length_prompts_with_a_sentencepiece_style_tokenizer(tmp_path, style):
    """Real folders often hold SentencePiece tokenizers (Llama 2, Mistral, Gemma): "▁word" tokens
    that decode alone without their space, and a "▁" the tokenizer puts before the text itself."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=style != "metaspace"))
    if style == "metaspace":
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first")
        tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="first")
    else:                                           # the layout of Llama 2's tokenizer.json
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
        tok.pre_tokenizer = pre_tokenizers.Split("\u2581", behavior="merged_with_next")
        tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                         decoders.Strip(" ", 1, 0)])
    corpus = tinymodel.CORPUS.read_text().splitlines()
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=2000, special_tokens=["<unk>", "<s>", "</s>"]))
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", tok.token_to_id("<s>"))])
    tok.save(str(tmp_path / "tokenizer.json"))
    prompts = PromptMaker(tmp_path)
    assert len(prompts.words) >= 50
    for n in (2, 17, 300):
        text = prompts.text(n, n)
        assert len(tok.encode(text).ids) == n
    a, b = prompts.shared_prefix(40, 8, "p", 1), prompts.shared_prefix(40, 8, "p", 2)
    assert tok.encode(a).ids[:40] == tok.encode(b).ids[:40] and len(tok.encode(a).ids) == 48


@pytest.mark.parametrize("n_tokens, words", [(64, 7), (1024, 31)])
def test_a_lookup_prompt_holds_every_pair_of_its_words(tiny, n_tokens, words):
    """The n-gram lever's workload: generation restricted to the prompt's words ends, at every step,
    in a pair the context already holds, whatever the model emits (the n-gram drafter proposes)."""
    prompts = PromptMaker(tiny)
    text, ids = prompts.lookup(n_tokens, "spec-lookup-p64-0:0")
    assert prompts.count(text) == n_tokens and len(ids) == words
    body = prompts.tok.encode(text, add_special_tokens=False).ids
    assert set(body) == set(ids)
    assert {(a, b) for a, b in zip(body, body[1:])} == {(a, b) for a in ids for b in ids}
    assert prompts.lookup(n_tokens, "other:0")[1] != ids                 # another seed, other words
