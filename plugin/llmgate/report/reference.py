"""Published reference figures (the seed's RTX 4070 measurements) beside a run's own figures, with
the conditions of both.  The figures are files of the repository's ``baselines/reference/``, read
from the working directory (or a path given by name); they are not part of the installed package.

    llmgate reference [--run .llmgate/report.json] [--reference seed-rtx4070]

A reference figure is information, never a gate: it was measured on another card, model
and engine build.  Where a figure names a metric of llmgate's, the run's matching values
(per configuration) are shown next to it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from tabulate import tabulate

from llmgate.core import metrics
from llmgate.core.types import spec_acceptance_meaningful

REFERENCE_DIRS = (Path("baselines") / "reference",)


def find(name: str, roots: tuple[Path, ...] = REFERENCE_DIRS) -> Path:
    p = Path(name)
    if p.is_file():
        return p
    for root in roots:
        for cand in (root / name, root / f"{name}.json"):
            if cand.is_file():
                return cand
    raise FileNotFoundError(f"no reference data named {name!r} (looked in {', '.join(map(str, roots))})")


def load(name: str, roots: tuple[Path, ...] = REFERENCE_DIRS) -> dict[str, Any]:
    path = find(name, roots)
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON: {e}") from None
    if not isinstance(data.get("figures"), list):
        raise ValueError(f"{path}: no 'figures' list")
    return data


def _matches(verdict: dict[str, Any], rule: dict[str, Any]) -> bool:
    key = verdict["key"]
    metric = rule["metric"]
    if "@" in metric:
        if key != metric:
            return False
    elif key.split("@", 1)[0] != metric:
        return False
    cfg = verdict.get("config_detail") or {}
    for k, want in (rule.get("match") or {}).items():
        if k == "model_kind":
            if want not in str(cfg.get("model", "")).lower():
                return False
        elif k == "speculative":
            if bool(cfg.get("speculative")) != want:
                return False
        elif k == "acceptance_meaningful":    # drafts from trained weights on random weights: not the seed's method
            from types import SimpleNamespace

            entry = SimpleNamespace(speculative=cfg.get("speculative"), load_format=cfg.get("load_format"),
                                    model=cfg.get("model"))
            if (spec_acceptance_meaningful(entry) is None) != want:
                return False
        elif k == "speculative_method":       # a list: the seed's MTP figure is not an n-gram figure
            method = str((cfg.get("speculative") or {}).get("method", "")).lower()
            if not any(method == w or (w == "mtp" and method.endswith("_mtp")) for w in want):
                return False
        elif cfg.get(k) != want:
            return False
    return True


def rows(reference: dict[str, Any], run: dict[str, Any] | None) -> list[list[str]]:
    out = []
    verdicts = (run or {}).get("verdicts", [])
    for fig in reference["figures"]:
        unit = fig.get("unit", "")
        metric = metrics.Metric("ref", fig["what"], unit if unit in ("s", "tok/s", "ratio", "tokens", "%") else "ratio",
                                "higher", 0)
        ours = []
        rule = fig.get("compare")
        if rule:
            hits = [v for v in verdicts if _matches(v, rule)]
            if rule.get("best") == "max" and hits:
                hits = [max(hits, key=lambda v: v["now"]["median"])]
            for v in hits:
                m = metrics.get(v["key"])
                ours.append(f"{v['config']} {v['key']}: {m.display(v['now']['median'])}")
        out.append([fig["lever"], fig["what"], metric.display(fig["value"]),
                    "\n".join(ours) if ours else ("—" if rule else "(not comparable here)")])
    return out


def table(reference: dict[str, Any], run: dict[str, Any] | None) -> str:
    cond = reference.get("conditions", {})
    head = [f"reference: {reference.get('name')} — {reference.get('source', '')}",
            "conditions: " + "; ".join(f"{k}: {v}" for k, v in cond.items() if k != "notes")]
    if cond.get("notes"):
        head.append("notes: " + cond["notes"])
    if run and run.get("device"):
        head.append("this run: " + json.dumps(run["device"]))
    return "\n".join(head) + "\n" + tabulate(rows(reference, run), headers=["lever", "reference figure", "value", "this run"],
                                             tablefmt="github")


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """``llmgate reference``'s arguments (llmgate.cli)."""
    ap.add_argument("--reference", default="seed-rtx4070",
                    help="a name under baselines/reference/ or a file (default seed-rtx4070)")
    ap.add_argument("--run", default=".llmgate/report.json", help="a run summary written by llmgate")


def run(a: argparse.Namespace) -> int:
    """``llmgate reference``: the reference's figures, and the run's beside them when there is one."""
    try:
        ref = load(a.reference)
    except (FileNotFoundError, ValueError) as e:
        print(f"llmgate reference: {e}", file=sys.stderr)
        return 2
    summary = None
    if Path(a.run).is_file():
        summary = json.loads(Path(a.run).read_text())
    else:
        print(f"(no run summary at {a.run}: showing the reference alone)", file=sys.stderr)
    print(table(ref, summary))
    return 0
