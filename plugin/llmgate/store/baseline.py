"""Baselines through pytest-benchmark's storage (``baselines/`` by default): the session's side
(taking --benchmark-compare over, loading the compared runs and checking them before any boot,
making saving atomic), storing a metric's result, and choosing the stored entry it is compared
with, or saying why there is none.

Beside it in store/: ``benchmark_files`` (what llmgate relies on in pytest-benchmark's
internals, and the stored files), ``keys`` (the stored keys and their migration), and
``fingerprint`` (what makes two stored results comparable).  ``llmgate migrate DIR`` gives stored
files today's keys (``keys.run``).
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any, Callable

import pytest

from llmgate.analysis.verdict import NoBaseline
from llmgate.core.metrics import Metric
from llmgate.store.benchmark_files import (EXTRA_KEY, PYTEST_BENCHMARK_DEFAULT_STORAGE, SCHEMA_VERSION, BaselineError,
                                           benchmark_session, check_storage_writable, enable_on_xdist_worker,
                                           is_llmgate, make_save_atomic, stored_files, validate_storage)
from llmgate.store.fingerprint import device_of, fingerprint_differences, fingerprint_mismatch, stored_fingerprint
from llmgate.store.keys import OLD_KEY, entry_of, migrate_bench, stored_key


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


def drop_stored(config: pytest.Config, entries: list[Any]) -> None:
    """Take entries this session added (``store``) out of what pytest-benchmark will save."""
    bs = benchmark_session(config)
    for meta in entries:
        if bs is not None and meta in bs.benchmarks:
            bs.benchmarks.remove(meta)


# a part of a run: an xdist worker's file (NAME-gwN), a shard's (NAME-shK) or a shard's worker's
PART_FILE = re.compile(r"^\d{4}_(.+?)((?:-(?:gw|sh)\d+)+)$")

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
    to every part of a run saved in parts (xdist workers' and shards' files).  Returns the runs considered, oldest first; None when
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
        names = sorted({m.group(1) for p, _ in runs if (m := PART_FILE.match(Path(str(p)).stem))})
        if names:
            runs += list(bs.storage.load(*[f"*/*_{n}-{part}" for n in names for part in ("gw", "sh")]))
        plain = list(bs.storage.load(spec))
    unique = {str(p): (p, data) for p, data in runs}
    runs = sorted(unique.values(), key=lambda r: (str(r[1].get("datetime") or ""), Path(str(r[0])).name, str(r[0])))
    config.stash[_STORED] = [(p, {b["fullname"]: b for b in map(_current, data["benchmarks"]) if is_llmgate(b)})
                             for p, data in runs]
    # pytest-benchmark shows and checks (--benchmark-compare-fail) what llmgate compares with, added
    # as each metric picks its baseline (baseline()); entries that are not llmgate's as it would itself
    mapping: dict[Any, dict[str, Any]] = {p: {} for p, _ in runs}
    for p, data in plain:
        mapping.setdefault(p, {}).update({b["fullname"]: b for b in data["benchmarks"] if not is_llmgate(b)})
    bs.compared_mapping = mapping
    return [str(p) for p, _ in runs]


def _current(bench: dict[str, Any]) -> dict[str, Any]:
    """A loaded entry under today's key (an old file is read as if migrated; the file is not changed)."""
    if is_llmgate(bench) and OLD_KEY.match(bench.get("fullname") or ""):
        bench = dict(bench)
        migrate_bench(bench)
    return bench


def _candidates(config: pytest.Config, fullname: str) -> list[tuple[Any, dict[str, Any]]]:
    """The stored entries of ``fullname`` among the compared runs, oldest first, with their run's
    path as pytest-benchmark keys it."""
    stored = config.stash.get(_STORED, None)
    if stored is None:                                # not file storage: pytest-benchmark loaded the runs
        bs = benchmark_session(config)
        stored = list((bs.compared_mapping or {}).items()) if bs is not None else []
    return [(path, m[fullname]) for path, m in stored if fullname in m]


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


# -- the compared runs against what is known before any boot -----------------------------------
# The device, each entry's model content, configuration and workload are known before its server
# boots (the engine build is not, and is what is gated): a run named by --benchmark-compare that
# nothing selected can be compared with is refused before an engine boots, and each entry's line
# says which stored run it is compared with and why a newer one was passed over.
_PARTS = {"device": "is of another device", "model": "is of another model",
          "configuration": "has another configuration", "workload": "has another workload"}


def _why_not(differences: dict[str, str]) -> str:
    """The first of ``fingerprint_differences``, as said of a stored run: "is of another device: …"."""
    part, line = next(iter(differences.items()))
    return f"{_PARTS.get(part, part)}: {line.removeprefix(f'{part} differs: ')}"


def check_before_boot(config: pytest.Config, entries: dict[str, Callable[[], dict[str, Any]]],
                      device: dict[str, Any], allow_mismatch: bool) -> list[str]:
    """(after collection, before any boot) The compared runs against what is known before the
    boot: ``entries`` maps each selected matrix entry to its fingerprint without the engine build
    (made when asked: the model's content hash), ``device`` is ``hardware.describe()``.  Returns one
    line per entry: the stored run it is compared with, the newer ones passed over and why.  With a
    run named by --benchmark-compare (unless ``allow_mismatch``), a run of another device, or one
    no selected entry can be compared with, is a usage error (one line, exit code 4)."""
    spec = compared_spec(config)
    stored = config.stash.get(_STORED, None)
    if not spec or not stored or not any(m for _, m in stored):
        return []
    named = spec is not True
    benches = [(str(path), b) for path, m in stored for b in m.values()]
    if named and not allow_mismatch and not any(
            stored_fingerprint(b).get("device") == device_of(device, stored_fingerprint(b).get("config"))
            for _, b in benches):
        newest = stored_fingerprint(benches[-1][1])
        why = fingerprint_differences(newest, {**newest, "device": device_of(device, newest.get("config"))})
        files = sorted({p for p, _ in benches})
        said = _why_not(why) if len(files) == 1 else _why_not(why).replace("is ", "are ", 1)
        raise pytest.UsageError(f"llmgate: --benchmark-compare={spec}: {', '.join(files)} {said}. "
                                f"Nothing was booted (compare anyway with --llmgate-allow-mismatch)")
    lines, refusals = [], []
    for cid, now in entries.items():
        held = [(str(path), [b for b in m.values() if entry_of(b) == cid]) for path, m in stored]
        held = [(path, bs) for path, bs in held if bs]
        if not held:
            runs = f"the runs matching --benchmark-compare={spec}" if named else "the stored runs"
            why = f"{runs} hold no result of it"
            lines.append(f"{cid}: nothing to compare with: {why}")
            refusals.append(f"{cid}: {why}")
            continue
        fp = now()
        passed, chosen = [], None
        for path, bs in reversed(held):
            differences = [fingerprint_differences(stored_fingerprint(b), fp) for b in bs]
            if any(not d for d in differences):
                chosen = path
                break
            passed.append(f"{path} {_why_not(differences[-1])}")
        if chosen is None and allow_mismatch:
            lines.append(f"{cid}: compared anyway (--llmgate-allow-mismatch) with {passed[0]}")
        elif chosen is None:
            lines.append(f"{cid}: nothing to compare with: " + "; ".join(passed))
            refusals.append(f"{cid}: " + "; ".join(passed))
        else:
            lines.append(f"{cid}: compared with {chosen}" + (f"; passed over the newer {'; '.join(passed)}"
                                                              if passed else ""))
    if named and not allow_mismatch and entries and len(refusals) == len(entries):
        raise pytest.UsageError(f"llmgate: --benchmark-compare={spec}: no selected entry can be compared with it: "
                                + "; ".join(refusals)
                                + ". Nothing was booted (compare anyway with --llmgate-allow-mismatch)")
    return lines


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
