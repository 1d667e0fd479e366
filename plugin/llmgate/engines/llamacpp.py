"""llama.cpp: ``llama-server -m MODEL.gguf``.

- Binary: the entry's ``launcher``, else ``$LLMGATE_LLAMA_SERVER``, else ``llama-server`` on
  PATH, else the one ``llmgate install llama-server`` built.  ``llama-quantize``
  is taken from beside it.
- Model: a ``.gguf`` file, a folder holding one (the first part of a split one), or a folder made
  by llmgate.models.tinymodel (converted to GGUF with the same weights); ``quantization`` (``Q8_0``,
  ``Q4_K_M``, …) runs llama-quantize once, cached.
- ``-c`` = max_model_len × ``-np`` slots, split evenly: every slot holds max_model_len, so
  max_model_len means per request what it means on vLLM (with one unified buffer, ``-kvu``,
  four concurrent 4k prompts overflowed a 4096 context: "Context size has been exceeded");
  ``-t`` leaves a core to the client.
- KV cache type: ``-ctk/-ctv`` (``f16``, ``q8_0``, ``q4_0`` …); a quantized V cache needs
  ``-fa on``.  There is no KV memory budget: the context is allocated as asked, so the
  max_model_len probe does not apply.
- Speculative decoding: ``-md DRAFT --spec-type draft-simple --spec-draft-n-max N``
  (``-md`` alone loads the draft and does nothing), or ``--spec-type ngram-simple``.
- Prefix cache: on by default (``cache_prompt``); off with ``--no-cache-prompt --cache-ram 0``.
  No endpoint empties it without ``--slot-save-path``: cold requests use a new prefix.
- Structured output: ``json_schema`` (llama-server converts it to a grammar that allows up to 20
  whitespace characters in every gap, with no switch to turn that off: random weights ran out
  of max_tokens in it, 1 of 70 outputs, so constrained requests get ``structured_slack`` more
  tokens, enough for every gap's whitespace); regexes use the case's GBNF twin.  (The converter
  in llama-cpp-python 0.3.36 allows one space, but knows no integer bounds and writes escapes
  this llama-server cannot parse.)
- Ready when ``GET /health`` is 200 (503 while loading).  ``--metrics``: ``llamacpp:*``;
  responses carry ``timings`` (prompt_ms, predicted_per_second, draft_n, draft_n_accepted).
- API key from ``LLAMA_API_KEY`` in the environment (never on the command line).
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any, ClassVar

import httpx

from llmgate.tools import install
from llmgate.models import tinymodel
from llmgate.core.types import ServerConfig
from llmgate.engines.meters import Delta, SpecAcceptance
from llmgate.engines.base import BaseAdapter, BootDiagnosis, EngineInfo, convert_once, last_match

INSTALL_HINT = "build it with `llmgate install llama-server` (llama.cpp from the llama-cpp-python sdist, ~10 min on 2 cores) or set LLMGATE_LLAMA_SERVER"
KV_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")


def find_binary(cfg: ServerConfig) -> Path | None:
    return install.find_llama_server(cfg.launcher)


def gguf_in(folder: Path) -> tuple[Path | None, str | None]:
    """The model file of a folder: its one .gguf (the first part of a split one); else None and why."""
    files = sorted(p for p in folder.glob("*.gguf") if not p.name.startswith("mmproj"))
    parts = [p for p in files if re.search(r"-\d{5}-of-\d{5}\.gguf$", p.name)]
    if files and len(parts) == len(files):
        files = [p for p in parts if re.search(r"-0*1-of-\d{5}\.gguf$", p.name)]
    if len(files) == 1:
        return files[0], None
    if not files:
        return None, (f"{folder} has no .gguf file: llama.cpp loads GGUF (convert a Hugging Face folder with "
                      f"llama.cpp's convert_hf_to_gguf.py; llmgate converts only the models it built)")
    return None, (f"{folder} holds {len(files)} .gguf files ({', '.join(p.name for p in files[:4])}"
                  f"{', …' if len(files) > 4 else ''}): name one in model")


@functools.lru_cache(maxsize=8)
def _version(binary: str) -> tuple[str | None, str | None]:
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30)
    text = out.stdout + out.stderr
    m = re.search(r"version: (\S+) \(build (\d+), commit (\w+)\)", text)
    if not m:
        m2 = re.search(r"version: (\S+)", text)
        return (m2.group(1) if m2 else None), None
    return f"{m.group(1)} build {m.group(2)}", m.group(3)


@functools.lru_cache(maxsize=8)
def _devices(binary: str) -> tuple[str, ...]:
    """The devices a llama-server build can use here (``--list-devices``: "CUDA0: NVIDIA H200 …")."""
    try:
        out = subprocess.run([binary, "--list-devices"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return ()
    return tuple(m.group(1) for m in re.finditer(r"^\s*((?:CUDA|ROCm|Vulkan|Metal|SYCL)\d*: [^\n]+)",
                                                  out.stdout + out.stderr, re.M))


def _build_commit(binary: Path) -> str | None:
    """The llama.cpp commit llmgate.tools.install recorded for a binary it built (a build from the slim
    source pack has no git metadata, so the binary itself says "unknown")."""
    try:
        return json.loads((binary.parents[2] / "llmgate-build.json").read_text()).get("llama_cpp_commit")
    except (OSError, ValueError, IndexError):
        return None


class Adapter(BaseAdapter):
    name: ClassVar[str] = "llamacpp"
    api_key_env: ClassVar[str | None] = "LLAMA_API_KEY"
    structured_slack: ClassVar[int] = 512
    # llama-server's errors: "error: …", "failed to …", a failed GGML_ASSERT (its crash), an exception
    error_line: ClassVar[str] = r"(?i)\berror: |\b(?:failed to|unable to) |GGML_ASSERT|\bexception\b"

    def unavailable(self, cfg: ServerConfig) -> str | None:
        if cfg.launcher and not Path(cfg.launcher).is_file():
            return f"launcher {cfg.launcher!r} (a llama-server binary) does not exist"
        binary = find_binary(cfg)
        if binary is None:
            return f"llama-server not found ({INSTALL_HINT})"
        if cfg.device == "gpu" and not _devices(str(binary)):
            return (f"{binary} lists no GPU device (--list-devices): a build without CUDA, or no GPU visible "
                    f"(build one with gpu/build-llama-server-cuda.sh; it is found through $LLMGATE_LLAMA_SERVER)")
        if cfg.kv_cache_dtype not in ("auto", *KV_TYPES):
            return f"kv_cache_dtype {cfg.kv_cache_dtype!r}: llama.cpp takes one of {', '.join(KV_TYPES)}"
        return None

    def check_model(self, cfg: ServerConfig, model: Path) -> str | None:
        if model.is_dir():
            return None if (model / tinymodel.MANIFEST).is_file() else gguf_in(model)[1]
        if model.suffix != ".gguf":
            return f"{model} is not a .gguf file: llama.cpp loads GGUF (a .gguf file, or a folder holding one)"
        return None

    def prepare_model(self, cfg: ServerConfig, model: Path) -> Path:
        if model.is_dir():
            if (model / tinymodel.MANIFEST).is_file():      # llmgate's own model: converted with the same weights
                model = tinymodel.gguf_path(model)
            else:
                found, why = gguf_in(model)
                if found is None:
                    raise ValueError(why)
                model = found
        if not cfg.quantization:
            return model
        def quantize(tmp: Path) -> None:      # every core: one thread took 8+ minutes for an 8B GGUF on an H200 host
            subprocess.run([str(find_binary(cfg).with_name("llama-quantize")), str(model), str(tmp), cfg.quantization,
                            str(os.cpu_count() or 1)], check=True, capture_output=True, timeout=1800)

        return convert_once(model.with_name(f"{model.stem}.{cfg.quantization}.gguf"), quantize)

    def command(self, cfg: ServerConfig, model: Path, host: str, port: int) -> list[str]:
        threads = max(1, (os.cpu_count() or 2) - 1) if cfg.device == "cpu" else (os.cpu_count() or 1)
        slots = cfg.max_num_seqs or 8
        cmd = [str(find_binary(cfg)), "-m", str(model), "--host", host, "--port", str(port),
               "-c", str(cfg.max_model_len * slots), "-np", str(slots),
               "-t", str(threads), "-tb", str(threads), "--metrics", "--no-webui"]
        if cfg.kv_cache_dtype != "auto":
            cmd += ["-ctk", cfg.kv_cache_dtype, "-ctv", cfg.kv_cache_dtype, "-fa", "on"]
        if not cfg.prefix_caching:
            cmd += ["--no-cache-prompt", "--cache-ram", "0"]
        spec = cfg.speculative or {}
        method = spec.get("method")
        if method in ("draft_model", "draft"):
            cmd += ["-md", str(spec["model"]), "--spec-type", "draft-simple",
                    "--spec-draft-n-max", str(spec.get("num_speculative_tokens", 3))]
        elif method in ("ngram", "ngram-simple"):
            cmd += ["--spec-type", "ngram-simple"]
            if "prompt_lookup_max" in spec:
                cmd += ["--spec-ngram-simple-size-n", str(spec["prompt_lookup_max"])]
            if "num_speculative_tokens" in spec:
                cmd += ["--spec-ngram-simple-size-m", str(spec["num_speculative_tokens"])]
        elif method:
            cmd += ["--spec-type", str(method)]
        if cfg.device == "gpu":
            cmd += ["-ngl", "999"]
        return cmd + list(cfg.args)

    def info(self, http: httpx.Client, base_url: str, cfg: ServerConfig | None = None) -> EngineInfo:
        binary = find_binary(cfg) if cfg else shutil.which("llama-server")
        version, commit = _version(str(binary)) if binary else (None, None)
        if binary and commit in (None, "unknown"):
            commit = _build_commit(Path(binary)) or commit
        extra = {"binary": str(binary)}
        if binary and cfg is not None and cfg.device == "gpu":
            extra["devices"] = list(_devices(str(binary)))
        return EngineInfo("llamacpp", version, commit, extra)

    def diagnose_boot(self, log_text: str) -> BootDiagnosis | None:
        for pattern in (r"error: [^\n]+", r"(?:failed to|unable to) [^\n]+", r"\bexception\b[^\n]*"):
            m = last_match(pattern, log_text, re.I)
            if m:
                return BootDiagnosis(m.group(0).strip()[:400])
        return None

    def read_log(self, log_text: str) -> dict[str, Any]:
        facts: dict[str, Any] = {}
        m = last_match(r"n_ctx_seq\s*=\s*(\d+)", log_text) or last_match(r"n_ctx_slot\s*=\s*(\d+)", log_text)
        if m:
            facts["context_per_request"] = int(m.group(1))
        m = last_match(r"llama_kv_cache:\s+size\s*=\s*([\d.]+) MiB \(\s*(\d+) cells", log_text)
        if m:
            facts["kv_cache_tokens"] = int(m.group(2))
        m = last_match(r"system_info: ([^\n]+)", log_text)
        if m:
            facts["system_info"] = m.group(1).strip()[:300]
        return facts

    def spec_acceptance(self, delta: Delta) -> SpecAcceptance | None:
        drafts = delta.counter("llamacpp:spec_decode_num_drafts_total")
        if drafts is None:
            return None
        return SpecAcceptance(drafts=drafts,
                              draft_tokens=delta.counter("llamacpp:spec_decode_num_draft_tokens_total") or 0.0,
                              accepted=delta.counter("llamacpp:spec_decode_num_accepted_tokens_total") or 0.0)

    def prefix_cache_hits(self, delta: Delta) -> float | None:
        return delta.counter("llamacpp:prompt_tokens_cached_total")

    def structured_fields(self, spec: dict[str, Any]) -> dict[str, Any] | None:
        if spec["type"] == "json_schema":
            return {"json_schema": spec["schema"]}
        if spec["type"] == "regex":          # no regex constraint: the case's GBNF twin, if it has one
            return {"grammar": spec["gbnf"]} if spec.get("gbnf") else None
        return {"grammar": "root ::= " + " | ".join(json.dumps(c) for c in spec["choices"])}

    def cannot(self, scenario: str, cfg: ServerConfig) -> str | None:
        if scenario == "kv_max_len":
            return ("llama.cpp has no KV memory budget: it allocates the context it is asked for, "
                    "so there is no largest max_model_len to probe")
        return None
