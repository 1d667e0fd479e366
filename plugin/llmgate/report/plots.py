"""PNG plots of a session's report (llmgate-report/1), for people who would rather look than
read: TTFT per request (baseline vs now), tok/s per configuration, concurrency curves, and
prefix-cache TTFT vs prefix length.  A plot is drawn only when the session measured its data."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

CONC = re.compile(r"^(aggregate_tok_s|ttft_p95)@c(\d+)$")
PREFIX = re.compile(r"^ttft_c1@prefix(\d+)-(cold|warm)$")


def write(rep: dict[str, Any], folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for name, draw in (("ttft.png", _ttft), ("tok_s.png", _tok_s), ("concurrency.png", _concurrency),
                       ("prefix_cache.png", _prefix)):
        fig = draw(rep["verdicts"])
        if fig is None:
            continue
        path = folder / name
        fig.savefig(path, dpi=110, bbox_inches="tight")
        plt.close(fig)
        out.append(path)
    return out


def _ttfts(raw: dict[str, Any] | None) -> list[float]:
    """Per-request TTFTs (s) in a stored raw record: one load result, or {"waves": [...]}."""
    if not raw:
        return []
    runs = raw.get("waves") if isinstance(raw.get("waves"), list) else [raw]
    return [t for r in runs for t in (r.get("ttft_s") or []) if t is not None]


def _ecdf(ax, values_s: list[float], **kw) -> None:
    xs = sorted(v * 1000 for v in values_s)
    ys = [(i + 1) / len(xs) for i in range(len(xs))]
    ax.step(xs, ys, where="post", **kw)


def _ttft(verdicts: list[dict[str, Any]]):
    series = []
    for v in verdicts:
        now, base = _ttfts(v.get("raw")), _ttfts(v.get("baseline_raw"))
        if now:
            label = f"{v['config']} · {v['test'].removeprefix('test_')}" + (f" @{v['key'].split('@')[1]}" if "@" in v["key"] else "")
            series.append((label, now, base))
    if not series:
        return None
    fig, ax = plt.subplots(figsize=(8, 4.5))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (label, now, base) in enumerate(series):
        c = colours[i % len(colours)]
        _ecdf(ax, now, color=c, label=f"{label}: now (n={len(now)})")
        if base:
            _ecdf(ax, base, color=c, linestyle="--", label=f"{label}: baseline (n={len(base)})")
    ax.set_xscale("log")
    plain = matplotlib.ticker.FuncFormatter(lambda x, _: f"{x:g}")
    ax.xaxis.set_major_formatter(plain)
    ax.xaxis.set_minor_formatter(plain)
    ax.tick_params(axis="x", which="minor", labelsize=7)
    ax.set_xlabel("time to first token per request (ms, log scale)")
    ax.set_ylabel("share of requests (cumulative)")
    ax.set_title("TTFT distribution: baseline (dashed) vs now (solid)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    return fig


def _tok_s(verdicts: list[dict[str, Any]]):
    rows = [v for v in verdicts if v["unit"] == "tok/s" and v["metric"] in ("decode_tok_s", "aggregate_tok_s")]
    if not rows:
        return None
    rows.sort(key=lambda v: (v["config"], v["key"]))
    fig, ax = plt.subplots(figsize=(8, 0.9 + 0.38 * len(rows)))
    ys = list(range(len(rows)))
    med = [v["now"]["median"] for v in rows]
    err = [[v["now"]["median"] - v["now"]["min"] for v in rows], [v["now"]["max"] - v["now"]["median"] for v in rows]]
    ax.barh(ys, med, xerr=err, color="tab:blue", alpha=0.8, capsize=3, label="now: median, bar = min–max")
    bx = [(v["baseline"]["median"], y) for v, y in zip(rows, ys) if v["baseline"]]
    if bx:
        ax.scatter([b[0] for b in bx], [b[1] for b in bx], color="black", marker="D", zorder=3, label="baseline median")
    ax.set_yticks(ys, [f"{v['config']} · {v['label']}" + (f" @{v['key'].split('@')[1]}" if "@" in v["key"] else "")
                       for v in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("tokens per second (higher is better)")
    ax.set_title("Throughput per configuration")
    ax.grid(True, axis="x", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    return fig


def _curves(verdicts, pattern, group):
    """{config: {series: {x: (now median, baseline median | None)}}} from keys matching ``pattern``."""
    out: dict[str, dict[str, dict[int, tuple[float, float | None]]]] = {}
    for v in verdicts:
        m = pattern.match(v["key"])
        if m:
            series, x = group(m)
            out.setdefault(v["config"], {}).setdefault(series, {})[x] = (
                v["now"]["median"], v["baseline"]["median"] if v["baseline"] else None)
    return out


def _concurrency(verdicts: list[dict[str, Any]]):
    data = _curves(verdicts, CONC, lambda m: (m.group(1), int(m.group(2))))
    data = {c: s for c, s in data.items() if any(len(pts) > 1 for pts in s.values())}
    if not data:
        return None
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for cfg, series in sorted(data.items()):
        for ax, key, scale in ((a1, "aggregate_tok_s", 1.0), (a2, "ttft_p95", 1000.0)):
            pts = series.get(key)
            if not pts:
                continue
            xs = sorted(pts)
            line, = ax.plot(xs, [pts[x][0] * scale for x in xs], marker="o", label=f"{cfg} now")
            if all(pts[x][1] is not None for x in xs):
                ax.plot(xs, [pts[x][1] * scale for x in xs], marker="x", linestyle="--", color=line.get_color(),
                        label=f"{cfg} baseline")
    a1.set(xlabel="concurrent requests", ylabel="aggregate tok/s (higher is better)", title="Aggregate throughput")
    a2.set(xlabel="concurrent requests", ylabel="TTFT p95 (ms, lower is better)", title="Time to first token, p95")
    levels = sorted({x for series in data.values() for pts in series.values() for x in pts})
    for ax in (a1, a2):
        ax.set_xscale("log", base=2)
        ax.set_xticks(levels, [str(x) for x in levels])
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    return fig


def _prefix(verdicts: list[dict[str, Any]]):
    data = _curves(verdicts, PREFIX, lambda m: (m.group(2), int(m.group(1))))
    if not data:
        return None
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for cfg, series in sorted(data.items()):
        colour = None
        for kind, style in (("cold", "--"), ("warm", "-")):
            pts = series.get(kind)
            if not pts:
                continue
            xs = sorted(pts)
            line, = ax.plot(xs, [pts[x][0] * 1000 for x in xs], marker="o", linestyle=style, color=colour,
                            label=f"{cfg}: {'first request after a cache reset' if kind == 'cold' else 'repeats (prefix cached)'}")
            colour = line.get_color()
    lengths = sorted({x for series in data.values() for pts in series.values() for x in pts})
    ax.set_xscale("log", base=2)
    ax.set_xticks(lengths, [str(x) for x in lengths])
    ax.set_xlabel("shared prefix length (tokens)")
    ax.set_ylabel("TTFT (ms, median)")
    ax.set_title("Prefix cache: TTFT vs prefix length (now)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    return fig
