"""Fingerprints: what a stored result is keyed by (device, model content, configuration, engine
build, workload), and how two of them differ: the reason a stored result is not comparable.

Identity by content, not place: a checkout in another folder (CI's) must compare with a baseline
saved in the first.  So no absolute path is fingerprinted: each one in the configuration (the
model, its tokenizer, a draft model, a file or folder named in ``args`` or ``env``) is held by its
last part, with the content hash of a file or a model folder (``draft@sha256:<16 hex>``;
``portable_config``), the project's folder itself (pytest's rootdir) as ``.``; the model's own
content is ``model_hash``.  A fingerprint stored with
absolute paths (before they were made portable) is read with their last parts (``legacy_paths``, on every
read: ``stored_fingerprint``; ``llmgate migrate`` rewrites the files),
and a path it recorded without a content hash is taken to be the one of the same name.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Callable

from llmgate.models import tinymodel, tokenizer
from llmgate.store.benchmark_files import EXTRA_KEY

# configuration fields that decide nothing about what is measured
NOT_FINGERPRINTED = ("min_effect", "boot_timeout_s", "levers", "reference", "launcher", "boots")

# The arrival rate a stored workload without one was measured at (stored before an unset rate was
# resolved per device): its device's default then.
LEGACY_ARRIVAL_RATE = {"gpu": 16.0, "cpu": 2.0}

# an absolute path within a string (an argument, ``--flag=PATH``, an environment value, one of a
# ``:``-separated list): after its start, a space, = : , ; a quote or a bracket; never a URL's //
ABS_PATH = re.compile(r"(?<![^\s=:,;'\"(\[{])/(?!/)[^\s:;,'\"\])}]*")
CONTENT = re.compile(r"@sha256:[0-9a-f]{16}")


def fingerprint(config: dict[str, Any] | None, model_hash: str | None, device: dict[str, Any],
                engine: dict[str, Any] | None, workload: dict[str, Any] | None = None,
                root: Path | None = None) -> dict[str, Any]:
    """What a stored result is keyed by: device, model content, full configuration (its paths
    made portable: ``portable_config``, ``root`` the project's folder), engine build, and the
    workload (the request shapes of ``[scenarios]``) when given."""
    eng = {k: (engine or {}).get(k) for k in ("engine", "version", "commit")}
    out = {"device": device_of(device, config), "model_hash": model_hash, "config": portable_config(config, root),
           "engine": eng}
    if workload is not None:
        out["workload"] = dict(workload)
    return out


def device_of(device: dict[str, Any], config: dict[str, Any] | None) -> dict[str, Any]:
    """The device part of a fingerprint of ``config`` (``hardware.describe()``'s CPU, GPUs and
    driver): the GPUs its server uses (the first tensor_parallel visible ones), not all the host
    has, so a one-GPU entry on an 8-GPU host, or on one xdist worker's GPU, compares with a one-GPU
    baseline."""
    dev = {k: device.get(k) for k in ("cpu", "gpus", "driver") if device.get(k) is not None}
    if dev.get("gpus"):
        names = [g.get("name") if isinstance(g, dict) else g for g in dev["gpus"]]
        if config and config.get("device") == "gpu":
            names = names[:max(1, int(config.get("tensor_parallel") or 1))]
        dev["gpus"] = names
    return dev


def portable_config(config: dict[str, Any] | None, root: Path | None = None) -> dict[str, Any]:
    """The configuration as a fingerprint holds it: the fields that decide what is measured, every
    absolute path in them by its last part, with ``@sha256:<16 hex>`` of its content for a file or a
    model folder (a tokenizer: its tokenizer files); the model by its last part alone (its content
    is the fingerprint's ``model_hash``); ``root`` (the project's folder) as ``.``.  A ``[models]``
    name is kept as it is."""
    out: dict[str, Any] = {}
    for k, v in (config or {}).items():
        if k in NOT_FINGERPRINTED:
            continue
        content = None if k == "model" else _tokenizer_content if k == "tokenizer" else _content
        out[k] = _portable(v, content, root)
    return out


def legacy_paths(fp: dict[str, Any]) -> dict[str, Any]:
    """A stored fingerprint with the absolute paths stored before they were made portable read (each by its
    last part; the contents they had were not recorded); a current one is returned as it is."""
    config = fp.get("config")
    if not isinstance(config, dict) or not ABS_PATH.search(json.dumps(config)):
        return fp
    return {**fp, "config": {k: _portable(v, None) for k, v in config.items()}}


def migrate_fingerprint(bench: dict[str, Any]) -> bool:
    """Give one stored entry's fingerprint portable paths (``legacy_paths``); True if it changed.
    The provenance beside it (``config``, ``model_path``) keeps the paths as they were."""
    info = (bench.get("extra_info") or {}).get(EXTRA_KEY)
    fp = info.get("fingerprint") if isinstance(info, dict) else None
    if not isinstance(fp, dict):
        return False
    new = legacy_paths(fp)
    if new is fp:
        return False
    info["fingerprint"] = new
    return True


def _portable(value: Any, content: Callable[[Path], str | None] | None, root: Path | None = None) -> Any:
    if isinstance(value, dict):
        return {k: _portable(v, content, root) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_portable(v, content, root) for v in value]
    if not isinstance(value, str):
        return value

    def one(m: re.Match) -> str:
        path = Path(m.group(0))
        if root is not None and path == root:
            return "."
        name = path.name or m.group(0)
        digest = content(path) if content is not None else None
        return f"{name}@sha256:{digest[:16]}" if digest else name

    return ABS_PATH.sub(one, value)


def _content(path: Path) -> str | None:
    """The content hash of a file, or of a model folder (config.json, or llmgate's manifest); None
    for another folder (a cache, a library path: where, not what) or a path that is not there."""
    try:
        if path.is_file() or (path.is_dir() and ((path / "config.json").is_file()
                                                 or (path / tinymodel.MANIFEST).is_file())):
            return tinymodel.model_hash(path)
    except OSError:
        pass
    return None


def _tokenizer_content(path: Path) -> str | None:
    try:
        return tokenizer.content_hash(path) if path.is_dir() else _content(path)
    except OSError:
        return None


def _as_recorded(now: Any, base: Any) -> Any:
    """``now`` read as ``base`` recorded it: a path stored without its content hash (stored before
    contents were, or of a file that was not there) is the one of the same name."""
    if isinstance(now, str) and isinstance(base, str):
        return base if "@sha256:" not in base and CONTENT.sub("", now) == base else now
    if isinstance(now, dict) and isinstance(base, dict):
        return {k: _as_recorded(v, base.get(k)) for k, v in now.items()}
    if isinstance(now, list) and isinstance(base, list) and len(now) == len(base):
        return [_as_recorded(n, b) for n, b in zip(now, base)]
    return now


def fingerprint_mismatch(base: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """Why two fingerprints are not comparable (the engine build may differ: that is what is gated)."""
    return list(fingerprint_differences(base, now).values())


def fingerprint_differences(base: dict[str, Any], now: dict[str, Any]) -> dict[str, str]:
    """``fingerprint_mismatch`` by the part that differs: "device", "model", "configuration",
    "workload" → the line that says how."""
    problems: dict[str, str] = {}
    base = legacy_paths(base)
    if base.get("device") != now.get("device"):
        problems["device"] = f"device differs: baseline {_short(base.get('device'))} vs now {_short(now.get('device'))}"
    if base.get("model_hash") != now.get("model_hash"):
        problems["model"] = (f"model differs: baseline content hash {str(base.get('model_hash'))[:12]} vs now "
                             f"{str(now.get('model_hash'))[:12]}")
    bc = base.get("config") or {}
    nc = _as_recorded(now.get("config") or {}, bc)
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
    """A stored entry's fingerprint, read portably (``legacy_paths``)."""
    return legacy_paths(((bench.get("extra_info") or {}).get(EXTRA_KEY) or {}).get("fingerprint") or {})
