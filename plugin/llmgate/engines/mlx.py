"""MLX-LM: ``python -m mlx_lm.server --model PATH`` (``mlx[cpu]`` on Linux).

- Interpreter: the entry's ``launcher``, else ``$LLMGATE_MLX_PYTHON``, else this Python.
- The model field of every request is the model's path (any other name makes it look on the
  hub); ``HF_HOME`` points at a folder that has ``hub/``, and the hub is offline.
- Model: a folder; ``dtype = "float32"``/``"float16"`` or ``quantization = "4bit"``/``"8bit"``
  converts it once with ``mlx_lm.convert`` (cached).  The bundled reference BLAS is slow:
  Debian's OpenBLAS is preloaded when installed, which speeds up float32 matrices only.
- It ignores ``ignore_eos``: a fixed output length is forced with ``logit_bias`` −100 on the
  EOS id.  Usage comes only with ``stream_options.include_usage`` (an empty
  ``stream_options`` crashes the request).  ``: keepalive`` comment lines precede tokens.
- ``/health`` can answer 200 before the model has loaded: ready means a one-token
  completion succeeded.
- Prompt cache: on by default, visible as ``usage.prompt_tokens_details.cached_tokens``;
  ``--prompt-cache-size 0`` turns it off; no endpoint empties it.  KV cache quantization:
  ``--kv-bits`` (serialises requests).  Draft model: ``--draft-model``, with no acceptance
  figures anywhere.  No ``/metrics``, no context-length limit, no structured output.
"""

from __future__ import annotations

import functools
import hashlib
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any, ClassVar

import httpx

from llmgate.models import tinymodel
from llmgate.core.types import ServerConfig
from llmgate.engines.base import EngineInfo, convert_once
from llmgate.engines.pymodule import PythonModuleAdapter, run_python

INSTALL_HINT = "pip install 'pytest-llmgate[cpu-mlx]' (mlx[cpu] and mlx-lm), or set LLMGATE_MLX_PYTHON to a Python that has them"
OPENBLAS = ("/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0",
            "/usr/lib/aarch64-linux-gnu/openblas-pthread/libopenblas.so.0")
KV_BITS = {"q8": 8, "q8_0": 8, "8bit": 8, "q4": 4, "q4_0": 4, "4bit": 4}


@functools.lru_cache(maxsize=8)
def _versions(py: str) -> str | None:
    return run_python(py, "import importlib.metadata as m; print('mlx-lm', m.version('mlx-lm'), '/ mlx', m.version('mlx'))")


def _hf_home() -> str:
    home = Path(tempfile.gettempdir()) / "llmgate-mlx-hf"
    (home / "hub").mkdir(parents=True, exist_ok=True)
    return str(home)


class Adapter(PythonModuleAdapter):
    name: ClassVar[str] = "mlx"
    metrics_path: ClassVar[str | None] = None
    package: ClassVar[str] = "mlx_lm"
    display: ClassVar[str] = "mlx-lm"
    python_env: ClassVar[str] = "LLMGATE_MLX_PYTHON"
    install_hint: ClassVar[str] = INSTALL_HINT
    usage_per_chunk: ClassVar[bool] = False         # an empty stream_options even crashes the request
    weight_patterns: ClassVar[tuple[str, ...]] = ("*.safetensors",)

    def unavailable(self, cfg: ServerConfig) -> str | None:
        if cfg.kv_cache_dtype not in ("auto", *KV_BITS):
            why = f"kv_cache_dtype {cfg.kv_cache_dtype!r}: MLX-LM quantizes the KV cache to {sorted(KV_BITS)}"
        else:
            why = None
        return super().unavailable(cfg) or why

    def check_model(self, cfg: ServerConfig, model: Path) -> str | None:
        if not model.is_dir():
            return f"{model} is a file: MLX-LM loads a Hugging Face model folder (config.json, *.safetensors, tokenizer)"
        return super().check_model(cfg, model)

    def prepare_model(self, cfg: ServerConfig, model: Path) -> Path:
        args: list[str] = []
        if cfg.dtype in ("float32", "float16", "bfloat16"):
            args += ["--dtype", cfg.dtype]
        if cfg.quantization:
            bits = {"4bit": "4", "q4": "4", "8bit": "8", "q8": "8"}.get(cfg.quantization)
            if bits is None:
                raise ValueError(f"quantization {cfg.quantization!r}: MLX-LM converts to 4bit or 8bit")
            args += ["-q", "--q-bits", bits]
        if not args:
            return model
        key = hashlib.sha256((tinymodel.model_hash(model) + " ".join(args)).encode()).hexdigest()[:12]
        return convert_once(model.parent / f"{model.name}.mlx-{key}", lambda tmp: subprocess.run(
            [self.python(cfg), "-m", "mlx_lm.convert", "--hf-path", str(model), "--mlx-path", str(tmp), *args],
            check=True, capture_output=True, timeout=1800, env=self._env()))

    def command(self, cfg: ServerConfig, model: Path, host: str, port: int) -> list[str]:
        cmd = [self.python(cfg), "-m", "mlx_lm.server", "--model", str(model), "--host", host, "--port", str(port),
               "--max-tokens", str(cfg.max_model_len)]
        if not cfg.prefix_caching:
            cmd += ["--prompt-cache-size", "0"]
        if cfg.max_num_seqs:
            cmd += ["--decode-concurrency", str(cfg.max_num_seqs)]
        if cfg.kv_cache_dtype != "auto":
            cmd += ["--kv-bits", str(KV_BITS[cfg.kv_cache_dtype])]
        spec = cfg.speculative or {}
        if spec:
            cmd += ["--draft-model", str(spec["model"]), "--num-draft-tokens", str(spec.get("num_speculative_tokens", 3))]
        return cmd + list(cfg.args)

    def _env(self) -> dict[str, str]:
        env = {**os.environ, **self.environment(None)}
        return env

    def environment(self, cfg: ServerConfig | None) -> dict[str, str]:
        env = {**super().environment(cfg), "HF_HOME": _hf_home()}
        blas = next((p for p in OPENBLAS if Path(p).is_file()), None)
        if blas:
            env["LD_PRELOAD"] = blas
            env["OPENBLAS_NUM_THREADS"] = str(max(1, (os.cpu_count() or 2) - 1))
        return env

    def ready(self, http: httpx.Client, base_url: str, model_name: str) -> bool:
        try:
            if http.get(base_url + self.health_path).status_code != 200:
                return False
            r = http.post(base_url + "/v1/completions", json={"model": model_name, "prompt": "hi", "max_tokens": 1},
                          timeout=120)
            return r.status_code == 200
        except httpx.HTTPError:
            return False

    def info(self, http: httpx.Client, base_url: str, cfg: ServerConfig | None = None) -> EngineInfo:
        py = self.python(cfg)
        return EngineInfo("mlx", _versions(py), None, {"python": py})

    def fixed_length_fields(self, cfg: ServerConfig, eos_token_id: int | None) -> dict[str, Any]:
        return {"logit_bias": {str(eos_token_id): -100}} if eos_token_id is not None else {}

    def cannot(self, scenario: str, cfg: ServerConfig) -> str | None:
        if scenario == "kv_max_len":
            return "MLX-LM has neither a KV memory budget nor a context-length limit to probe"
        if scenario == "limits":
            return "MLX-LM checks no context length: prompts of any length are accepted (seen: 702 positions on a 256-position model)"
        return None
