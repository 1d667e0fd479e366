"""The machine results were measured on: CPU model, and NVIDIA GPUs through nvidia-ml-py.
Every function answers sensibly when there is no GPU.

Why one module over ~450 lines: the decode roofline and the regime judgement are analysis and
belong in ``analysis/``, but docs/api.md publishes them as ``llmgate.device.decode_roofline`` and
``llmgate.device.classify``, and device/ may not import analysis/: they stay here until that
public name is settled.
"""

from __future__ import annotations

import functools
import math
import os
import platform
import statistics
from pathlib import Path
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


def parse_visible(value: str | None, count: int) -> list[int]:
    """NVML indices of the GPUs that ``CUDA_VISIBLE_DEVICES=value`` leaves visible, in CUDA's
    order, out of ``count`` (numeric indices only; an id that is not a number, or out of range,
    ends the list there, as CUDA does)."""
    if value is None:
        return list(range(count))
    out: list[int] = []
    for part in value.split(","):
        part = part.strip()
        if not part.isdigit() or int(part) >= count or int(part) in out:
            break
        out.append(int(part))
    return out


def visible_gpus() -> list[int]:
    """NVML indices of the GPUs this process and the servers it starts may use."""
    if why_no_gpu():
        return []
    import pynvml

    return parse_visible(os.environ.get("CUDA_VISIBLE_DEVICES"), pynvml.nvmlDeviceGetCount())


def worker_share(visible: list[int], worker: int, workers: int) -> list[int]:
    """The GPUs of pytest-xdist worker ``worker`` (0-based) of ``workers``: the visible GPUs
    split into equal consecutive shares (4 GPUs, 2 workers → [0, 1] and [2, 3])."""
    if workers < 1 or not 0 <= worker < workers:
        raise ValueError(f"worker {worker} of {workers}")
    if workers > len(visible):
        raise ValueError(f"{workers} workers but {len(visible)} GPU(s) visible: one worker per GPU at most")
    per = len(visible) // workers
    return visible[worker * per:(worker + 1) * per]


def gpus() -> list[dict[str, Any]]:
    """The visible GPUs (``CUDA_VISIBLE_DEVICES`` honoured; ``index`` is NVML's)."""
    if why_no_gpu():
        return []
    import pynvml

    out = []
    for i in visible_gpus():
        h = pynvml.nvmlDeviceGetHandleByIndex(i)
        name = pynvml.nvmlDeviceGetName(h)
        g = {"index": i, "name": name.decode() if isinstance(name, bytes) else name,
             "memory_total": pynvml.nvmlDeviceGetMemoryInfo(h).total}
        try:
            g["memory_bus_width_bits"] = pynvml.nvmlDeviceGetMemoryBusWidth(h)
            g["max_memory_clock_mhz"] = pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_MEM)
            g["peak_memory_bandwidth_bytes_s"] = g["max_memory_clock_mhz"] * 1e6 * g["memory_bus_width_bits"] / 8 * 2
        except (pynvml.NVMLError, AttributeError):
            pass
        out.append(g)
    return out


@functools.lru_cache(maxsize=4)
def machine_id(device_kind: str = "cpu") -> str:
    """Which machine measured (recorded beside every result, not part of the fingerprint): for a GPU
    entry the visible GPUs' UUIDs (the cards themselves), else this host's machine-id and name.  A
    stored baseline of another machine carries that machine's offset, one of this machine an earlier
    session's (``noise_prior.stored_offset``)."""
    import hashlib

    parts: list[str] = []
    if device_kind == "gpu" and not why_no_gpu():
        import pynvml

        for i in visible_gpus():
            try:
                parts.append(nvml_text(pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i))))
            except pynvml.NVMLError:
                pass
    if not parts:
        try:
            parts.append(Path("/etc/machine-id").read_text().strip())
        except OSError:
            pass
        parts.append(platform.node())
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


def memory_fraction(budget_bytes: int, count: int = 1) -> float:
    """A GPU budget in bytes as the fraction of a card's memory that vLLM's
    ``--gpu-memory-utilization`` and SGLang's ``--mem-fraction-static`` take: ``budget_bytes`` over
    the total memory (NVML) of the smallest of the first ``count`` visible GPUs (the ones a server
    with that tensor parallelism uses), rounded down to 6 decimals, so that 12e9 bytes are 12 GB on
    an H200 and on an RTX 4070 alike.  ValueError, with the reason, when there is no GPU to read or
    the budget is more than the card has."""
    found = gpus()[:max(1, count)]
    if not found:
        raise ValueError(f"gpu_memory_bytes = {budget_bytes / 1e9:.2f} GB needs the GPU's total memory: "
                         f"{why_no_gpu() or 'no visible GPU'}")
    small = min(found, key=lambda g: g["memory_total"])
    if budget_bytes > small["memory_total"]:
        raise ValueError(f"gpu_memory_bytes = {budget_bytes / 1e9:.2f} GB is more than GPU {small['index']} "
                         f"({small['name']}) has: {small['memory_total'] / 1e9:.2f} GB")
    return math.floor(budget_bytes / small["memory_total"] * 1e6) / 1e6


def describe() -> dict[str, Any]:
    """The device part of every result's provenance (and of baseline fingerprints): the CPU and
    the GPUs visible to this process."""
    return _describe(os.environ.get("CUDA_VISIBLE_DEVICES"))


@functools.lru_cache(maxsize=4)
def _describe(visible: str | None) -> dict[str, Any]:
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


# -- memory-bandwidth roofline and GPU sampling (nvidia-ml-py) -----------------------------
def peak_memory_bandwidth(index: int | None = None) -> float | None:
    """Peak DRAM bandwidth of GPU ``index`` (NVML's; default: the first visible) in bytes/s:
    max memory clock × bus width × 2 (double data rate); None without a GPU or when NVML does not say."""
    if why_no_gpu():
        return None
    import pynvml

    if index is None:
        visible = visible_gpus()
        if not visible:
            return None
        index = visible[0]
    try:
        h = pynvml.nvmlDeviceGetHandleByIndex(index)
        clock_hz = pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_MEM) * 1e6
        bus_bytes = pynvml.nvmlDeviceGetMemoryBusWidth(h) / 8
    except (pynvml.NVMLError, AttributeError):
        return None
    return clock_hz * bus_bytes * 2 if clock_hz and bus_bytes else None


_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4}
_QUANT_BYTES = {"fp8": 1.0, "awq": 0.5, "gptq": 0.5, "awq_marlin": 0.5, "gptq_marlin": 0.5}


_PACKED_METHODS = ("awq", "gptq", "awq_marlin", "gptq_marlin", "auto_awq", "auto_gptq")


def checkpoint_quant_bytes(qcfg: Any, scale_bytes: float | None) -> float | None:
    """Bytes per weight of a linear layer in a group-quantized checkpoint (config.json's
    ``quantization_config``, as vLLM's AWQ/GPTQ loaders read it: ``bits`` (or ``w_bit``),
    ``group_size`` (or ``q_group_size``), ``zero_point`` / ``sym``): ``bits`` / 8 for the packed
    weight, plus per group of ``group_size`` input channels one scale at the activation dtype's
    width and, with zero points, one packed ``bits``-wide zero.  AWQ 4-bit, group 128, fp16
    scales: 0.5 + (2 + 0.5) / 128 = 0.5195.  None for anything else (fp8, no config)."""
    if not isinstance(qcfg, dict) or str(qcfg.get("quant_method", "")).lower() not in _PACKED_METHODS:
        return None
    bits = qcfg.get("bits", qcfg.get("w_bit"))
    group = qcfg.get("group_size", qcfg.get("q_group_size"))
    if not isinstance(bits, int) or not isinstance(group, int) or not bits or scale_bytes is None:
        return None
    zero = qcfg.get("zero_point") if "zero_point" in qcfg else not qcfg.get("sym", True)
    per_group = scale_bytes + (bits / 8 if zero else 0.0)
    return bits / 8 + (per_group / group if group > 0 else 0.0)


def weight_bytes_per_token(model: Path | str, dtype: str = "auto", quantization: str | None = None) -> dict[str, Any] | None:
    """Bytes of weights one decode step reads at batch 1: every layer's weights and the LM head
    (the input embedding is a row lookup).  Linear layers at the quantization's width, the rest
    at ``dtype`` (``auto``: the checkpoint's).  From config.json (and llmgate's manifest for the
    parameter count); None for a model it cannot size."""
    import json

    folder = Path(model)
    if folder.suffix == ".gguf":
        return gguf_bytes_per_token(folder)
    try:
        cfg = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return None
    dt = cfg.get("torch_dtype", "bfloat16") if dtype == "auto" else dtype
    full = _DTYPE_BYTES.get(str(dt))
    lin = _QUANT_BYTES.get(quantization, None) if quantization else full
    packed = checkpoint_quant_bytes(cfg.get("quantization_config"), full)
    if packed is not None and quantization in (None, *_PACKED_METHODS):
        lin = packed          # a pre-quantized checkpoint (AWQ/GPTQ): its bits and its groups' scales/zeros
    try:
        h, layers, inter, vocab = (cfg["hidden_size"], cfg["num_hidden_layers"], cfg["intermediate_size"],
                                   cfg["vocab_size"])
        heads = cfg["num_attention_heads"]
        kv = cfg.get("num_key_value_heads", heads)
        hd = cfg.get("head_dim") or h // heads
    except KeyError:
        return None
    if full is None or lin is None:
        return None
    linear = layers * (h * heads * hd * 2 + h * kv * hd * 2 + 3 * h * inter)   # q, o, k, v, gate/up/down
    norms = layers * 2 * h + h
    head = vocab * h
    params = linear + norms + head * (1 if cfg.get("tie_word_embeddings") else 2)
    try:
        manifest = json.loads((folder / "llmgate-model.json").read_text())
        params = manifest.get("parameters", params)
    except (OSError, ValueError):
        pass
    return {"parameters": params, "bytes_per_token": linear * lin + (norms + head) * full,
            "linear_bytes_per_param": lin, "other_bytes_per_param": full}


def gguf_bytes_per_token(path: Path) -> dict[str, Any] | None:
    """The same for a GGUF file (llama.cpp), read from its tensors as stored, each at its own type
    (a Q4_K_M file mixes 4- and 6-bit blocks): every tensor but the token embedding, a row lookup,
    unless the file has no separate output tensor (tied: the embedding is the LM head).  None
    without the ``gguf`` package (``pytest-llmgate[llamacpp]``) or for a file it cannot read."""
    try:
        from gguf import GGUFReader

        tensors = GGUFReader(str(path)).tensors
    except Exception:                        # no gguf package, or not a readable GGUF (split parts too)
        return None
    names = {t.name for t in tensors}
    tied = "output.weight" not in names
    read = [t for t in tensors if t.name != "token_embd.weight" or tied]
    if not read:
        return None
    params = sum(int(t.n_elements) for t in tensors)
    nbytes = sum(int(t.n_bytes) for t in read)
    return {"parameters": params, "bytes_per_token": nbytes, "source": "gguf tensors"}


def decode_roofline(model: Path | str, dtype: str, quantization: str | None, decode_tok_s: float,
                    gpus: int = 1) -> dict[str, Any] | None:
    """Decode speed at batch 1 as a share of the memory-bandwidth roofline: the weights are read
    once per token, so at most peak bandwidth ÷ weight bytes per token tokens per second.  With
    tensor parallelism over ``gpus`` GPUs each reads its share, so the bandwidths add up."""
    w = weight_bytes_per_token(model, dtype, quantization)
    bw = peak_memory_bandwidth()
    if not w or not bw:
        return None
    bw *= max(1, gpus)
    ceiling = bw / w["bytes_per_token"]
    return {**w, "peak_bandwidth_bytes_s": bw, "gpus": max(1, gpus), "roofline_tok_s": ceiling,
            "decode_tok_s": decode_tok_s, "efficiency": decode_tok_s / ceiling}


class GpuSampler:
    """Memory used, utilisation, SM and memory clocks, temperature, power and throttle reasons of
    every visible GPU, sampled in a thread while a scenario runs (``with GpuSampler() as g: ...;
    g.summary()``).  Reads only: the gate never changes a GPU's settings.  Does nothing without a GPU."""

    def __init__(self, interval: float = 0.2, enabled: bool = True):
        import threading

        self.interval = interval
        self.enabled = enabled and why_no_gpu() is None
        self.samples: list[dict[str, Any]] = []
        self.indices = visible_gpus() if self.enabled else []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="llmgate-gpu-sampler")

    def _sample(self) -> None:
        import pynvml

        for i in self.indices:
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            try:
                s: dict[str, Any] = {"index": i, "used": int(pynvml.nvmlDeviceGetMemoryInfo(h).used),
                                     "util": int(pynvml.nvmlDeviceGetUtilizationRates(h).gpu)}
            except pynvml.NVMLError:
                continue
            for name, read in (("sm_mhz", lambda: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)),
                               ("mem_mhz", lambda: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM)),
                               ("temp_c", lambda: pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)),
                               ("power_w", lambda: pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0),
                               ("throttle", lambda: _throttle_reasons(pynvml, h))):
                try:
                    s[name] = read()
                except (pynvml.NVMLError, AttributeError):
                    pass
            self.samples.append(s)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.interval)

    def __enter__(self) -> "GpuSampler":
        if self.enabled:
            self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.enabled:
            self._stop.set()
            self._thread.join(5)

    def summary(self) -> dict[str, Any]:
        return summarize_samples(self.samples)


# NVML's clock event ("throttle") reason bits; GPU idle and an application-clock setting say
# nothing about a measurement, the others (power cap, thermal, sync boost…) do
_THROTTLE_BITS = {0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
                  0x10: "sync_boost", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown",
                  0x80: "hw_power_brake_slowdown", 0x100: "display_clock_setting"}
_HARMLESS = {"gpu_idle", "applications_clocks_setting"}


def _throttle_reasons(pynvml, h) -> int:
    read = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
        pynvml.nvmlDeviceGetCurrentClocksThrottleReasons
    return int(read(h))


def throttle_names(mask: int) -> list[str]:
    return [name for bit, name in _THROTTLE_BITS.items() if mask & bit]


def summarize_samples(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Per GPU: memory used at the start and at its peak (bytes), utilisation mean and max (%),
    SM and memory clocks (min, median, max MHz), temperature max, power mean, and every throttle
    reason seen (with the share of samples it was on)."""
    out: dict[str, Any] = {}
    for i in sorted({s["index"] for s in samples}):
        mine = [s for s in samples if s["index"] == i]
        g: dict[str, Any] = {"memory_used_start": mine[0]["used"], "memory_used_peak": max(s["used"] for s in mine),
                             "utilization_mean": sum(s["util"] for s in mine) / len(mine),
                             "utilization_max": max(s["util"] for s in mine), "samples": len(mine)}
        for k in ("sm_mhz", "mem_mhz"):
            vals = [s[k] for s in mine if k in s]
            if vals:
                g[k] = {"min": min(vals), "median": float(statistics.median(vals)), "max": max(vals)}
        temps = [s["temp_c"] for s in mine if "temp_c" in s]
        if temps:
            g["temp_c_max"] = max(temps)
        power = [s["power_w"] for s in mine if "power_w" in s]
        if power:
            g["power_w_mean"] = round(sum(power) / len(power), 1)
        seen: dict[str, int] = {}
        for s in mine:
            for name in throttle_names(s.get("throttle", 0)):
                seen[name] = seen.get(name, 0) + 1
        g["throttle"] = {k: round(v / len(mine), 3) for k, v in sorted(seen.items())}
        out[str(i)] = g
    return out


def sampling_notes(summary: dict[str, Any], what: str) -> list[str]:
    """One line per GPU for the report, and a warning when its clocks moved or it throttled."""
    lines = []
    for i, g in summary.items():
        line = (f"GPU {i} during {what}: memory {g['memory_used_start'] / 2**30:.1f} → peak "
                f"{g['memory_used_peak'] / 2**30:.1f} GiB; utilisation mean {g['utilization_mean']:.0f}%")
        sm = g.get("sm_mhz")
        if sm:
            line += f"; SM clock {sm['min']}–{sm['max']} MHz (median {sm['median']:.0f})"
        if "temp_c_max" in g:
            line += f"; max {g['temp_c_max']} °C"
        if "power_w_mean" in g:
            line += f"; {g['power_w_mean']:.0f} W mean"
        lines.append(line)
        bad = {k: v for k, v in g.get("throttle", {}).items() if k not in _HARMLESS}
        if sm and sm["max"] and (sm["max"] - sm["min"]) / sm["max"] > 0.05:
            lines.append(f"GPU {i} during {what}: SM clock moved {sm['min']}–{sm['max']} MHz (more than 5%): "
                         f"figures from this window carry that")
        if bad:
            lines.append(f"GPU {i} during {what}: throttled (" + ", ".join(f"{k} {v:.0%} of samples"
                                                                        for k, v in bad.items()) + ")")
    return lines


# -- the regime: which side of the machine limits a configuration -------------------------
GPU_BOUND_EFFICIENCY = 0.5     # decode at batch 1 reaching half the bandwidth roofline
GPU_BUSY_UTILIZATION = 90.0    # NVML utilisation (% of the time a kernel ran) at which the GPU sets the pace


def classify(device_kind: str, roofline: dict[str, Any] | None, gpu_sampling: dict[str, Any] | None,
             engine_cpu: dict[str, Any] | None) -> dict[str, Any]:
    """GPU-bound or host-bound, from what the decode window measured, with the evidence and the
    rule that decided (``decided_by``).

    First the GPU's own account: a GPU that ran kernels at least ``GPU_BUSY_UTILIZATION`` % of the
    time is what limits the engine, however far below the bandwidth roofline its kernels run (AWQ's
    dequantising kernels on the H200: 95% busy at 21% of the roofline).  Otherwise the roofline
    share: at batch 1 a decode step reads every weight once, so a GPU-bound engine runs near it (an
    8B shape on the H200: ~70%), while a small model on a big card leaves the GPU waiting on the host
    between steps (the 1.7B shape: ~28%), and its boots then differ by what the host does (5–10% CV
    seen, against under 1% GPU-bound).  The engine's busiest process near a full core is shown too."""
    ev: dict[str, Any] = {}
    if engine_cpu:
        ev["busiest_engine_process"] = engine_cpu.get("busiest")
        ev["busiest_cpu_share"] = engine_cpu.get("busiest_share")
    if device_kind != "gpu":
        return {"regime": "cpu", **ev}
    util = None
    if gpu_sampling:
        util = round(sum(g["utilization_mean"] for g in gpu_sampling.values()) / len(gpu_sampling), 1)
        ev["gpu_utilization_mean"] = util
    if roofline:
        ev["roofline_efficiency"] = round(roofline["efficiency"], 4)
    cpu = ev.get("busiest_cpu_share")
    host = f"; busiest engine process {cpu:.0%} of a core" if isinstance(cpu, (int, float)) else ""
    if util is not None and util >= GPU_BUSY_UTILIZATION:
        roof = f", decode at {roofline['efficiency']:.0%} of the bandwidth roofline" if roofline else ""
        return {"regime": "gpu-bound", "decided_by": f"GPU busy {util:.0f}% of the time (>= {GPU_BUSY_UTILIZATION:.0f}%)"
                                                     f"{roof}: its kernels set the pace{host}", **ev}
    if not roofline:
        return {"regime": "unknown (no roofline: model not sized or no bandwidth figure)", **ev}
    eff = roofline["efficiency"]
    busy = f"GPU busy {util:.0f}% of the time, " if util is not None else ""
    if eff >= GPU_BOUND_EFFICIENCY:
        return {"regime": "gpu-bound", "decided_by": f"{busy}decode at {eff:.0%} of the bandwidth roofline "
                                                     f"(>= {GPU_BOUND_EFFICIENCY:.0%}){host}", **ev}
    return {"regime": "host-bound", "decided_by": f"{busy}decode at {eff:.0%} of the bandwidth roofline "
                                                  f"(< {GPU_BOUND_EFFICIENCY:.0%}): the GPU waits between steps{host}",
            **ev}


def nvml_text(x: Any) -> str:
    """A string NVML returned (bytes in older nvidia-ml-py releases)."""
    return x.decode() if isinstance(x, bytes) else str(x)
