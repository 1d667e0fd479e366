"""What the engines run as ``python -m MODULE`` share (vLLM, SGLang, MLX-LM).

- The interpreter: the entry's ``launcher``, else ``$LLMGATE_<ENGINE>_PYTHON``, else this Python;
  ``unavailable()`` says when it is missing or lacks the engine's package (with the install hint).
- Facts read in that interpreter without importing the engine (``run_python``).
- A failed boot's reason: the last line of the last Python traceback.
- Offline Hugging Face hub, and stream fields with per-chunk token counts where the engine has them.
- The model: a Hugging Face folder (``config.json``, and weights unless ``load_format = "dummy"``).
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, ClassVar

from llmgate.core.types import ServerConfig
from llmgate.engines.base import TRACEBACK_FINAL, BaseAdapter, BootDiagnosis, last_match
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
WEIGHT_PATTERNS = ("*.safetensors", "*.bin", "*.pt", "*.pth")


def traceback_diagnosis(log_text: str) -> BootDiagnosis | None:
    """The final line of the last Python traceback in a log, as the boot's reason."""
    m = last_match(TRACEBACK_FINAL, log_text, re.M)
    return BootDiagnosis(m.group(0).strip()[:400]) if m else None


def run_python(python: str, code: str, strip: bool = True, timeout: float = 60) -> str | None:
    """What ``python -c code`` prints (stripped unless ``strip`` is False); None when it fails or
    prints nothing."""
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=timeout)
    text = out.stdout.strip() if strip else out.stdout
    return (text or None) if out.returncode == 0 else None


class PythonModuleAdapter(BaseAdapter):
    """An engine served by ``python -m ...`` from an interpreter that has its package."""

    package: ClassVar[str] = "?"            # the import name whose presence makes the engine available
    display: ClassVar[str] = "?"            # the engine as messages name it ("vLLM")
    python_env: ClassVar[str] = "?"         # the variable naming its interpreter (LLMGATE_VLLM_PYTHON)
    install_hint: ClassVar[str] = ""
    usage_per_chunk: ClassVar[bool] = True  # honours stream_options.continuous_usage_stats
    weight_patterns: ClassVar[tuple[str, ...]] = WEIGHT_PATTERNS

    def launcher(self, cfg: ServerConfig | None) -> str | None:
        """The interpreter the entry names (``launcher``, else the variable); None: this Python."""
        return (cfg.launcher if cfg else None) or os.environ.get(self.python_env) or None

    def python(self, cfg: ServerConfig | None) -> str:
        return self.launcher(cfg) or sys.executable

    def unavailable(self, cfg: ServerConfig) -> str | None:
        py = self.python(cfg)
        if py == sys.executable:
            if importlib.util.find_spec(self.package) is None:
                return f"{self.display} is not installed in this Python ({self.install_hint})"
            return None
        if not Path(py).is_file():
            return f"launcher {py!r} does not exist (a Python interpreter with {self.display} installed)"
        probe = subprocess.run([py, "-c", "import importlib.util as u, sys; "
                                f"sys.exit(u.find_spec({self.package!r}) is None)"], capture_output=True, timeout=60)
        if probe.returncode != 0:
            return f"{self.display} is not installed in {py} ({self.install_hint})"
        return None

    def check_model(self, cfg: ServerConfig, model: Path) -> str | None:
        if not model.is_dir():
            return None                     # a single file: the engine says what it makes of it
        if not (model / "config.json").is_file():
            return (f"{model} has no config.json: {self.display} loads a Hugging Face model folder "
                    f"(config.json, weights, tokenizer)")
        if cfg.load_format != "dummy" and not any(any(model.glob(p)) for p in self.weight_patterns):
            return (f"{model} has no weights ({' or '.join(self.weight_patterns)}); "
                    f"give load_format = \"dummy\" to run with random weights")
        return None

    def environment(self, cfg: ServerConfig | None) -> dict[str, str]:
        return dict(OFFLINE)

    def stream_fields(self) -> dict[str, Any]:
        if not self.usage_per_chunk:
            return super().stream_fields()
        return {"stream_options": {"include_usage": True, "continuous_usage_stats": True}}

    def diagnose_boot(self, log_text: str) -> BootDiagnosis | None:
        return traceback_diagnosis(log_text)
