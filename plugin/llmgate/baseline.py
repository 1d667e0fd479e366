"""Baselines through pytest-benchmark's storage (``baselines/`` by default).

Every recorded metric becomes one pytest-benchmark entry named
``<test node id>::<metric key>``.  Its timing data are the metric's values in
"bigger is worse" form (seconds as they are; tok/s as seconds per token), so
``--benchmark-compare-fail=median:10%`` works in the right direction, and its
``extra_info["llmgate"]`` holds the natural values, unit, direction and
provenance that llmgate's own verdict reads back.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

import pytest

from .metrics import Metric

EXTRA_KEY = "llmgate"
SCHEMA_VERSION = 3          # 2: every entry carries a fingerprint; 3: values per boot ("boots") and a noise model
READABLE_SCHEMAS = (2, 3)   # a schema-2 entry reads as one boot with no noise model
# configuration fields that decide nothing about what is measured
NOT_FINGERPRINTED = ("min_effect", "boot_timeout_s", "levers", "reference", "launcher", "boots")


class BaselineError(ValueError):
    """A stored baseline file that cannot be used; the message names the file and the problem."""


def fingerprint(config: dict[str, Any] | None, model_hash: str | None, device: dict[str, Any],
                engine: dict[str, Any] | None) -> dict[str, Any]:
    """What a stored result is keyed by: device, model content, full configuration, engine build."""
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
    return {"device": dev, "model_hash": model_hash, "config": cfg, "engine": eng}


def fingerprint_mismatch(base: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """Why two fingerprints are not comparable (the engine build may differ: that is what is gated)."""
    problems = []
    if base.get("device") != now.get("device"):
        problems.append(f"device differs: baseline {_short(base.get('device'))} vs now {_short(now.get('device'))}")
    if base.get("model_hash") != now.get("model_hash"):
        problems.append(f"model differs: baseline content hash {str(base.get('model_hash'))[:12]} vs now "
                        f"{str(now.get('model_hash'))[:12]}")
    bc, nc = base.get("config") or {}, now.get("config") or {}
    changed = sorted(k for k in set(bc) | set(nc) if bc.get(k) != nc.get(k))
    if changed:
        problems.append("configuration differs: " + ", ".join(f"{k}: {bc.get(k)!r} → {nc.get(k)!r}" for k in changed))
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


def benchmark_session(config: pytest.Config):
    return getattr(config, "_benchmarksession", None)


def node_key(item: pytest.Item) -> str:
    """The test's id in stored baselines: its node id without the ``@group`` that pytest-xdist's
    ``--dist loadgroup`` appends, so that runs with and without xdist compare with each other."""
    nodeid = item.nodeid
    callspec = getattr(item, "callspec", None)
    boot = callspec.params.get("llmgate_boot") if callspec else None
    if boot is not None:          # one stored entry spans the boots of a run: test[entry-boot2] → test[entry]
        nodeid = nodeid.replace(f"-boot{boot}]", "]")
    mark = item.get_closest_marker("xdist_group")
    if mark is not None:
        group = mark.args[0] if mark.args else mark.kwargs.get("name", "default")
        nodeid = nodeid.removesuffix(f"@{group}")
    return nodeid


def enable_on_xdist_worker(config: pytest.Config, worker: str) -> None:
    """pytest-benchmark turns itself off under pytest-xdist, as its timings would share the CPU.
    llmgate's measurements time servers on the GPUs of each worker, so a worker keeps storing and
    comparing: it saves as NAME-gwN (one file per worker, NNNN_NAME-gwN.json)."""
    bs = benchmark_session(config)
    if bs is None or config.getoption("benchmark_disable") or bs.skip:
        return
    bs.disabled = False
    if hasattr(bs, "xdist_warning"):        # pytest-benchmark >= 5.3 (5.2 only warns, at configure)
        bs.xdist_warning = False
    if bs.save:
        bs.save = f"{bs.save}-{worker}"
    if bs.autosave:
        bs.autosave = f"{bs.autosave}-{worker}"


WORKER_FILE = re.compile(r"^\d{4}_(.+)-gw\d+$")


def widen_compare_to_workers(config: pytest.Config) -> list[str]:
    """A compared file saved by one xdist worker (NNNN_NAME-gwN.json) holds that worker's
    entries only: compare with every worker's file of that NAME (the newest wins per test).
    Returns the files then compared."""
    bs = benchmark_session(config)
    if bs is None or not bs.compare or not bs.compared_mapping:
        return []
    names = {m.group(1) for p in bs.compared_mapping if (m := WORKER_FILE.match(Path(str(p)).stem))}
    if not names:
        return []
    wanted = [f"*_{n}-gw" for n in sorted(names)]
    mapping: dict[Any, dict[str, Any]] = {}
    for path, data in bs.storage.load(*wanted):
        mapping[path] = {b["fullname"]: b for b in data["benchmarks"]}
    for path, m in bs.compared_mapping.items():       # the files asked for stay, and stay newest
        mapping.pop(path, None)
        mapping[path] = m
    bs.compared_mapping = mapping
    return [str(p) for p in mapping]


def store(item: pytest.Item, metric: Metric, key: str, boots: list[list[float]], extra: dict[str, Any],
          noise: dict[str, Any] | None = None):
    """Add one metric of ``item`` to pytest-benchmark's results: its repeat values per boot and the
    noise model they give; returns the entry (None when benchmarks are disabled)."""
    values = [v for b in boots for v in b]
    from pytest_benchmark.fixture import BenchmarkFixture

    bs = benchmark_session(item.config)
    if bs is None or bs.disabled:
        return None
    fx = BenchmarkFixture(item, add_stats=bs.benchmarks.append, logger=bs.logger, warner=item.warn,
                          disabled=bs.disabled, **bs.options)
    fx.name = f"{item.name}::{key}"
    fx.fullname = f"{node_key(item)}::{key}"
    fx.group = f"{metric.label} [{metric.unit}; stored as {'1/x' if metric.better == 'higher' else 'x'}]"
    fx.extra_info = {EXTRA_KEY: {"schema": SCHEMA_VERSION, "metric": metric.name, "key": key, "unit": metric.unit,
                                 "better": metric.better, "values": list(values),
                                 "boots": [list(b) for b in boots], "noise": noise, **extra}}
    meta = fx._make_stats(1)
    for v in values:
        meta.stats.update(metric.cost(v))
    return meta


def compare_active(config: pytest.Config) -> bool:
    bs = benchmark_session(config)
    return bool(bs is not None and bs.compare and bs.compared_mapping is not None)


def baseline(config: pytest.Config, nodeid: str, key: str) -> tuple[str, dict[str, Any]] | None:
    """The stored entry for ``nodeid::key`` in the file(s) named by --benchmark-compare (the newest wins)."""
    bs = benchmark_session(config)
    if bs is None or not bs.compared_mapping:
        return None
    found = None
    for path, mapping in bs.compared_mapping.items():
        bench = mapping.get(f"{nodeid}::{key}")
        if bench is not None:
            found = (str(path), bench)
    return found


def baseline_values(bench: dict[str, Any]) -> list[float] | None:
    info = (bench.get("extra_info") or {}).get(EXTRA_KEY)
    if not isinstance(info, dict) or not isinstance(info.get("values"), list):
        return None
    return [float(v) for v in info["values"]]


def baseline_boots(bench: dict[str, Any]) -> list[list[float]] | None:
    """A stored entry's repeat values per boot (schema 2: all of them as one boot)."""
    info = (bench.get("extra_info") or {}).get(EXTRA_KEY)
    if not isinstance(info, dict):
        return None
    if isinstance(info.get("boots"), list) and info["boots"]:
        return [[float(v) for v in b] for b in info["boots"]]
    values = baseline_values(bench)
    return [values] if values else None


def baseline_noise(bench: dict[str, Any]):
    """The noise model stored with an entry (None for schema 2 or a single boot without one)."""
    from .stats import Noise

    info = (bench.get("extra_info") or {}).get(EXTRA_KEY) or {}
    noise = Noise.from_dict(info.get("noise"))
    return noise if noise is not None and noise.df >= 1 else None


# -- files -------------------------------------------------------------------------------------
STORED_FILE_GLOBS = ("[0-9][0-9][0-9][0-9]_*.json", "*/[0-9][0-9][0-9][0-9]_*.json")


def stored_files(root: Path) -> list[Path]:
    """The files pytest-benchmark would load from a storage folder (reference data elsewhere is not one)."""
    out: set[Path] = set()
    for pattern in STORED_FILE_GLOBS:
        out.update(p for p in Path(root).glob(pattern) if p.is_file())
    return sorted(out)


def validate_file(path: Path) -> None:
    """Raise BaselineError naming the file and the problem; never changes the file."""
    def bad(problem: str) -> BaselineError:
        return BaselineError(f"{path}: {problem} (the file was left untouched: fix or remove it, "
                             f"or point --benchmark-storage elsewhere)")

    try:
        data = json.loads(Path(path).read_text(encoding="utf8"))
    except UnicodeDecodeError as e:
        raise bad(f"not UTF-8 text ({e.reason} at byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise bad(f"not valid JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    if not isinstance(data, dict) or not isinstance(data.get("benchmarks"), list):
        raise bad("not a pytest-benchmark result (no 'benchmarks' list)")
    for i, b in enumerate(data["benchmarks"]):
        where = f"benchmarks[{i}]"
        if not isinstance(b, dict) or not isinstance(b.get("fullname"), str):
            raise bad(f"{where} has no 'fullname'")
        where = f"benchmark {b['fullname']!r}"
        stats = b.get("stats")
        if not isinstance(stats, dict) or not all(isinstance(stats.get(k), (int, float)) for k in ("min", "max", "median", "mean")):
            raise bad(f"{where} has no numeric 'stats' (min, max, median, mean)")
        info = (b.get("extra_info") or {}).get(EXTRA_KEY)
        if info is None:
            continue  # a plain pytest-benchmark entry: not llmgate's to judge
        if not isinstance(info, dict):
            raise bad(f"{where}: extra_info.{EXTRA_KEY} is not an object")
        schema = info.get("schema")
        if schema not in READABLE_SCHEMAS:
            raise bad(f"{where}: llmgate schema {schema!r}, this llmgate reads schemas "
                      f"{', '.join(map(str, READABLE_SCHEMAS))} (record a new baseline)")
        values = info.get("values")
        if (not isinstance(values, list) or not values
                or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)):
            raise bad(f"{where}: 'values' must be a non-empty list of numbers")
        if info.get("better") not in ("higher", "lower") or not isinstance(info.get("unit"), str):
            raise bad(f"{where}: 'better' must be 'higher' or 'lower' and 'unit' a string")
        fp = info.get("fingerprint")
        if not isinstance(fp, dict) or not {"device", "model_hash", "config", "engine"} <= set(fp):
            raise bad(f"{where}: no fingerprint (device, model_hash, config, engine)")
        boots = info.get("boots")
        if schema >= 3 and (not isinstance(boots, list) or not boots or not all(
                isinstance(b, list) and b and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in b)
                for b in boots)):
            raise bad(f"{where}: 'boots' must be a non-empty list of non-empty lists of numbers")


def validate_storage(root: Path) -> list[Path]:
    files = stored_files(root)
    for f in files:
        validate_file(f)
    return files


def atomic_write(path: Path, data: bytes) -> None:
    """Write a new file whole or not at all; an existing file is never replaced."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.link(tmp, path)            # fails if the target exists: nothing is overwritten
    finally:
        os.unlink(tmp)


def make_save_atomic(storage) -> None:
    """pytest-benchmark's FileStorage.save writes in place; save through atomic_write instead."""
    from pytest_benchmark.utils import safe_dumps

    if not hasattr(storage, "get") or not hasattr(storage, "_next_num"):
        return  # not file storage (elasticsearch): leave it alone

    def save(output_json, save):
        target = storage.get(f"{storage._next_num}_{save}.json")
        if target.exists():
            raise BaselineError(f"{target}: exists already; not overwriting a stored baseline")
        atomic_write(target, safe_dumps(output_json, ensure_ascii=True, indent=4).encode())
        storage.logger.info(f"Saved benchmark data in: {target}")

    storage.save = save
