"""Run history: every gate run appends one record (its schema, writing and reading are here);
``llmgate history`` (``report/trends.py``) shows each metric over runs and names the run where it
stepped beyond its noise.

Store: ``<rootdir>/.llmgate/history/`` unless ``--llmgate-history DIR`` (``--llmgate-no-history``
writes nothing).  One JSON file per run (per pytest-xdist worker), named
``<UTC time>_<short hash>.json`` so that a listing is in run order, written atomically (a
temporary file in the same folder, then ``os.replace``): a reader never sees half a record.

A record (``llmgate-history/1``, checked against ``data/history.schema.json`` on write and on
read; a corrupt file stops the reader with an error naming the file, and no other file is lost)::

    {"schema": "llmgate-history/1",
     "run": {"id", "started", "finished" (UTC ISO 8601), "argv", "worker", "exit_status"},
     "series": [{"entry": "cpu-vllm-tiny", "test": "test_decode_c1", "key": "decode_tok_s",
                 "unit": "tok/s", "better": "higher",
                 "boots": [[repeat values of boot 1], [repeat values of boot 2], ...],
                 "noise": {"within_boot_cv": ..., "between_boot_cv": ... or null},
                 "provenance": {"engine": {"engine", "version", "commit", "distribution"},
                                "device": {...}, "model_hash": "...",
                                "config_fingerprint": "<sha256[:16] of the fingerprinted configuration>",
                                "config": {...}}}, ...]}

A boot's *boot-level value* is the median of its repeat values; ``within_boot_cv`` is the pooled
standard deviation of the log repeat values within boots, ``between_boot_cv`` the standard
deviation of the log boot-level values (null with one boot); ``gate`` (optional) is the gate's
own noise model as stored with the result.  A run with ``--llmgate-boots K`` gives K boots
per series (on the CPU the default is one).

The change-point detection is :mod:`llmgate.analysis.changepoint` (binary segmentation, t-test on log
boot-level values with a variance that pools the run-to-run and within-run noise, Bonferroni
over the splits, and a minimum relative step).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import os
import statistics
import tempfile
from importlib.resources import files
from pathlib import Path
from typing import Any

from llmgate.analysis import changepoint
from llmgate.device import hardware
from llmgate.analysis.verdict import Verdict
from llmgate.store import benchmark_files, fingerprint as fingerprints
from llmgate.store.finished import FinishedRun

SCHEMA = "llmgate-history/1"
DEFAULT_DIR = Path(".llmgate") / "history"


class HistoryError(Exception):
    """A history record that cannot be read or does not match the schema (names the file)."""


# -- records -----------------------------------------------------------------------------------
def schema() -> dict[str, Any]:
    return json.loads(files("llmgate").joinpath("data/history.schema.json").read_text(encoding="utf-8"))


def validate(record: Any, where: str = "history record") -> None:
    import jsonschema

    try:
        jsonschema.validate(record, schema())
    except jsonschema.ValidationError as e:
        path = "/".join(str(p) for p in e.absolute_path) or "(top level)"
        raise HistoryError(f"{where}: not a valid {SCHEMA} record: at {path}: {e.message[:300]}") from None


def config_fingerprint(config: dict[str, Any] | None) -> str | None:
    if config is None:
        return None
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:16]


def noise(boots: list[list[float]]) -> dict[str, float | None]:
    """Within-boot CV (pooled SD of log repeats) and between-boot CV (SD of log boot medians)."""
    num, df = 0.0, 0
    for b in boots:
        v = changepoint.log_var([x for x in b if x > 0])
        if v is not None:
            num += v * (len(b) - 1)
            df += len(b) - 1
    meds = [statistics.median(b) for b in boots if b]
    between = changepoint.log_var([m for m in meds if m > 0])
    return {"within_boot_cv": math.sqrt(num / df) if df else None,
            "between_boot_cv": math.sqrt(between) if between is not None else None}


def make_series(entry: str, test: str, key: str, unit: str, better: str, boots: list[list[float]],
                provenance: dict[str, Any]) -> dict[str, Any]:
    boots = [[float(v) for v in b] for b in boots if b]
    return {"entry": entry, "test": test, "key": key, "unit": unit, "better": better, "boots": boots,
            "noise": noise(boots), "provenance": provenance}


def make_record(series: list[dict[str, Any]], started: float, finished: float | None = None,
                argv: list[str] | None = None, worker: str | None = None, exit_status: int | None = None,
                entry_seconds: dict[str, float] | None = None) -> dict[str, Any]:
    finished = finished if finished is not None else dt.datetime.now(dt.timezone.utc).timestamp()
    body = json.dumps(series, sort_keys=True, default=str)
    rid = _stamp(started) + "_" + hashlib.sha256(f"{started}{worker}{body}".encode()).hexdigest()[:8]
    return {"schema": SCHEMA,
            "run": {"id": rid, "started": _iso(started), "finished": _iso(finished), "argv": list(argv or []),
                    "worker": worker, "exit_status": exit_status,
                    **({"entry_seconds": {k: round(float(v), 3) for k, v in entry_seconds.items()}}
                       if entry_seconds else {})},
            "series": series}


def write(record: dict[str, Any], folder: Path) -> Path:
    """Validate, then write ``<folder>/<run id>.json`` atomically."""
    validate(record, "record to write")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{record['run']['id']}.json"
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".json", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(record, f, indent=1, sort_keys=True)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def read_file(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise HistoryError(f"{path}: cannot read this history record ({e}); the other records are untouched: "
                           f"fix or remove this file") from None
    validate(data, str(path))
    return data


def record_files(folder: Path) -> list[Path]:
    return sorted(p for p in Path(folder).glob("*.json") if not p.name.startswith("."))


def load(folder: Path) -> list[dict[str, Any]]:
    """Every record in the folder, validated, oldest first (by run start)."""
    records = [read_file(p) for p in record_files(folder)]
    return sorted(records, key=lambda r: (r["run"]["started"], r["run"]["id"]))


# -- from a run (its record, built by GateRun.finish at the run's end: store.finished) ---------
def folder_for(config) -> Path | None:
    if config.getoption("llmgate_no_history", False):
        return None
    chosen = config.getoption("llmgate_history", None)
    if chosen:
        p = Path(chosen)
        return p if p.is_absolute() else config.rootpath / p
    return config.rootpath / DEFAULT_DIR


def run_series(run: FinishedRun, config) -> list[dict[str, Any]]:
    """What the run recorded, one series per (entry, test, key): the repeat values of each
    boot its verdicts rest on, with the provenance Gate.record stored beside them (read from
    pytest-benchmark's session of ``config``, pytest's)."""
    stored: dict[tuple[str, str], dict[str, Any]] = {}       # (entry, key) → extra_info of the stored entry
    bs = benchmark_files.benchmark_session(config)
    for meta in (getattr(bs, "benchmarks", None) or []):
        info = (getattr(meta, "extra_info", None) or {}).get(benchmark_files.EXTRA_KEY) or {}
        cid = (info.get("config") or {}).get("id")
        if cid and info.get("key"):
            stored[(cid, info["key"])] = info
    out = []
    for v in run.verdicts:
        if not v.samples or v.metric.name == "failed_share" or v.baseline_in_run:
            continue
        info = stored.get((v.config_id, v.key)) or {}
        fp = info.get("fingerprint") or {}
        detail = run.config_detail(v.config_id)
        boots = run.boots.get(v.config_id) or [{}]
        engine = dict(fp.get("engine") or {"engine": boots[-1].get("engine"), "version": boots[-1].get("version"),
                                            "commit": None})
        eng_info = info.get("engine") or {}
        if (eng_info.get("extra") or {}).get("distribution"):
            engine["distribution"] = eng_info["extra"]["distribution"]
        model_hash = fp.get("model_hash")
        if model_hash is None:
            model_hash = run.model_hashes.get(v.config_id)
        fconf = fp.get("config") if fp else fingerprints.portable_config(detail, config.rootpath)
        prov = {"engine": engine, "device": fp.get("device") or _device_part(hardware.describe()),
                "model_hash": model_hash, "config_fingerprint": config_fingerprint(fconf), "config": detail}
        boots_of_run = _boots_of(run, v, info)
        if not all(math.isfinite(x) and x > 0 for b in boots_of_run for x in b):
            continue                                   # the analysis is on the log scale
        series = make_series(v.config_id, v.test, v.key, v.metric.unit, v.metric.better, boots_of_run, prov)
        if isinstance(info.get("noise"), dict):
            series["noise"]["gate"] = info["noise"]    # the gate's own noise model, as stored with the result
        out.append(series)
    return out


def _boots_of(run: FinishedRun, v: Verdict, info: dict[str, Any]) -> list[list[float]]:
    """A verdict's repeat values per boot: as stored with the result (``boots``), else as the
    session kept them per measurement boot (``--llmgate-boots K``), else its samples as one boot."""
    stored = info.get("boots")
    if isinstance(stored, list) and stored and all(isinstance(b, list) and b for b in stored):
        return [[float(x) for x in b] for b in stored]
    kept = run.boot_values.get((v.config_id, v.test, v.key))
    if kept:
        return [list(map(float, kept[k])) for k in sorted(kept)]
    return [list(map(float, v.samples))]


def _device_part(d: dict[str, Any]) -> dict[str, Any]:
    return {k: d.get(k) for k in ("cpu", "gpus", "driver") if d.get(k) is not None}


def record_run(run: FinishedRun, config, exit_status: int) -> Path | None:
    """Append the record of ``run`` to the history folder ``config``'s options choose (None: nothing
    measured, or disabled)."""
    folder = folder_for(config)
    if folder is None:
        return None
    series = run_series(run, config)
    if not series:
        return None
    rec = make_record(series, run.started, argv=list(run.argv), worker=run.worker,
                      exit_status=exit_status, entry_seconds=run.entry_seconds)
    return write(rec, folder)


def entry_seconds(folder: Path) -> dict[str, float]:
    """Each matrix entry's wall seconds in the newest run of ``folder`` that timed it (the records of a
    run's xdist workers and shards each time their own entries); empty without a history.  A record
    that does not load is passed over here: the history's reader names it."""
    out: dict[str, float] = {}
    if not folder.is_dir():
        return out
    for path in reversed(record_files(folder)):
        try:
            rec = read_file(path)
        except HistoryError:
            continue
        for cid, s in (rec["run"].get("entry_seconds") or {}).items():
            out.setdefault(cid, float(s))
    return out


def _stamp(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y%m%dT%H%M%S") + f"{int(t * 1000) % 1000:03d}Z"


def _iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
