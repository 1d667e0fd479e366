"""The duet (``--llmgate-ab``'s default mode): both sides resident together on each of K boot pairs, a
test's measurement interleaved between them (``runner/duet.py`` schedules the turns); side B's pairs
judged against side A's, the boot pair's B ÷ A the unit (``analysis.paired.judge_duet``).  Each side
records its figures on its own thread; ``DuetBook`` keeps them until both sides have recorded a
figure on the last pair.  The verdict is side B's test result; side B's values are what a
``--benchmark-save`` stores."""

from __future__ import annotations

import dataclasses
import threading
from typing import TYPE_CHECKING, Any

from llmgate.analysis import noise_prior, stats
from llmgate.analysis.paired import judge_duet
from llmgate.analysis.stats import Noise, median
from llmgate.analysis.verdict import Verdict, judge as judge_one
from llmgate.config.matrix import ServerConfig
from llmgate.core import metrics
from llmgate.engines.base import engine_label
from llmgate.runner.compare.figure import Figure, Slot

if TYPE_CHECKING:
    from llmgate.runner.recorder import Recorder
    from llmgate.runner.run import GateRun

Round = tuple[list[float], float | None, int | None, Any]   # one side's round of a figure: values, sampling, requests, raw


@dataclasses.dataclass
class DuetBook:
    """A run's duet figures until they are judged, under one lock (both sides record on threads of
    their own): per figure, boot pair → side → its rounds in order; the grain of the turns each
    rested on; what one side recorded on the last pair before the other (``pending``); and the last
    recorder of each, which judges the pairs both sides finished when an interrupt cuts the run."""

    values: dict[Slot, dict[int, dict[str, list[Round]]]] = dataclasses.field(default_factory=dict)
    grain: dict[Slot, set[str]] = dataclasses.field(default_factory=dict)
    pending: dict[Slot, dict[str, Any]] = dataclasses.field(default_factory=dict)
    last: dict[Slot, tuple[metrics.Metric, Recorder]] = dataclasses.field(default_factory=dict)
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)


def judge(rec: Recorder, fig: Figure) -> Verdict | None:
    """Keep this side's values on boot pair k.  On the last pair, the side that records a figure second
    judges side B's pairs against side A's and gets the verdict; the first gets None, as on the
    earlier pairs (neither waits for the other: their scenarios may record in different orders).  A
    figure only one side recorded is judged when the test ends (``finish``)."""
    side, cfg, mb = rec.side, fig.cfg, fig.boot
    assert side is not None and cfg is not None and mb is not None
    slot, k, run = fig.slot, int(mb), rec.run
    book = run.duets
    with book.lock:
        # a test in rounds (runner/duet.py) records each figure once a round: the rounds are kept in order
        book.values.setdefault(slot, {}).setdefault(k, {}).setdefault(side.name, []).append(
            (fig.values, fig.sampling, fig.requests, fig.raw))
        book.grain.setdefault(slot, set()).add("rounds" if side.windows and side.rounds > 1 else side.grain)
        book.last[slot] = (fig.metric, rec)
        if k < mb.of or side.more_rounds:
            run.say(f"llmgate: {cfg.id} {fig.key}: boot pair {k} of {mb.of}, side {side.name}"
                    + (f", round {side.round} of {side.rounds}" if side.windows and side.rounds > 1 else "")
                    + f": {fig.metric.display(median(fig.values))}; judged after pair {mb.of}")
            return None
        pending = book.pending.setdefault(slot, {})
        if not pending:                       # the first side to record it on the last pair: the other judges
            pending.update(metric=fig.metric, key=fig.key, parts=dict(fig.parts or {}), info=fig.info, recorder=rec)
            return None
        merged = {**pending["parts"], **(fig.parts or {})}   # each side holds the parts it judged
        del book.pending[slot]
        return judge_pairs(rec, fig.metric, fig.key, cfg, fig.test, merged, {**pending["info"], **fig.info})


def judge_pairs(rec: Recorder, metric: metrics.Metric, key: str, cfg: ServerConfig, test: str,
                parts: dict[str, Verdict], info: dict[str, Any], cut_of: int | None = None) -> Verdict:
    """Judge one figure of a duet over the boot pairs that hold both sides' values (under the book's
    lock).  ``cut_of``: the run was interrupted before its last pair (of ``cut_of``): the pairs both
    sides finished are judged, saying so, and nothing is stored as a baseline."""
    side = rec.side
    assert side is not None
    run, slot = rec.run, (cfg.id, test, key)
    a_name, b_name = side.run.sides
    done = run.duets.values[slot]
    ks = [i for i in sorted(done) if a_name in done[i] and b_name in done[i]]
    cand: Recorder = side.run.recorders[b_name]
    # a figure measured over whole windows (one side under load, then the other), once a pair, rests on the
    # window grain's prior; one measured in rounds of windows (A B, B A …) on their paired ratios and the
    # rounds' prior; one measured request by request, interleaved, on the finest
    grains = run.duets.grain.get(slot, {"window"})
    grain = "window" if "window" in grains else "rounds" if "rounds" in grains else "request"
    if not ks:
        only = sorted({n for i in done for n in done[i]})
        values = [v for i in sorted(done) for n in only for v in _rounds_merged(done[i][n])[0]]
        verdict = judge_one(metric, key, cfg.id, values, None)
        notes = [f"duet: not compared, no boot pair has both sides' {key} (only side {', '.join(only)} recorded it)"]
    else:
        a = [_rounds_merged(done[i][a_name]) for i in ks]
        b = [_rounds_merged(done[i][b_name]) for i in ks]
        min_effect = run.min_effect(metric, key, cfg, rec.item)
        baseline = f"side {a_name} of this session (resident beside side {b_name})"
        requests = [float(x[2]) for x in a + b if x[2]]
        if grain == "rounds" and all(len(done[i][n]) > 1 for i in ks for n in (a_name, b_name)):
            # each round's value (its repeats' median), paired round by round within the boot pair
            pairs = [(_round_values(done[i][a_name]), _round_values(done[i][b_name])) for i in ks]
            pairs = [(ra[:min(len(ra), len(rb))], rb[:min(len(ra), len(rb))]) for ra, rb in pairs]
            verdict = judge_duet(metric, key, cfg.id, [p[0] for p in pairs], [p[1] for p in pairs], min_effect,
                                 run.settings.alpha, baseline, requests=requests, paired_rounds=True,
                                 assumed=noise_prior.duet_assumed(cfg.device, metric, "rounds"))
        else:
            verdict = judge_duet(metric, key, cfg.id, [x[0] for x in a], [x[0] for x in b], min_effect,
                                 run.settings.alpha, baseline, a_sampling=[x[1] for x in a],
                                 b_sampling=[x[1] for x in b], requests=requests,
                                 assumed=noise_prior.duet_assumed(cfg.device, metric,
                                                                  "window" if grain == "rounds" else grain),
                                 pair_sampling=[_paired_sampling(x, y) for x, y in zip(a, b)]
                                 if grain == "request" else None)
        how = {"window": "window by window", "request": "request by request"}.get(
            grain, f"in rounds of windows ({len(done[ks[0]][a_name])} a side a pair, paired round by round)")
        notes = [f"duet: {len(ks)} boot pair(s), side {a_name} and side {b_name} resident together, "
                 f"interleaved {how}: {side.turns.summary()}"]
        if cut_of is not None:
            notes.insert(0, f"cut by an interrupt: judged on the {len(ks)} of {cut_of} boot pairs both sides finished")
        extra = {**cand.provenance(), **info, "fingerprint": cand.fingerprint(),
                 "duet": {"baseline_side": a_name, "candidate_side": b_name, "pairs": len(ks),
                          "baseline_side_boot_values": [median(x[0]) for x in a]}}
        if any(x[3] is not None for x in b):
            extra["raw"] = {"boots": [x[3] for x in b]}
        b_boots = [x[0] for x in b]
        noise = Noise.of(b_boots, [x[1] for x in b], [float(x[2]) for x in b if x[2]]).pooled(
            Noise.of([x[0] for x in a], [x[1] for x in a], [float(x[2]) for x in a if x[2]]))
        if cut_of is None:
            cand.store(metric, key, b_boots, extra, noise.as_dict())
    labels = {}
    for name in (a_name, b_name):
        h = side.run.recorders[name].handle()
        labels[name] = engine_label(dataclasses.asdict(h.engine_info), h.config.launcher) if h is not None else ""
    verdict = dataclasses.replace(verdict, engine=labels[b_name], baseline_engine=labels[a_name])
    return cand.finish_verdict(verdict, key, test, notes, parts, None, None, [])


def finish(rec: Recorder) -> None:
    """(a duet's test, both sides done) Judge what only one side recorded on the last pair."""
    run, cfg = rec.run, rec.entry
    if cfg is None:
        return
    test = getattr(rec.item, "originalname", rec.item.name)
    with run.duets.lock:
        for slot in [sl for sl in run.duets.pending if sl[:2] == (cfg.id, test)]:
            pending = run.duets.pending.pop(slot)
            judge_pairs(pending["recorder"], pending["metric"], pending["key"], cfg, test, pending["parts"],
                        pending["info"])


def judge_cut(run: GateRun) -> None:
    """(an interrupted run, at its end) Judge each duet figure that the interrupt left unjudged over the boot
    pairs both sides finished: what the run measured is reported, each such verdict saying it was cut, and
    the run still reads interrupted, never passed.  A figure no pair holds both sides of stays unjudged."""
    judged = {(v.config_id, v.test, v.key) for v in run.verdicts}
    book = run.duets
    with book.lock:
        for slot, (metric, rec) in list(book.last.items()):
            if slot in judged or rec.side is None or rec.entry is None or rec.boot is None:
                continue
            a_name, b_name = rec.side.run.sides
            done = book.values.get(slot, {})
            if not any(a_name in done[k] and b_name in done[k] for k in done):
                continue
            book.pending.pop(slot, None)
            judge_pairs(rec, metric, slot[2], rec.entry, slot[1], {}, {}, cut_of=rec.boot.of)


def _paired_sampling(a: Round, b: Round) -> float | None:
    """One boot pair's sampling part of log(B ÷ A) from the two sides' requests in pairs, in the order they
    took turns (``stats.paired_sampling_log_var``), where both recorded them (a figure that is one median
    over requests: its raw ``request_values_s``); None otherwise."""
    ra, rb = a[3], b[3]
    if not (isinstance(ra, dict) and isinstance(rb, dict)):
        return None
    va, vb = ra.get("request_values_s"), rb.get("request_values_s")
    if not (isinstance(va, list) and isinstance(vb, list)):
        return None
    return stats.paired_sampling_log_var([float(x or 0) for x in va], [float(x or 0) for x in vb])


def _round_values(rounds: list[Round]) -> list[float]:
    """A duet side's rounds of one figure on one boot pair: each round's value (the median of its repeats)."""
    return [median([float(v) for v in r[0]]) for r in rounds]


def _rounds_merged(rounds: list[Round]) -> Round:
    """A duet side's rounds of one figure on one boot pair as one boot's (values, sampling, requests, raw):
    one round as it was; several: every round's values, no sampling part of their own (the rounds' spread
    is it), the requests summed, the rounds' raw data in a list."""
    if len(rounds) == 1:
        return rounds[0]
    values = [float(v) for r in rounds for v in r[0]]
    requests = sum(int(r[2]) for r in rounds if r[2]) or None
    raws = [r[3] for r in rounds]
    return (values, None, requests, {"rounds": raws} if any(x is not None for x in raws) else None)
