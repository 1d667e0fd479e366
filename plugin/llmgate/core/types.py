"""The matrix entry and what every layer says about it, importing nothing of llmgate: the
engines' contract (``llmgate.engines.base``) and the matrix's parsing (``llmgate.config.matrix``)
both build on these, so neither imports the other for them."""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Iterable
from typing import Any

ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")
DEVICES = ("cpu", "gpu")
# "gate": the basic gate tests (decode, concurrency at N, client overhead); "latency": the scenarios built
# for latency (TTFT at c=1 from many short requests, Poisson loads at shares of the entry's capacity,
# goodput); the rest are the seed's levers
LEVERS = ("gate", "latency", "quantization", "speculative", "kv_max_len", "concurrency", "prefix_cache", "quality")


# Speculative decoding: whose acceptance figures mean something.  The drafts of these methods come
# from the context itself (prompt lookup, suffix trees), so their acceptance is a property of the
# text the target generates, with random weights too.  (vLLM: "ngram", "ngram_gpu", "suffix";
# SGLang: "ngram"; llama.cpp: its n-gram lookup.)
CONTEXT_DRAFT_METHODS = ("ngram", "ngram_gpu", "suffix", "lookup")
# These draft from trained weights: a draft model, EAGLE/EAGLE-3 and MTP/NextN heads, Medusa, MLP
# speculators, DFlash.  On random weights (load_format = "dummy", or a [models] shape) their drafts
# are random: what they cost is real and may be gated, their acceptance is not a figure to keep.
TRAINED_DRAFT_METHODS = ("draft_model", "standalone", "eagle", "eagle3", "mtp", "nextn", "medusa",
                         "mlp_speculator", "dflash", "dspark", "extract_hidden_states")


def drafts_from_context(cfg: "ServerConfig") -> bool:
    """Whether the entry's speculative drafts come from the context (CONTEXT_DRAFT_METHODS)."""
    return str((cfg.speculative or {}).get("method", "")).lower() in CONTEXT_DRAFT_METHODS


def spec_acceptance_meaningful(cfg: "ServerConfig", models: dict[str, Any] | None = None) -> str | None:
    """None when the entry's speculative acceptance is a figure to record and compare; else why not.

    Context drafts (CONTEXT_DRAFT_METHODS): always meaningful.  Trained drafts: meaningful only
    with trained weights, i.e. neither the target nor the draft drawn at random by the engine
    (``load_format = "dummy"``); llmgate's own draft model of a ``[models]`` target is a
    truncation of the same seeded weights (``tinymodel.random_weights``), so its drafts agree
    with the target by construction and count.  An unknown method is not counted."""
    spec = cfg.speculative or {}
    method = str(spec.get("method", "")).lower()
    if drafts_from_context(cfg):
        return None
    trained = method in TRAINED_DRAFT_METHODS or method.endswith("_mtp")
    if not trained:
        return f"speculative method {method!r} is not known to llmgate (neither context nor trained drafts)"
    if cfg.load_format == "dummy":
        return (f"method {method!r} drafts from trained weights, and this entry's weights are random "
                f"(load_format = \"dummy\"): its acceptance says nothing about the method")
    draft = spec.get("model")
    if method in ("draft_model", "standalone") and models is not None and cfg.model in models \
            and isinstance(draft, str) and draft in models:
        return None       # llmgate's truncated draft of its own seeded target
    if models is not None and cfg.model in models:
        return (f"method {method!r} needs a draft trained for this target; a [models] shape has random "
                f"weights (no trained heads): its acceptance says nothing about the method")
    return None


def spec_acceptance_caveat(cfg: "ServerConfig", models: dict[str, Any] | None = None) -> str | None:
    """What a meaningful acceptance figure still does not say (None: nothing): drafts taken from the
    context (n-gram prompt lookup) on random weights are accepted as often as the random model
    repeats itself, which it does far more than a trained one on real text (seen on the H200:
    acceptance 1.000, 4.92 tokens a step of 5): an upper bound of what real text gets, not a result."""
    method = str((cfg.speculative or {}).get("method", "")).lower()
    if method not in CONTEXT_DRAFT_METHODS:
        return None
    if cfg.load_format == "dummy" or (models is not None and cfg.model in models):
        return (f"method {method!r} drafts from the context, and this entry's weights are random: a random model "
                f"repeats itself, so its acceptance (and speed-up) is an upper bound of what real text gets, "
                f"not a result")
    return None


class MatrixError(ValueError):
    """A matrix file that cannot be used; the message is one line naming file, entry and key."""


def did_you_mean(word: object, choices: Iterable[str]) -> str:
    """``; did you mean 'x'?`` for an unknown name with a close known one (``difflib``), else ``""``:
    what the one-line error of a misspelt key, engine or lever says after the name."""
    if not isinstance(word, str):
        return ""
    known = [c for c in choices if isinstance(c, str)]
    close = difflib.get_close_matches(word, known, n=1, cutoff=0.6) or [c for c in known if c.lower() == word.lower()]
    return f"; did you mean {close[0]!r}?" if close else ""


SECRET = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL", re.IGNORECASE)   # env values never reported

@dataclasses.dataclass(frozen=True)
class ServerConfig:
    """One server configuration: everything that decides how an engine is started."""

    id: str
    engine: str
    model: str
    device: str = "cpu"
    dtype: str = "auto"
    quantization: str | None = None
    kv_cache_dtype: str = "auto"
    speculative: dict[str, Any] | None = None
    prefix_caching: bool = True
    max_model_len: int = 2048
    kv_cache_bytes: int | None = None
    gpu_memory_utilization: float | None = None
    gpu_memory_bytes: int | None = None   # a GPU budget in bytes: the same on any card (a fraction of its memory at boot)
    max_num_seqs: int | None = None
    tensor_parallel: int = 1
    load_format: str | None = None
    tokenizer: str | None = None          # folder with tokenizer.json, when the model has none (a .gguf file)
    args: tuple[str, ...] = ()
    env: dict[str, str] = dataclasses.field(default_factory=dict)
    boot_timeout_s: float = 600.0
    port: int | None = None               # a fixed port (default: a free one); taken → another, and it says so
    min_effect: dict[str, float] = dataclasses.field(default_factory=dict)
    launcher: str | None = None           # the engine's interpreter / binary (default: this Python, or PATH)
    levers: tuple[str, ...] = ("gate",)   # scenarios this entry takes part in (LEVERS)
    reference: str | None = None          # id of the entry it is compared with (same model, lever off)
    boots: int | None = None              # boots a run spans (default: --llmgate-boots, else 3 on a GPU, 1 on the CPU)
    # goodput's targets for this entry (the latency lever): {"ttft_ms": …, "tpot_ms": …}; a request is
    # good when both hold (default: [scenarios] goodput_ttft_ms / goodput_tpot_ms, per device)
    goodput: dict[str, float] | None = None
    source: str = dataclasses.field(default="", compare=False)

    def __hash__(self) -> int:
        return hash(self.id)

    def describe(self) -> dict[str, Any]:
        """The full configuration as plain data (for fingerprints and reports)."""
        d = dataclasses.asdict(self)
        d.pop("source")
        d.pop("port")                     # where it listens does not change what it measures
        d["args"] = list(self.args)
        d["levers"] = list(self.levers)
        d["env"] = {k: ("***" if SECRET.search(k) else v) for k, v in self.env.items()}
        return d
