"""Run history: every gate run appends one record, and ``llmgate history`` shows each
metric over runs and names the run where it stepped beyond its noise.

    llmgate history [DIR] [--metric KEY] [--entry ID] [--test NAME] [--plot OUT.png]
                    [--alpha A] [--min-step FRACTION]

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

Why one module over ~450 lines: a run record's schema, its writing at a run's end and its
reading over runs change together (the schema is versioned here); the change-point test itself is
``analysis.changepoint``.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import hashlib
import json
import math
import os
import statistics
import sys
import tempfile
from collections.abc import Iterable
from importlib.resources import files
from pathlib import Path
from typing import Any, Protocol

from llmgate.analysis import changepoint
from llmgate.device import hardware
from llmgate.analysis.verdict import Verdict
from llmgate.config.matrix import Matrix, ServerConfig
from llmgate.store import benchmark_files, fingerprint as fingerprints

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


# -- from a run (GateRun.finish, llmgate.runner.run, at the run's end) -----------------------
class ModelHashes(Protocol):
    def model_hash(self, cfg: ServerConfig) -> str | None: ...


class RecordedRun(Protocol):
    """What a record is made of: the part of a finished run (``llmgate.runner.run.GateRun``)
    the history reads.  A protocol here, so that this layer does not import the runner above it."""

    config: Any                                  # pytest.Config
    started: float
    worker: str | None
    verdicts: list[Verdict]
    boots: dict[str, list[dict[str, Any]]]
    boot_values: dict[tuple[str, str, str], dict[int, list[float]]]
    entry_seconds: dict[str, float]               # wall seconds of each entry's tests (boots included)

    @property
    def matrix(self) -> Matrix: ...

    @property
    def pool(self) -> ModelHashes: ...                # the run's servers (llmgate.runner.pool.ServerPool)

    def config_detail(self, cid: str) -> dict[str, Any] | None: ...


def folder_for(config) -> Path | None:
    if config.getoption("llmgate_no_history", False):
        return None
    chosen = config.getoption("llmgate_history", None)
    if chosen:
        p = Path(chosen)
        return p if p.is_absolute() else config.rootpath / p
    return config.rootpath / DEFAULT_DIR


def run_series(gs: RecordedRun) -> list[dict[str, Any]]:
    """What the run recorded, one series per (entry, test, key): the repeat values of each
    boot its verdicts rest on, with the provenance Gate.record stored beside them."""
    stored: dict[tuple[str, str], dict[str, Any]] = {}       # (entry, key) → extra_info of the stored entry
    bs = benchmark_files.benchmark_session(gs.config)
    for meta in (getattr(bs, "benchmarks", None) or []):
        info = (getattr(meta, "extra_info", None) or {}).get(benchmark_files.EXTRA_KEY) or {}
        cid = (info.get("config") or {}).get("id")
        if cid and info.get("key"):
            stored[(cid, info["key"])] = info
    out = []
    for v in gs.verdicts:
        if not v.samples or v.metric.name == "failed_share" or v.baseline_in_run:
            continue
        info = stored.get((v.config_id, v.key)) or {}
        fp = info.get("fingerprint") or {}
        config = gs.config_detail(v.config_id)
        boots = gs.boots.get(v.config_id) or [{}]
        engine = dict(fp.get("engine") or {"engine": boots[-1].get("engine"), "version": boots[-1].get("version"),
                                            "commit": None})
        eng_info = info.get("engine") or {}
        if (eng_info.get("extra") or {}).get("distribution"):
            engine["distribution"] = eng_info["extra"]["distribution"]
        model_hash = fp.get("model_hash")
        if model_hash is None:
            try:
                model_hash = gs.pool.model_hash(gs.matrix.by_id(v.config_id))
            except Exception:
                model_hash = None
        fconf = fp.get("config") if fp else fingerprints.portable_config(config, gs.config.rootpath)
        prov = {"engine": engine, "device": fp.get("device") or _device_part(hardware.describe()),
                "model_hash": model_hash, "config_fingerprint": config_fingerprint(fconf), "config": config}
        boots_of_run = _boots_of(gs, v, info)
        if not all(math.isfinite(x) and x > 0 for b in boots_of_run for x in b):
            continue                                   # the analysis is on the log scale
        series = make_series(v.config_id, v.test, v.key, v.metric.unit, v.metric.better, boots_of_run, prov)
        if isinstance(info.get("noise"), dict):
            series["noise"]["gate"] = info["noise"]    # the gate's own noise model, as stored with the result
        out.append(series)
    return out


def _boots_of(gs: RecordedRun, v: Verdict, info: dict[str, Any]) -> list[list[float]]:
    """A verdict's repeat values per boot: as stored with the result (``boots``), else as the
    session kept them per measurement boot (``--llmgate-boots K``), else its samples as one boot."""
    stored = info.get("boots")
    if isinstance(stored, list) and stored and all(isinstance(b, list) and b for b in stored):
        return [[float(x) for x in b] for b in stored]
    kept = (getattr(gs, "boot_values", None) or {}).get((v.config_id, v.test, v.key))
    if kept:
        return [list(map(float, kept[k])) for k in sorted(kept)]
    return [list(map(float, v.samples))]


def _device_part(d: dict[str, Any]) -> dict[str, Any]:
    return {k: d.get(k) for k in ("cpu", "gpus", "driver") if d.get(k) is not None}


def record_run(gs: RecordedRun, exit_status: int) -> Path | None:
    """Append this run's record to the history folder (None: nothing measured, or disabled)."""
    folder = folder_for(gs.config)
    if folder is None:
        return None
    series = run_series(gs)
    if not series:
        return None
    rec = make_record(series, gs.started, argv=list(gs.config.invocation_params.args), worker=gs.worker,
                      exit_status=exit_status, entry_seconds=gs.entry_seconds)
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


# -- over runs ---------------------------------------------------------------------------------
@dataclasses.dataclass
class Point:
    run_id: str
    started: str
    engine: str
    series: dict[str, Any]

    @property
    def boot_values(self) -> list[float]:
        return [statistics.median(b) for b in self.series["boots"]]

    @property
    def median(self) -> float:
        return statistics.median(self.boot_values)

    def spread(self) -> tuple[float, float]:
        """Between-boot range with ≥ 2 boots, else the repeats' range of the one boot."""
        vals = self.boot_values if len(self.series["boots"]) > 1 else self.series["boots"][0]
        return min(vals), max(vals)

    def run_point(self) -> changepoint.RunPoint:
        wv = self.series["noise"].get("within_boot_cv")
        reps = min(len(b) for b in self.series["boots"])
        return changepoint.RunPoint(tuple(self.boot_values), None if wv is None else wv ** 2, reps)


def engine_label(prov: dict[str, Any]) -> str:
    e = prov.get("engine") or {}
    s = f"{e.get('engine') or '?'} {e.get('version') or '?'}"
    if e.get("commit"):
        s += f" ({str(e['commit'])[:10]})"
    return s


def series_over_runs(records: Iterable[dict[str, Any]]) -> dict[tuple[str, str, str], list[Point]]:
    out: dict[tuple[str, str, str], list[Point]] = {}
    for rec in records:
        for s in rec["series"]:
            out.setdefault((s["entry"], s["test"], s["key"]), []).append(
                Point(rec["run"]["id"], rec["run"]["started"], engine_label(s["provenance"]), s))
    return out


@dataclasses.dataclass
class Finding:
    key: tuple[str, str, str]
    points: list[Point]
    changes: list[changepoint.ChangePoint]

    def worse(self, cp: changepoint.ChangePoint) -> bool:
        better = self.points[0].series["better"]
        return (cp.step < 0) if better == "higher" else (cp.step > 0)


def analyse(records: list[dict[str, Any]], metric: str | None = None, entry: str | None = None,
            test: str | None = None, alpha: float = changepoint.DEFAULT_ALPHA,
            min_step: float = changepoint.DEFAULT_MIN_STEP) -> list[Finding]:
    out = []
    for key, points in sorted(series_over_runs(records).items()):
        if (entry and key[0] != entry) or (test and key[1] != test) or (metric and key[2] != metric):
            continue
        out.append(Finding(key, points, changepoint.detect([p.run_point() for p in points], alpha, min_step)))
    return out


def _fmt(v: float) -> str:
    return f"{v:.4g}" if abs(v) < 1000 else f"{v:.0f}"


def describe(f: Finding, alpha: float, min_step: float) -> str:
    entry, test, key = f.key
    first = f.points[0].series
    lines = [f"{entry} {test} {key} ({first['unit']}, {first['better']} is better): {len(f.points)} run(s)"]
    rows = [("run", "started (UTC)", "engine", "config", "boots", "median", "spread", "within-boot CV")]
    cfgs: dict[str, int] = {}
    for p in f.points:
        lo, hi = p.spread()
        cfp = p.series["provenance"].get("config_fingerprint") or "-"
        cfgs.setdefault(cfp, len(cfgs) + 1)
        wcv = p.series["noise"].get("within_boot_cv")
        rows.append((p.run_id, p.started.replace("T", " ")[:19], p.engine, f"#{cfgs[cfp]}", str(len(p.series["boots"])),
                     _fmt(p.median), f"{_fmt(lo)}…{_fmt(hi)}", "-" if wcv is None else f"{wcv:.1%}"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines += ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    if len(cfgs) > 1:
        lines.append(f"  note: {len(cfgs)} configurations (config fingerprints) over these runs")
    if len(f.points) < 3:
        lines.append(f"  change points: too few runs to tell ({len(f.points)}; 3 or more needed)")
    elif not f.changes:
        lines.append(f"  change points: none beyond the noise (alpha {alpha:g}, minimum step {min_step:.0%})")
    for cp in f.changes:
        p, prev = f.points[cp.index], f.points[cp.index - 1]
        changed = []
        if prev.engine != p.engine:
            changed.append(f"engine {prev.engine} → {p.engine}")
        pc, nc = (x.series["provenance"].get("config_fingerprint") or "-" for x in (prev, p))
        if pc != nc:
            changed.append(f"configuration #{cfgs[pc]} → #{cfgs[nc]}")
        if (prev.series["provenance"].get("model_hash") != p.series["provenance"].get("model_hash")):
            changed.append("model content")
        lines.append(f"  STEP at run {p.run_id} ({p.started.replace('T', ' ')[:19]} UTC, {p.engine}): "
                     f"{_fmt(cp.before)} → {_fmt(cp.after)} {first['unit']}, {cp.step:+.1%} "
                     f"(95% CI {cp.ci[0]:+.1%} … {cp.ci[1]:+.1%}), {'worse' if f.worse(cp) else 'better'}; "
                     f"p={cp.p_value:.2g} (Bonferroni over splits), confidence "
                     f"{'>99.9%' if cp.p_value < 0.001 else f'{cp.confidence:.1%}'}, "
                     f"run noise {cp.sigma:.1%} (log SD, df {cp.df}); "
                     + ("changed at this run: " + ", ".join(changed) if changed
                        else "same engine build, configuration and model as the run before"))
    return "\n".join(lines)


def plot(findings: list[Finding], out: Path) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = max(1, len(findings))
    fig, axes = plt.subplots(n, 1, figsize=(9, 2.8 * n), squeeze=False)
    for ax, f in zip(axes[:, 0], findings):
        xs = list(range(len(f.points)))
        for x, p in zip(xs, f.points):
            reps = [v for b in p.series["boots"] for v in b]
            ax.scatter([x] * len(reps), reps, s=8, color="0.7", zorder=1)
            ax.scatter([x] * len(p.boot_values), p.boot_values, s=18, color="tab:blue", zorder=2)
        ax.plot(xs, [p.median for p in f.points], color="tab:blue", lw=1)
        for cp in f.changes:
            ax.axvline(cp.index - 0.5, color="tab:red", ls="--")
            ax.annotate(f"{cp.step:+.0%} (p={cp.p_value:.2g})", (cp.index - 0.45, ax.get_ylim()[1]),
                        va="top", color="tab:red", fontsize=8)
        ax.set_xticks(xs, [f"{p.started[5:16]}\n{p.engine.split(' (')[0]}" for p in f.points], fontsize=7)
        unit = f.points[0].series["unit"]
        ax.set_title(f"{f.key[0]} {f.key[1]} {f.key[2]}", fontsize=9)
        ax.set_ylabel(unit)
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """``llmgate history``'s arguments (llmgate.cli)."""
    ap.add_argument("dir", nargs="?", default=str(DEFAULT_DIR), help=f"history folder (default {DEFAULT_DIR})")
    ap.add_argument("--metric", help="metric key, e.g. decode_tok_s or ttft_p95@c8")
    ap.add_argument("--entry", help="matrix entry id")
    ap.add_argument("--test", help="test name, e.g. test_decode_c1")
    ap.add_argument("--plot", metavar="OUT.png", help="plot the selected metrics over runs")
    ap.add_argument("--alpha", type=float, default=changepoint.DEFAULT_ALPHA,
                    help=f"significance level of a step (default {changepoint.DEFAULT_ALPHA})")
    ap.add_argument("--min-step", type=float, default=changepoint.DEFAULT_MIN_STEP,
                    help=f"smallest relative step that is named (default {changepoint.DEFAULT_MIN_STEP})")


def run(a: argparse.Namespace) -> int:
    """``llmgate history [DIR]``: each selected series and its steps; exit 1 when none matches, 2 for
    a missing folder or a corrupt record."""
    folder = Path(a.dir)
    if not folder.is_dir():
        print(f"llmgate history: no history folder {folder}", file=sys.stderr)
        return 2
    try:
        records = load(folder)
    except HistoryError as e:
        print(f"llmgate history: {e}", file=sys.stderr)
        return 2
    findings = analyse(records, a.metric, a.entry, a.test, a.alpha, a.min_step)
    if not findings:
        print(f"llmgate history: {len(records)} record(s) in {folder}, no series matches", file=sys.stderr)
        return 1
    print(f"{len(records)} run record(s) in {folder}")
    for f in findings:
        print()
        print(describe(f, a.alpha, a.min_step))
    if a.plot:
        print(f"\nplot: {plot(findings, Path(a.plot))}")
    return 0


def _stamp(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y%m%dT%H%M%S") + f"{int(t * 1000) % 1000:03d}Z"


def _iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
