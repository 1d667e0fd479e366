"""What a run came to, in one place: the headline of the terminal section and of summary.md, the
lines above their tables (verdicts not gated, verdicts inconclusive), and whether the gate fails
the run for them.

Never green when nothing was gated: a failed, interrupted, uncompared or inconclusive run never
reads as passed.  The headline follows the run's real outcome, the first of: failed (tests that
failed or errors beyond the regressions, from pytest's counts and exit status), interrupted,
baseline not saved, measured but not compared (no comparison asked), regressed, not gated
(compared, but a verdict had no comparable baseline), inconclusive, nothing measured, passed.

In a comparison (``--benchmark-compare``, or A/B mode's same-session one) verdicts without a
comparable baseline and inconclusive verdicts fail the run (exit status 1; the tests themselves
pass) unless ``--llmgate-accept no-baseline`` / ``--llmgate-accept inconclusive`` says that is
expected; accepted, they still keep the headline from reading as passed.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable
from typing import Any

from llmgate.analysis.verdict import INCONCLUSIVE, NO_BASELINE, REFUSED, REGRESSED, NoBaseline

NO_BASELINE_OK = "no-baseline"
INCONCLUSIVE_OK = "inconclusive"
ACCEPTABLE = (NO_BASELINE_OK, INCONCLUSIVE_OK)

FAILED, INTERRUPTED, NOT_SAVED, NOT_COMPARED = "failed", "interrupted", "baseline not saved", "measured, not compared"
REGRESSIONS, NOT_GATED, INCONCLUSIVE_RUN, NOTHING, PASSED = ("regressed", "not gated", "inconclusive",
                                                             "nothing measured", "passed")
NAMED = 4              # verdicts named in a line; the rest are counted


def parse_accept(items: Iterable[str]) -> tuple[str, ...]:
    """``--llmgate-accept`` values (repeatable, each a comma list) → the accepted outcomes;
    ValueError naming an unknown one."""
    out: list[str] = []
    for item in items:
        for word in (w.strip() for w in str(item).split(",")):
            if not word:
                continue
            if word not in ACCEPTABLE:
                raise ValueError(f"--llmgate-accept {item!r}: {word!r} is not one of {', '.join(ACCEPTABLE)}")
            if word not in out:
                out.append(word)
    return tuple(out)


def _name(v: dict[str, Any]) -> str:
    return f"{v['config']} {v['key']}"


def _names(vs: list[dict[str, Any]], extra=None) -> str:
    shown = [_name(v) + (f" ({extra(v)})" if extra and extra(v) else "") for v in vs[:NAMED]]
    return ", ".join(shown) + (f", … {len(vs) - NAMED} more" if len(vs) > NAMED else "")


def not_gated(verdicts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The verdicts of a comparison that found no comparable baseline (none stored, or refused)."""
    return [v for v in verdicts if v["status"] in (NO_BASELINE, REFUSED) and v.get("no_baseline") != NoBaseline.OUTSIDE_AB]


def inconclusive(verdicts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [v for v in verdicts if v["status"] == INCONCLUSIVE]


def not_gated_line(verdicts: list[dict[str, Any]]) -> str | None:
    """"not gated: 3 of 12 verdicts had no comparable baseline — no baseline for this test: a x, b y; …" """
    missing = not_gated(verdicts)
    if not missing:
        return None
    by_why: dict[str, list[dict[str, Any]]] = {}
    for v in missing:
        why = str(v.get("no_baseline") or ("refused: not comparable" if v["status"] == REFUSED else "no baseline"))
        by_why.setdefault(why, []).append(v)
    whys = "; ".join(f"{why} ({len(vs)}): {_names(vs)}" for why, vs in by_why.items())
    return f"not gated: {len(missing)} of {len(verdicts)} verdict(s) had no comparable baseline — {whys}"


def inconclusive_line(verdicts: list[dict[str, Any]]) -> str | None:
    vs = inconclusive(verdicts)
    if not vs:
        return None

    def need(v: dict[str, Any]) -> str:
        if not v.get("boots_needed"):
            return ""
        unit = "pairs" if v.get("mde_kind") == "pairs" else "boots a side"
        return f"{v['boots_needed']} {unit} would decide it"

    line = (f"inconclusive: {len(vs)} of {len(verdicts)} verdict(s) neither showed a regression nor ruled one out "
            f"(the confidence interval reaches past the min effect, or one value a side gives none) — {_names(vs, need)}")
    held = [v for v in vs if v.get("held")]
    if held:
        # a change the statistics called, held: the side that reads worse was measured on a busy machine
        line += (f"; {len(held)} of them held: {_names(held)}: {held[0]['held']}"
                 + (" (and the like for the others)" if len(held) > 1 else ""))
    return line


GOOD, WARN, BAD = "good", "warn", "bad"          # how a headline reads: green, yellow, red


@dataclasses.dataclass(frozen=True)
class Outcome:
    status: str                 # FAILED, INTERRUPTED, …, PASSED
    headline: str               # summary.md's: "❌ not gated: 3 of 12 verdict(s) had no baseline"
    words: str                  # the terminal's: "NOT GATED"
    severity: str               # GOOD (only a run that passed), WARN or BAD
    lines: list[str]            # what is above the tables: the verdicts not gated, those inconclusive
    fate: str | None            # what they do to the run: "the run fails (exit status 1): …", or accepted; None
    fails: list[str]            # why the gate fails the run (not gated, inconclusive, not accepted); [] none


def gate_failures(verdicts: list[dict[str, Any]], compared: bool, accept: Iterable[str]) -> list[str]:
    """Why the gate fails a comparison that no test failed: its verdicts without a comparable
    baseline and its inconclusive verdicts, each unless accepted ([] when none, or not comparing)."""
    if not compared:
        return []
    accept = set(accept)
    out = []
    if not_gated(verdicts) and NO_BASELINE_OK not in accept:
        out.append(f"{len(not_gated(verdicts))} verdict(s) not gated (--llmgate-accept {NO_BASELINE_OK} "
                   f"if that is expected)")
    if inconclusive(verdicts) and INCONCLUSIVE_OK not in accept:
        out.append(f"{len(inconclusive(verdicts))} verdict(s) inconclusive (more boots decide them; "
                   f"--llmgate-accept {INCONCLUSIVE_OK} if that is expected)")
    return out


def compared(rep: dict[str, Any]) -> bool:
    """Whether the run asked for a comparison (a report written before ``compared`` existed: whether
    any verdict was compared, or said why it could not be)."""
    if "compared" in rep:
        return bool(rep["compared"])
    return any(v.get("baseline") is not None or v.get("no_baseline") or v["status"] == REFUSED for v in rep["verdicts"])


def outcome(rep: dict[str, Any]) -> Outcome:
    """The outcome of the run a report (``llmgate-report/1``) describes."""
    verdicts = rep["verdicts"]
    tests = rep.get("tests") or {}
    exit_status = int(rep.get("exit_status") or 0)
    accept = list((rep.get("settings") or {}).get("accept") or ())
    is_compared = compared(rep)
    regressed_tests = {(v["config"], v["test"]) for v in verdicts if v["status"] == REGRESSED}
    bad_tests = int(tests.get("failed") or 0) + int(tests.get("errors") or 0)
    fails = gate_failures(verdicts, is_compared, accept)
    lines: list[str] = []
    if is_compared:
        lines += [ln for ln in (not_gated_line(verdicts), inconclusive_line(verdicts)) if ln]
    counted = Counter(v["status"] for v in verdicts)

    def made(status: str, headline: str, words: str, severity: str) -> Outcome:
        fate = None
        if fails:
            # an interrupt's exit status (2) stands: the failures are said beside it, not as another status
            fate = f"the run fails (exit status {2 if rep.get('interrupted') else 1}): " + "; ".join(fails)
        elif is_compared and (not_gated(verdicts) or inconclusive(verdicts)):
            fate = (f"accepted (--llmgate-accept {','.join(accept)}): these do not fail the run, and it does "
                    f"not read as passed")
        return Outcome(status, headline, words, severity, lines, fate, fails)

    if bad_tests > len(regressed_tests) or exit_status in (3, 4) or (exit_status == 1 and not tests and not fails
                                                                     and not counted[REGRESSED]
                                                                     and not rep.get("baseline_not_saved")):
        parts = [f"{tests.get('failed') or 0} failed", f"{tests.get('errors') or 0} error(s)"] if tests else \
            [f"exit status {exit_status}"]
        what = ", ".join(parts) + (f" ({len(regressed_tests)} with a regressed verdict)" if regressed_tests else "")
        return made(FAILED, f"❌ failed: {what}", f"FAILED: {what}", BAD)
    if rep.get("interrupted"):
        return made(INTERRUPTED, "⚠️ interrupted", "INTERRUPTED: what was measured is below", WARN)
    if rep.get("baseline_not_saved"):
        return made(NOT_SAVED, "❌ baseline not saved", "BASELINE NOT SAVED", BAD)
    if not is_compared:
        n = len(verdicts)
        return made(NOT_COMPARED, f"ℹ️ measured, not compared ({n} verdict(s))",
                    f"measured, not compared: {n} verdict(s), no baseline asked for (--benchmark-compare compares)", WARN)
    if counted[REGRESSED]:
        return made(REGRESSIONS, f"❌ regressions ({counted[REGRESSED]})", f"REGRESSED: {counted[REGRESSED]} verdict(s)",
                    BAD)
    if not_gated(verdicts):
        ok = NO_BASELINE_OK in accept
        return made(NOT_GATED, f"{'⚠️' if ok else '❌'} not gated: {len(not_gated(verdicts))} of {len(verdicts)} "
                               f"verdict(s) had no baseline", "NOT GATED" + (" (accepted)" if ok else ""),
                    WARN if ok and not fails else BAD)
    if inconclusive(verdicts):
        ok = INCONCLUSIVE_OK in accept
        return made(INCONCLUSIVE_RUN, f"{'⚠️' if ok else '❌'} inconclusive: {len(inconclusive(verdicts))} of "
                                      f"{len(verdicts)} verdict(s)", "INCONCLUSIVE" + (" (accepted)" if ok else ""),
                    WARN if ok and not fails else BAD)
    if not verdicts:
        return made(NOTHING, "⚠️ nothing measured", "nothing measured: no verdict was recorded", WARN)
    outside = [v for v in verdicts if v.get("no_baseline") == NoBaseline.OUTSIDE_AB]
    if len(outside) == len(verdicts):
        return made(NOT_COMPARED, f"ℹ️ measured, not compared ({len(verdicts)} verdict(s))",
                    f"measured, not compared: {len(verdicts)} verdict(s) of tests outside A/B mode's comparison "
                    f"(it compares the scenarios that measure boots)", WARN)
    if outside:
        return made(PASSED, "✅ no regression", f"no regression: every compared verdict was decided ({len(outside)} "
                    f"more outside A/B mode's comparison: their tests' own checks gate them)", GOOD)
    return made(PASSED, "✅ no regression", "no regression: every verdict was compared and decided", GOOD)
