"""Engine adapters, one file each, behind the protocol in ``base.py``."""

from __future__ import annotations

import importlib

from .base import BaseAdapter, BootDiagnosis, Engine, EngineInfo

# name → module holding a class ``Adapter``; adding an engine is one file and one line here.
_ADAPTERS = {
    "vllm": "llmgate.engines.vllm",
    "sglang": "llmgate.engines.sglang",
    "llamacpp": "llmgate.engines.llamacpp",
    "mlx": "llmgate.engines.mlx",
}


def names() -> list[str]:
    return sorted(_ADAPTERS)


def get(name: str) -> Engine:
    if name not in _ADAPTERS:
        raise KeyError(f"unknown engine {name!r} (known: {', '.join(names())})")
    return importlib.import_module(_ADAPTERS[name]).Adapter()


__all__ = ["BaseAdapter", "BootDiagnosis", "Engine", "EngineInfo", "get", "names"]
