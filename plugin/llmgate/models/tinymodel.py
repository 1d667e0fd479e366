"""The embedded default model, made locally: no hub, no download.

A Llama-style Hugging Face folder (config.json, model.safetensors, tokenizer
files with bos/eos and a chat template) with random weights drawn from a seeded
generator, and a byte-level BPE tokenizer trained with `tokenizers` on the text
shipped in ``llmgate/data/corpus.txt``.  Random weights give real speed figures
for the shape; they give no meaningful answers.

The folder is cached under a key derived from the spec, the corpus and the
builder version, so a second call returns the same folder at once; the content
hash of the files is written beside them (``llmgate-model.json``) and is what
baselines are keyed by.

    llmgate tinymodel OUT_DIR [--layers 4 --hidden 512 ...]

Why one module over ~450 lines: one recipe for one artifact: the tokenizer, the weights and
their safetensors, AWQ and GGUF writings all make the folder whose content hash baselines are
keyed by, so they change together.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import shutil
import struct
import sys
import tempfile
from pathlib import Path

import numpy as np

BUILDER_VERSION = 2
CORPUS = Path(__file__).parent.parent / "data" / "corpus.txt"
MANIFEST = "llmgate-model.json"
BOS, EOS, PAD = "<s>", "</s>", "<pad>"
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}{{ eos_token }}\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


@dataclasses.dataclass(frozen=True)
class TinySpec:
    """The shape of a tiny model.  Every field goes into the cache key."""

    hidden: int = 512
    layers: int = 4
    heads: int = 8
    kv_heads: int = 4
    intermediate: int = 1536
    vocab: int = 8192
    max_position: int = 32768
    seed: int = 0
    rope_theta: float = 10000.0
    tie_embeddings: bool = False
    weights: str = "bf16"  # "bf16", or "awq4": linear layers in AWQ 4-bit (RTN), the rest fp16
    # Each layer's output projections (o_proj, down_proj) are drawn with this factor on top of
    # the 0.02 std, so layers refine the embedding rather than replace it: the 1-layer truncation
    # then agrees with the 4-layer model on ~57% of greedy tokens (a usable draft model) and greedy
    # output does not fall into a short loop (at 1.0: 0% agreement, 11 distinct tokens in 64).
    residual_scale: float = 0.03

    def __post_init__(self):
        if self.weights not in ("bf16", "awq4"):
            raise ValueError(f"weights must be 'bf16' or 'awq4', not {self.weights!r}")
        if self.weights == "awq4":
            # every linear layer's input in whole groups and its output in whole int32 words of 8
            # nibbles (AutoAWQ's GEMM layout; vLLM's AWQ-Marlin kernels need the same)
            head_dim = self.hidden // self.heads if self.heads else 0
            ins = {"hidden": self.hidden, "intermediate": self.intermediate, "heads × head_dim": self.heads * head_dim}
            outs = {"hidden": self.hidden, "intermediate": self.intermediate, "kv_heads × head_dim": self.kv_heads * head_dim}
            for what, n in ins.items():
                if n % AWQ_GROUP:
                    raise ValueError(f"weights = 'awq4' needs {what} divisible by the AWQ group size {AWQ_GROUP}, got {n}")
            for what, n in outs.items():
                if n % 8:
                    raise ValueError(f"weights = 'awq4' needs {what} divisible by 8 (packed int32), got {n}")

    def key(self) -> str:
        h = hashlib.sha256()
        h.update(json.dumps(dataclasses.asdict(self), sort_keys=True).encode())
        h.update(hashlib.sha256(CORPUS.read_bytes()).digest())
        h.update(str(BUILDER_VERSION).encode())
        return h.hexdigest()[:16]


def default_cache_dir() -> Path:
    return Path(os.environ.get("LLMGATE_CACHE", Path.home() / ".cache" / "llmgate")) / "models"


def content_hash(folder: Path) -> str:
    """sha256 over the names and bytes of every file of a model folder (the manifest excluded)."""
    h = hashlib.sha256()
    for p in sorted(Path(folder).rglob("*")):
        if p.is_file() and p.name != MANIFEST:
            h.update(str(p.relative_to(folder)).encode() + b"\0")
            with open(p, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
    return h.hexdigest()


_FILE_HASHES: dict[tuple[str, int, int], str] = {}


def model_hash(path: Path) -> str:
    """The content hash of a model folder (read from the manifest when llmgate built it) or file."""
    path = Path(path)
    if path.is_file():
        st = path.stat()
        key = (str(path), st.st_size, st.st_mtime_ns)
        if key not in _FILE_HASHES:
            h = hashlib.sha256()
            with open(path, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
            _FILE_HASHES[key] = h.hexdigest()
        return _FILE_HASHES[key]
    manifest = path / MANIFEST
    if manifest.is_file():
        return json.loads(manifest.read_text())["content_hash"]
    # a folder given by path (real weights: gigabytes): hashed once a process while no file changes
    key = (str(path), hash(tuple((str(p), p.stat().st_size, p.stat().st_mtime_ns)
                                 for p in sorted(path.rglob("*")) if p.is_file())), 0)
    if key not in _FILE_HASHES:
        _FILE_HASHES[key] = content_hash(path)
    return _FILE_HASHES[key]


CONFIG_ONLY_SUFFIX = "-config"          # cache folders of config-only builds (no weights file)


def build(out: Path | str | None = None, spec: TinySpec = TinySpec(), name: str = "tiny-llama",
          config_only: bool = False) -> Path:
    """Return a folder holding the model of ``spec``; build it only if the cache lacks it.

    With ``out`` given, the model is built (or copied from the cache) there.  ``config_only``:
    everything but model.safetensors (config, generation config, the same tokenizer), for an
    engine that draws random weights itself (vLLM's ``--load-format dummy``); cached apart from
    the full build, so each has one content hash.
    """
    cached = default_cache_dir() / (f"{name}-{spec.key()}" + (CONFIG_ONLY_SUFFIX if config_only else ""))
    if not (cached / MANIFEST).is_file():
        cached.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{cached.name}.", dir=cached.parent))
        try:
            _write_model(tmp, spec, name, config_only)
            try:
                os.rename(tmp, cached)
            except OSError:  # another process built it first: theirs is identical
                if not (cached / MANIFEST).is_file():
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    if out is None:
        return cached
    out = Path(out)
    if (out / MANIFEST).is_file() and model_hash(out) == model_hash(cached):
        return out
    out.mkdir(parents=True, exist_ok=True)
    for p in cached.iterdir():
        shutil.copy2(p, out / p.name)
    return out


def train_tokenizer(vocab: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        special_tokens=[PAD, BOS, EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    text = CORPUS.read_text()
    tok.train_from_iterator(text.split("\n\n"), trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, tok.token_to_id(BOS))]
    )
    return tok


def _write_model(folder: Path, spec: TinySpec, name: str, config_only: bool = False) -> None:
    tok = train_tokenizer(spec.vocab)
    vocab = tok.get_vocab_size()  # every id the model can sample decodes
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS, "eos_token": EOS, "pad_token": PAD,
        "add_bos_token": True, "add_eos_token": False,
        "model_max_length": spec.max_position,
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
    }, indent=2))
    (folder / "special_tokens_map.json").write_text(json.dumps(
        {"bos_token": BOS, "eos_token": EOS, "pad_token": PAD}, indent=2))
    head_dim = spec.hidden // spec.heads
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": spec.hidden,
        "intermediate_size": spec.intermediate,
        "num_hidden_layers": spec.layers,
        "num_attention_heads": spec.heads,
        "num_key_value_heads": spec.kv_heads,
        "head_dim": head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": spec.max_position,
        "rms_norm_eps": 1e-5,
        "rope_theta": spec.rope_theta,
        "vocab_size": vocab,
        "bos_token_id": tok.token_to_id(BOS),
        "eos_token_id": tok.token_to_id(EOS),
        "pad_token_id": tok.token_to_id(PAD),
        "tie_word_embeddings": spec.tie_embeddings,
        "torch_dtype": "bfloat16" if spec.weights == "bf16" else "float16",
        "attention_bias": False,
        "mlp_bias": False,
    }
    if spec.weights == "awq4":
        config["quantization_config"] = {"quant_method": "awq", "bits": 4, "group_size": AWQ_GROUP,
                                         "zero_point": True, "version": "gemm", "modules_to_not_convert": None}
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    (folder / "generation_config.json").write_text(json.dumps({
        "bos_token_id": config["bos_token_id"], "eos_token_id": config["eos_token_id"],
        "pad_token_id": config["pad_token_id"], "do_sample": False}, indent=2))
    if not config_only:
        write_safetensors(folder / "model.safetensors", checkpoint_tensors(spec, vocab))
    manifest = {
        "name": name, "builder_version": BUILDER_VERSION, "spec": dataclasses.asdict(spec),
        "vocab_size": vocab, "parameters": parameter_count(spec, vocab),
        "content_hash": content_hash(folder),
    }
    if config_only:
        manifest["weights"] = "none: config and tokenizer only, for load_format = \"dummy\""
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=2))


def parameter_count(spec: TinySpec, vocab: int) -> int:
    head_dim = spec.hidden // spec.heads
    h, q, kv, inter = spec.hidden, spec.heads * head_dim, spec.kv_heads * head_dim, spec.intermediate
    per_layer = 2 * h + h * q + 2 * h * kv + q * h + 3 * h * inter
    return vocab * h * (1 if spec.tie_embeddings else 2) + h + spec.layers * per_layer


def random_weights(spec: TinySpec, vocab: int) -> dict[str, np.ndarray]:
    """Llama tensor names and shapes, float32, N(0, 0.02), same on every machine.

    Every tensor group has its own seeded PCG64 stream (embeddings, LM head, each layer), so
    a spec with fewer layers and the same seed is an exact truncation of the deeper model:
    the draft model of the speculative-decoding lever shares embeddings, head and first layers.
    """
    head_dim = spec.hidden // spec.heads
    h, kv, inter = spec.hidden, spec.kv_heads * head_dim, spec.intermediate

    def stream(*key: int):
        rng = np.random.Generator(np.random.PCG64([spec.seed, *key]))
        return lambda *shape: rng.standard_normal(shape, dtype=np.float32) * np.float32(0.02)

    w = {"model.embed_tokens.weight": stream(1_000_000)(vocab, h)}
    if not spec.tie_embeddings:
        w["lm_head.weight"] = stream(1_000_001)(vocab, h)
    for i in range(spec.layers):
        normal = stream(i)
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = np.ones(h, np.float32)
        w[p + "post_attention_layernorm.weight"] = np.ones(h, np.float32)
        w[p + "self_attn.q_proj.weight"] = normal(spec.heads * head_dim, h)
        w[p + "self_attn.k_proj.weight"] = normal(kv, h)
        w[p + "self_attn.v_proj.weight"] = normal(kv, h)
        w[p + "self_attn.o_proj.weight"] = normal(h, spec.heads * head_dim) * np.float32(spec.residual_scale)
        w[p + "mlp.gate_proj.weight"] = normal(inter, h)
        w[p + "mlp.up_proj.weight"] = normal(inter, h)
        w[p + "mlp.down_proj.weight"] = normal(h, inter) * np.float32(spec.residual_scale)
    w["model.norm.weight"] = np.ones(h, np.float32)
    return w


LINEAR_SUFFIXES = ("q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight",
                   "gate_proj.weight", "up_proj.weight", "down_proj.weight")
AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)  # nibble i of a packed int32 holds column AWQ_ORDER[i] (AutoAWQ "gemm")
AWQ_GROUP = 128


def awq_quantize(weight: np.ndarray, group: int = AWQ_GROUP) -> dict[str, np.ndarray]:
    """Round-to-nearest 4-bit, asymmetric, per group of ``group`` input channels, packed in the
    AutoAWQ GEMM layout (qweight/qzeros int32 [in, out/8] / [in/group, out/8], scales fp16 [in/group, out]).

    The format is AWQ's; the rounding is plain RTN (no activation-aware scaling, which needs
    calibration data and would change nothing for random weights)."""
    w = weight.T.astype(np.float32)                      # [in, out]
    n_in, n_out = w.shape
    if n_in % group or n_out % 8:
        raise ValueError(f"AWQ needs in % {group} == 0 and out % 8 == 0, got {w.shape}")
    g = w.reshape(n_in // group, group, n_out)
    wmax, wmin = g.max(axis=1), g.min(axis=1)            # [in/group, out]
    scales = np.maximum(wmax - wmin, 1e-8) / 15.0
    scales = scales.astype(np.float16).astype(np.float32)
    zeros = np.clip(np.round(-wmin / scales), 0, 15)
    q = np.clip(np.round(g / scales[:, None, :]) + zeros[:, None, :], 0, 15).astype(np.uint32).reshape(n_in, n_out)

    def pack(a: np.ndarray) -> np.ndarray:
        a = a.astype(np.uint32).reshape(a.shape[0], n_out // 8, 8)
        out = np.zeros(a.shape[:2], np.uint32)
        for i, col in enumerate(AWQ_ORDER):
            out |= a[:, :, col] << np.uint32(4 * i)
        return out.view(np.int32)

    return {"qweight": pack(q), "qzeros": pack(zeros.astype(np.uint32)), "scales": scales.astype(np.float16)}


def awq_dequantize(t: dict[str, np.ndarray], group: int = AWQ_GROUP) -> np.ndarray:
    """The torch-layout [out, in] float32 weight an AWQ tensor triple stands for (for checks)."""
    def unpack(a: np.ndarray) -> np.ndarray:
        a = a.view(np.uint32)
        out = np.zeros((a.shape[0], a.shape[1] * 8), np.uint32)
        for i, col in enumerate(AWQ_ORDER):
            out[:, col::8] = (a >> np.uint32(4 * i)) & np.uint32(0xF)
        return out.astype(np.float32)
    q, z, s = unpack(t["qweight"]), unpack(t["qzeros"]), t["scales"].astype(np.float32)
    zz, ss = np.repeat(z, group, axis=0), np.repeat(s, group, axis=0)
    return ((q - zz) * ss).T


def checkpoint_tensors(spec: TinySpec, vocab: int) -> dict[str, np.ndarray]:
    """The tensors as stored: float32 arrays are written as bf16 (bf16 weights) or fp16 (awq4)."""
    weights = random_weights(spec, vocab)
    if spec.weights == "bf16":
        return weights
    out: dict[str, np.ndarray] = {}
    for name, w in weights.items():
        if name.endswith(LINEAR_SUFFIXES):
            base = name[: -len(".weight")]
            for k, v in awq_quantize(w).items():
                out[f"{base}.{k}"] = v
        else:
            out[name] = w.astype(np.float16)
    return out


def to_bf16_bytes(a: np.ndarray) -> bytes:
    """float32 → bfloat16 with round-to-nearest-even, as raw little-endian bytes."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    rounded = (u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    return rounded.astype("<u2").tobytes()


_ST_DTYPES = {np.dtype(np.float16): "F16", np.dtype(np.int32): "I32", np.dtype(np.float32): "BF16"}


def write_safetensors(path: Path, tensors: dict[str, np.ndarray]) -> None:
    """The safetensors format written directly (numpy has no bfloat16): float32 → BF16, others as they are."""
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        a = tensors[name]
        kind = _ST_DTYPES[a.dtype]
        data = to_bf16_bytes(a) if kind == "BF16" else np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": kind, "shape": list(a.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    header["__metadata__"] = {"format": "pt"}
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for b in blobs:
            f.write(b)


def gguf_path(folder: Path | str, dtype: str = "bf16") -> Path:
    """The model of an llmgate-built folder as a GGUF file (for llama.cpp), written once into the cache.

    Same weights as the safetensors checkpoint (regenerated from the seeded spec), with Q and K
    rows permuted as convert_hf_to_gguf.py does for LLaMA, so llama.cpp computes the same function.
    """
    folder = Path(folder)
    manifest = json.loads((folder / MANIFEST).read_text())
    spec = TinySpec(**manifest["spec"])
    if spec.weights != "bf16":
        raise ValueError(f"{folder}: only bf16 tiny models convert to GGUF (quantize the GGUF with llama-quantize)")
    out = folder.parent / f"{folder.name}.{dtype}.gguf"
    if out.is_file():
        return out
    tmp = out.with_suffix(f".tmp{os.getpid()}")
    try:
        _write_gguf(folder, spec, manifest["vocab_size"], tmp, dtype)
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            tmp.unlink()
    return out


def _permute_rope(w: np.ndarray, n_head: int) -> np.ndarray:
    """HF Llama's rotate-half layout → llama.cpp's interleaved pairs (convert_hf_to_gguf's LlamaModel.permute)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _write_gguf(folder: Path, spec: TinySpec, vocab: int, path: Path, dtype: str) -> None:
    import gguf

    tok = json.loads((folder / "tokenizer.json").read_text())
    tok_cfg = json.loads((folder / "tokenizer_config.json").read_text())
    config = json.loads((folder / "config.json").read_text())
    id_to_token = {i: t for t, i in tok["model"]["vocab"].items()}
    for added in tok.get("added_tokens", []):
        id_to_token[added["id"]] = added["content"]
    specials = {a["id"] for a in tok.get("added_tokens", []) if a.get("special")}
    tokens = [id_to_token[i] for i in range(vocab)]
    types = [int(gguf.TokenType.CONTROL if i in specials else gguf.TokenType.NORMAL) for i in range(vocab)]
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]]
    head_dim = spec.hidden // spec.heads

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name(folder.name)
    w.add_context_length(spec.max_position)
    w.add_embedding_length(spec.hidden)
    w.add_block_count(spec.layers)
    w.add_feed_forward_length(spec.intermediate)
    w.add_head_count(spec.heads)
    w.add_head_count_kv(spec.kv_heads)
    w.add_rope_dimension_count(head_dim)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(spec.rope_theta)
    w.add_vocab_size(vocab)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_BF16 if dtype == "bf16" else gguf.LlamaFileType.MOSTLY_F16)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(config["bos_token_id"])
    w.add_eos_token_id(config["eos_token_id"])
    w.add_pad_token_id(config["pad_token_id"])
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_chat_template(tok_cfg["chat_template"])

    names = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
             "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
             "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
             "mlp.down_proj": "ffn_down"}

    def add(name: str, a: np.ndarray) -> None:
        if a.ndim == 1:
            w.add_tensor(name, a.astype(np.float32))
        elif dtype == "bf16":
            w.add_tensor(name, gguf.quants.quantize(a.astype(np.float32), gguf.GGMLQuantizationType.BF16),
                         raw_dtype=gguf.GGMLQuantizationType.BF16)
        else:
            w.add_tensor(name, a.astype(np.float16))

    weights = random_weights(spec, vocab)
    add("token_embd.weight", weights["model.embed_tokens.weight"])
    add("output_norm.weight", weights["model.norm.weight"])
    if "lm_head.weight" in weights:
        add("output.weight", weights["lm_head.weight"])
    for i in range(spec.layers):
        for hf, gg in names.items():
            a = weights[f"model.layers.{i}.{hf}.weight"]
            if hf == "self_attn.q_proj":
                a = _permute_rope(a, spec.heads)
            elif hf == "self_attn.k_proj":
                a = _permute_rope(a, spec.kv_heads)
            add(f"blk.{i}.{gg}.weight", a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """``llmgate tinymodel``'s arguments (llmgate.cli)."""
    ap.add_argument("out", nargs="?", help="folder to write (default: print the cached folder)")
    ap.add_argument("--name", default="tiny-llama")
    for f in dataclasses.fields(TinySpec):
        ap.add_argument("--" + f.name.replace("_", "-"), type=int if f.type == "bool" else type(f.default),
                        default=f.default)


def run(a: argparse.Namespace) -> int:
    """``llmgate tinymodel [OUT]``: build (or find) the model and print its folder."""
    spec = TinySpec(**{f.name: getattr(a, f.name) for f in dataclasses.fields(TinySpec)})
    folder = build(a.out, spec, a.name)
    print(folder)
    print(json.dumps(json.loads((folder / MANIFEST).read_text()), indent=2), file=sys.stderr)
    return 0
