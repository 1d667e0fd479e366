"""The busy-GPU check on a real GPU: a second process (PyTorch) holds GPU memory, then the
check runs for a vLLM entry whose budget cannot fit and prints what a user of the gate sees;
then once more for a budget that fits (no message).  ``--record FILE`` keeps the NVML answers
the check read, for the CPU unit test (tests/plugin/test_leftovers.py replays them).

    python tests/validation/busy_gpu.py --hold-gib 100 --util 0.9 [--record nvml.json]

Needs nvidia-ml-py, psutil and PyTorch with CUDA; this process itself opens no CUDA context.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "plugin"))

from llmgate.device import gpu_room as device  # noqa: E402
from llmgate.engines import vllm  # noqa: E402
from llmgate.config.matrix import ServerConfig  # noqa: E402

HOLDER = """
import sys, time, torch
x = torch.empty(int(float(sys.argv[1]) * (1 << 30)), dtype=torch.uint8, device="cuda")
free, total = torch.cuda.mem_get_info()
print(f"holding {x.numel() / (1 << 30):.1f} GiB; CUDA says free {free} total {total}", flush=True)
time.sleep(float(sys.argv[2]))
"""

FUNCTIONS = ("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2",
             "nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses_v3",
             "nvmlDeviceGetGraphicsRunningProcesses_v2", "nvmlDeviceGetGraphicsRunningProcesses")


def _plain(x):
    if isinstance(x, (list, tuple)):
        return [_plain(i) for i in x]
    if hasattr(x, "_fields_"):
        return {f[0]: _plain(getattr(x, f[0])) for f in x._fields_}
    if isinstance(x, bytes):
        return x.decode()
    if hasattr(x, "__dict__") and not isinstance(x, (int, float, str)):     # pynvml's nvmlFriendlyObject
        return {k: _plain(v) for k, v in vars(x).items() if not k.startswith("_")}
    return x


def record(nvml, indices: list[int]) -> dict:
    """Every NVML answer device.gpu_memory reads, as plain data."""
    out = {"count": nvml.nvmlDeviceGetCount(), "driver": _plain(nvml.nvmlSystemGetDriverVersion()), "devices": []}
    for i in indices:
        h = nvml.nvmlDeviceGetHandleByIndex(i)
        d = {"index": i, "name": _plain(nvml.nvmlDeviceGetName(h)),
             "memory": _plain(nvml.nvmlDeviceGetMemoryInfo(h))}
        try:
            d["memory_v2"] = _plain(nvml.nvmlDeviceGetMemoryInfo(h, version=nvml.nvmlMemory_v2))
        except (AttributeError, TypeError, nvml.NVMLError) as e:
            d["memory_v2"] = {"error": str(e)}
        for fn in FUNCTIONS:
            f = getattr(nvml, fn, None)
            if f is None:
                d[fn] = {"missing": True}
                continue
            try:
                d[fn] = _plain(f(h))
            except nvml.NVMLError as e:
                d[fn] = {"error": str(e)}
        out["devices"].append(d)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hold-gib", type=float, default=100.0)
    ap.add_argument("--util", type=float, default=0.9, help="the entry's gpu_memory_utilization (cannot fit)")
    ap.add_argument("--fits-util", type=float, default=0.2, help="a budget that fits beside the holder")
    ap.add_argument("--record", metavar="FILE")
    args = ap.parse_args()

    import pynvml

    pynvml.nvmlInit()
    indices = device.entry_gpus({}, 1, pynvml)
    before = device.gpu_memory(indices, pynvml)
    print(f"before: GPU {before[0]['index']} {before[0]['name']}: free {before[0]['free'] / device.GIB:.1f} GiB "
          f"of {before[0]['total'] / device.GIB:.1f} GiB, {len(before[0]['processes'])} process(es)")
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(args.hold_gib), "300"], stdout=subprocess.PIPE,
                              text=True)
    try:
        line = holder.stdout.readline().strip()
        print(f"second process (pid {holder.pid}): {line}")
        time.sleep(1.0)                                   # NVML's process list follows the allocation
        adapter = vllm.Adapter()
        for util in (args.util, args.fits_util):
            cfg = ServerConfig(id=f"h200-vllm-util{util}", engine="vllm", model="m", device="gpu",
                               gpu_memory_utilization=util)
            t0 = time.perf_counter()
            msg = device.busy_gpu(cfg.id, cfg.env, cfg.tensor_parallel,
                                  lambda total: adapter.gpu_budget_bytes(cfg, total), pynvml)
            took = time.perf_counter() - t0
            print(f"\n--- gpu_memory_utilization {util}: check took {took * 1000:.0f} ms; "
                  f"{'the entry fails with:' if msg else 'fits: no message'}")
            if msg:
                print(msg)
        if args.record:
            rec = record(pynvml, indices)
            rec["holder"] = {"pid": holder.pid, "said": line, "hold_gib": args.hold_gib}
            rec["created"] = time.strftime("%Y-%m-%d %H:%M:%S")
            Path(args.record).write_text(json.dumps(rec, indent=1))
            print(f"\nNVML answers recorded in {args.record}")
    finally:
        holder.kill()
        holder.wait()
    os.environ.pop("CUDA_VISIBLE_DEVICES", None)


if __name__ == "__main__":
    main()
