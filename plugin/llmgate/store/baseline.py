"""Baselines through pytest-benchmark's storage (``baselines/`` by default).

Every recorded metric becomes one pytest-benchmark entry named
``<scenario>[<matrix entry>]::<metric>[@<variant>]`` (``decode_c1[cpu-vllm-tiny]::decode_tok_s``):
the scenario is the test function's name without ``test_``, so the key does not depend on
where the scenario's file lies (in the installed package, in a team's own ``tests/``).  Files
stored with the keys of llmgate 0.1 (``tests/perf/test_decode.py::test_decode_c1[h200]::…``)
are read as the new keys, and ``python -m llmgate.store.baseline migrate DIR`` rewrites them.

This is the one module that touches pytest-benchmark's internals (its session object, its
fixture class, its storage); ``RELIES_ON`` lists them and ``tests/plugin/test_benchmark_internals.py``
fails, naming the missing one, when a pytest-benchmark release changes them.  Its timing data are the metric's values in
"bigger is worse" form (seconds as they are; tok/s as seconds per token), so
``--benchmark-compare-fail=median:10%`` works in the right direction, and its
``extra_info["llmgate"]`` holds the natural values, unit, direction and
provenance that llmgate's own verdict reads back.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import secrets
import stat
from pathlib import Path
from typing import Any

import pytest

from llmgate.analysis.verdict import NoBaseline
from llmgate.core.metrics import Metric

EXTRA_KEY = "llmgate"
SCHEMA_VERSION = 3          # 2: every entry carries a fingerprint; 3: values per boot ("boots") and a noise model
READABLE_SCHEMAS = (2, 3)   # a schema-2 entry reads as one boot with no noise model
# configuration fields that decide nothing about what is measured
NOT_FINGERPRINTED = ("min_effect", "boot_timeout_s", "levers", "reference", "launcher", "boots")


# The arrival rate a stored workload without one was measured at (stored before an unset rate was
# resolved per device): its device's default then.
LEGACY_ARRIVAL_RATE = {"gpu": 16.0, "cpu": 2.0}


class BaselineError(ValueError):
    """A stored baseline file that cannot be used; the message names the file and the problem."""


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


# What this module relies on in pytest-benchmark (checked by tests/plugin/test_benchmark_internals.py):
RELIES_ON = {
    "config attribute": ["_benchmarksession"],
    "options": ["benchmark_storage", "benchmark_compare", "benchmark_save", "benchmark_autosave",
                "benchmark_disable"],
    "default storage": ["file://./.benchmarks"],
    "session attributes": ["benchmarks", "logger", "storage", "compare", "compared_mapping", "groups", "quiet",
                           "disabled", "skip", "save", "autosave", "options"],
    "fixture": ["pytest_benchmark.fixture.BenchmarkFixture(node, add_stats, logger, warner, disabled, **options)",
                "BenchmarkFixture._make_stats", "name", "fullname", "group", "extra_info"],
    "stats": ["Metadata.stats.update"],
    "file storage": ["FileStorage.load", "FileStorage.get", "FileStorage._next_num", "FileStorage.save",
                     "FileStorage.logger"],
    "utils": ["pytest_benchmark.utils.safe_dumps"],
}
PYTEST_BENCHMARK_DEFAULT_STORAGE = "file://./.benchmarks"


def benchmark_session(config: pytest.Config):
    return getattr(config, "_benchmarksession", None)


def configure(config: pytest.Config, folder: Path) -> None:
    """(pytest_configure, before pytest-benchmark's) Store under ``folder`` unless the user chose a
    storage; a corrupt stored file stops the run (pytest-benchmark would skip it with a warning and
    compare with the next one); llmgate takes --benchmark-compare over (every machine-id folder)."""
    if getattr(config.option, "benchmark_storage", None) == PYTEST_BENCHMARK_DEFAULT_STORAGE:
        config.option.benchmark_storage = "file://" + str(folder)
    storage = getattr(config.option, "benchmark_storage", "") or ""
    if storage.startswith("file://") and (config.getoption("benchmark_compare", None)
                                          or config.getoption("benchmark_save", None)
                                          or config.getoption("benchmark_autosave", None)):
        try:
            validate_storage(Path(storage[len("file://"):]))
        except BaselineError as e:
            raise pytest.UsageError(str(e)) from None
    take_over_compare(config)


def session_start(config: pytest.Config, worker: str | None, say) -> None:
    """(pytest_sessionstart) Load the compared runs, say which, and make saving atomic.  Before any
    test runs: a run named by --benchmark-compare that is not stored, and (saving) a storage folder
    that cannot be written, are usage errors (one line each, exit code 4)."""
    bs = benchmark_session(config)
    if bs is None:
        return
    if worker:
        enable_on_xdist_worker(config, worker)
    runs = load_compared(config)
    if runs is not None and not worker:
        if runs:
            bs.logger.info("Comparing against benchmarks from: " + ", ".join(runs) + " (llmgate: each metric "
                           "with the newest of these whose fingerprint matches)")
        else:
            spec = compared_spec(config)
            if spec is not True:            # a run named, and not found: a typo must not make the gate pass
                raise pytest.UsageError(unknown_run_line(spec, bs.storage))
            say(f"llmgate: --benchmark-compare: no stored run in {bs.storage}; every metric "
                f"is reported without a baseline (record one with --benchmark-save=NAME)")
    check_storage_writable(config)

    def save_failed(line: str) -> None:
        config.stash[_SAVE_FAILED] = line

    make_save_atomic(bs.storage, save_failed)


def unknown_run_line(spec: Any, storage: Any) -> str:
    """One line for --benchmark-compare=SPEC matching no stored run: what is stored, this
    interpreter's machine-id folder first."""
    root = Path(str(getattr(storage, "path", storage)))
    mine = getattr(storage, "default_machine_id", None)
    files = stored_files(root) if root.is_dir() else []
    if not files:
        held = "it holds no stored run (record one with --benchmark-save=NAME)"
    else:
        by_folder: dict[str, list[str]] = {}
        for f in files:
            by_folder.setdefault(f.parent.name if f.parent != root else "", []).append(f.stem)
        parts = []
        for folder in sorted(by_folder, key=lambda k: (k != mine, k)):
            names = by_folder[folder]
            shown = ("…, " if len(names) > 8 else "") + ", ".join(names[-8:])
            where = f" ({folder}, this interpreter)" if folder == mine else (f" ({folder})" if folder else "")
            parts.append(shown + where)
        held = "stored runs: " + "; ".join(parts)
    return (f"llmgate: --benchmark-compare={spec}: no stored run matches {str(spec)!r} in {root}; {held}. "
            f"Nothing was run (a bare --benchmark-compare compares with the newest)")


_SAVE_FAILED = pytest.StashKey[str]()                 # why the baseline was not saved at the end


def save_failure(config: pytest.Config) -> str | None:
    """(pytest_sessionfinish, after pytest-benchmark saved) One line when saving the baseline failed."""
    return config.stash.get(_SAVE_FAILED, None)


def check_storage_writable(config: pytest.Config) -> None:
    """(pytest_sessionstart) With --benchmark-save or --benchmark-autosave, the folder the run will
    be stored in (``<storage>/<machine id>/``) must take a new file; otherwise a usage error now,
    before any boot, rather than a traceback after the whole run.  Leaves no folder or file behind."""
    bs = benchmark_session(config)
    if bs is None or not (bs.save or bs.autosave) or bs.skip or config.getoption("benchmark_disable", False):
        return
    storage = bs.storage
    if not hasattr(storage, "get") or not hasattr(storage, "_next_num"):
        return                                        # not file storage (elasticsearch)
    folder = Path(storage.path) / storage.default_machine_id if storage.default_machine_id else Path(storage.path)
    problem = unwritable(folder)
    if problem:
        save = config.getoption("benchmark_save", None)
        option = f"--benchmark-save={save}" if save else "--benchmark-autosave"
        raise pytest.UsageError(f"llmgate: {option}: the baseline cannot be stored: {problem}. Nothing was run "
                                f"(fix the folder, or store elsewhere with --benchmark-storage=file://DIR)")


def unwritable(folder: Path) -> str | None:
    """Why a new file cannot be written in ``folder`` (made if missing, and then removed again), in a
    few words; None when it can.  Tried for real: file permissions do not stop root, a read-only file
    system or an immutable folder do."""
    folder = Path(folder)
    made: list[Path] = []
    p = folder
    while not p.exists() and p != p.parent:
        made.append(p)
        p = p.parent
    if not p.is_dir():
        return f"{p} is a file, not a folder"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = _new_temp(folder, ".llmgate-write-check")
        os.close(fd)
        os.unlink(tmp)
    except OSError as e:
        return f"cannot write in {folder}: {e.strerror or e}"
    finally:
        for d in made:                                # deepest first
            try:
                d.rmdir()
            except OSError:
                break
    return None


def drop_stored(config: pytest.Config, entries: list[Any]) -> None:
    """Take entries this session added (``store``) out of what pytest-benchmark will save."""
    bs = benchmark_session(config)
    for meta in entries:
        if bs is not None and meta in bs.benchmarks:
            bs.benchmarks.remove(meta)


# -- keys: scenario + matrix entry + metric (+ variant) ----------------------------------------
def scenario_name(item: pytest.Item) -> str:
    """The scenario a test is: its function's name without ``test_``."""
    name = getattr(item, "originalname", None) or item.name.split("[", 1)[0]
    return name.removeprefix("test_")


def stored_key(item: pytest.Item) -> str:
    """The test's part of its stored keys: ``scenario[entry]`` (``decode_c1[cpu-vllm-tiny]``);
    the ids of other parameters, when the test has any, in brackets before the entry's
    (``sweep[long][cpu-vllm-tiny]``).  Independent of the file's path, of the boot a test
    measures (one stored entry spans the boots of a run) and of pytest-xdist's ``@group``."""
    scenario = scenario_name(item)
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return scenario
    cfg = callspec.params.get("llmgate_config")
    pid = callspec.id
    if cfg is None:
        return f"{scenario}[{pid}]"
    boot = callspec.params.get("llmgate_boot")
    entry_part = cfg.id
    if boot is not None:
        # ENTRY-bootK, or in A/B mode ENTRY-bootK.SIDE (plugin.pytest_generate_tests)
        m = re.search(re.escape(f"{cfg.id}-boot{boot}") + r"(\.[^-\]]+)?", pid)
        entry_part = m.group(0) if m else cfg.id
    others = "-".join(p for p in pid.replace(entry_part, "\0", 1).split("\0") if p).strip("-")
    return f"{scenario}[{others}][{cfg.id}]" if others else f"{scenario}[{cfg.id}]"


def base_nodeid(nodeid: str) -> str:
    """A node id without its parameters (the boots of one test share their stored keys)."""
    return nodeid.split("[", 1)[0]


OLD_KEY = re.compile(r"^(?P<path>[^:\[]*\.py)::(?P<func>[^\[:@]+)(?:\[(?P<params>[^\]]*)\])?(?:@[^:]*)?::(?P<key>.+)$")


def current_key(fullname: str, entry: str | None = None) -> str:
    """A stored name in today's form: a name of llmgate 0.1 (``<file>::<test>[<params>]::<key>``)
    becomes ``<scenario>[<params>]::<key>`` (the entry id, when ``entry`` names it among the
    params, last in its own brackets); a current name is returned as it is."""
    m = OLD_KEY.match(fullname)
    if m is None:
        return fullname
    scenario = m["func"].removeprefix("test_")
    params, key = m["params"], m["key"]
    if params is None:
        return f"{scenario}::{key}"
    if entry and params != entry and entry in params:
        others = "-".join(p for p in params.replace(entry, "\0", 1).split("\0") if p).strip("-")
        return f"{scenario}[{others}][{entry}]::{key}"
    return f"{scenario}[{params}]::{key}"


def _entry_of(bench: dict[str, Any]) -> str | None:
    info = (bench.get("extra_info") or {}).get(EXTRA_KEY) or {}
    cfg = info.get("config") or (info.get("fingerprint") or {}).get("config") or {}
    return cfg.get("id") if isinstance(cfg, dict) else None


def migrate_bench(bench: dict[str, Any]) -> bool:
    """Give one stored llmgate entry today's key (its ``fullname`` and ``name``); True if it changed."""
    if not _is_llmgate(bench):
        return False
    new = current_key(bench["fullname"], _entry_of(bench))
    if new == bench["fullname"]:
        return False
    bench["fullname"] = bench["name"] = new
    return True


def migrate_file(path: Path) -> int:
    """Rewrite a stored file's llmgate entries with today's keys (whole or not at all); returns
    how many changed (0: the file is left as it is).  Values, stats and provenance are kept."""
    from pytest_benchmark.utils import safe_dumps

    validate_file(path)
    data = json.loads(Path(path).read_text(encoding="utf8"))
    changed = sum(migrate_bench(b) for b in data["benchmarks"])
    if changed:
        names = [b["fullname"] for b in data["benchmarks"]]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise BaselineError(f"{path}: migrating gives two entries the key {dup[0]!r}; the file was left untouched")
        fd, tmp = _new_temp(Path(path).parent, Path(path).name)
        with os.fdopen(fd, "wb") as f:
            f.write(safe_dumps(data, ensure_ascii=True, indent=4).encode())
        os.chmod(tmp, stat.S_IMODE(os.stat(path).st_mode))     # the rewritten file keeps its mode
        os.replace(tmp, path)
    return changed


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

# -- which stored runs are compared ------------------------------------------------------------
# pytest-benchmark looks for compared runs only in ``<storage>/<machine id>/``, a folder named after
# the interpreter that saved them (``Linux-CPython-3.12-64bit``): a runner on Python 3.11 never
# finds baselines saved on 3.12.  llmgate takes --benchmark-compare over (file storage only): it
# reads the runs of every machine-id folder and compares each metric with the newest stored result
# whose fingerprint matches; pytest-benchmark is given exactly those to show and to check
# (--benchmark-compare-fail).
_COMPARE = pytest.StashKey[Any]()                    # the --benchmark-compare value llmgate took over
_STORED = pytest.StashKey[list]()                    # [(path, {fullname: entry})] llmgate's entries, oldest first
_STORED_ALL = "*/[0-9][0-9][0-9][0-9]_"              # every run of every machine-id folder (and the top level)


def take_over_compare(config: pytest.Config) -> None:
    """(pytest_configure, before pytest-benchmark's) Keep --benchmark-compare from pytest-benchmark,
    which would load runs of this interpreter's machine-id folder only, warning when it holds none."""
    storage = getattr(config.option, "benchmark_storage", "") or ""
    value = getattr(config.option, "benchmark_compare", None)
    if not value or not storage.startswith("file://"):
        return
    config.stash[_COMPARE] = value
    config.option.benchmark_compare = []            # pytest-benchmark's "not comparing"


def compared_spec(config: pytest.Config) -> Any:
    """--benchmark-compare as given (True for a bare one, else the run's number or glob); None when off."""
    if _COMPARE in config.stash:
        return config.stash[_COMPARE]
    bs = benchmark_session(config)
    return bs.compare if bs is not None and bs.compare else None


def load_compared(config: pytest.Config) -> list[str] | None:
    """(pytest_sessionstart) Load the runs --benchmark-compare names from every machine-id folder:
    a bare one, every stored run; ``NNNN`` (or a glob), the runs it matches in any folder, widened
    to every worker file of an xdist run.  Returns the runs considered, oldest first; None when
    llmgate did not take the comparison over."""
    bs = benchmark_session(config)
    value = config.stash.get(_COMPARE, None)
    if bs is None or not value:
        return None
    bs.compare = value
    config.option.benchmark_compare = value
    if value is True:
        runs = list(bs.storage.load(_STORED_ALL))
        plain = list(bs.storage.load())[-1:]          # what pytest-benchmark itself compares with
    else:
        spec = str(value)
        runs = list(bs.storage.load(spec if "/" in spec or Path(spec).is_file() else f"*/{spec}"))
        names = sorted({m.group(1) for p, _ in runs if (m := WORKER_FILE.match(Path(str(p)).stem))})
        if names:
            runs += list(bs.storage.load(*[f"*/*_{n}-gw" for n in names]))
        plain = list(bs.storage.load(spec))
    unique = {str(p): (p, data) for p, data in runs}
    runs = sorted(unique.values(), key=lambda r: (str(r[1].get("datetime") or ""), Path(str(r[0])).name, str(r[0])))
    config.stash[_STORED] = [(p, {b["fullname"]: b for b in map(_current, data["benchmarks"]) if _is_llmgate(b)})
                             for p, data in runs]
    # pytest-benchmark shows and checks (--benchmark-compare-fail) what llmgate compares with, added
    # as each metric picks its baseline (baseline()); entries that are not llmgate's as it would itself
    mapping: dict[Any, dict[str, Any]] = {p: {} for p, _ in runs}
    for p, data in plain:
        mapping.setdefault(p, {}).update({b["fullname"]: b for b in data["benchmarks"] if not _is_llmgate(b)})
    bs.compared_mapping = mapping
    return [str(p) for p, _ in runs]


def _current(bench: dict[str, Any]) -> dict[str, Any]:
    """A loaded entry under today's key (an old file is read as if migrated; the file is not changed)."""
    if _is_llmgate(bench) and OLD_KEY.match(bench.get("fullname") or ""):
        bench = dict(bench)
        migrate_bench(bench)
    return bench


def _is_llmgate(bench: dict[str, Any]) -> bool:
    return isinstance((bench.get("extra_info") or {}).get(EXTRA_KEY), dict)


def _candidates(config: pytest.Config, fullname: str) -> list[tuple[Any, dict[str, Any]]]:
    """The stored entries of ``fullname`` among the compared runs, oldest first, with their run's
    path as pytest-benchmark keys it."""
    stored = config.stash.get(_STORED, None)
    if stored is None:                                # not file storage: pytest-benchmark loaded the runs
        bs = benchmark_session(config)
        stored = list((bs.compared_mapping or {}).items()) if bs is not None else []
    return [(path, m[fullname]) for path, m in stored if fullname in m]


def stored_fingerprint(bench: dict[str, Any]) -> dict[str, Any]:
    return ((bench.get("extra_info") or {}).get(EXTRA_KEY) or {}).get("fingerprint") or {}


def hide_benchmark_table(config: pytest.Config) -> int:
    """(pytest_terminal_summary, before pytest-benchmark's) pytest-benchmark's table shows every
    entry as a time ("time in ms"): llmgate's tok/s metrics are stored as their inverse (seconds
    per token), so its rows read wrongly there.  Take llmgate's rows out of the table; its
    --benchmark-compare-fail checks stay (they ran at sessionfinish and are raised after the table).
    Returns how many of llmgate's entries were hidden."""
    bs = benchmark_session(config)
    if bs is None or not bs.groups:
        return 0
    kept, hidden = [], set()
    for name, benches in bs.groups:
        rest = [b for b in benches if not _is_llmgate(b)]
        hidden.update(b["fullname"] for b in benches if _is_llmgate(b))
        if rest:
            kept.append((name, rest))
    if kept:
        bs.groups = kept
    elif hidden:
        bs.quiet = True          # no table at all; an empty one would skip the regression checks too
    return len(hidden)


RAW_ENCODING = "zlib+base64 json"


def pack_raw(raw: Any) -> dict[str, Any]:
    """Per-request arrays as stored with a result: compressed JSON (an 8B entry's three boots of
    per-token ITLs came to 13.7 MB of plain JSON, a committed file in a team's repository)."""
    import base64
    import zlib

    data = json.dumps(raw, separators=(",", ":")).encode()
    return {"encoding": RAW_ENCODING, "data": base64.b64encode(zlib.compress(data, 9)).decode("ascii")}


def unpack_raw(stored: Any) -> Any:
    """A stored result's raw arrays, packed (``pack_raw``) or plain (files saved before)."""
    if isinstance(stored, dict) and stored.get("encoding") == RAW_ENCODING:
        import base64
        import zlib

        return json.loads(zlib.decompress(base64.b64decode(stored["data"])))
    return stored


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
    fx.name = fx.fullname = f"{stored_key(item)}::{key}"
    fx.group = f"{metric.label} [{metric.unit}; stored as {'1/x' if metric.better == 'higher' else 'x'}]"
    if extra.get("raw") is not None:
        extra = {**extra, "raw": pack_raw(extra["raw"])}
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


def baseline(config: pytest.Config, nodeid: str, key: str, fingerprint: dict[str, Any] | None = None,
             allow_mismatch: bool = False) -> tuple[str, dict[str, Any]] | None:
    """The stored entry ``nodeid::key`` is compared with: among the compared runs, the newest whose
    fingerprint matches ``fingerprint`` (the newest of all when no fingerprint is given).  When none
    matches: with a bare --benchmark-compare, None (why_no_baseline() says why); with a named run
    or ``allow_mismatch``, the newest, for the caller to refuse (or compare anyway)."""
    bs = benchmark_session(config)
    if bs is None or not bs.compared_mapping:
        return None
    fullname = f"{nodeid}::{key}"
    candidates = _candidates(config, fullname)
    if not candidates:
        return None
    if fingerprint is None:
        return str(candidates[-1][0]), candidates[-1][1]
    comparable = [c for c in candidates if not fingerprint_mismatch(stored_fingerprint(c[1]), fingerprint)]
    if comparable:
        path, bench = comparable[-1]
    elif allow_mismatch or compared_spec(config) is not True:
        path, bench = candidates[-1]
        if not allow_mismatch:
            return str(path), bench                   # refused by the caller: pytest-benchmark does not compare it
    else:
        return None
    if _STORED in config.stash:
        bs.compared_mapping.setdefault(path, {})[fullname] = bench
    return str(path), bench


@dataclasses.dataclass(frozen=True)
class Missing:
    """Why there is no baseline: the reason as a value (a table's cell) and the note in full."""

    reason: NoBaseline
    note: str


def why_no_baseline(config: pytest.Config, nodeid: str, key: str, fingerprint: dict[str, Any]) -> Missing | None:
    """Why ``nodeid::key`` has no baseline to compare with while comparing (None when not comparing):
    no baseline for this test, or for this device / model / configuration (the nearest stored
    result's difference: same device first, then same model).  A different engine build is never
    the reason: that is what the gate compares, and the verdict names it."""
    spec = compared_spec(config)
    if not spec or not compare_active(config):
        return None
    stored = config.stash.get(_STORED, None)
    bs = benchmark_session(config)
    where = str(bs.storage) if bs is not None else "the storage"
    if stored is not None and not stored:
        which = "no stored run" if spec is True else f"no stored run matches --benchmark-compare={spec}"
        return Missing(NoBaseline.STORED,
                       f"{NoBaseline.STORED}: {which} in {where} (record one with --benchmark-save=NAME)")
    candidates = _candidates(config, f"{nodeid}::{key}")
    if not candidates:
        runs = "the stored runs" if spec is True else f"the runs matching --benchmark-compare={spec}"
        return Missing(NoBaseline.TEST,
                       f"{NoBaseline.TEST}: {runs} in {where} hold none (record one with --benchmark-save=NAME)")
    levels = ((NoBaseline.DEVICE, "device", lambda fp: fp.get("device") == fingerprint.get("device")),
              (NoBaseline.MODEL, "model", lambda fp: fp.get("model_hash") == fingerprint.get("model_hash")),
              (NoBaseline.CONFIGURATION, "configuration", lambda fp: False))
    nearest = candidates
    for reason, part, same in levels:
        closer = [c for c in nearest if same(stored_fingerprint(c[1]))]
        if not closer:
            path, bench = nearest[-1]
            why = fingerprint_differences(stored_fingerprint(bench), fingerprint)
            # the last level names whatever else differs (the configuration, or the workload)
            detail = why.get(part) or (next(iter(why.values()), None) if reason == NoBaseline.CONFIGURATION else None)
            return Missing(reason, f"{reason}: the nearest, {path}, " + (detail or f"{part} differs"))
        nearest = closer
    return None


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
    from llmgate.analysis.stats import Noise

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
        raise bad(f"not valid JSON: {e.msg}: line {e.lineno} column {e.colno}") from None
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


def _new_temp(folder: Path, name: str) -> tuple[int, Path]:
    """A new temporary file in ``folder`` (open for writing, its descriptor and path) with the mode a
    file gets under the user's umask (0644 under umask 022), not mkstemp's 0600: a baseline is a
    file others read (a CI job under another user, a reviewer's checkout)."""
    for _ in range(100):
        tmp = Path(folder) / f".{name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"{folder}: no free temporary name for {name}")


def atomic_write(path: Path, data: bytes) -> None:
    """Write a new file whole or not at all; an existing file is never replaced."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _new_temp(path.parent, path.name)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.link(tmp, path)            # fails if the target exists: nothing is overwritten
    finally:
        os.unlink(tmp)


def make_save_atomic(storage, on_failure=None) -> None:
    """pytest-benchmark's FileStorage.save writes in place; save through atomic_write instead.
    ``on_failure(line)``: a save that fails (the file system turned read-only, the folder went
    away, the file exists) is told in one line instead of raised: raised, it would end the session
    with a traceback before llmgate wrote its report, the run history and the verdict table."""
    from pytest_benchmark.utils import safe_dumps

    if not hasattr(storage, "get") or not hasattr(storage, "_next_num"):
        return  # not file storage (elasticsearch): leave it alone

    def save(output_json, save):
        target = None
        try:
            target = storage.get(f"{storage._next_num}_{save}.json")
            if target.exists():
                raise BaselineError(f"{target}: exists already; not overwriting a stored baseline")
            atomic_write(target, safe_dumps(output_json, ensure_ascii=True, indent=4).encode())
        except (OSError, BaselineError) as e:
            if on_failure is None:
                raise
            if isinstance(e, BaselineError):
                why = str(e)
            else:
                folder = Path(target).parent if target is not None else Path(storage.path)
                why = f"{target or folder} could not be written: " + (unwritable(folder) or f"{e.strerror or e}")
            on_failure(f"baseline not saved: {why}")
            return
        storage.logger.info(f"Saved benchmark data in: {target}")

    storage.save = save


def main(argv: list[str] | None = None) -> int:
    """``python -m llmgate.store.baseline migrate DIR…``: give stored baselines today's keys."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m llmgate.store.baseline")
    sub = ap.add_subparsers(dest="command", required=True)
    mig = sub.add_parser("migrate", help="rewrite stored files' llmgate entries with keys independent of file paths")
    mig.add_argument("folders", nargs="+", type=Path, help="baseline storage folders (e.g. baselines/)")
    args = ap.parse_args(argv)
    total = 0
    for folder in args.folders:
        files = stored_files(folder) if folder.is_dir() else [folder]
        for f in files:
            try:
                n = migrate_file(f)
            except BaselineError as e:
                print(f"llmgate: {e}")
                return 1
            total += n
            print(f"{f}: {n} entr{'y' if n == 1 else 'ies'} migrated" if n else f"{f}: already current")
    print(f"{total} entr{'y' if total == 1 else 'ies'} migrated")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
