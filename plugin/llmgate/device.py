"""The machine results were measured on: CPU model, and NVIDIA GPUs through nvidia-ml-py.
Every function answers sensibly when there is no GPU."""

from __future__ import annotations

import functools
import os
import platform
from typing import Any


@functools.lru_cache(maxsize=1)
def why_no_gpu() -> str | None:
    """None when an NVIDIA GPU is visible; otherwise the reason, for a skip message."""
    try:
        import pynvml
    except ImportError:
        return "no NVIDIA GPU: nvidia-ml-py is not installed (pip install 'pytest-llmgate[gpu]')"
    try:
        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
    except pynvml.NVMLError as e:
        return f"no NVIDIA GPU: NVML could not start ({e})"
    if count == 0:
        return "no NVIDIA GPU: NVML sees no device"
    return None


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _cpu_flags() -> list[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return sorted(x for x in flags if x.startswith(("avx", "amx")))
    except OSError:
        pass
    return []


def gpus() -> list[dict[str, Any]]:
    if why_no_gpu():
        return []
    import pynvml

    out = []
    for i in range(pynvml.nvmlDeviceGetCount()):
        h = pynvml.nvmlDeviceGetHandleByIndex(i)
        name = pynvml.nvmlDeviceGetName(h)
        out.append({"index": i, "name": name.decode() if isinstance(name, bytes) else name,
                    "memory_total": pynvml.nvmlDeviceGetMemoryInfo(h).total})
    return out


@functools.lru_cache(maxsize=1)
def describe() -> dict[str, Any]:
    """The device part of every result's provenance (and of baseline fingerprints)."""
    d: dict[str, Any] = {"cpu": cpu_model(), "cpu_count": os.cpu_count(), "cpu_flags": _cpu_flags(),
                         "system": f"{platform.system()} {platform.release()}"}
    g = gpus()
    if g:
        import pynvml

        d["gpus"] = g
        drv = pynvml.nvmlSystemGetDriverVersion()
        d["driver"] = drv.decode() if isinstance(drv, bytes) else drv
        try:
            cuda = pynvml.nvmlSystemGetCudaDriverVersion_v2()
            d["cuda"] = f"{cuda // 1000}.{cuda % 1000 // 10}"
        except pynvml.NVMLError:
            pass
    return d
