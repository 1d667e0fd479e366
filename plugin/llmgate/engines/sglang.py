"""SGLang: ``python -m sglang.launch_server --model-path MODEL``.

- Interpreter: the entry's ``launcher``, else ``$LLMGATE_SGLANG_PYTHON``, else this Python.
- GPU only (its kernels have no CPU build on PyPI): ``--mem-fraction-static`` is the KV
  budget (from ``gpu_memory_utilization``, or ``gpu_memory_bytes`` over the card's memory), ``--context-length`` the max_model_len,
  ``--kv-cache-dtype`` (``fp8`` is taken as ``fp8_e4m3``), ``--disable-radix-cache`` turns the
  prefix cache (RadixAttention) off, ``--max-running-requests`` caps concurrency,
  ``--enable-metrics`` publishes ``sglang:*`` at /metrics, ``--enable-cache-report`` puts
  cached tokens into ``usage``.
- Speculative decoding: ``--speculative-algorithm {EAGLE,EAGLE3,NEXTN,NGRAM,STANDALONE}`` with
  ``--speculative-num-steps``, ``--speculative-eagle-topk``, ``--speculative-num-draft-tokens``
  and ``--speculative-draft-model-path``; acceptance is published as gauges
  (``sglang:spec_accept_rate``, ``sglang:spec_accept_length``; also
  ``/get_server_info`` → ``internal_states[0].avg_spec_accept_length``).
- Ready when ``GET /health`` is 200 (503 until its warm-up request is done); version and KV
  capacity (``max_total_num_tokens``) from ``GET /get_server_info``; ``POST /flush_cache``
  empties the radix cache.  ``ignore_eos`` and ``stream_options.continuous_usage_stats``
  are honoured.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, ClassVar

import httpx

from llmgate.core.types import ServerConfig
from llmgate.engines.meters import Delta, SpecAcceptance
from llmgate.engines.base import EngineInfo, gpu_memory_fraction, last_match
from llmgate.engines.pymodule import PythonModuleAdapter

INSTALL_HINT = "SGLang needs an NVIDIA GPU: pip install 'sglang[all]' on the GPU machine"
SPEC_ALGORITHMS = {"eagle": "EAGLE", "eagle3": "EAGLE3", "mtp": "NEXTN", "nextn": "NEXTN", "ngram": "NGRAM",
                   "draft_model": "STANDALONE", "standalone": "STANDALONE"}


# The engine's per-request timers (sglang/srt/observability: metrics_collector.py, req_time_stats.py,
# 0.5.17): TTFT and E2E of streamed requests from the tokenizer manager; queue = waiting queue entry
# → first forward; prefill = the per-stage latency of stage "prefill_forward" (first forward entry →
# prefill finished); inter-token latency.
TIMERS = {
    "ttft": ("sglang:time_to_first_token_seconds", {"is_streaming": "true"}),
    "queue": ("sglang:queue_time_seconds", {}),
    "prefill": ("sglang:per_stage_req_latency_seconds", {"stage": "prefill_forward"}),
    "itl": ("sglang:inter_token_latency_seconds", {}),
    "e2e": ("sglang:e2e_request_latency_seconds", {"is_streaming": "true"}),
}


class Adapter(PythonModuleAdapter):
    name: ClassVar[str] = "sglang"
    package: ClassVar[str] = "sglang"
    display: ClassVar[str] = "SGLang"
    # SGLang pins its own transformers, so it often lives apart from the gate
    python_env: ClassVar[str] = "LLMGATE_SGLANG_PYTHON"
    install_hint: ClassVar[str] = INSTALL_HINT
    # SGLang's log lines carry no level: its scheduler's "Scheduler hit an exception: <traceback>" and
    # its launcher's "Received sigquit from a child process. It usually means the child failed."
    error_line: ClassVar[str] = r"\b(?:ERROR|CRITICAL|FATAL)\b|hit an exception|Received sigquit from a child"

    def unavailable(self, cfg: ServerConfig) -> str | None:
        if cfg.device != "gpu":
            return f"SGLang runs on GPUs only (entry has device = {cfg.device!r}); {INSTALL_HINT}"
        return super().unavailable(cfg)

    def command(self, cfg: ServerConfig, model: Path, host: str, port: int) -> list[str]:
        cmd = [self.python(cfg), "-m", "sglang.launch_server", "--model-path", str(model), "--host", host, "--port", str(port),
               "--context-length", str(cfg.max_model_len), "--dtype", cfg.dtype, "--enable-metrics",
               "--enable-cache-report", "--constrained-json-disable-any-whitespace"]
        if cfg.kv_cache_dtype != "auto":
            cmd += ["--kv-cache-dtype", "fp8_e4m3" if cfg.kv_cache_dtype == "fp8" else cfg.kv_cache_dtype]
        if (fraction := gpu_memory_fraction(cfg)) is not None:
            cmd += ["--mem-fraction-static", str(fraction)]
        if not cfg.prefix_caching:
            cmd += ["--disable-radix-cache"]
        if cfg.quantization:
            cmd += ["--quantization", cfg.quantization]
        if cfg.max_num_seqs:
            cmd += ["--max-running-requests", str(cfg.max_num_seqs)]
        if cfg.tensor_parallel > 1:
            cmd += ["--tp-size", str(cfg.tensor_parallel)]
        if cfg.load_format:
            cmd += ["--load-format", cfg.load_format]
        spec = dict(cfg.speculative or {})
        if spec:
            method = str(spec.pop("method"))
            cmd += ["--speculative-algorithm", SPEC_ALGORITHMS.get(method.lower(), method)]
            if "model" in spec:
                cmd += ["--speculative-draft-model-path", str(spec.pop("model"))]
            n = spec.pop("num_speculative_tokens", None)
            if n is not None:
                cmd += ["--speculative-num-steps", str(n), "--speculative-num-draft-tokens", str(int(n) + 1),
                        "--speculative-eagle-topk", str(spec.pop("eagle_topk", 1))]
            for k, v in spec.items():
                cmd += ["--speculative-" + k.replace("_", "-"), str(v)]
        return cmd + list(cfg.args)

    def environment(self, cfg: ServerConfig) -> dict[str, str]:
        return {**super().environment(cfg), "SGLANG_HOST_IP": "127.0.0.1"}

    def info(self, http: httpx.Client, base_url: str, cfg: ServerConfig | None = None) -> EngineInfo:
        data = http.get(base_url + "/get_server_info").json()
        return EngineInfo("sglang", data.get("version"), None, self.server_facts(data))

    @staticmethod
    def server_facts(info: dict[str, Any]) -> dict[str, Any]:
        """The figures /get_server_info states that results should carry."""
        facts = {k: info.get(k) for k in ("max_total_num_tokens", "attention_backend", "kv_cache_dtype",
                                          "speculative_algorithm", "context_length", "mem_fraction_static")
                 if info.get(k) is not None}
        if "max_total_num_tokens" in facts:
            facts["kv_cache_tokens"] = facts["max_total_num_tokens"]
        states = info.get("internal_states") or [{}]
        if isinstance(states, list) and states and states[0].get("avg_spec_accept_length") is not None:
            facts["avg_spec_accept_length"] = states[0]["avg_spec_accept_length"]
        return facts

    def structured_fields(self, spec: dict[str, Any]) -> dict[str, Any] | None:
        if spec["type"] == "json_schema":
            return {"json_schema": json.dumps(spec["schema"])}
        if spec["type"] == "regex":
            return {"regex": spec["pattern"]}
        return {"regex": "(" + "|".join(re.escape(c) for c in spec["choices"]) + ")"}

    def token_ids_fields(self) -> dict[str, Any]:
        return {"return_token_ids": True}

    def reset_prefix_cache(self, http: httpx.Client, base_url: str) -> bool:
        http.post(base_url + "/flush_cache").raise_for_status()
        return True

    def read_log(self, log_text: str) -> dict[str, Any]:
        facts: dict[str, Any] = {}
        m = last_match(r"max_total_num_tokens=(\d+)", log_text)
        if m:
            facts["kv_cache_tokens"] = int(m.group(1))
        m = last_match(r"attention_backend='?(\w+)", log_text)
        if m:
            facts["attention_backend"] = m.group(1)
        return facts

    def spec_acceptance(self, delta: Delta) -> SpecAcceptance | None:
        rate = delta.after.total("sglang:spec_accept_rate")
        length = delta.after.total("sglang:spec_accept_length")
        if rate is None and length is None:
            return None
        return SpecAcceptance(reported_rate=rate, reported_length=length)

    def prefix_cache_hits(self, delta: Delta) -> float | None:
        return delta.counter("sglang:cached_tokens_total")

    def server_ttft(self, delta: Delta) -> float | None:
        return delta.histogram_mean("sglang:time_to_first_token_seconds")

    def engine_timers(self, delta: Delta) -> dict[str, float]:
        return delta.histogram_means(TIMERS)
