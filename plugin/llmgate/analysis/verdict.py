"""Direction-aware verdicts: did a metric move in its worse direction, by more than
its minimum effect, and is the move real rather than noise?

Three outcomes, not two: a verdict is *regressed* when the change is worse than its minimum
effect and significant, *improved* the other way, *unchanged* only when its confidence interval
rules a regression out (an equivalence check), and *inconclusive* when it does neither: the data
cannot tell, and the verdict says what would (``boots_needed``).

Why one module over ~550 lines: the verdict type and the three ways to reach one (per repeat,
paired, per boot) share one decision rule (``decide``), the MDE and the wording of every line a
verdict prints; apart, that one rule would be read in three places.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from enum import StrEnum
from typing import Any

from llmgate.core.metrics import Metric
from llmgate.analysis.stats import Noise, Summary, median

class Status(StrEnum):
    """A verdict's outcome; the values are what report.json and the history store."""

    REGRESSED = "regressed"
    IMPROVED = "improved"
    UNCHANGED = "unchanged"        # the confidence interval rules a regression out
    INCONCLUSIVE = "inconclusive"  # compared, but neither a regression nor its absence is shown
    NO_BASELINE = "no baseline"
    REFUSED = "refused: not comparable"


class NoBaseline(StrEnum):
    """Why a verdict has no baseline while comparing; the value is what a table's verdict cell says
    (the note says it in full: the nearest stored run and what differs)."""

    STORED = "no baseline stored"
    TEST = "no baseline for this test"
    DEVICE = "no baseline for this device"
    MODEL = "no baseline for this model"
    CONFIGURATION = "no baseline for this configuration"
    # A/B mode (no --benchmark-compare) compares the scenarios that measure boots; a test outside
    # them (quality checks, the client's overhead) runs once, on side B, and its own checks gate it:
    # not a comparison that is missing, so it does not fail the run as one (report.outcome.not_gated)
    OUTSIDE_AB = "not compared in A/B mode"


class MdeBasis(StrEnum):
    """What a verdict's MDE rests on (``mde_basis`` says it in words, for people)."""

    BOOTS = "boots"                 # the boot values of both sides (a t-test)
    PAIRS = "pairs"                 # paired values (a Wilcoxon test)
    THIS_RUN = "this run"           # no baseline: what a baseline like this run would give
    REPEATS = "repeats"             # repeats within one boot a side: a lower bound
    UNKNOWN = "unknown"             # no MDE: boot-to-boot noise not measured, or too few pairs


REGRESSED, IMPROVED, UNCHANGED = Status.REGRESSED, Status.IMPROVED, Status.UNCHANGED
INCONCLUSIVE = Status.INCONCLUSIVE
NO_BASELINE, REFUSED = Status.NO_BASELINE, Status.REFUSED
DEFAULT_ALPHA = 0.05


@dataclasses.dataclass(frozen=True)
class Verdict:
    metric: Metric
    key: str                       # metric name with its variant, e.g. "ttft_p95@c8"
    config_id: str
    now: Summary
    baseline: Summary | None
    status: Status
    change: float | None           # relative change of medians, now vs baseline (signed, natural units)
    worse_change: float | None     # the same, positive when worse
    min_effect: float
    p_value: float | None
    method: str                    # which significance test decided
    baseline_source: str | None = None
    note: str = ""
    test: str = ""                 # the test that measured it
    ci: tuple[float, float] | None = None   # 95% bootstrap interval of the change of medians
    samples: tuple[float, ...] = dataclasses.field(default=(), repr=False, compare=False)           # now
    baseline_samples: tuple[float, ...] = dataclasses.field(default=(), repr=False, compare=False)
    # the minimum detectable effect: the smallest worsening this comparison finds with 80% power at
    # its alpha (a fraction, like min_effect); what it rests on; boots a side that would bring it
    # down to the minimum effect when it is above it
    mde: float | None = None
    mde_basis: str = ""
    boots_needed: int | None = None
    boots: tuple[int, int] = (0, 0)                 # (baseline, now) boots
    boot_values: tuple[float, ...] = dataclasses.field(default=(), repr=False, compare=False)
    baseline_boot_values: tuple[float, ...] = dataclasses.field(default=(), repr=False, compare=False)
    noise: Noise | None = dataclasses.field(default=None, compare=False)
    regime: str = ""                                # gpu-bound | host-bound | cpu (where known)
    # where the between-boot noise came from when no boots measured it (one boot a side): the prior
    # assumed for this device and metric (``noise_prior``), said in one line; "" when measured
    noise_assumed: str = ""
    # the MDE rests on repeats within one boot a side (boot-to-boot noise not measured): a lower bound
    mde_lower_bound: bool = False
    # the baseline is the other side of this run's A/B comparison, not a stored run
    baseline_in_run: bool = False
    # what the comparison rests on: "same session" (the baseline's boots were measured in this
    # session, alternating with these) or "stored" (a baseline of an earlier run); "" before compared
    comparison: str = ""
    # a stored baseline from an earlier session or another machine: the offset the MDE includes, in
    # words ("session offset (…: CV 15% assumed …)", "machine offset (…)"); "" for a same-session
    # comparison or a device with no such offset measured (the field keeps its schema name)
    machine_offset: str = ""
    # what the MDE rests on (None: not said, as in a report.json written before it was)
    mde_kind: MdeBasis | None = None
    # with NO_BASELINE while comparing: why there is none (None: not comparing, or not said)
    no_baseline: NoBaseline | None = None
    # the engine builds of the two sides (``engines.base.engine_label``: "vllm 0.32.0 (commit …,
    # launcher …)"): this run's, and the baseline's (its stored fingerprint, or side A's boots); "" not known
    engine: str = ""
    baseline_engine: str = ""
    # which part of a client TTFT moved (``attribution``: the engine's queue and prefill timers, the front
    # end), in one line; "" where its test recorded no engine timers or nothing was compared
    attribution: str = ""
    # a change the statistics called regressed (or improved) held as inconclusive, and why: the side
    # that reads worse was measured on a busy machine (``hold_disturbed``); "" otherwise
    held: str = ""

    @property
    def failed(self) -> bool:
        return self.status == REGRESSED

    @property
    def gated(self) -> bool:
        """Compared with a baseline and decided: regressed, improved or unchanged."""
        return self.status in (REGRESSED, IMPROVED, UNCHANGED)

    def worse_bound(self) -> float | None:
        """The confidence interval's bound in the metric's worse direction, as a relative change
        that is positive when worse (None without an interval)."""
        return _worse_bound(self.metric, self.ci)

    def engines_text(self) -> str:
        """"vllm 0.31.0 → vllm 0.32.0": the baseline's engine build and this run's ("" when neither is known)."""
        if not (self.engine or self.baseline_engine):
            return ""
        return f"{self.baseline_engine or '?'} → {self.engine or '?'}"

    def inconclusive_text(self) -> str:
        """Why an inconclusive verdict is one, and what would decide it."""
        if self.held:
            return self.held
        m = self.metric
        bound = self.worse_bound()
        if bound is None:
            why = "one value a side: no confidence interval, and no significance test could decide"
        else:
            why = (f"its 95% CI reaches {_signed(m, bound):+.1%}, a regression beyond the min effect "
                   f"{self.min_effect:.0%} is not ruled out")
        unit = "pairs" if self.mde_kind == MdeBasis.PAIRS else "boots a side"
        if self.boots_needed:
            more = f"{self.boots_needed} {unit} would decide it"
        elif self.mde is not None and self.mde > self.min_effect and self.mde_kind in (MdeBasis.BOOTS, MdeBasis.PAIRS):
            more = f"more than {MAX_BOOTS_ADVISED} {unit} would be needed at this noise"
        elif bound is None:
            more = "more values a side would decide it"
        else:
            more = f"more {unit.split()[0]} would decide it"
        return f"{why}; {more}"

    def line(self) -> str:
        m = self.metric
        if self.status == REFUSED:
            return f"{self.config_id} {self.key}: now {m.display(self.now.median)}; not compared: {self.note}"
        if self.baseline is None:
            return f"{self.config_id} {self.key}: {m.display(self.now.median)} (no baseline)" + \
                (f" ({self.mde_text()})" if self.mde is not None else "") + (f"; {self.note}" if self.note else "")
        nb, nn = self.boots
        unit = "boot pair" if self.comparison.startswith("duet") else "boot"
        sizes = (f"{nb} {unit}{'s' * (nb != 1)}", f"{nn} {unit}{'s' * (nn != 1)}") if nb and nn else \
            (f"n={self.baseline.n}", f"n={self.now.n}")
        sig = f"{self.method}, p={self.p_value:.3g}" if self.p_value is not None else self.method
        if self.comparison:
            sig += f"; compared {self.comparison}"
        ci = f" (95% CI {self.ci[0]:+.1%} … {self.ci[1]:+.1%})" if self.ci else ""
        status = f"{self.status} ({self.inconclusive_text()})" if self.status == INCONCLUSIVE else str(self.status)
        engines = self.engines_text()
        return (f"{self.config_id} {self.key} ({m.label}, {m.better} is better): baseline {m.display(self.baseline.median)} "
                f"({sizes[0]}) → now {m.display(self.now.median)} ({sizes[1]}), change {self.change:+.1%}{ci} "
                f"({self.mde_text()}): {status} [min effect {self.min_effect:.0%}"
                + (f" and {m.display(m.min_abs_effect)}" if m.min_abs_effect else "")
                + f"; {sig}]" + (f"; engine {engines}" if engines else "")
                + (f"; regime {self.regime}" if self.regime else "")
                + (f"; {self.note}" if self.note else ""))

    def to_dict(self) -> dict[str, Any]:
        """The verdict as report.json holds it (``from_dict`` rebuilds the same Verdict)."""
        m = self.metric
        return {
            "config": self.config_id, "test": self.test, "key": self.key,
            "metric": m.name, "label": m.label, "unit": m.unit, "better": m.better,
            "metric_min_effect": m.min_effect, "min_abs_effect": m.min_abs_effect,
            "status": self.status, "change": self.change, "worse_change": self.worse_change,
            "ci95": list(self.ci) if self.ci else None, "p_value": self.p_value,
            "method": self.method, "min_effect": self.min_effect, "baseline_source": self.baseline_source,
            "note": self.note,
            "now": {**self.now.as_dict(), "values": list(self.samples)},
            "baseline": {**self.baseline.as_dict(), "values": list(self.baseline_samples)} if self.baseline else None,
            "mde": self.mde, "mde_basis": self.mde_basis, "boots_needed": self.boots_needed,
            "boots": {"baseline": self.boots[0], "now": self.boots[1]},
            "boot_values": list(self.boot_values), "baseline_boot_values": list(self.baseline_boot_values),
            "noise": self.noise.as_dict() if self.noise is not None else None, "regime": self.regime,
            "noise_assumed": self.noise_assumed, "mde_lower_bound": self.mde_lower_bound,
            "baseline_in_run": self.baseline_in_run, "comparison": self.comparison,
            "machine_offset": self.machine_offset,
            "mde_kind": self.mde_kind, "no_baseline": self.no_baseline,
            "engine": self.engine, "baseline_engine": self.baseline_engine, "attribution": self.attribution,
            "held": self.held,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Verdict:
        """A verdict of report.json (a pytest-xdist worker's, an earlier run's) as the object it was."""
        def summary(s: dict[str, Any] | None) -> Summary | None:
            if s is None:
                return None
            return Summary(int(s["n"]), s["median"], s["mean"], s["min"], s["max"], s["q1"], s["q3"])

        metric = Metric(d["metric"], d["label"], d["unit"], d["better"],
                        float(d.get("metric_min_effect", d["min_effect"])), float(d.get("min_abs_effect") or 0.0))
        boots = d.get("boots") or {}
        now = summary(d["now"])
        assert now is not None
        return cls(metric, d["key"], d["config"], now, summary(d.get("baseline")), Status(d["status"]), d.get("change"),
                   d.get("worse_change"), float(d["min_effect"]), d.get("p_value"), d.get("method") or "",
                   d.get("baseline_source"), d.get("note") or "", d.get("test") or "",
                   tuple(d["ci95"]) if d.get("ci95") else None,
                   tuple(d["now"].get("values") or ()),
                   tuple((d.get("baseline") or {}).get("values") or ()),
                   d.get("mde"), d.get("mde_basis") or "", d.get("boots_needed"),
                   (int(boots.get("baseline") or 0), int(boots.get("now") or 0)),
                   tuple(d.get("boot_values") or ()), tuple(d.get("baseline_boot_values") or ()),
                   Noise.from_dict(d.get("noise")), d.get("regime") or "", d.get("noise_assumed") or "",
                   bool(d.get("mde_lower_bound")), bool(d.get("baseline_in_run")), d.get("comparison") or "",
                   d.get("machine_offset") or "",
                   mde_kind=MdeBasis(d["mde_kind"]) if d.get("mde_kind") else None,
                   no_baseline=NoBaseline(d["no_baseline"]) if d.get("no_baseline") else None,
                   engine=d.get("engine") or "", baseline_engine=d.get("baseline_engine") or "",
                   attribution=d.get("attribution") or "", held=d.get("held") or "")

    def mde_text(self) -> str:
        """"MDE 4.2%", with what it rests on when that is weak, and the boots that would close it."""
        if self.mde is None:
            return "MDE unknown" + (f": {self.mde_basis}" if self.mde_basis else "")
        out = f"MDE {mde_pct(self.mde)}"
        if self.mde_basis and self.mde_kind not in (MdeBasis.BOOTS, MdeBasis.PAIRS, MdeBasis.THIS_RUN):
            out += f", {self.mde_basis}"
        if self.machine_offset:
            out += f", includes the {self.machine_offset}"
        if self.mde > self.min_effect:
            unit = ("boot pairs" if self.comparison.startswith("duet") else "pairs" if self.mde_kind == MdeBasis.PAIRS
                    else "boots a side")
            out += " > min effect" + (f": {self.boots_needed} {unit} would reach it" if self.boots_needed
                                      else ": more boots would not reach it" if self.mde_kind == MdeBasis.BOOTS
                                      else "")
        return out


def hold_disturbed(v: Verdict, now_why: str, base_why: str) -> Verdict:
    """A regression of a figure measured on a busy machine this run (``now_why``: other processes used
    a quarter of the CPUs or more, ``Gate.watch``), or an improvement over a baseline measured on one
    (``base_why``), held as inconclusive: a busy machine reads an engine slower than it is, so the side
    that reads worse may be that and not the engine.  A change the other way stands (the busy side
    read better all the same).  A stored baseline measured beside a compiler once read its engine's
    prefill 5× slower than it is and called an A/A improved."""
    if v.status == REGRESSED and now_why:
        side, why, called = "this run's", now_why, "regressed"
    elif v.status == IMPROVED and base_why:
        side, why, called = "the baseline's", base_why, "improved"
    else:
        return v
    held = (f"not called {called}: {side} {why}, and a busy machine reads an engine slower than it is; "
            f"a run on a quiet machine decides it")
    return dataclasses.replace(v, status=INCONCLUSIVE, held=held)


MDE_SHOWN_MAX = 10.0     # an MDE above 1,000% is shown as such: past that, its digits say nothing


def mde_pct(mde: float, digits: int = 1) -> str:
    """An MDE as a percentage for a reader: "4.2%", or "> 1,000%" (a tiny alpha or a one-boot prior
    can put it at 10^140 %)."""
    return f"{mde:.{digits}%}" if mde <= MDE_SHOWN_MAX else f"> {MDE_SHOWN_MAX:,.0%}"


def smallest_p(n1: int, n2: int) -> float:
    """The smallest one-sided p-value an exact Mann–Whitney U test can give for these sample sizes."""
    return 1.0 / math.comb(n1 + n2, n1)


def mann_whitney_worse(metric: Metric, baseline: Sequence[float], now: Sequence[float],
                       alpha: float = DEFAULT_ALPHA) -> float | None:
    """One-sided Mann–Whitney U p-value for 'now is worse than baseline'; None when the sample
    sizes cannot reach ``alpha`` at all (3 vs 3 gives at best p = 0.05)."""
    if len(baseline) < 2 or len(now) < 2 or smallest_p(len(baseline), len(now)) >= alpha:
        return None
    from scipy.stats import mannwhitneyu

    alternative = "greater" if metric.better == "lower" else "less"
    return float(mannwhitneyu(list(now), list(baseline), alternative=alternative).pvalue)


def bootstrap_change_ci(baseline: Sequence[float], now: Sequence[float], n_boot: int = 2000,
                        level: float = 0.95, seed: int = 0) -> tuple[float, float] | None:
    """Percentile bootstrap interval of median(now) / median(baseline) − 1 (seeded: the same
    data always give the same interval).  None with fewer than 2 values a side."""
    if len(baseline) < 2 or len(now) < 2:
        return None
    import numpy as np

    rng = np.random.default_rng(seed)
    b, n = np.asarray(baseline, float), np.asarray(now, float)
    mb = np.median(rng.choice(b, (n_boot, b.size)), axis=1)
    mn = np.median(rng.choice(n, (n_boot, n.size)), axis=1)
    ok = mb != 0
    ratios = mn[ok] / mb[ok] - 1.0
    if ratios.size == 0:
        return None
    lo, hi = np.percentile(ratios, [(1 - level) / 2 * 100, (1 + level) / 2 * 100])
    return float(lo), float(hi)


def decide(metric: Metric, change: float, ci: tuple[float, float] | None, min_effect: float, *,
           p_worse: float | None, p_better: float | None = None, alpha: float = DEFAULT_ALPHA,
           abs_change: float | None = None, baseline: float | None = None) -> Status:
    """The one decision every verdict rests on (``judge``, ``judge_paired``, ``judge_boots``, and any
    judge of another design: it passes its own change, interval and p-values).

    ``change``: the relative change now against the baseline, signed in natural units (+0.10: 10%
    higher; ±inf from a baseline of zero).  ``ci``: the 95% confidence interval of ``change`` (same
    units), None when there is none (one value a side).  ``min_effect``: the smallest relative worsening
    that counts.  ``p_worse``: the one-sided p-value of "now is worse"; None when no test could reach
    ``alpha`` (too few values), and then the effect size alone decides a regression.  ``p_better``: the
    same for "now is better"; None: the effect size alone decides an improvement.  ``abs_change``: the
    change in the metric's own unit (now − baseline) where it is measured directly, else ``baseline``
    (the baseline's value in the metric's unit): ``abs_change`` is then ``change`` × abs(baseline).  Both are
    needed only for a metric that sets ``min_abs_effect``.

    - **regressed**: moved the worse way by more than ``min_effect`` (and by more than the metric's
      ``min_abs_effect`` in its unit, where it sets one), significantly (``p_worse`` < ``alpha``);
    - **improved**: moved the better way by more than both, significantly where ``p_better`` is given;
    - **unchanged**: the interval rules a regression out (an equivalence check): its bound in the
      worse direction is below ``min_effect``, or, for a metric with ``min_abs_effect``, that bound in
      the metric's unit is below it (a regression must exceed both);
      A figure whose minimum effect is 0 (any change counts: a pass rate, failed requests) and that
      did not move at all is unchanged without an interval;
    - **inconclusive**: none of these (no interval, or one that reaches a regression the data do not
      show): the data cannot tell."""
    sign = 1.0 if metric.better == "lower" else -1.0
    worse = sign * change
    if abs_change is not None:
        worse_abs = sign * abs_change
    elif baseline is not None and math.isfinite(change):
        worse_abs = worse * abs(baseline)
    else:
        worse_abs = math.copysign(math.inf, worse) if worse else 0.0
    min_abs = metric.min_abs_effect
    if worse > min_effect and worse_abs > min_abs and (p_worse is None or p_worse < alpha):
        return REGRESSED
    if -worse > min_effect and -worse_abs > min_abs and (p_better is None or p_better < alpha):
        return IMPROVED
    if ci is None and min_effect == 0 and worse == 0:
        # a figure where any change counts (a pass rate, a count of failed requests): it did not move
        return UNCHANGED
    bound = _worse_bound(metric, ci)
    if bound is not None:
        if bound < min_effect:
            return UNCHANGED
        if min_abs and baseline is not None and bound * abs(baseline) < min_abs:
            return UNCHANGED
    return INCONCLUSIVE


def _worse_bound(metric: Metric, ci: tuple[float, float] | None) -> float | None:
    """The bound of ``ci`` (a relative change, signed) in the metric's worse direction, positive when worse."""
    if ci is None:
        return None
    return ci[1] if metric.better == "lower" else -ci[0]


def _signed(metric: Metric, worse: float) -> float:
    """A worsening (positive = worse) as the signed change it is in the metric's natural units."""
    return worse if metric.better == "lower" else -worse


def _relative(base: float, now: float) -> float:
    """now / base − 1, ±inf from a baseline of zero (0 when both are)."""
    if base:
        return (now - base) / abs(base)
    return 0.0 if now == base else math.copysign(math.inf, now - base)


def judge(metric: Metric, key: str, config_id: str, now: Sequence[float], baseline: Sequence[float] | None,
          min_effect: float | None = None, alpha: float = DEFAULT_ALPHA, baseline_source: str | None = None) -> Verdict:
    """Regressed only if the median moved the worse way by more than ``min_effect`` AND the
    move is significant (one-sided Mann–Whitney U at ``alpha``); when the sample sizes are too
    small for the test to ever reach ``alpha``, the effect size alone decides and the verdict says so."""
    eff = metric.min_effect if min_effect is None else min_effect
    s_now = Summary.of(now)
    if not baseline:
        return Verdict(metric, key, config_id, s_now, None, NO_BASELINE, None, None, eff, None, "none", baseline_source,
                       samples=tuple(now))
    s_base = Summary.of(baseline)
    change = (s_now.median - s_base.median) / abs(s_base.median) if s_base.median else 0.0
    worse = metric.worse_change(s_base.median, s_now.median)
    p = mann_whitney_worse(metric, baseline, now, alpha)
    method = ("Mann-Whitney U" if p is not None else
              f"effect size only ({len(baseline)} vs {len(now)} values cannot reach p<{alpha:g})")
    ci = bootstrap_change_ci(baseline, now)
    status = decide(metric, _relative(s_base.median, s_now.median), ci, eff, p_worse=p, alpha=alpha,
                    abs_change=s_now.median - s_base.median, baseline=s_base.median)
    return Verdict(metric, key, config_id, s_now, s_base, status, change, worse, eff, p, method, baseline_source,
                   ci=ci, samples=tuple(now), baseline_samples=tuple(baseline))


def judge_paired(metric: Metric, key: str, config_id: str, now: Sequence[float], baseline: Sequence[float],
                 min_effect: float | None = None, alpha: float = DEFAULT_ALPHA,
                 baseline_source: str | None = None) -> Verdict:
    """Like ``judge``, for values that come in pairs (``now[i]`` measured beside ``baseline[i]``:
    the same boot through two paths, or the two boots of one A/B round), so that what the
    pairs share (the boot, the machine's drift) cancels.  The change is the median of the
    per-pair ratios; significance: one-sided Wilcoxon signed-rank test on their logarithms
    (5 pairs are the fewest that can reach p < 0.05; with fewer the effect size decides)."""
    if len(now) != len(baseline) or not now:
        raise ValueError(f"{key}: paired values need equal, non-empty lists ({len(now)} vs {len(baseline)})")
    eff = metric.min_effect if min_effect is None else min_effect
    ratios = [n / b for n, b in zip(now, baseline) if b]
    change = median(ratios) - 1.0 if ratios else 0.0
    worse = change if metric.better == "lower" else -change
    p = None
    if len(ratios) >= 2 and 0.5 ** len(ratios) < alpha:
        from scipy.stats import wilcoxon

        logs = [math.log(r) for r in ratios if r > 0]
        if any(logs):
            p = float(wilcoxon(logs, alternative="greater" if metric.better == "lower" else "less").pvalue)
        else:
            p = 1.0
    method = (f"Wilcoxon signed-rank, {len(ratios)} pairs" if p is not None else
              f"effect size only ({len(ratios)} pairs cannot reach p<{alpha:g})")
    ci = None
    if len(ratios) >= 2:
        import numpy as np

        rng = np.random.default_rng(0)
        boot = np.median(rng.choice(np.asarray(ratios), (2000, len(ratios))), axis=1) - 1.0
        ci = (float(np.percentile(boot, 2.5)), float(np.percentile(boot, 97.5)))
    mde, basis, kind, need = None, "fewer than 3 pairs", MdeBasis.UNKNOWN, None
    logs_all = [math.log(r) for r in ratios if r > 0]
    if len(logs_all) >= 3:
        m = sum(logs_all) / len(logs_all)
        var = max(sum((x - m) ** 2 for x in logs_all) / (len(logs_all) - 1), 1e-12)
        mde = _rel(metric, _mde_paired(var, len(logs_all), alpha))
        basis, kind = f"pairs ({len(logs_all)})", MdeBasis.PAIRS
        need = pairs_needed(metric, var, eff, alpha) if mde > eff else None
    s_base = Summary.of(baseline)
    status = decide(metric, change, ci, eff, p_worse=p, alpha=alpha,
                    abs_change=median([n - b for n, b in zip(now, baseline)]), baseline=s_base.median)
    return Verdict(metric, key, config_id, Summary.of(now), s_base, status, change, worse, eff, p,
                   method, baseline_source, ci=ci, samples=tuple(now), baseline_samples=tuple(baseline),
                   mde=mde, mde_basis=basis, mde_kind=kind, boots_needed=need)


# -- boot-level verdicts: the boot is the unit -------------------------------------------------
POWER = 0.80
MAX_BOOTS_ADVISED = 50


def _t(q: float, df: float) -> float:
    from scipy.stats import t

    return float(t.ppf(q, df))


def _mde_log(var: float, df: float, n_now: float, n_base: float, alpha: float, offset: float = 0.0) -> float:
    """The smallest worsening (log scale) a one-sided t-test at ``alpha`` finds with 80% power: boot
    values of variance ``var``, ``n_now`` and ``n_base`` a side, plus a fixed ``offset`` variance that
    no number of boots averages away (a baseline from another machine: the machines' offset)."""
    return (_t(1 - alpha, df) + _t(POWER, df)) * math.sqrt(var * (1 / n_now + 1 / n_base) + offset)


def _mde_paired(var: float, n: int, alpha: float) -> float:
    """The smallest worsening (log scale) a one-sided paired t-test at ``alpha`` finds with 80% power
    from ``n`` pairs whose log ratios vary by ``var``."""
    return (_t(1 - alpha, n - 1) + _t(POWER, n - 1)) * math.sqrt(var / n)


def pairs_needed(metric: Metric, var: float, min_effect: float, alpha: float) -> int | None:
    """Pairs (A/B rounds) for a paired comparison's MDE to reach ``min_effect`` (None: more than
    MAX_BOOTS_ADVISED)."""
    if min_effect <= 0 or var <= 0:
        return None
    for k in range(3, MAX_BOOTS_ADVISED + 1):
        if _rel(metric, _mde_paired(var, k, alpha)) <= min_effect:
            return k
    return None


def _rel(metric: Metric, log_effect: float) -> float:
    """A worsening of ``log_effect`` on the log scale as a relative change in the worse direction."""
    return math.expm1(log_effect) if metric.better == "lower" else -math.expm1(-log_effect)


def boots_needed(metric: Metric, var: float, df: int, n_base: int, min_effect: float, alpha: float,
                 offset: float = 0.0) -> int | None:
    """Boots a side (the baseline re-recorded with as many) for the MDE to reach ``min_effect``
    (None when no number up to MAX_BOOTS_ADVISED does: a machine ``offset`` is not averaged away)."""
    if min_effect <= 0 or var <= 0:
        return None
    for k in range(2, MAX_BOOTS_ADVISED + 1):
        dfk = max(df, 2 * (k - 1))
        if _rel(metric, _mde_log(var, dfk, k, k, alpha, offset)) <= min_effect:
            return k
    return None


def judge_boots(metric: Metric, key: str, config_id: str, now_boots: Sequence[Sequence[float]],
                base_boots: Sequence[Sequence[float]] | None, min_effect: float | None = None,
                alpha: float = DEFAULT_ALPHA, baseline_source: str | None = None,
                prior: Noise | None = None, assumed: tuple[Noise, str] | None = None,
                now_sampling: Sequence[float | None] | None = None, now_requests: Sequence[float] | None = None,
                base_sampling: Sequence[float | None] | None = None, base_requests: Sequence[float] | None = None,
                offset: tuple[float, str] | None = None, comparison: str = "") -> Verdict:
    """Judge one metric with the boot as the unit.

    Each boot's value is the median of its repeats.  When the boot-to-boot variance can be
    estimated (two boots on either side, or ``prior``: the noise model stored with the baseline,
    which then stands for the baseline's own boots), the boot values are compared on the log scale
    with a one-sided t-test whose variance pools both sides, and the MDE (alpha, 80% power) follows
    from that variance and the boots a side.  With one boot a side and no stored noise model, the
    boot-to-boot noise is unknown.  Then ``assumed`` (a conservative between-boot noise for this
    device and metric, and where it comes from: ``noise_prior.assumed``) stands in for it, so that
    a move one boot's size can explain is not called a change, and the verdict says the noise was
    assumed; without it the repeats decide (Mann–Whitney, as ``judge``) and the MDE from their
    spread is a lower bound, said so.

    ``now_sampling`` / ``base_sampling``: each boot's sampling variance (log scale), where a boot's
    value is one statistic over its requests (``stats.sampling_log_var``): the sampling part of the
    noise, beside the boot part the boots' spread adds (``Noise.boot_cv``).  ``offset``: (a log-scale
    variance, its description) of a stored baseline from an earlier session or another machine, added
    to the comparison's variance whatever the boots (``noise_prior.stored_offset``).  ``comparison``: "same session" or "stored"."""
    eff = metric.min_effect if min_effect is None else min_effect
    now_boots = [list(map(float, b)) for b in now_boots if b]
    flat_now = [v for b in now_boots for v in b]
    now_vals = [median(b) for b in now_boots]
    noise_now = Noise.of(now_boots, now_sampling, now_requests)
    if not base_boots:
        v = judge(metric, key, config_id, now_vals if len(now_vals) > 1 else flat_now, None, eff, alpha,
                  baseline_source)
        mde = need = None
        basis, kind = "", None
        if noise_now.between is not None and noise_now.df >= 1 and min(now_vals) > 0:
            # what a comparison with a baseline like this run would see: the figure to read
            # before saving it as one
            var = max(noise_now.between, noise_now.value_var, 1e-12)
            k = len(now_vals)
            mde = _rel(metric, _mde_log(var, max(noise_now.df, 2 * (k - 1)), k, k, alpha))
            basis, kind = f"against a baseline like this run ({k} boots)", MdeBasis.THIS_RUN
            need = boots_needed(metric, var, noise_now.df, k, eff, alpha) if mde > eff else None
        elif assumed is not None and assumed[0].between is not None and now_vals and min(now_vals) > 0:
            var = max(assumed[0].between, noise_now.value_var, 1e-12)
            k = len(now_vals)
            mde = _rel(metric, _mde_log(var, max(assumed[0].df, 1), k, k, alpha))
            basis = f"against a baseline like this run ({k} boot{'s' * (k != 1)}), between-boot noise assumed"
            kind = MdeBasis.THIS_RUN
            need = boots_needed(metric, var, assumed[0].df, k, eff, alpha) if mde > eff else None
            return dataclasses.replace(v, samples=tuple(flat_now), boots=(0, len(now_boots)),
                                       boot_values=tuple(now_vals), noise=noise_now, mde=mde, mde_basis=basis,
                                       mde_kind=kind, boots_needed=need, noise_assumed=assumed[1])
        return dataclasses.replace(v, samples=tuple(flat_now), boots=(0, len(now_boots)), boot_values=tuple(now_vals),
                                   noise=noise_now, mde=mde, mde_basis=basis, mde_kind=kind, boots_needed=need)
    base_boots = [list(map(float, b)) for b in base_boots if b]
    flat_base = [v for b in base_boots for v in b]
    base_vals = [median(b) for b in base_boots]
    noise = noise_now.pooled(prior if prior is not None else Noise.of(base_boots, base_sampling, base_requests))
    source = ""
    if (noise.between is None or noise.df < 1) and assumed is not None and assumed[0].between is not None:
        # one boot a side and no stored noise model: the between-boot noise no boot measured is
        # assumed, conservatively, for this device and metric (the repeats still set a floor)
        noise = dataclasses.replace(noise, between=assumed[0].between, df=max(assumed[0].df, 1))
        source = assumed[1]
    off_var, off_text = offset if offset is not None else (0.0, "")
    common: dict[str, Any] = dict(samples=tuple(flat_now), baseline_samples=tuple(flat_base), boots=(len(base_vals), len(now_vals)),
                  boot_values=tuple(now_vals), baseline_boot_values=tuple(base_vals), noise=noise,
                  comparison=comparison, machine_offset=off_text)
    if noise.between is None or noise.df < 1 or min(now_vals + base_vals) <= 0:
        v = judge(metric, key, config_id, flat_now, flat_base, eff, alpha, baseline_source)
        mde = None
        basis = "one boot a side and no stored noise model: boot-to-boot noise not measured"
        kind = MdeBasis.UNKNOWN
        lower = False
        if noise.within is not None and noise.within_df >= 1:
            rn, rb = max(1, len(flat_now)), max(1, len(flat_base))
            mde = _rel(metric, _mde_log(noise.within, noise.within_df, rn, rb, alpha))
            basis = "from repeats within one boot a side: a lower bound (boot-to-boot noise not measured)"
            kind = MdeBasis.REPEATS
            lower = True
        method = "repeats within one boot a side, " + ("Mann-Whitney U" if v.p_value is not None else v.method)
        return dataclasses.replace(v, method=method, mde=mde, mde_basis=basis, mde_kind=kind,
                                   mde_lower_bound=lower, **common)
    ln = [math.log(x) for x in now_vals]
    lb = [math.log(x) for x in base_vals]
    diff = sum(ln) / len(ln) - sum(lb) / len(lb)          # log of now ÷ baseline
    # a boot's value is no more precise than its repeats say (boot medians that tie are not a zero variance)
    var = max(noise.between, noise.value_var, 1e-12)
    se = math.sqrt(var * (1 / len(ln) + 1 / len(lb)) + off_var)
    worse_log = diff if metric.better == "lower" else -diff
    from scipy.stats import t as t_dist

    p = float(t_dist.sf(worse_log / se, noise.df))
    change = math.expm1(diff)
    worse = metric.worse_change(1.0, math.exp(diff))
    half = _t(0.975, noise.df) * se
    ci = (math.expm1(diff - half), math.expm1(diff + half))
    mde = _rel(metric, _mde_log(var, noise.df, len(ln), len(lb), alpha, off_var))
    need = boots_needed(metric, var, noise.df, len(lb), eff, alpha, off_var) if mde > eff else None
    s_now, s_base = Summary.of(now_vals), Summary.of(base_vals)
    # an A/A run on the H200 gave TTFT at c=8 −12% over boots that spread ±30%: not an improvement
    p_better = float(t_dist.cdf(worse_log / se, noise.df))
    status = decide(metric, change, ci, eff, p_worse=p, p_better=p_better, alpha=alpha,
                    abs_change=s_now.median - s_base.median, baseline=s_base.median)
    src = ("this run and the baseline's boots" if prior is None else "this run's boots and the baseline's noise model")
    if source:
        src = f"assumed: {source}"
    parts = (f"; sampling {noise.sampling_cv:.2%} + boot {noise.boot_cv or 0.0:.2%}"
             if noise.sampling is not None else "")
    method = (f"t-test on boot values, between-boot CV {math.sqrt(var):.2%}{parts} (df {noise.df}, {src})")
    basis = f"boots ({len(lb)} vs {len(ln)})" + (", between-boot noise assumed" if source else "")
    return Verdict(metric, key, config_id, s_now, s_base, status, change, worse, eff, p, method, baseline_source,
                   ci=ci, mde=mde, mde_basis=basis, mde_kind=MdeBasis.BOOTS, boots_needed=need, noise_assumed=source, **common)


# -- where a latency's time went ---------------------------------------------------------------
PART_NAMES = {"frontend": "front end", "queue": "queue", "prefill": "prefill", "ttft": "engine TTFT"}


def attribution(client: Verdict, parts: dict[str, Verdict]) -> str | None:
    """Which part of a client TTFT moved: the change of each part's boot-level median (the engine's
    own queue and prefill timers, what the engine's TTFT holds beyond them, and the front end:
    client − engine TTFT), in ms and relative, with the part's own verdict where it
    regressed or improved.  None without a compared baseline for the parts."""
    have = {k: v for k, v in parts.items() if v.baseline is not None and v.change is not None}
    if client.baseline is None or not have:
        return None

    def delta_ms(v: Verdict) -> float:
        return (v.now.median - v.baseline.median) * 1000.0        # type: ignore[union-attr]

    # (name, change in ms, the part's verdict, the part's floor in ms: its metric's min_abs_effect)
    items: list[tuple[str, float, Verdict | None, float]] = []
    for k in ("frontend", "queue", "prefill"):
        if k in have:
            items.append((PART_NAMES[k], delta_ms(have[k]), have[k], have[k].metric.min_abs_effect * 1000.0))
    if "ttft" in have and ("queue" in have or "prefill" in have):
        other = delta_ms(have["ttft"]) - sum(delta_ms(have[k]) for k in ("queue", "prefill") if k in have)
        # a difference of parts: within the floors of what it is computed from (a queue's sub-ms
        # wobble shows up here with the opposite sign)
        floor = sum(have[k].metric.min_abs_effect for k in ("ttft", "queue", "prefill") if k in have) * 1000.0
        items.append(("engine other", other, None, floor))
    elif "ttft" in have:
        items.append((PART_NAMES["ttft"], delta_ms(have["ttft"]), have["ttft"], have["ttft"].metric.min_abs_effect * 1000.0))
    if not items:
        return None
    text = []
    for name, ms, v, floor in items:
        # a relative change only of a baseline above the part's floor: a queue of ~0.0 ms that moves
        # by 0.1 ms is +70% of nothing; its absolute floor judges it (and its verdict says so)
        rel = (f" ({v.change:+.0%})" if v is not None and v.change is not None and v.baseline is not None
               and abs(v.baseline.median) > max(1e-4, v.metric.min_abs_effect) else "")
        status = f" {v.status}" if v is not None and v.status in (REGRESSED, IMPROVED) else ""
        text.append(f"{name} {ms:+.1f} ms{rel}{status}")
    total = (client.now.median - client.baseline.median) * 1000.0
    # "most of it": the largest move among the parts that moved beyond their floor
    beyond = [it for it in items if abs(it[1]) > it[3]]
    most = f"most of it: {max(beyond, key=lambda x: abs(x[1]))[0]}" if beyond else "no part moved beyond its floor"
    return f"where (engine timers, window means): {', '.join(text)}; client {total:+.1f} ms; {most}"
