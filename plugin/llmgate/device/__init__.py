"""The machine a run measures on: CPU model, NVIDIA GPUs (discovery, NVML sampling, a busy card),
the decode roofline from a model's config.json, and the regime that bounds an entry
(``hardware``); room on a busy GPU before a boot (``gpu_room``).  Public (docs/api.md): ``decode_roofline``, ``classify``, ``sampling_notes``,
``GpuSampler``."""

from llmgate.device.hardware import GpuSampler, classify, decode_roofline, sampling_notes

__all__ = ["GpuSampler", "classify", "decode_roofline", "sampling_notes"]
