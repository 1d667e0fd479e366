"""NVIDIA GPUs through nvidia-ml-py; every function answers sensibly when there is none."""

from __future__ import annotations

import functools


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
