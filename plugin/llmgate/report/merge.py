"""One result from the reports of a sharded gate (``--llmgate-shard K/N``, one CI job a share).

    llmgate merge --out DIR shard-1/report.json shard-2/report.json …

Writes DIR/report.json, DIR/summary.md and DIR/report.html, the page (and appends the Markdown to
$GITHUB_STEP_SUMMARY when set): every verdict of every share, the machine each share ran on, and the shares that are missing.
A share whose report is absent (a job that failed before writing one, or was cancelled), or whose run
failed, makes the merged result fail (exit 1), named; nothing is dropped silently.  The shares' count
comes from the reports (``shard.of``); ``--shards N`` says it where no report may be left to say it.
``--history DIR``: a run history folder (``--llmgate-history``) whose series the page charts beside
the verdicts, with their change points.
Exit 2: a file that is not a shard's report, shares of different splits, a share given twice."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from llmgate.report import html, reports


class MergeError(ValueError):
    """Reports that cannot be merged: not a shard's report, or shares of different splits."""


def load(paths: list[Path]) -> list[dict[str, Any]]:
    out = []
    for p in paths:
        try:
            rep = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise MergeError(f"{p}: not a readable report ({e})") from None
        if not isinstance(rep, dict) or not isinstance(rep.get("verdicts"), list):
            raise MergeError(f"{p}: not an llmgate report.json (no verdicts list)")
        shard = rep.get("shard")
        if not isinstance(shard, dict) or not isinstance(shard.get("index"), int) or not isinstance(shard.get("of"), int):
            raise MergeError(f"{p}: not the report of a shard (run with --llmgate-shard K/N)")
        rep["_path"] = str(p)
        out.append(rep)
    return out


def merge(parts: list[dict[str, Any]], shards: int | None = None, argv: list[str] | None = None) -> dict[str, Any]:
    """The merged report: ``reports.merge`` of the shares, with ``shards`` (each share's index, machine,
    entries, exit status and file) and ``missing_shards``; its ``exit_status`` is 1 when a share is
    missing or failed."""
    counts = {p["shard"]["of"] for p in parts} | ({shards} if shards else set())
    if len(counts) > 1:
        raise MergeError(f"reports of different splits: N = {', '.join(map(str, sorted(counts)))}")
    n = counts.pop() if counts else 0
    if n < 1:
        raise MergeError("no report, and no --shards N to say how many were expected")
    seen: dict[int, str] = {}
    for p in parts:
        k = p["shard"]["index"]
        if k in seen:
            raise MergeError(f"shard {k}/{n} given twice: {seen[k]} and {p['_path']}")
        if not 1 <= k <= n:
            raise MergeError(f"{p['_path']}: shard {k}/{n} is outside 1…{n}")
        seen[k] = p["_path"]
    missing = [k for k in range(1, n + 1) if k not in seen]
    failed = [p["shard"]["index"] for p in parts if p.get("exit_status")]
    parts = sorted(parts, key=lambda p: p["shard"]["index"])
    status = 1 if missing or failed else 0
    doc = reports.merge(parts, argv or [], status) if parts else reports.merge([], argv or [], status)
    doc["shards"] = [{"index": p["shard"]["index"], "of": n, "entries": p["shard"].get("entries", []),
                      "machine": _machine(p.get("device") or {}), "exit_status": p.get("exit_status"),
                      "report": p["_path"]} for p in parts]
    doc["missing_shards"] = missing
    doc["baseline_not_saved"] = [line for p in parts for line in p.get("baseline_not_saved") or []]
    doc["interrupted"] = next((p["interrupted"] for p in parts if p.get("interrupted")), None)
    return doc


def _machine(device: dict[str, Any]) -> str:
    gpus = device.get("gpus") or []
    name = ", ".join(sorted({g.get("name", "?") for g in gpus})) if gpus else device.get("cpu") or device.get("kind") or "?"
    mid = device.get("machine_id")
    return f"{name}{f' ({len(gpus)}×)' if len(gpus) > 1 else ''}{f', machine {mid}' if mid else ''}"


def markdown(doc: dict[str, Any], page: str | None = None) -> str:
    n = max([s["of"] for s in doc["shards"]] + [max(doc["missing_shards"], default=0)])
    lines = []
    for k in doc["missing_shards"]:
        lines.append(f"**❌ shard {k}/{n} missing**: no report from it (the job failed before writing one, or was "
                     f"cancelled); its entries were not gated.")
    for s in doc["shards"]:
        if s["exit_status"]:
            lines.append(f"**❌ shard {s['index']}/{n} exited {s['exit_status']}** (a regression, a failed test or an error: its summary below).")
    lines += ["", "| shard | machine | entries | exit |", "|---|---|---|---|"]
    for s in doc["shards"]:
        lines.append(f"| {s['index']}/{n} | {s['machine']} | {', '.join(s['entries']) or '—'} | {s['exit_status']} |")
    for k in doc["missing_shards"]:
        lines.append(f"| {k}/{n} | — | **missing** | — |")
    body = reports.markdown(doc, page=page).split("\n")
    if doc["missing_shards"] or any(s["exit_status"] for s in doc["shards"]):
        body[0] = "## llmgate: ❌ incomplete: " + ("missing shard(s) " + ", ".join(f"{k}/{n}" for k in doc["missing_shards"])
                                                 if doc["missing_shards"] else "a shard failed")
    return "\n".join(body[:1] + lines + [""] + body[1:])


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """``llmgate merge``'s arguments (llmgate.cli)."""
    ap.add_argument("reports", nargs="*", type=Path, help="each shard's report.json")
    ap.add_argument("--out", type=Path, required=True, help="folder for the merged report.json and summary.md")
    ap.add_argument("--shards", type=int, help="how many shards were started (where no report may say it)")
    ap.add_argument("--history", type=Path, metavar="DIR",
                    help="a run history folder (--llmgate-history) for the report page's history charts")


def run(a: argparse.Namespace) -> int:
    """``llmgate merge --out DIR REPORT...``: write the merged report; its exit status (module docstring)."""
    try:
        doc = merge(load(a.reports), a.shards, ["llmgate", "merge", *map(str, a.reports)])
    except MergeError as e:
        print(f"llmgate merge: {e}", file=sys.stderr)
        return 2
    a.out.mkdir(parents=True, exist_ok=True)
    try:
        page = html.render(doc, a.out, a.history)
    except Exception as e:                  # the page is a view of report.json: the merge stands without it
        page = None
        doc["notes"].append(f"{html.PAGE} not written: {type(e).__name__}: {e}")
    md = markdown(doc, page=str(a.out / html.PAGE) if page is not None else None)
    (a.out / "report.json").write_text(json.dumps(doc, indent=1, default=str), encoding="utf-8")
    (a.out / "summary.md").write_text(md, encoding="utf-8")
    if page is not None:
        (a.out / html.PAGE).write_text(page, encoding="utf-8")
    if os.environ.get("GITHUB_STEP_SUMMARY"):
        with open(os.environ["GITHUB_STEP_SUMMARY"], "a", encoding="utf-8") as f:
            f.write(md + "\n")
    c = doc["counts"]
    n = len(doc["shards"]) + len(doc["missing_shards"])
    print(f"llmgate: merged {len(doc['shards'])} of {n} shard(s): {c.get('regressed', 0)} regressed, "
          f"{c.get('improved', 0)} improved, {c.get('unchanged', 0)} unchanged, {c.get('inconclusive', 0)} inconclusive, "
          f"{c.get('no baseline', 0)} without baseline → {a.out / 'summary.md'}"
          + (f", report page {a.out / html.PAGE}" if page is not None else ""))
    for k in doc["missing_shards"]:
        print(f"llmgate: shard {k}/{n} missing: no report", file=sys.stderr)
    for s in doc["shards"]:
        if s["exit_status"]:
            print(f"llmgate: shard {s['index']}/{n} exited {s['exit_status']}: {s['report']}", file=sys.stderr)
    return doc["exit_status"]
