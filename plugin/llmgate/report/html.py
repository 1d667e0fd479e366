"""report.html: one page a reviewer opens, beside report.json (docs/report.md, "The report page").

One self-contained file: the styles, the charts (SVG drawn here, no plotting library) and a few
lines of script (the verdict table's filters) are inline; nothing is fetched when it is viewed.
Every text that comes from the run (entry ids, notes, paths, command lines) is HTML-escaped.

    write(rep, out_dir, history_dir=None) -> out_dir / "report.html"

What it shows, top to bottom: the outcome (a pass/fail badge, the counts, the lines above
summary.md's tables), what each verdict rests on (a stored baseline, alternating boots in one
session, a duet, a ratio to a reference entry), the engine builds and launchers of each side, the
device and the GPU's clocks and throttling while it was sampled; the verdict table, regressions
first, filterable by entry, metric and status; per flagged metric (regressed or improved) or one
whose change came near what the comparison can see (its MDE or minimum effect), a chart of both
sides' boot (or boot-pair) values with the confidence interval of the change, and the run history
with its change points where a history folder is given; the notes (what could not be compared and
why); the engine logs, linked relative to the page where they are in its folder.
"""

from __future__ import annotations

import html
import math
from collections import Counter
from pathlib import Path
from typing import Any

from llmgate.analysis.verdict import (INCONCLUSIVE, IMPROVED, NO_BASELINE, REFUSED, REGRESSED, UNCHANGED, Verdict,
                                      mde_pct)
from llmgate.report import outcome as outcomes
from llmgate.report import reports

PAGE = "report.html"
# the verdict table's order: what needs a look first
RANK = {REGRESSED: 0, INCONCLUSIVE: 1, NO_BASELINE: 2, REFUSED: 3, IMPROVED: 4, UNCHANGED: 5}
MAX_CHARTS = 30            # charts on one page (regressions first); the table lists every verdict
HISTORY_RUNS = 40          # the newest runs a history chart shows
# an engine's own timers (``record_engine_parts``): the phases a client figure's time went to
PHASES = {"frontend_ttft": "front end", "engine_queue": "queue", "engine_prefill": "prefill",
          "engine_tpot": "decode (time per output token)"}
TOTALS = {"engine_ttft": "engine TTFT", "engine_e2e": "engine E2E"}


def e(x: Any) -> str:
    """Text for HTML (element content and quoted attribute values alike)."""
    return html.escape("" if x is None else str(x), quote=True)


def write(rep: dict[str, Any], out_dir: Path, history_dir: Path | None = None) -> Path:
    """Write ``out_dir/report.html`` for ``rep`` (an ``llmgate-report/1`` document); returns its path."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / PAGE
    tmp = path.with_name(PAGE + ".tmp")
    tmp.write_text(render(rep, out_dir, history_dir), encoding="utf-8")
    tmp.replace(path)
    return path


# -- what a verdict rests on -------------------------------------------------------------------
def ordered(verdicts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Regressions first, then inconclusive, not gated, improved, unchanged; within a status the
    figures before the engine's own timers that explain them, the regressions the largest worsening
    first, the rest by entry, test and metric."""
    def key(v: dict[str, Any]) -> tuple[Any, ...]:
        worse = v.get("worse_change")
        w = -worse if isinstance(worse, (int, float)) and math.isfinite(worse) and v["status"] == REGRESSED else 0.0
        timer = v.get("metric") in PHASES or v.get("metric") in TOTALS
        return (RANK.get(v["status"], 9), timer, w, v["config"], v["test"], v["key"])
    return sorted(verdicts, key=key)


def basis(v: dict[str, Any]) -> str:
    """What the verdict rests on, in a few words."""
    comp = v.get("comparison") or ""
    ref = ""
    if v.get("metric", "").endswith("_vs_reference"):
        r = (v.get("config_detail") or {}).get("reference")
        ref = f"ratio to reference entry {r} (same session), " if r else "ratio to the reference entry (same session), "
    if v["status"] == REFUSED:
        return ref + "not comparable: " + (v.get("baseline_source") or "stored run")
    if comp.startswith("duet"):
        return ref + f"{comp}: both builds up at once, load in turns"
    if comp == "same session":
        return ref + "alternating boots, same session (A/B)"
    if comp == "stored" or v.get("baseline") is not None:
        src = v.get("baseline_source") or "a stored run"
        return ref + f"stored baseline {src}" + (f" + {v['machine_offset'].split(' (')[0]}" if v.get("machine_offset")
                                                 else "")
    if v["status"] == NO_BASELINE:
        return ref + (v.get("no_baseline") or "no baseline")
    return ref + "not compared"


def basis_kind(v: dict[str, Any]) -> str:
    """The comparison's kind for the header's count: stored, alternating boots, duet, not compared."""
    comp = v.get("comparison") or ""
    if v["status"] == REFUSED:
        return "not comparable"
    if comp.startswith("duet"):
        return "duet (both builds up at once, load in turns)"
    if comp == "same session":
        return "alternating boots in this session (A/B)"
    if comp == "stored" or v.get("baseline") is not None:
        return f"stored baseline {v.get('baseline_source') or '(its name not recorded)'}"
    return "not compared" + (f": {v['no_baseline']}" if v.get("no_baseline") else "")


def attribution(v: dict[str, Any], siblings: list[dict[str, Any]]) -> tuple[str, str]:
    """Which phase moved: (short, full).  A TTFT verdict's own (its ``attribution``: the engine's queue,
    prefill and front-end timers, ``analysis.verdict.attribution``); else the engine timers the same test
    recorded (``record_engine_parts``), compared: each phase's change, and those beyond their min effect.
    ("", "") for an engine timer itself, or where nothing was compared."""
    own = v.get("attribution") or ""
    if own:
        return own.rsplit("; ", 1)[-1], own          # its last part: "most of it: prefill"
    if v.get("metric") in PHASES or v.get("metric") in TOTALS:
        name = PHASES.get(v["metric"]) or TOTALS[v["metric"]]
        return "", f"this figure is the engine's own timer of {name}: the phase itself"
    if v.get("change") is None:
        return "", ""
    variant = v["key"].split("@", 1)[1] if "@" in v["key"] else None
    parts = [s for s in siblings if s.get("metric") in PHASES or s.get("metric") in TOTALS]
    parts = [s for s in parts if (s["key"].split("@", 1)[1] if "@" in s["key"] else None) == variant] or \
        [s for s in parts if "@" not in s["key"]]
    parts = [s for s in parts if s.get("change") is not None and s.get("baseline") is not None]
    if not parts:
        return "", ""
    text = []
    for s in sorted(parts, key=lambda s: (s["metric"] in TOTALS, -abs(s["change"]))):
        name = PHASES.get(s["metric"]) or TOTALS[s["metric"]]
        ms = (s["now"]["median"] - s["baseline"]["median"]) * 1000.0
        status = f" {s['status']}" if s["status"] in (REGRESSED, IMPROVED) else ""
        text.append(f"{name} {s['change']:+.0%} ({ms:+.2f} ms){status}")
    # the phases whose change passed their min effect, largest first (a time per token and a time per
    # request are not added up: which of them weighs most in the figure depends on its workload)
    phases = [s for s in parts if s["metric"] in PHASES]
    moved = sorted((s for s in phases if s["status"] in (REGRESSED, IMPROVED) or (
        abs(s["change"]) > s["min_effect"]
        and abs(s["now"]["median"] - s["baseline"]["median"]) > float(s.get("min_abs_effect") or 0.0))),
        key=lambda s: -abs(s["change"]))
    if moved:
        short = "moved: " + ", ".join(f"{PHASES[s['metric']]} {s['change']:+.0%}" for s in moved)
    else:
        short = "no engine phase moved beyond its min effect"
    return short, f"engine timers of this test (window means): {', '.join(text)}; {short}"


def flagged(v: dict[str, Any]) -> bool:
    """A verdict that gets a chart: regressed or improved, or a change as large as its min effect or
    half its MDE (what the comparison can see) that was not decided."""
    if v["status"] in (REGRESSED, IMPROVED):
        return True
    ch = v.get("change")
    if ch is None or not isinstance(ch, (int, float)) or not math.isfinite(ch) or v.get("baseline") is None:
        return False
    mde = v.get("mde")
    return abs(ch) >= (v.get("min_effect") or 0.0) > 0 or (mde is not None and abs(ch) >= 0.5 * mde)


# -- charts (SVG) ---------------------------------------------------------------------------
def _nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    span = hi - lo
    if span <= 0 or not math.isfinite(span):
        return [lo]
    raw = span / n
    mag = 10 ** math.floor(math.log10(raw))
    step = mag
    for m in (1, 2, 2.5, 5, 10):
        step = m * mag
        if span / step <= n:
            break
    first = math.ceil(lo / step) * step
    out: list[float] = []
    x = first
    while x <= hi + span * 1e-9 and len(out) < 20:
        out.append(0.0 if abs(x) < step * 1e-9 else x)
        x += step
    return out


def _domain(values: list[float]) -> tuple[float, float]:
    vals = [v for v in values if v is not None and math.isfinite(v)]
    lo, hi = min(vals), max(vals)
    if hi == lo:
        pad = abs(lo) * 0.1 or 1.0
        return lo - pad, hi + pad
    pad = (hi - lo) * 0.08
    return lo - pad, hi + pad


def _geomean(xs: list[float]) -> float | None:
    if not xs or min(xs) <= 0:
        return None
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def worse_at(v: dict[str, Any], base: float, fraction: float) -> float:
    """The value a worsening of ``fraction`` from ``base`` reaches (relative, in the metric's worse direction)."""
    return base * (1 + fraction) if v["better"] == "lower" else base * (1 - fraction)


def boot_chart(v: dict[str, Any], idx: int) -> str:
    """Both sides' boot values (boot pairs, in a duet: joined by a line), each side's repeats, the
    baseline's centre, and the 95% CI of the change drawn from it, with the min-effect line."""
    metric = Verdict.from_dict(v).metric
    display = metric.display
    base_boots = [float(x) for x in v.get("baseline_boot_values") or []]
    now_boots = [float(x) for x in v.get("boot_values") or []]
    base = v.get("baseline") or {}
    if not base_boots and base:
        base_boots = [float(base["median"])]
    if not now_boots:
        now_boots = [float(v["now"]["median"])]
    base_reps = [float(x) for x in base.get("values") or []]
    now_reps = [float(x) for x in v["now"].get("values") or []]
    anchor = (_geomean(base_boots) if v.get("comparison") else None) or (float(base["median"]) if base else None)
    ci = v.get("ci95")
    ci_vals = [anchor * (1 + c) for c in ci] if ci and anchor is not None else []
    est = anchor * (1 + v["change"]) if anchor is not None and v.get("change") is not None else None
    eff = worse_at(v, anchor, v["min_effect"]) if anchor is not None and v.get("min_effect") else None
    mde = worse_at(v, anchor, v["mde"]) if anchor is not None and v.get("mde") is not None else None
    lo, hi = _domain(base_boots + now_boots + base_reps + now_reps + ci_vals + ([eff] if eff else []))
    show_mde = mde is not None and lo <= mde <= hi
    w, h, left, right = 760, 150, 92, 18
    rows = {"baseline": 56, "now": 112}

    def x(val: float) -> float:
        return left + (val - lo) / (hi - lo) * (w - left - right)

    bad = v["status"] == REGRESSED
    now_colour = "#c62828" if bad else "#2e7d32" if v["status"] == IMPROVED else "#e07b00"
    out = [f'<svg class="chart" id="boots-{idx}" role="img" viewBox="0 0 {w} {h}" width="{w}" height="{h}" '
           f'xmlns="http://www.w3.org/2000/svg"><title>{e(v["config"])} {e(v["key"])}: boot values, baseline and now'
           f'</title>']
    for t in _nice_ticks(lo, hi):
        out.append(f'<line x1="{x(t):.1f}" x2="{x(t):.1f}" y1="24" y2="{h - 14}" class="grid"/>'
                   f'<text x="{x(t):.1f}" y="{h - 2}" class="tick" text-anchor="middle">{e(display(t))}</text>')
    for name, y in rows.items():
        out.append(f'<text x="{left - 8}" y="{y + 4}" class="lab" text-anchor="end">{e(name)}</text>'
                   f'<line x1="{left}" x2="{w - right}" y1="{y}" y2="{y}" class="axis"/>')
    if eff is not None:
        out.append(f'<line x1="{x(eff):.1f}" x2="{x(eff):.1f}" y1="20" y2="{h - 14}" class="eff"/>'
                   f'<text x="{x(eff) + 3:.1f}" y="19" class="tick">min effect {v["min_effect"]:.0%}</text>')
    if show_mde and mde is not None:
        out.append(f'<line x1="{x(mde):.1f}" x2="{x(mde):.1f}" y1="28" y2="{h - 14}" class="mde"/>'
                   f'<text x="{x(mde) + 3:.1f}" y="{h - 18}" class="tick">MDE {mde_pct(v["mde"], 0)}</text>')
    if v.get("comparison", "").startswith("duet") and len(base_boots) == len(now_boots):
        for a, b in zip(base_boots, now_boots):
            out.append(f'<line x1="{x(a):.1f}" y1="{rows["baseline"]}" x2="{x(b):.1f}" y2="{rows["now"]}" class="pair"/>')
    for name, reps, boots, colour in (("baseline", base_reps, base_boots if base else [], "#455a64"),
                                      ("now", now_reps, now_boots, now_colour)):
        y = rows[name]
        for r in reps:
            out.append(f'<circle cx="{x(r):.1f}" cy="{y - 9}" r="2.6" class="rep"><title>{e(name)} repeat: '
                       f'{e(display(r))}</title></circle>')
        for i, b in enumerate(boots):
            unit = "pair" if v.get("comparison", "").startswith("duet") else "boot"
            out.append(f'<circle cx="{x(b):.1f}" cy="{y}" r="5.5" fill="{colour}" class="boot"><title>{e(name)} {unit} '
                       f'{i + 1}: {e(display(b))}</title></circle>')
    if anchor is not None:
        out.append(f'<line x1="{x(anchor):.1f}" x2="{x(anchor):.1f}" y1="{rows["baseline"] - 14}" '
                   f'y2="{rows["now"] + 14}" class="anchor"/>')
    if len(ci_vals) == 2:
        a, b = sorted(ci_vals)
        y = rows["now"] + 17
        out.append(f'<line x1="{x(a):.1f}" x2="{x(b):.1f}" y1="{y}" y2="{y}" stroke="{now_colour}" class="ci"/>'
                   f'<line x1="{x(a):.1f}" x2="{x(a):.1f}" y1="{y - 5}" y2="{y + 5}" stroke="{now_colour}" class="ci"/>'
                   f'<line x1="{x(b):.1f}" x2="{x(b):.1f}" y1="{y - 5}" y2="{y + 5}" stroke="{now_colour}" class="ci"/>')
    if est is not None and lo <= est <= hi:
        y = rows["now"] + 17
        out.append(f'<path d="M{x(est):.1f},{y - 5} l5,5 l-5,5 l-5,-5 z" fill="{now_colour}"><title>change '
                   f'{v["change"]:+.1%}: {e(display(est))}</title></path>')
    out.append("</svg>")
    legend = ("large dots: each side's boot values" if not v.get("comparison", "").startswith("duet")
              else "large dots: each boot pair's values, a line joining the two sides of a pair") + \
        ("; small dots: the repeats within the boots; vertical line: the baseline's centre; bar under 'now': the 95% "
         "CI of the change drawn from the baseline's centre (◆ the change); dashed: the min effect"
         + (", dotted: the MDE" if show_mde else ""))
    out.append(f'<p class="legend">{e(legend)}</p>')
    return "".join(out)


def history_chart(v: dict[str, Any], points: list[Any], changes: list[Any], idx: int) -> str:
    """The metric over runs (each run's boot values and their median, joined), change points as
    dashed lines with their step."""
    display = Verdict.from_dict(v).metric.display
    pts = points[-HISTORY_RUNS:]
    offset = len(points) - len(pts)
    vals = [b for p in pts for b in p.boot_values]
    lo, hi = _domain(vals)
    w, h, left, right, top, bottom = 760, 170, 92, 18, 22, 24
    n = len(pts)

    def x(i: int) -> float:
        return left + (i + 0.5) / n * (w - left - right)

    def y(val: float) -> float:
        return top + (hi - val) / (hi - lo) * (h - top - bottom)

    out = [f'<svg class="chart" id="history-{idx}" role="img" viewBox="0 0 {w} {h}" width="{w}" height="{h}" '
           f'xmlns="http://www.w3.org/2000/svg"><title>{e(v["config"])} {e(v["key"])} over {n} run(s)</title>']
    for t in _nice_ticks(lo, hi, 4):
        out.append(f'<line x1="{left}" x2="{w - right}" y1="{y(t):.1f}" y2="{y(t):.1f}" class="grid"/>'
                   f'<text x="{left - 6}" y="{y(t) + 4:.1f}" class="tick" text-anchor="end">{e(display(t))}</text>')
    path = " ".join(f"{'M' if i == 0 else 'L'}{x(i):.1f},{y(p.median):.1f}" for i, p in enumerate(pts))
    out.append(f'<path d="{path}" class="line"/>')
    for i, p in enumerate(pts):
        last = i == n - 1
        for b in p.boot_values:
            out.append(f'<circle cx="{x(i):.1f}" cy="{y(b):.1f}" r="{4.5 if last else 3.2}" '
                       f'class="{"hnow" if last else "hrun"}"><title>run {e(p.run_id)} ({e(p.started[:16])}, '
                       f'{e(p.engine)}): {e(display(b))}</title></circle>')
    for cp in changes:
        i = cp.index - offset
        if 0 < i < n:
            xc = (x(i - 1) + x(i)) / 2
            out.append(f'<line x1="{xc:.1f}" x2="{xc:.1f}" y1="{top - 6}" y2="{h - bottom}" class="cp"/>'
                       f'<text x="{xc + 3:.1f}" y="{top + 4}" class="cpl">step {cp.step:+.0%} (p={cp.p_value:.2g})</text>')
    if pts:
        out.append(f'<text x="{x(0):.1f}" y="{h - bottom + 16}" class="tick" text-anchor="start">'
                   f'{e(pts[0].started[:10])}</text>'
                   f'<text x="{x(n - 1):.1f}" y="{h - bottom + 16}" class="tick" text-anchor="end">'
                   f'{e(pts[-1].started[:16].replace("T", " "))} (the newest)</text>')
    out.append('</svg><p class="legend">dots: each run\'s boot values (the newest in orange), line: their median; '
               'dashed red: a change point, with its step</p>')
    return "".join(out)


def load_history(history_dir: Path | None) -> tuple[dict[tuple[str, str, str], list[Any]], str]:
    """The run history by (entry, test, key), and a line about it (why it is absent or unread)."""
    if history_dir is None:
        return {}, "no run history given"
    folder = Path(history_dir)
    if not folder.is_dir():
        return {}, f"no run history in {folder}"
    from llmgate.store import history
    try:
        records = history.load(folder)
    except history.HistoryError as err:
        return {}, f"run history not read: {err}"
    from llmgate.report import trends
    return trends.series_over_runs(records), f"{len(records)} run record(s) in {folder}"


# -- the page ---------------------------------------------------------------------------------
CSS = """
:root{--bad:#c62828;--good:#2e7d32;--warn:#b26a00;--ink:#1d232a;--mute:#5f6b76;--line:#d9dee3;--bg:#f6f8fa}
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--ink);margin:0;background:#fff}
main{max-width:1360px;margin:0 auto;padding:18px 22px 40px}
h1{font-size:22px;margin:0 0 6px}h2{font-size:17px;margin:26px 0 8px;border-bottom:1px solid var(--line);padding-bottom:4px}
h3{font-size:14px;margin:18px 0 4px}
.badge{display:inline-block;padding:3px 12px;border-radius:14px;color:#fff;font-weight:700;letter-spacing:.04em;margin-right:10px;vertical-align:3px}
.badge.bad{background:var(--bad)}.badge.good{background:var(--good)}.badge.warn{background:var(--warn)}
.lines li{margin:2px 0}.mute{color:var(--mute)}.small{font-size:12px}
code,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12px}
table{border-collapse:collapse;width:100%;margin:6px 0}
th,td{border-bottom:1px solid var(--line);padding:4px 6px;text-align:left;vertical-align:top}
th{background:var(--bg);font-weight:600;position:sticky;top:0}
table.verdicts td{font-size:12.5px}.scroll{overflow-x:auto}
table.verdicts td.metric{min-width:150px}table.verdicts td:last-child{min-width:130px}
table.verdicts td.basis{min-width:120px}
td.num{text-align:right;white-space:nowrap;font-variant-numeric:tabular-nums}
tr.s-regressed td{background:#fdecea}tr.s-improved td{background:#edf7ee}tr.s-inconclusive td{background:#fff8e1}
.st{font-weight:600}.s-regressed .st{color:var(--bad)}.s-improved .st{color:var(--good)}
.s-inconclusive .st{color:var(--warn)}
.grid2{display:grid;grid-template-columns:repeat(auto-fit,minmax(340px,1fr));gap:6px 26px}
dl{margin:0}dt{font-weight:600;margin-top:6px}dd{margin:0 0 0 12px}
.filters{display:flex;gap:12px;flex-wrap:wrap;align-items:center;margin:6px 0;padding:8px;background:var(--bg);border-radius:6px}
.filters label{font-size:12.5px}
.card{border:1px solid var(--line);border-radius:8px;padding:10px 14px;margin:12px 0}
.card.s-regressed{border-left:5px solid var(--bad)}.card.s-improved{border-left:5px solid var(--good)}
.card.s-inconclusive{border-left:5px solid var(--warn)}
svg.chart{width:100%;max-width:900px;height:auto;display:block;margin:6px 0 0}
.legend{font-size:11.5px;color:var(--mute);margin:2px 0 8px}
svg .grid{stroke:#eceff1}svg .axis{stroke:#b0bec5}svg .tick{font-size:10px;fill:#5f6b76}
svg .lab{font-size:12px;fill:#1d232a;font-weight:600}svg .rep{fill:#90a4ae;opacity:.7}
svg .boot{stroke:#fff;stroke-width:1.2}svg .anchor{stroke:#455a64;stroke-width:1.5}
svg .ci{stroke-width:2.2}svg .eff{stroke:#6a1b9a;stroke-dasharray:5 3}svg .mde{stroke:#0277bd;stroke-dasharray:2 3}
svg .pair{stroke:#b0bec5;stroke-width:1}svg .line{fill:none;stroke:#1565c0;stroke-width:1.5}
svg .hrun{fill:#1565c0;opacity:.75}svg .hnow{fill:#e07b00;stroke:#fff}svg .cp{stroke:#c62828;stroke-dasharray:5 3}
svg .cpl{font-size:10px;fill:#c62828}
.where{background:var(--bg);padding:6px 8px;border-radius:4px;font-size:12.5px}
footer{margin-top:30px;color:var(--mute);font-size:12px}
"""

SCRIPT = """
(function () {
  var rows = Array.prototype.slice.call(document.querySelectorAll('#verdicts tbody tr'));
  var entry = document.getElementById('f-entry'), metric = document.getElementById('f-metric'),
      status = document.getElementById('f-status'), shown = document.getElementById('shown');
  function apply() {
    var en = entry.value, me = metric.value.trim().toLowerCase(), st = status.value, n = 0;
    rows.forEach(function (r) {
      var ok = (!en || r.getAttribute('data-entry') === en) &&
               (!me || (r.getAttribute('data-metric') + ' ' + r.getAttribute('data-label')).toLowerCase().indexOf(me) >= 0) &&
               (!st || r.getAttribute('data-status') === st);
      r.hidden = !ok;
      if (ok) { n += 1; }
    });
    shown.textContent = n + ' of ' + rows.length + ' verdict(s) shown';
  }
  [entry, metric, status].forEach(function (el) { el.addEventListener('input', apply); el.addEventListener('change', apply); });
  apply();
  var done = document.getElementById('llmgate-js');
  done.textContent = 'page script ran';
  document.documentElement.setAttribute('data-llmgate-ready', '1');
})();
"""


def _dev_text(dev: dict[str, Any]) -> list[tuple[str, str]]:
    out = []
    gpus = dev.get("gpus") or []
    if gpus:
        out.append(("GPUs", reports.gpu_words(gpus)))
        if dev.get("driver"):
            out.append(("driver", f"{dev['driver']}" + (f", CUDA {dev['cuda']}" if dev.get("cuda") else "")))
    if dev.get("cpu"):
        out.append(("CPU", f"{dev['cpu']}" + (f" ({dev['cpu_count']} logical cores)" if dev.get("cpu_count") else "")))
    if dev.get("system"):
        out.append(("system", str(dev["system"])))
    if dev.get("machine_id"):
        out.append(("machine", str(dev["machine_id"])))
    return out or [("device", str(dev.get("name") or dev.get("kind") or "not recorded"))]


def _clocks(rep: dict[str, Any]) -> str:
    samples = rep.get("gpu_sampling")
    if samples is None:
        return '<p class="mute">This report predates GPU sampling in report.json (no <code>gpu_sampling</code>).</p>'
    if not samples:
        gpus = (rep.get("device") or {}).get("gpus")
        why = ("no test sampled the GPU (the decode and concurrency scenarios do on a GPU entry)" if gpus
               else "no GPU: a CPU run, no clocks or throttling to sample")
        return f'<p class="mute">{e(why)}.</p>'
    rows = []
    for s in samples:
        for gi, g in sorted((s.get("gpus") or {}).items()):
            sm, mem = g.get("sm_mhz") or {}, g.get("mem_mhz") or {}
            moved = bool(sm and sm.get("max") and (sm["max"] - sm["min"]) / sm["max"] > 0.05)
            thr = {k: v for k, v in (g.get("throttle") or {}).items() if k not in ("gpu_idle", "applications_clocks_setting")}
            rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in (
                e(s.get("config")), e(s.get("test", "").removeprefix("test_")), e(s.get("key")),
                e((str(s["boot"]) if s.get("boot") is not None else "—") + (f" ({s['side']})" if s.get("side") else "")),
                e(gi),
                e(f"{sm.get('min')}–{sm.get('max')} MHz (median {sm.get('median', 0):.0f})" if sm else "—")
                + (' <b class="bad">moved &gt;5%</b>' if moved else ""),
                e(f"{mem.get('min')}–{mem.get('max')} MHz" if mem else "—"),
                e(f"{g.get('utilization_mean', 0):.0f}% (max {g.get('utilization_max', 0):.0f}%)"),
                e(f"{g['temp_c_max']} °C" if "temp_c_max" in g else "—"),
                e(f"{g['power_w_mean']:.0f} W" if "power_w_mean" in g else "—"),
                (f'<b class="bad">{e(", ".join(f"{k} {v:.0%}" for k, v in thr.items()))}</b>' if thr else "none"),
            )) + "</tr>")
    return ('<table class="small"><thead><tr><th>entry</th><th>test</th><th>figure</th><th>boot</th><th>GPU</th>'
            '<th>SM clock</th><th>memory clock</th><th>utilisation</th><th>max temp.</th><th>power</th>'
            '<th>throttled (share of samples)</th></tr></thead><tbody>' + "".join(rows) + "</tbody></table>")


def _log_link(log: str | None, out_dir: Path | None) -> str:
    if not log:
        return '<span class="mute">—</span>'
    p = Path(log)
    if out_dir is not None:
        root = Path(out_dir).resolve()
        full = p if p.is_absolute() else (Path.cwd() / p)
        try:
            rel = full.resolve().relative_to(root)
        except ValueError:
            rel = None
        if rel is None and (root / "logs" / p.name).is_file():
            rel = Path("logs") / p.name
        if rel is not None:
            href = "/".join(rel.parts)
            return f'<a href="{e(href)}" class="mono">{e(href)}</a>'
    return f'<span class="mono" title="not in this report\'s folder">{e(log)}</span>'


def _engines(rep: dict[str, Any], out_dir: Path | None) -> str:
    pairs: dict[tuple[str, str], set[str]] = {}
    for v in rep["verdicts"]:
        if v.get("engine") or v.get("baseline_engine"):
            pairs.setdefault((v.get("baseline_engine") or "—", v.get("engine") or "—"), set()).add(v["config"])
    out = []
    if pairs:
        out.append('<table class="small"><thead><tr><th>baseline side</th><th>now side</th><th>entries</th></tr>'
                   '</thead><tbody>')
        for (b, n), cids in sorted(pairs.items()):
            out.append(f"<tr><td class=mono>{e(b)}</td><td class=mono>{e(n)}</td><td>{e(', '.join(sorted(cids)))}</td></tr>")
        out.append("</tbody></table>")
    boots = rep.get("boots") or {}
    if boots:
        sides = any(b.get("side") for bs in boots.values() for b in bs)
        out.append('<h3>Boots</h3><table class="small"><thead><tr><th>entry</th><th>boot</th>'
                   + ("<th>side</th>" if sides else "") + '<th>engine</th><th>version</th><th>commit</th>'
                   '<th>launcher</th><th>start-up</th><th>log</th></tr></thead><tbody>')
        for cid, bs in sorted(boots.items()):
            for b in bs:
                up = (f"{b['startup_s']:.1f} s" if b.get("startup_s") is not None
                      else "interrupted" if b.get("interrupted") else "failed")
                out.append(f"<tr><td>{e(cid)}</td><td>{e(b.get('boot'))}</td>"
                           + (f"<td>{e(b.get('side') or '')}</td>" if sides else "")
                           + f"<td>{e(b.get('engine', ''))}</td><td>{e(b.get('version') or '?')}</td>"
                           f"<td class=mono>{e((b.get('commit') or '')[:12])}</td>"
                           f"<td class=mono>{e(b.get('launcher') or 'default')}</td><td>{e(up)}</td>"
                           f"<td>{_log_link(b.get('log'), out_dir)}</td></tr>")
        out.append("</tbody></table>")
    if not out:
        return '<p class="mute">No engine was booted and no verdict names an engine build.</p>'
    return "".join(out)


def _cell_change(v: dict[str, Any]) -> str:
    return f"{v['change']:+.1%}" if isinstance(v.get("change"), (int, float)) and math.isfinite(v["change"]) else "—"


def _cell_p(v: dict[str, Any]) -> str:
    return f"{v['p_value']:.3g}" if v.get("p_value") is not None else "—"


def _cell_ci(v: dict[str, Any]) -> str:
    ci = v.get("ci95")
    return f"{ci[0]:+.1%} … {ci[1]:+.1%}" if ci else "—"


def render(rep: dict[str, Any], out_dir: Path | None = None, history_dir: Path | None = None) -> str:
    """The page for ``rep`` as a string."""
    o = outcomes.outcome(rep)
    verdicts = ordered(list(rep.get("verdicts") or []))
    c = rep.get("counts") or {}
    exit_status = int(rep.get("exit_status") or 0)
    sev = "bad" if exit_status or o.severity == outcomes.BAD else "good" if o.severity == outcomes.GOOD else "warn"
    badge = {"bad": "FAIL", "good": "PASS", "warn": "PASS, NOT GREEN"}[sev]
    first, _, rest = o.headline.partition(" ")
    headline = rest if rest and not any(ch.isalnum() for ch in first) else o.headline     # the badge says ❌/✅
    by_test: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for v in verdicts:
        by_test.setdefault((v["config"], v["test"]), []).append(v)
    series, history_line = load_history(history_dir)

    p: list[str] = []
    p.append(f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
             f'<meta name="viewport" content="width=device-width, initial-scale=1">'
             f'<title>llmgate: {badge}: {e(headline)}</title><style>{CSS}</style></head><body><main>')
    # -- header
    p.append(f'<header id="outcome"><h1><span class="badge {sev}" id="badge">{badge}</span>{e(headline)}</h1>')
    p.append(f'<p id="counts"><b>{e(reports.counts_line(c))}</b>'
             + (f' · tests: {e(reports._tests_text(rep["tests"]))}' if rep.get("tests") else "")
             + f' · exit status {exit_status}</p>')
    lines = list(o.lines) + ([o.fate] if o.fate else [])
    lines += [f"{line}: the run fails" for line in rep.get("baseline_not_saved") or []]
    stop = rep.get("interrupted")
    if stop:
        lines.append(f"interrupted by {stop.get('signal') or stop.get('reason') or 'an interrupt'}"
                     + (f" during {stop['during']}" if stop.get("during") else "") + ": what was measured is below")
    for k in rep.get("missing_shards") or []:
        lines.append(f"shard {k} missing: no report from it; its entries were not gated")
    if lines:
        p.append('<ul class="lines">' + "".join(f"<li>{e(x)}</li>" for x in lines) + "</ul>")
    p.append(f'<p class="mute small">created {e(rep.get("created"))} · llmgate {e(rep.get("llmgate_version"))} · '
             f'<code>pytest {e(" ".join(rep.get("argv") or []))}</code></p></header>')

    kinds = Counter(basis_kind(v) for v in verdicts)
    p.append('<section id="context" class="grid2"><div><h2>What the verdicts rest on</h2><ul>')
    p.append("".join(f"<li>{e(k)}: {n} verdict(s)</li>" for k, n in kinds.most_common()) or
             "<li>no verdict</li>")
    ref = sorted({str((v.get("config_detail") or {}).get("reference")) for v in verdicts
                  if v.get("metric", "").endswith("_vs_reference") and (v.get("config_detail") or {}).get("reference")})
    if ref:
        p.append(f"<li>ratios to a reference entry measured in the same session: {e(', '.join(ref))}</li>")
    p.append("</ul>")
    shards = rep.get("shards")
    if shards is not None:
        p.append('<h3>Shards</h3><table class="small"><thead><tr><th>shard</th><th>machine</th><th>entries</th>'
                 '<th>exit</th></tr></thead><tbody>')
        for s in shards:
            p.append(f"<tr><td>{e(s['index'])}/{e(s['of'])}</td><td>{e(s.get('machine'))}</td>"
                     f"<td>{e(', '.join(s.get('entries') or []) or '—')}</td><td>{e(s.get('exit_status'))}</td></tr>")
        for k in rep.get("missing_shards") or []:
            p.append(f'<tr class="s-regressed"><td>{e(k)}</td><td>—</td><td><b>missing</b></td><td>—</td></tr>')
        p.append("</tbody></table>")
    p.append('</div><div><h2>Device</h2><dl>')
    p.append("".join(f"<dt>{e(k)}</dt><dd>{e(val)}</dd>" for k, val in _dev_text(rep.get("device") or {})))
    regimes = Counter(v.get("regime") for v in verdicts if v.get("regime"))
    if regimes:
        p.append(f"<dt>regime</dt><dd>{e(', '.join(f'{k} ({n} verdicts)' for k, n in regimes.items()))}</dd>")
    p.append("</dl></div></section>")
    p.append(f'<section id="clocks"><h2>Clocks and throttling</h2>{_clocks(rep)}</section>')
    p.append(f'<section id="engines"><h2>Engine builds and launchers</h2>{_engines(rep, out_dir)}</section>')

    # -- the verdict table
    charted = [v for v in verdicts if flagged(v)][:MAX_CHARTS]
    chart_ids = {id(v): i for i, v in enumerate(charted)}
    entries = sorted({v["config"] for v in verdicts})
    p.append('<section id="table"><h2>Verdicts</h2><div class="filters">'
             '<label>entry <select id="f-entry"><option value="">all</option>'
             + "".join(f'<option value="{e(x)}">{e(x)}</option>' for x in entries) + '</select></label>'
             '<label>metric <input id="f-metric" type="search" placeholder="name or label contains…"></label>'
             '<label>verdict <select id="f-status"><option value="">all</option>'
             + "".join(f'<option value="{e(s)}">{e(s)}</option>' for s in reports.STATUSES) + '</select></label>'
             '<span id="shown" class="mute small"></span></div>')
    any_regime = any(v.get("regime") for v in verdicts)
    p.append('<div class="scroll"><table class="verdicts" id="verdicts"><thead><tr><th>verdict</th><th>entry · test</th>'
             '<th>metric</th><th>baseline</th><th>now</th><th>change</th><th>95% CI</th><th>MDE</th><th>p</th>'
             + ('<th>regime</th>' if any_regime else '') + '<th>compared with</th><th>which phase moved</th></tr>'
             '</thead><tbody>')
    for i, v in enumerate(verdicts):
        m = Verdict.from_dict(v).metric
        siblings = by_test.get((v["config"], v["test"]), [])
        short, full = attribution(v, siblings)
        status = reports.status_text(v)
        if v["status"] == INCONCLUSIVE and v.get("boots_needed"):
            status += f" ({v['boots_needed']} {'pairs' if v.get('mde_kind') == 'pairs' else 'boots a side'} would decide)"
        label = m.label + (f" @{v['key'].split('@', 1)[1]}" if "@" in v["key"] else "")
        chart = chart_ids.get(id(v))
        name = (f'<a href="#chart-{chart}">{e(label)}</a>' if chart is not None else e(label))
        p.append(f'<tr id="v-{i}" class="s-{e(v["status"]).split(":")[0].replace(" ", "-")}" '
                 f'data-status="{e(v["status"])}" data-entry="{e(v["config"])}" data-test="{e(v["test"])}" '
                 f'data-key="{e(v["key"])}" data-metric="{e(v["key"])}" data-label="{e(m.label)}">'
                 f'<td class="st">{e(status)}</td><td>{e(v["config"])}<br><span class="mute small">'
                 f'{e(v["test"].removeprefix("test_"))}</span></td>'
                 f'<td class="metric">{name} <span class="mute" title="{e(v["better"])} is better">'
                 f'{"↑" if v["better"] == "higher" else "↓"}</span></td>'
                 f'<td class="num">{e(m.display(v["baseline"]["median"]) if v.get("baseline") else "—")}</td>'
                 f'<td class="num">{e(m.display(v["now"]["median"]))}</td>'
                 f'<td class="num">{e(_cell_change(v))}</td><td class="num">{e(_cell_ci(v))}</td>'
                 f'<td class="num">{e(reports.mde_cell(v))}</td>'
                 f'<td class="num">{e(_cell_p(v))}</td>'
                 + (f'<td>{e(v.get("regime") or "")}</td>' if any_regime else "")
                 + f'<td class="small basis">{e(basis(v))}</td>'
                 f'<td class="small" title="{e(full)}">{e(short) or "—"}</td></tr>')
    p.append('</tbody></table></div>')
    p.append(f'<p class="mute small">{e(reports.MDE_LEGEND)}. ↑ higher is better, ↓ lower is better. p: the one-sided '
             f'test of a worsening (its method: '
             f'each chart\'s caption).</p></section>')

    # -- charts
    p.append(f'<section id="charts"><h2>Flagged and near-MDE metrics</h2><p class="mute small">'
             f'{len(charted)} chart(s): each regressed or improved verdict, and each whose change reached its min '
             f'effect or half its MDE without being decided'
             + (f" (the first {MAX_CHARTS})" if sum(flagged(v) for v in verdicts) > MAX_CHARTS else "")
             + f'. Run history: {e(history_line)}.</p>')
    if not charted:
        p.append('<p>No verdict moved as far as its min effect or half its MDE.</p>')
    for i, v in enumerate(charted):
        vd = Verdict.from_dict(v)
        short, full = attribution(v, by_test.get((v["config"], v["test"]), []))
        head = f"{v['config']} · {v['test'].removeprefix('test_')} · {vd.metric.label}" + \
            (f" @{v['key'].split('@', 1)[1]}" if "@" in v["key"] else "")
        cls = e(v["status"]).split(":")[0].replace(" ", "-")
        p.append(f'<div class="card s-{cls}" id="chart-{i}" data-key="{e(v["key"])}" data-entry="{e(v["config"])}" '
                 f'data-test="{e(v["test"])}"><h3>{e(head)}: {e(v["status"])}</h3>')
        p.append(f'<p class="small">{e(vd.line())}</p>')
        p.append(boot_chart(v, i))
        p.append(f'<p class="small mute">method: {e(v.get("method"))}' +
                 (f"; MDE basis: {e(v['mde_basis'])}" if v.get("mde_basis") else "") + "</p>")
        p.append(f'<div class="where" id="where-{i}"><b>Which phase moved:</b> '
                 + (e(full) if full else '<span class="mute">no engine timers were compared for this test '
                    '(only the client\'s figure): which phase moved is not known</span>') + '</div>')
        pts = series.get((v["config"], v["test"], v["key"]))
        if pts:
            from llmgate.analysis import changepoint
            changes = changepoint.detect([pt.run_point() for pt in pts]) if len(pts) >= 3 else []
            p.append(f'<h3>Run history ({len(pts)} run(s)'
                     + (", too few for change points: 3 or more" if len(pts) < 3 else
                        f", {len(changes)} change point(s)") + ')</h3>')
            p.append(history_chart(v, pts, changes, i))
        p.append("</div>")
    p.append("</section>")

    # -- notes
    p.append('<section id="notes"><h2>Notes</h2>')
    not_compared = [v for v in verdicts if v["status"] in (NO_BASELINE, REFUSED)]
    if not_compared:
        p.append("<h3>Not compared, and why</h3><ul>" + "".join(
            f"<li><b>{e(v['config'])} {e(v['key'])}</b>: {e(v.get('note') or reports.status_text(v))}</li>"
            for v in not_compared) + "</ul>")
    undecided = [v for v in verdicts if v["status"] == INCONCLUSIVE]
    if undecided:
        p.append("<h3>Inconclusive, and what would decide them</h3><ul>" + "".join(
            f"<li><b>{e(v['config'])} {e(v['key'])}</b>: {e(Verdict.from_dict(v).inconclusive_text())}</li>"
            for v in undecided) + "</ul>")
    notes = rep.get("notes") or []
    p.append("<h3>Notes of the run</h3>" + ("<ul>" + "".join(f"<li>{e(n)}</li>" for n in notes) + "</ul>"
                                           if notes else '<p class="mute">none</p>'))
    p.append("</section>")
    p.append('<section id="files"><h2>Files</h2><ul><li><a href="report.json">report.json</a>: everything measured '
             '(schema llmgate-report/1)</li><li><a href="summary.md">summary.md</a>: the Markdown summary</li>'
             + ('<li>plots/: PNG plots, where the run drew them</li>' if out_dir is not None and
                (Path(out_dir) / "plots").is_dir() else "")
             + '<li>engine logs: the Boots table above</li></ul></section>')
    p.append(f'<footer>llmgate {e(rep.get("llmgate_version"))} · {e(rep.get("schema"))} · '
             f'<span id="llmgate-js">page script did not run</span></footer>')
    p.append(f"</main><script>{SCRIPT}</script></body></html>")
    return "".join(p)
