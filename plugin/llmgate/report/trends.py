"""Each metric over gate runs: the run records' series (``store/history.py`` keeps them), the change
points where a series stepped beyond its noise (``analysis/changepoint.py``), their text and plot,
and the ``llmgate history`` command:

    llmgate history [DIR] [--metric KEY] [--entry ID] [--test NAME] [--plot OUT.png]
                    [--alpha A] [--min-step FRACTION]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from llmgate.analysis import changepoint
from llmgate.engines.base import engine_label
from llmgate.store.history import DEFAULT_DIR, HistoryError, load


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


def series_over_runs(records: Iterable[dict[str, Any]]) -> dict[tuple[str, str, str], list[Point]]:
    out: dict[tuple[str, str, str], list[Point]] = {}
    for rec in records:
        for s in rec["series"]:
            out.setdefault((s["entry"], s["test"], s["key"]), []).append(
                Point(rec["run"]["id"], rec["run"]["started"], engine_label(s["provenance"].get("engine")), s))
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
