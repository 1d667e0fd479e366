"""What a stored baseline can see.

For each matrix entry and metric of pytest-benchmark files that llmgate saved: the boots the file
holds, their between-boot noise (log scale, ≈ CV) and its part beyond one boot's own sampling, the
minimum detectable effect of a comparison with a run like it (same session, K boots a side, one-sided
α = 0.05, 80% power: the MDE the verdicts print), the same against this file from a later session of
the same machine (with the session offset of ``data/noise_prior.json``, which no number of boots
averages away: what ``--benchmark-compare`` with this file sees), and the boots a side that bring the
same-session MDE to the metric's own minimum effect and to a target (default 5%).  A file of one boot a side has no
between-boot noise: its rows say so, as the verdicts would (they then assume the device's prior).

    llmgate sensitivity baselines/Linux-CPython-3.12-64bit/0005_h200-8b.json [...]
        [--entry ID] [--metric NAME] [--target 0.05] [--markdown]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from tabulate import tabulate

from llmgate.analysis import noise_prior
from llmgate.analysis.stats import Noise, median
from llmgate.analysis.verdict import DEFAULT_ALPHA, MAX_BOOTS_ADVISED, boots_needed, judge_boots, mde_pct
from llmgate.core import metrics
from llmgate.store.baseline import baseline_boots, baseline_noise
from llmgate.store.benchmark_files import is_llmgate

HEADERS = ["entry", "metric", "boots", "median", "between-boot CV", "boot part", "MDE (K a side)",
           "MDE, later session", "min effect", "K for min effect", "K for target"]


class SensitivityError(ValueError):
    """A file that is not a pytest-benchmark file llmgate can read."""


def rows(path: Path, entry: str | None = None, metric: str | None = None, target: float = 0.05,
         alpha: float = DEFAULT_ALPHA) -> list[list[str]]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise SensitivityError(f"{path}: not a readable JSON file ({e})") from None
    benches = data.get("benchmarks") if isinstance(data, dict) else None
    if not isinstance(benches, list):
        raise SensitivityError(f"{path}: no 'benchmarks' list: not a pytest-benchmark file")
    out = []
    scenarios: dict[tuple[str, str], list[str]] = {}
    for bench in benches:
        if not isinstance(bench, dict) or not is_llmgate(bench):
            continue
        info = bench["extra_info"]["llmgate"]
        name = str(bench.get("name", ""))
        cid = name.split("[", 1)[1].split("]", 1)[0] if "[" in name else "?"
        scenario = name.split("[", 1)[0] if "[" in name else ""
        key = str(info.get("key") or name.rsplit("::", 1)[-1])
        if (entry and cid != entry) or (metric and not key.startswith(metric)):
            continue
        try:
            m = metrics.get(key)
        except KeyError:
            continue                              # a metric of a plugin not loaded here
        boots = baseline_boots(bench) or []
        stored = baseline_noise(bench)
        k = len(boots)
        vals = [median(b) for b in boots if b]
        if not vals:
            continue
        sampling = [stored.sampling] * k if stored is not None and stored.sampling is not None else None
        requests = [stored.requests] * k if stored is not None and stored.requests else None
        v = judge_boots(m, key, cid, boots, None, alpha=alpha, now_sampling=sampling, now_requests=requests)
        noise = v.noise or Noise.of(boots)
        need_target = None
        if noise.between is not None and min(vals) > 0:
            var = max(noise.between, noise.value_var, 1e-12)
            need_target = boots_needed(m, var, noise.df, k, target, alpha)
        known = noise.between is not None
        device = ((info.get("fingerprint") or {}).get("config") or {}).get("device")
        offset = noise_prior.session_offset(device, m)
        later = None
        if known and v.mde is not None:
            later = v.mde if offset is None else judge_boots(
                m, key, cid, boots, boots, alpha=alpha, now_sampling=sampling, now_requests=requests,
                base_sampling=sampling, base_requests=requests, offset=offset, comparison="stored").mde

        def k_text(mde: float | None, goal: float, need: int | None) -> str:
            if not known or mde is None:
                return "—"
            if mde <= goal:
                return f"≤{k}"
            return str(need) if need else f">{MAX_BOOTS_ADVISED}"

        scenarios.setdefault((cid, key), []).append(scenario)
        out.append([cid, key, str(k), _fmt(median(vals), m.unit),
                    f"{noise.between_cv:.2%}" if known else "1 boot: unknown",
                    f"{noise.boot_cv:.2%}" if known and noise.boot_cv is not None else "—",
                    mde_pct(v.mde) if known and v.mde is not None else "—",
                    f"{later:.1%}" if later is not None else "—",
                    f"{m.min_effect:.0%}" if m.min_effect else "any",
                    k_text(v.mde, m.min_effect, v.boots_needed) if m.min_effect else "—",
                    k_text(v.mde, target, need_target)])
    # a metric that two scenarios of one entry record (decode tok/s by the decode test and by the
    # quantization lever) is told apart by its scenario
    seen: dict[tuple[str, str], int] = {}
    for row in out:
        names = scenarios[(row[0], row[1])]
        if len(names) > 1:
            i = seen.get((row[0], row[1]), 0)
            seen[(row[0], row[1])] = i + 1
            row[1] = f"{row[1]} ({names[i]})" if names[i] else row[1]
    return out


def _fmt(x: float, unit: str) -> str:
    if unit == "s":
        return f"{x * 1e3:.2f} ms"
    if x and abs(x) >= 100:
        return f"{x:,.0f} {unit}"
    return f"{x:.4g} {unit}"


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """``llmgate sensitivity``'s arguments (llmgate.cli)."""
    ap.add_argument("files", nargs="+", help="pytest-benchmark files saved by llmgate (baselines/…/NNNN_NAME.json)")
    ap.add_argument("--entry", help="one matrix entry id")
    ap.add_argument("--metric", help="metrics whose key starts with this (e.g. decode_tok_s, ttft_p50@c8)")
    ap.add_argument("--target", type=float, default=0.05, help="the MDE to reach, as a fraction (default 0.05)")
    ap.add_argument("--markdown", action="store_true", help="a Markdown table (default: plain)")


def run(a: argparse.Namespace) -> int:
    """``llmgate sensitivity FILE...``: the table; exit 1 when nothing matches, 2 for a bad file or target."""
    if not 0 < a.target < 1 or not math.isfinite(a.target):
        print(f"llmgate sensitivity: --target {a.target}: give a fraction between 0 and 1, e.g. 0.05",
              file=sys.stderr)
        return 2
    table: list[list[str]] = []
    for f in a.files:
        try:
            found = rows(Path(f), a.entry, a.metric, a.target)
        except SensitivityError as e:
            print(f"llmgate sensitivity: {e}", file=sys.stderr)
            return 2
        table += found
    if not table:
        print("llmgate sensitivity: no llmgate figure matches in " + ", ".join(a.files), file=sys.stderr)
        return 1
    headers = [*HEADERS[:-1], f"K for {a.target:.0%}"]
    print(tabulate(table, headers=headers, tablefmt="github" if a.markdown else "simple"))
    return 0
