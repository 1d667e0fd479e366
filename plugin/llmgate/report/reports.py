"""What people read: the terminal table at the end of a run, the JSON report (the same
data with provenance and raw samples; schema in docs/report.md), the Markdown summary for a
pull request or ``$GITHUB_STEP_SUMMARY``, and the plots (llmgate.report.plots)."""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from tabulate import tabulate

from llmgate.config.ids import LEVER_OFF, entry_scope
from llmgate.core.metrics import FAILED_SHARE
from llmgate.engines.base import engine_label
from llmgate.analysis.verdict import (INCONCLUSIVE, IMPROVED, NO_BASELINE, REFUSED, REGRESSED, UNCHANGED, Verdict,
                                      mde_pct)
from llmgate.report import outcome as outcomes
from llmgate.store.finished import FinishedRun

STATUSES = (REGRESSED, IMPROVED, UNCHANGED, INCONCLUSIVE, NO_BASELINE, REFUSED)


HEADERS = ["configuration", "test", "metric", "now (median)", "range", "n", "baseline", "change", "MDE", "verdict",
           "regime"]


def verdict_rows(verdicts: Iterable[Verdict]) -> list[list[str]]:
    """Table rows of verdicts (those of report.json rebuilt with ``Verdict.from_dict``), in ``HEADERS``' columns."""
    rows = []
    pairs = [(v, v.to_dict()) for v in verdicts]
    for obj, v in sorted(pairs, key=lambda p: (p[1]["config"], p[1]["test"], p[1]["key"])):
        m = obj.metric
        now, base = v["now"], v["baseline"]
        # the range of every value measured (each boot's repeats): ``now`` summarises the boots'
        # values, one a side on a CPU entry, whose range would be empty
        spread = value_range(m.display, now)
        boots = (v.get("boots") or {}).get("now") or 0
        n = f"{boots}×{len(now['values']) // boots}" if boots > 1 and now.get("values") else str(len(now.get("values") or []) or now["n"])
        rows.append([
            v["config"], v["test"].removeprefix("test_"),
            f"{m.label}" + (f" @{v['key'].split('@', 1)[1]}" if "@" in v["key"] else ""),
            m.display(now["median"]), spread, n,
            m.display(base["median"]) if base else "—",
            f"{v['change']:+.1%}" if v["change"] is not None else "—",
            mde_cell(v), status_text(v), v.get("regime") or "",
        ])
    return rows


def value_range(display: Callable[[float], str], now: dict[str, Any]) -> str:
    """"98.0 tok/s – 103.0 tok/s": the range of every value measured (each boot's repeats; ``now``'s own
    min and max summarise the boots' values, one a side on a CPU entry, whose range would be empty)."""
    values = now.get("values") or []
    if len(values) > 1:
        return f"{display(min(values))} – {display(max(values))}"
    return f"{display(now['min'])} – {display(now['max'])}" if now["n"] > 1 else ""


def status_text(v: dict[str, Any]) -> str:
    """The verdict as a table shows it: a missing baseline says why (``no baseline for this device``)."""
    if v["status"] == NO_BASELINE and v.get("no_baseline"):
        return str(v["no_baseline"])
    return v["status"]


def mde_cell(v: dict[str, Any]) -> str:
    """The minimum detectable effect of a verdict, "≥" when it is a lower bound, "~" when it rests on
    assumed between-boot noise (one boot a side, ``noise_prior``), "!" when it is above the metric's
    minimum effect."""
    mde = v.get("mde")
    if mde is None:
        return "—"
    lower = bool(v.get("mde_lower_bound"))
    prefix = "≥" if lower else "~" if v.get("noise_assumed") else ""
    return prefix + mde_pct(mde) + (" !" if mde > v["min_effect"] else "")


def verdict_table(verdicts: Iterable[Verdict]) -> str:
    return tabulate(verdict_rows(verdicts), headers=HEADERS, tablefmt="github")


TERMINAL_WIDTH = 120
# what the terminal leaves out first when the table is too wide (summary.md and report.json keep all)
DROPPED_FIRST = ("regime", "range", "n")
MDE_LEGEND = ("MDE: the smallest worsening the comparison finds (80% power); ≥ a lower bound (repeats within one "
              "boot a side), ~ the between-boot noise was assumed (one boot a side), ! above the metric's min effect")


def fit(headers: list[str], rows: list[list[str]], plan: list[tuple[str, str, int]],
        width: int = TERMINAL_WIDTH) -> tuple[str, list[str]]:
    """A table at most ``width`` columns wide where ``plan`` can make it so: its steps, in order, while
    it is wider: ("drop", column, 0) leaves a column out, ("cut", column, floor) shortens that column's
    longest cells (…) down to ``floor`` characters.  Returns the table and the columns left out."""
    cols = list(headers)

    def render() -> str:
        idx = [headers.index(c) for c in cols]
        return tabulate([[r[i] for i in idx] for r in rows], headers=cols, tablefmt="github")

    def fits() -> bool:
        return max((len(ln) for ln in render().splitlines()), default=0) <= width

    dropped: list[str] = []
    for step, col, floor in plan:
        if col not in cols:
            continue
        if step == "drop" and not fits():
            cols.remove(col)
            dropped.append(col)
        i = headers.index(col)
        while step == "cut" and not fits():
            longest = max((len(r[i]) for r in rows), default=0)
            if longest <= floor:
                break
            rows = [r[:i] + [_cut(r[i], longest - 1) if len(r[i]) >= longest else r[i]] + r[i + 1:] for r in rows]
    return render(), dropped


def _one(rows: list[list[str]], col: int) -> str | None:
    """The value every row has in column ``col``, if they share one."""
    values = {r[col] for r in rows}
    return next(iter(values)) if len(values) == 1 else None


def terminal_table(verdicts: Iterable[Verdict], width: int = TERMINAL_WIDTH) -> tuple[str, list[str]]:
    """The verdict table at most ``width`` columns wide: ``DROPPED_FIRST`` left out, and the
    configuration where all rows share one ("configuration (all cpu-vllm-tiny)"); then the metric
    labels and the tests shortened (…) to 28 and 16 characters, then the test (or, with several
    configurations, the configuration) left out, then the longest text cells shortened, until it
    fits.  Returns the table and what was left out."""
    rows = verdict_rows(verdicts)
    one = _one(rows, 0)
    plan = [("drop", c, 0) for c in DROPPED_FIRST] + ([("drop", "configuration", 0)] if one else []) + [
        ("cut", "metric", 28), ("cut", "test", 16), ("drop", "test", 0), ("drop", "configuration", 0),
        ("cut", "metric", 12), ("cut", "verdict", 12), ("cut", "configuration", 12)]
    text, dropped = fit(HEADERS, rows, plan, width)
    return text, [f"configuration (all {one})" if c == "configuration" and one else c for c in dropped]


def _cut(cell: str, n: int) -> str:
    """``cell`` in ``n`` characters, "…" where it was cut; a metric's variant (" @c8") is kept whole."""
    label, sep, variant = cell.rpartition(" @") if " @" in cell else cell.rpartition("@")
    if sep and len(variant) + len(sep) + 4 <= n:
        return label[:n - len(variant) - len(sep) - 1] + "…" + sep + variant
    return cell[:n - 1] + "…"


def noise_rows(verdicts: Iterable[Verdict], target: float = 0.05, alpha: float = 0.05) -> list[list[str]]:
    """The noise report: for each verdict whose boot values are statistics over many requests (the
    latency lever's), the two parts of its noise on the log scale (≈ CV): sampling (the requests a boot
    drew) and boot (what a boot shares beyond them), with the requests a boot held, what the
    comparison is (same session or stored, with a machine's offset), its MDE, and the boots a side
    that bring the MDE to ``target`` at the noise measured (more requests a boot shrink only the
    sampling part)."""
    from llmgate.analysis.verdict import boots_needed

    rows = []
    for v in sorted(verdicts, key=lambda v: (v.config_id, v.test, v.key)):
        n = v.noise
        if n is None or n.sampling is None:
            continue
        var = max(n.between or 0.0, n.value_var, 1e-12)
        k = boots_needed(v.metric, var, n.df, max(v.boots[0], 1), target, alpha) if n.between is not None else None
        rows.append([v.config_id, v.key, f"{n.sampling_cv:.2%}", f"{n.boot_cv:.2%}" if n.boot_cv is not None else "—",
                     f"{n.requests:.0f}" if n.requests else "—", f"{v.boots[0]}+{v.boots[1]}" if v.boots[0] else str(v.boots[1]),
                     (v.comparison or "not compared") + (f" (+ {v.machine_offset.split(' (')[0]})" if v.machine_offset else ""),
                     mde_pct(v.mde) if v.mde is not None else "—",
                     (str(k) if k else f">{50}") if n.between is not None else "—"])
    return rows


NOISE_HEADERS = ["configuration", "metric", "sampling CV", "boot CV", "requests/boot", "boots", "comparison", "MDE",
                 "boots a side for 5%"]


def noise_table(verdicts: Iterable[Verdict], width: int | None = None) -> str:
    """The noise report as a table; ``width``: at most that wide (the terminal's), the configuration
    left out where all rows share one, then the comparison shortened."""
    rows = noise_rows(verdicts)
    if not rows:
        return ""
    if width is None:
        return tabulate(rows, headers=NOISE_HEADERS, tablefmt="github")
    shared = {c: v for c in ("configuration", "comparison") if (v := _one(rows, NOISE_HEADERS.index(c)))}
    text, dropped = fit(NOISE_HEADERS, rows, [("drop", c, 0) for c in shared]
                        + [("cut", "comparison", 12), ("cut", "metric", 16), ("cut", "metric", 8)], width)
    return text + "".join(f"\n{c} of every row: {shared[c]}" for c in dropped)


def boot_table(boots: dict[str, list[dict]]) -> str:
    rows = []
    sides = any(b.get("side") for items in boots.values() for b in items)      # A/B mode: which side a boot was
    for cid, items in sorted(boots.items()):
        for b in items:
            rows.append([cid, b.get("boot"), *([b.get("side") or ""] if sides else []), b.get("engine", ""),
                         b.get("version") or "?",
                         f"{b['startup_s']:.1f} s" if b.get("startup_s") is not None
                         else "interrupted" if b.get("interrupted") else "failed",
                         b.get("log", "")])
    return tabulate(rows, headers=["configuration", "boot", *(["side"] if sides else []), "engine", "version",
                                   "start-up", "log"], tablefmt="github")


# -- the JSON report -------------------------------------------------------------------------
REPORT_SCHEMA = "llmgate-report/1"        # documented in docs/report.md, checked by data/report.schema.json


def _verdict_dict(v: Verdict, configs: Callable[[str], dict[str, Any] | None],
                  raw: dict[tuple[str, str, str], dict[str, Any]]) -> dict[str, Any]:
    r = raw.get((v.config_id, v.test, v.key)) or {}
    return {**v.to_dict(), "config_detail": configs(v.config_id), "raw": r.get("now"), "baseline_raw": r.get("baseline")}


def build(device: dict[str, Any], settings: dict[str, Any], boots: dict[str, list[dict]], verdicts: list[Verdict],
          notes: list[str], raw: dict[tuple[str, str, str], dict[str, Any]],
          configs: Callable[[str], dict[str, Any] | None], argv: list[str], exit_status: int) -> dict[str, Any]:
    """Everything a run measured, as one JSON-ready document (schema ``llmgate-report/1``)."""
    return _document(device, settings, boots, [_verdict_dict(v, configs, raw) for v in verdicts], notes, argv,
                     exit_status)


def merge(reports: list[dict[str, Any]], argv: list[str], exit_status: int) -> dict[str, Any]:
    """One report from the reports of pytest-xdist workers (each a whole ``llmgate-report/1``):
    verdicts, boots and notes of all; the device with every worker's GPUs."""
    boots: dict[str, list[dict]] = {}
    gpus: dict[int, dict[str, Any]] = {}
    for r in reports:
        for cid, bs in r["boots"].items():
            boots.setdefault(cid, []).extend(bs)
        for g in (r.get("device") or {}).get("gpus") or []:
            gpus[g["index"]] = g
    device = dict(reports[0]["device"]) if reports else {}
    if gpus:
        device["gpus"] = [gpus[i] for i in sorted(gpus)]
    doc = _document(device, reports[0]["settings"] if reports else {}, boots,
                    [v for r in reports for v in r["verdicts"]], [n for r in reports for n in r["notes"]], argv,
                    exit_status)
    doc["workers"] = [r.get("worker") for r in reports]
    doc["gpu_sampling"] = [g for r in reports for g in r.get("gpu_sampling") or []]
    doc["compared"] = any(outcomes.compared(r) for r in reports)
    doc["tests"] = dict(sum((Counter(r.get("tests") or {}) for r in reports), Counter()))
    return doc


def _document(device: dict[str, Any], settings: dict[str, Any], boots: dict[str, list[dict]],
              verdicts: list[dict[str, Any]], notes: list[str], argv: list[str], exit_status: int) -> dict[str, Any]:
    counts = Counter(v["status"] for v in verdicts)
    return {
        "schema": REPORT_SCHEMA,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "llmgate_version": _version(),
        "argv": _redact(argv),
        "exit_status": exit_status,
        "device": device,
        "settings": settings,
        "boots": boots,
        "counts": {s: counts.get(s, 0) for s in STATUSES},
        "tests": {},            # pytest's counts, set by the run at its end
        "verdicts": verdicts,
        "notes": notes,
        "gpu_sampling": [],     # what the GPU did while figures were measured, set by the run
    }


def _version() -> str:
    try:
        from importlib.metadata import version
        return version("pytest-llmgate")
    except Exception:               # running from a source tree that is not installed
        return "unknown"


def _redact(argv: list[str]) -> list[str]:
    """Command-line words that look like secrets (``--api-key X``, ``key=…``) are replaced."""
    out, hide_next = [], False
    for a in argv:
        if hide_next:
            out.append("***")
            hide_next = False
            continue
        low = a.lower()
        if any(w in low for w in ("api-key", "api_key", "token", "secret", "password")):
            if "=" in a:
                out.append(a.split("=", 1)[0] + "=***")
            else:
                out.append(a)
                hide_next = True
            continue
        out.append(a)
    return out


# -- the Markdown summary ----------------------------------------------------------------------
def _fmt(metric_display: Callable[[float], str], x: float | None) -> str:
    return "—" if x is None else metric_display(x)


def counts_line(c: dict[str, int]) -> str:
    """"1 regressed · 0 improved · 3 unchanged · 5 inconclusive · 2 without baseline · 0 not comparable"."""
    return (f"{c.get(REGRESSED, 0)} regressed · {c.get(IMPROVED, 0)} improved · {c.get(UNCHANGED, 0)} unchanged · "
            f"{c.get(INCONCLUSIVE, 0)} inconclusive · {c.get(NO_BASELINE, 0)} without baseline · "
            f"{c.get(REFUSED, 0)} not comparable")


def engine_lines(verdicts: list[dict[str, Any]], boots: dict[str, list[dict[str, Any]]]) -> list[str]:
    """The engine builds compared, baseline → now (each entry's, where entries differ): "vllm 0.31.0 →
    vllm 0.32.0"; without a comparison, the builds this run booted."""
    pairs: dict[str, set[str]] = {}
    for v in verdicts:
        if v.get("baseline") is not None and (v.get("engine") or v.get("baseline_engine")):
            pairs.setdefault(f"{v.get('baseline_engine') or '?'} → {v.get('engine') or '?'}", set()).add(v["config"])
    if pairs:
        if len(pairs) == 1:
            return [f"engine (baseline → now): {next(iter(pairs))}"]
        return [f"engine (baseline → now): {pair} ({', '.join(sorted(cids))})" for pair, cids in sorted(pairs.items())]
    built = sorted({engine_label(b, b.get("launcher")) or f"{b.get('engine')} ?" for bs in boots.values() for b in bs
                    if b.get("engine")})
    return [f"engine: {', '.join(built)}"] if built else []


def page_line(page: str) -> str:
    """summary.md's line naming the report page: where it is, and in GitHub Actions (``GITHUB_SERVER_URL``,
    ``GITHUB_REPOSITORY``, ``GITHUB_RUN_ID`` set) a link to the run's artifacts, where it is uploaded."""
    name = Path(page).name
    env = os.environ
    run = (f"{env['GITHUB_SERVER_URL']}/{env['GITHUB_REPOSITORY']}/actions/runs/{env['GITHUB_RUN_ID']}#artifacts"
           if all(env.get(k) for k in ("GITHUB_SERVER_URL", "GITHUB_REPOSITORY", "GITHUB_RUN_ID")) else None)
    return (f"**Report page:** `{name}` beside this summary (`{page}`): the verdicts, their charts and the run "
            f"history in one file, no network needed"
            + (f"; in the [run's artifacts]({run})" if run else "") + ".")


def gpu_words(gpus: list[dict[str, Any]]) -> str:
    """The GPUs a run measured on, by name and count: "1× NVIDIA H100 80GB HBM3 (80 GiB each)"."""
    names = Counter(g.get("name", "?") for g in gpus)
    mem = {g.get("memory_total") for g in gpus if g.get("memory_total")}
    return (", ".join(f"{n}× {name}" for name, n in names.items())
            + (f" ({max(mem) / 2**30:.0f} GiB each)" if mem else ""))


def device_words(dev: dict[str, Any]) -> str:
    """The device in one phrase: its GPUs on their host where it has any (the host CPU alone read as if
    a GPU run had measured a Xeon), else the CPU."""
    host = dev.get("name") or dev.get("cpu") or dev.get("kind", "?")
    return f"{gpu_words(dev['gpus'])} on {host}" if dev.get("gpus") else host


def markdown(rep: dict[str, Any], page: str | None = None) -> str:
    """A summary ready to paste into a pull request (and written to $GITHUB_STEP_SUMMARY); ``page``: the
    report page's path, named in one line under the counts."""

    c = rep["counts"]
    o = outcomes.outcome(rep)
    dev = rep.get("device") or {}
    lines = [f"## llmgate: {o.headline}", ""]
    lines += [f"- {ln}" for ln in o.lines] + ([f"- **{o.fate}**"] if o.fate else []) + ([""] if o.lines or o.fate else [])
    lines += [counts_line(c) + (f" · tests: {_tests_text(rep['tests'])}" if rep.get("tests") else ""), ""]
    lines += [f"Device: {device_words(dev)} · "
              + " · ".join(engine_lines(rep["verdicts"], rep["boots"]) or ["engine: —"])
              + f" · created {rep['created']}", ""]
    if page:
        lines += [page_line(page), ""]
    for line in rep.get("baseline_not_saved") or []:
        lines += [f"**❌ {line}**: the run fails; what was measured is below and in report.json.", ""]
    stop = rep.get("interrupted")
    if stop:
        during = f" during `{stop['during']}`" if stop.get("during") else ""
        rest = ("the rest was not run" if stop.get("not_run")
                else "it was the last test: none was left to run" if stop.get("during")
                else "every test had run; the interrupt cut short only what came after")
        lines += [f"**⚠️ Interrupted by {stop.get('signal') or stop.get('reason') or 'an interrupt'}{during}**: "
                  f"the servers were stopped and what was measured is below; {rest}.", ""]
        if stop.get("not_run"):
            lines += ["Not run:", ""] + [f"- `{n}`" for n in stop["not_run"][:50]]
            if len(stop["not_run"]) > 50:
                lines.append(f"- … and {len(stop['not_run']) - 50} more")
            lines.append("")
    by_test: dict[str, list[dict[str, Any]]] = {}
    for v in rep["verdicts"]:
        by_test.setdefault(v["test"].removeprefix("test_"), []).append(v)
    for test, vs in by_test.items():
        lines += [f"### {test}", "", "| configuration | metric | baseline | now (median) | range | change | MDE | verdict "
                                     "| regime |", "|---|---|---|---|---|---|---|---|---|"]
        for v in sorted(vs, key=lambda v: (v["config"], v["key"])):
            m = Verdict.from_dict(v).metric
            suffix = f" @{v['key'].split('@', 1)[1]}" if "@" in v["key"] else ""
            base = _fmt(m.display, v["baseline"]["median"]) if v["baseline"] else "—"
            change = f"{v['change']:+.1%}" if v["change"] is not None else "—"
            if v["ci95"]:
                change += f" ({v['ci95'][0]:+.0%} … {v['ci95'][1]:+.0%})"
            status = {REGRESSED: "**regressed**", IMPROVED: "improved"}.get(v["status"], status_text(v))
            if v["status"] == INCONCLUSIVE and v.get("boots_needed"):
                status += f": {v['boots_needed']} {'pairs' if v.get('mde_kind') == 'pairs' else 'boots a side'} would decide"
            lines.append(f"| {v['config']} | {v['label']}{suffix} ({v['better']} is better) | {base} | "
                         f"{m.display(v['now']['median'])} | {value_range(m.display, v['now'])} | {change} | "
                         f"{mde_cell(v)} | {status} | {v.get('regime') or ''} |")
        lines.append("")
    if rep["verdicts"]:
        lines += [MDE_LEGEND + ".", ""]
    noise = noise_rows(Verdict.from_dict(v) for v in rep["verdicts"])
    if noise:
        lines += ["### Noise of the latency figures", "",
                  "Sampling: what the requests a boot drew move its value; boot: what a boot adds beyond them.", "",
                  "| " + " | ".join(NOISE_HEADERS) + " |", "|" + "---|" * len(NOISE_HEADERS)]
        lines += ["| " + " | ".join(r) + " |" for r in noise] + [""]
    if rep["notes"]:
        lines += ["### Notes", ""] + [f"- {n}" for n in rep["notes"]] + [""]
    return "\n".join(lines)


def _tests_text(t: dict[str, int]) -> str:
    return ", ".join(f"{n} {k}" for k, n in t.items() if n)  or "none ran"


def write_all(rep: dict[str, Any], out_dir: Path, step_summary: str | None,
              history_dir: Path | None = None) -> list[Path]:
    """report.json, summary.md, report.html (the page: llmgate.report.html; its charts include the run
    history of ``history_dir`` where given) and the plots under ``out_dir`` (not with ``LLMGATE_PLOTS=0``);
    the Markdown is also appended to ``$GITHUB_STEP_SUMMARY`` when that is set.  Returns the files written."""
    from llmgate.report import html

    out_dir.mkdir(parents=True, exist_ok=True)
    files = []
    try:
        page = html.render(rep, out_dir, history_dir)
    except Exception as e:                  # the page is a view of report.json: the rest of the report stands
        page = None
        rep["notes"].append(f"{html.PAGE} not written: {type(e).__name__}: {e}")
    path = out_dir / "report.json"
    _write(path, json.dumps(rep, indent=1, default=str))
    files.append(path)
    md = markdown(rep, page=str(out_dir / html.PAGE) if page is not None else None)
    path = out_dir / "summary.md"
    _write(path, md)
    files.append(path)
    if page is not None:
        path = out_dir / html.PAGE
        _write(path, page)
        files.append(path)
    if step_summary:
        with open(step_summary, "a", encoding="utf-8") as f:
            f.write(md + "\n")
    if os.environ.get("LLMGATE_PLOTS") == "0":     # asked for no plots (llmgate's self-tests: ~0.8 s a session)
        return files
    try:
        from llmgate.report import plots
    except ImportError as e:                # matplotlib missing: the rest of the report stands
        rep["notes"].append(f"no plots: {e} (pip install 'pytest-llmgate[plots]')")
    else:
        files += plots.write(rep, out_dir / "plots")
    return files


def _write(path: Path, text: str) -> None:
    """Replace a report file whole (a reader never sees half of one)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


# -- the terminal -----------------------------------------------------------------------------
def skipped_entries(terminalreporter, entry_ids: Iterable[str]) -> list[tuple[str, bool]]:
    """Why tests of matrix entries were skipped, one line per entry and reason, with how many: (line,
    whole) where ``whole`` says that none of the entry's tests ran (every GPU entry on a machine
    without a GPU).  The levers an entry does not enable are one line: "small-cpu: 12 test(s)
    skipped: lever 'quality' is not enabled for this entry".  ``entry_ids``: the matrix's entries
    (none when it did not load)."""
    ids = list(entry_ids)
    if not ids:
        return []
    ran: set[str] = set()
    counts: dict[tuple[str, str], int] = {}
    levers: dict[str, Counter[str]] = {}
    for category, reps in terminalreporter.stats.items():
        for rep in reps:
            scope = entry_scope(getattr(rep, "nodeid", None) or "", ids)
            if not scope.startswith("llmgate-entry:"):
                continue
            cid = scope.removeprefix("llmgate-entry:")
            if category in ("passed", "failed", "error", "xfailed", "xpassed"):
                ran.add(cid)
            elif category == "skipped" and isinstance(getattr(rep, "longrepr", None), tuple):
                lever = dict(getattr(rep, "user_properties", None) or ()).get(LEVER_OFF)
                if lever is not None:
                    levers.setdefault(cid, Counter())[str(lever)] += 1
                    continue
                reason = str(rep.longrepr[2]).removeprefix("Skipped: ").removeprefix(f"{cid}: ")
                counts[(cid, reason)] = counts.get((cid, reason), 0) + 1
    out = [(f"{cid}: {n} test(s) skipped: {reason}", cid not in ran) for (cid, reason), n in counts.items()]
    for cid, c in levers.items():
        names = (f"lever '{next(iter(c))}' is" if len(c) == 1 else
                 "levers " + ", ".join(f"'{k}' ({n})" for k, n in c.most_common()) + " are")
        out.append((f"{cid}: {sum(c.values())} test(s) skipped: {names} not enabled for this entry", cid not in ran))
    return out


def terminal_section(terminalreporter, run: FinishedRun, hidden: int, reference_name: str | None,
                     reference_dir: Path) -> None:
    """llmgate's section at the end of the terminal output, from the record of the finished run: the
    run's outcome (what was not gated, what is inconclusive), the engine builds compared, the tests
    skipped and why, the boots, the verdict table (at most 120 columns) and its legend, notes, the
    reference figures asked for, the report files, the regressions."""
    boots = run.boots                                       # the workers' too, under pytest-xdist
    verdicts = list(run.verdicts)
    skipped = skipped_entries(terminalreporter, run.entry_ids)
    not_saved = list(run.not_saved)
    if not (verdicts or boots or skipped or not_saved or run.report_files):
        return
    tr = terminalreporter
    tr.section("llmgate")
    rep = run.summary
    if rep is not None:
        o = outcomes.outcome(rep)
        colour = {{outcomes.GOOD: "green", outcomes.WARN: "yellow"}.get(o.severity, "red"): True}
        tr.write_line(f"llmgate: {o.words}", bold=True, **colour)
        for line in o.lines + ([o.fate] if o.fate else []):
            tr.write_line("  " + line, **colour)
        tr.write_line(counts_line(rep["counts"]))
        for line in engine_lines(rep["verdicts"], rep["boots"]):
            tr.write_line(line)
    for line, whole in skipped:
        tr.write_line(line, yellow=whole)
    if hidden:
        shown = len(verdicts)
        requests_rows = sum(v.metric.name == FAILED_SHARE.name for v in verdicts)
        tr.write_line(f"pytest-benchmark's table of llmgate's {hidden} stored metric(s) is not shown: it prints each as "
                      f"a time, tok/s as seconds per token (--llmgate-benchmark-table shows it); read llmgate's "
                      f"table of {shown} verdict(s) below"
                      + (f" (those {hidden} and {requests_rows} failed-requests row(s))"
                         if requests_rows and hidden + requests_rows == shown else ""))
    if boots:
        total = sum(len(v) for v in boots.values())
        tr.write_line(f"boots this session: {total} ({len(boots)} configuration(s))")
        tr.write_line(boot_table(boots))
    if verdicts:
        tr.write_line("")
        table, dropped = terminal_table(verdicts)
        tr.write_line(table)
        tr.write_line(MDE_LEGEND + (f"; not shown here: {', '.join(dropped)} (summary.md, report.json)" if dropped else ""))
        noise = noise_table(verdicts, TERMINAL_WIDTH)
        if noise:
            tr.write_line("")
            tr.write_line("noise of the latency figures (sampling: the requests a boot drew; boot: what a boot adds):")
            tr.write_line(noise)
    if run.notes:
        tr.write_line("")
        tr.write_line("notes:")
        for n in run.notes:
            tr.write_line("  " + n)
    if verdicts and reference_name and run.summary:
        from llmgate.report import reference
        tr.write_line("")
        try:
            tr.write_line(reference.table(reference.load(reference_name, (reference_dir,)),
                                          run.summary))
        except (FileNotFoundError, ValueError) as e:
            tr.write_line(f"llmgate: --llmgate-reference: {e}", red=True)
    if run.report_files:
        tr.write_line("")
        tr.write_line("reports: " + ", ".join(str(f) for f in run.report_files))
        page = next((f for f in run.report_files if Path(f).name == "report.html"), None)
        if page is not None:
            tr.write_line(f"report page: {page} (open it in a browser: verdicts, charts, run history)")
    regressed = [v for v in verdicts if v.failed]
    if regressed:
        tr.write_line("")
        tr.write_line(f"{len(regressed)} regression(s):", red=True, bold=True)
        for v in regressed:
            tr.write_line("  " + v.line(), red=True)
    for line in not_saved:
        tr.write_line("")
        tr.write_line(f"llmgate: {line}", red=True, bold=True)
