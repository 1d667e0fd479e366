"""Fingerprints: what a stored result is keyed by (device, model content, configuration, engine
build, workload), and how two of them differ: the reason a stored result is not comparable."""

from __future__ import annotations

import json
from typing import Any

from llmgate.store.benchmark_files import EXTRA_KEY

# configuration fields that decide nothing about what is measured
NOT_FINGERPRINTED = ("min_effect", "boot_timeout_s", "levers", "reference", "launcher", "boots")

# The arrival rate a stored workload without one was measured at (stored before an unset rate was
# resolved per device): its device's default then.
LEGACY_ARRIVAL_RATE = {"gpu": 16.0, "cpu": 2.0}


def fingerprint(config: dict[str, Any] | None, model_hash: str | None, device: dict[str, Any],
                engine: dict[str, Any] | None, workload: dict[str, Any] | None = None) -> dict[str, Any]:
    """What a stored result is keyed by: device, model content, full configuration, engine build,
    and the workload (the request shapes of ``[scenarios]``) when given."""
    dev = {k: device.get(k) for k in ("cpu", "gpus", "driver") if device.get(k) is not None}
    if dev.get("gpus"):
        names = [g.get("name") for g in dev["gpus"]]
        if config and config.get("device") == "gpu":
            # the GPUs its server uses (the first tensor_parallel visible ones), not all the host has:
            # a one-GPU entry on an 8-GPU host, or on one xdist worker's GPU, compares with a one-GPU baseline
            names = names[:max(1, int(config.get("tensor_parallel") or 1))]
        dev["gpus"] = names
    cfg = {k: v for k, v in (config or {}).items() if k not in NOT_FINGERPRINTED}
    eng = {k: (engine or {}).get(k) for k in ("engine", "version", "commit")}
    out = {"device": dev, "model_hash": model_hash, "config": cfg, "engine": eng}
    if workload is not None:
        out["workload"] = dict(workload)
    return out


def fingerprint_mismatch(base: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """Why two fingerprints are not comparable (the engine build may differ: that is what is gated)."""
    return list(fingerprint_differences(base, now).values())


def fingerprint_differences(base: dict[str, Any], now: dict[str, Any]) -> dict[str, str]:
    """``fingerprint_mismatch`` by the part that differs: "device", "model", "configuration",
    "workload" → the line that says how."""
    problems: dict[str, str] = {}
    if base.get("device") != now.get("device"):
        problems["device"] = f"device differs: baseline {_short(base.get('device'))} vs now {_short(now.get('device'))}"
    if base.get("model_hash") != now.get("model_hash"):
        problems["model"] = (f"model differs: baseline content hash {str(base.get('model_hash'))[:12]} vs now "
                             f"{str(now.get('model_hash'))[:12]}")
    bc, nc = base.get("config") or {}, now.get("config") or {}
    changed = sorted(k for k in set(bc) | set(nc) if bc.get(k) != nc.get(k))
    if changed:
        problems["configuration"] = "configuration differs: " + ", ".join(f"{k}: {bc.get(k)!r} → {nc.get(k)!r}"
                                                                        for k in changed)
    if "workload" in now and "workload" not in base:
        problems["workload"] = ("the baseline does not record its workload (made before request shapes were "
                                "fingerprinted): re-record it")
    elif "workload" in now:
        bw, nw = dict(base["workload"] or {}), now["workload"] or {}
        if bw.get("arrival_rate") is None and nw.get("arrival_rate") is not None:
            # stored before rates were resolved per device: it ran at its device's default then
            bw["arrival_rate"] = LEGACY_ARRIVAL_RATE.get(((base.get("config") or {}).get("device")) or "cpu")
        moved = sorted(k for k in set(bw) | set(nw) if bw.get(k) != nw.get(k))
        if moved:
            problems["workload"] = "workload differs: " + ", ".join(f"scenarios.{k}: {bw.get(k)!r} → {nw.get(k)!r}"
                                                                  for k in moved)
    return problems


def engine_change(base: dict[str, Any], now: dict[str, Any]) -> str | None:
    b, n = base.get("engine") or {}, now.get("engine") or {}
    if b == n:
        return None
    def name(e):
        return f"{e.get('engine')} {e.get('version')}" + (f" ({str(e['commit'])[:10]})" if e.get("commit") else "")
    return f"engine {name(b)} → {name(n)}"


def _short(v: Any) -> str:
    return json.dumps(v, sort_keys=True)[:200]


def stored_fingerprint(bench: dict[str, Any]) -> dict[str, Any]:
    return ((bench.get("extra_info") or {}).get(EXTRA_KEY) or {}).get("fingerprint") or {}
