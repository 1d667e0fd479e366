"""Is there room on the GPU? (before a boot): what NVML says each visible card holds and which
processes hold it, and the one line that names a card an entry cannot boot on because another
process holds its memory (``busy_gpu``), said at once rather than after the engine's own timeout."""

from __future__ import annotations

import os
from typing import Any

from llmgate.device.hardware import nvml_text, parse_visible

GIB = 1 << 30
_NOT_AVAILABLE = (1 << 64) - 1          # NVML_VALUE_NOT_AVAILABLE as an unsigned long long


def _nvml():
    import pynvml

    pynvml.nvmlInit()
    return pynvml


def _gpu_processes(nvml: Any, handle: Any) -> list[tuple[int, int | None]]:
    """(pid, bytes held or None) of every process with a context on a GPU: compute processes
    (newest NVML call first: _v3, _v2, plain) and graphics ones (an X server holds memory too)."""
    seen: dict[int, int | None] = {}
    for names in (("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2",
                   "nvmlDeviceGetComputeRunningProcesses"),
                  ("nvmlDeviceGetGraphicsRunningProcesses_v3", "nvmlDeviceGetGraphicsRunningProcesses_v2",
                   "nvmlDeviceGetGraphicsRunningProcesses")):
        for name in names:
            fn = getattr(nvml, name, None)
            if fn is None:
                continue
            try:
                procs = fn(handle)
            except nvml.NVMLError:
                continue
            for p in procs or []:
                used = getattr(p, "usedGpuMemory", None)
                used = None if used in (None, _NOT_AVAILABLE) else int(used)
                seen[int(p.pid)] = max(used or 0, seen.get(int(p.pid)) or 0) if used is not None else seen.get(int(p.pid))
            break
    return sorted(seen.items(), key=lambda kv: -(kv[1] or 0))


def _process_words(pid: int) -> str:
    """A GPU process by name: its command line here, or why it cannot be seen (NVML reports the
    host's pids; in a container another namespace's process is not visible)."""
    import psutil

    try:
        p = psutil.Process(pid)
        cmd = " ".join(" ".join(p.cmdline()).split()) or p.name()
        user = p.username()
    except psutil.AccessDenied:
        return "(not readable from here)"
    except psutil.Error:
        return "(not visible from here: another container or pid namespace?)"
    cmd = cmd if len(cmd) <= 100 else cmd[:97] + "…"
    return f"{cmd} (user {user})"


def gpu_memory(indices: list[int], nvml: Any = None) -> list[dict[str, Any]]:
    """Memory of NVML GPUs ``indices`` as an engine starting now would find it: total, free
    (bytes), and the processes holding memory there (pid, bytes, command line).  ``total`` is
    what CUDA reports (NVML's total less the driver's reserved memory, where NVML tells it)."""
    nvml = nvml or _nvml()
    out = []
    for i in indices:
        h = nvml.nvmlDeviceGetHandleByIndex(i)
        mem = None
        v2 = getattr(nvml, "nvmlDeviceGetMemoryInfo_v2", None) or (
            (lambda h: nvml.nvmlDeviceGetMemoryInfo(h, version=nvml.nvmlMemory_v2))
            if hasattr(nvml, "nvmlMemory_v2") else None)
        if v2 is not None:
            try:
                mem = v2(h)
            except (nvml.NVMLError, TypeError):
                mem = None
        if mem is None:
            mem = nvml.nvmlDeviceGetMemoryInfo(h)
        reserved = int(getattr(mem, "reserved", 0) or 0)
        out.append({"index": i, "name": nvml_text(nvml.nvmlDeviceGetName(h)), "total": int(mem.total) - reserved,
                    "free": int(mem.free), "used": int(mem.used),
                    "processes": [{"pid": pid, "bytes": used, "command": _process_words(pid)}
                                  for pid, used in _gpu_processes(nvml, h)]})
    return out


def entry_gpus(cfg_env: dict[str, str], tensor_parallel: int, nvml: Any = None) -> list[int]:
    """NVML indices of the GPUs an entry's server will use: the first ``tensor_parallel`` of
    those ``CUDA_VISIBLE_DEVICES`` leaves visible (the entry's own ``env`` first, then ours)."""
    nvml = nvml or _nvml()
    visible = parse_visible(cfg_env.get("CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES")),
                            nvml.nvmlDeviceGetCount())
    return visible[:max(1, tensor_parallel)]


def no_room(entry: str, gpus: list[dict[str, Any]], budget: Any) -> str | None:
    """Why the entry cannot fit on ``gpus`` (``gpu_memory``'s answer), naming what holds the
    memory; None when it fits.  ``budget(total) -> (bytes per GPU, how it was reckoned)``."""
    short = []
    for g in gpus:
        need, how = budget(g["total"])
        if need > g["free"]:
            short.append((g, need, how))
    if not short:
        return None
    lines = []
    for g, need, how in short:
        lines.append(f"GPU {g['index']} ({g['name']}) has {g['free'] / GIB:.1f} GiB free of {g['total'] / GIB:.1f} GiB; "
                     f"the entry needs {need / GIB:.1f} GiB ({how})")
        holders = g["processes"]
        if holders:
            lines.append("  held by:")
            for p in holders:
                held = f"{p['bytes'] / GIB:.1f} GiB" if p["bytes"] is not None else "memory not reported"
                lines.append(f"    pid {p['pid']}: {held}: {p['command']}")
        else:
            lines.append(f"  NVML names no process holding it ({g['used'] / GIB:.1f} GiB used): another "
                         f"container, or a process of another user")
    return (f"{entry}: not booted: the GPU is busy\n" + "\n".join(lines)
            + "\nstop those processes (or lower the entry's gpu_memory_utilization), then run again")


def busy_gpu(entry: str, env: dict[str, str], tensor_parallel: int, budget: Any, nvml: Any = None) -> str | None:
    """Before booting a GPU entry: why it cannot fit (``no_room``), or None when it fits or
    cannot be checked (no NVML, or ``budget(total)`` is None: the engine does not say)."""
    if budget(1 << 40) is None:
        return None
    try:
        nvml = nvml or _nvml()
        gpus = gpu_memory(entry_gpus(env, tensor_parallel, nvml), nvml)
    except Exception:                 # no pynvml, no driver, an NVML error: the engine finds out itself
        return None
    return no_room(entry, gpus, budget)


def room_for_two(entry: str, env: dict[str, str], tensor_parallel: int, budget: Any, nvml: Any = None) -> str | None:
    """A duet (two servers of one entry resident together): why two of the entry's budgets do not fit
    its GPUs' free memory now, in one line; None when they fit or it cannot be checked (no NVML, or
    the engine does not say its budget)."""
    if budget(1 << 40) is None:
        return None
    try:
        nvml = nvml or _nvml()
        gpus = gpu_memory(entry_gpus(env, tensor_parallel, nvml), nvml)
    except Exception:                 # no pynvml, no driver, an NVML error: the boot finds out
        return None
    for g in gpus:
        need, how = budget(g["total"])
        if 2 * need > g["free"]:
            return (f"{entry}: two servers need 2 × {need / GIB:.1f} GiB ({how}) and GPU {g['index']} ({g['name']}) has "
                    f"{g['free'] / GIB:.1f} GiB free of {g['total'] / GIB:.1f} GiB")
    return None
