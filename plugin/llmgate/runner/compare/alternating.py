"""Alternating boots (``--llmgate-ab-mode alternate``, and A/B mode where two servers do not fit): the
sides booted in turn, A B A B …, K boots a side; on the entry's last measurement boot side B's boots
are judged against side A's.  A same-session comparison: the machine, its offset and its drift are
the same on both sides, but each boot's own speed is in the noise.  B's boots are what a
``--benchmark-save`` stores; a stored baseline, where one is compared with, is only set beside side A
(what the machine's offset is)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from llmgate.analysis import noise_prior
from llmgate.analysis.stats import Noise, median
from llmgate.analysis.verdict import Verdict, hold_disturbed, judge_boots
from llmgate.runner.compare.figure import Figure, kept_boots
from llmgate.store import baseline as baseline_store, benchmark_files, fingerprint as fingerprints, keys

if TYPE_CHECKING:
    from llmgate.runner.recorder import Recorder


def judge(rec: Recorder, fig: Figure) -> Verdict | None:
    """On the entry's last measurement boot, side B's boots against side A's (None before it)."""
    kept = kept_boots(rec, fig)
    if kept is None:
        return None
    cfg, mb, metric, key, run = fig.cfg, fig.boot, fig.metric, fig.key, rec.run
    assert cfg is not None and mb is not None
    done = kept.by_boot()
    plan = mb.plan
    side = {k: s[0] for k in range(1, plan.total + 1) if (s := plan.side(k)) is not None}
    a_name, b_name = plan.sides[0][0], plan.sides[1][0]
    a_ks = [k for k in sorted(done) if side.get(k) == a_name]
    b_ks = [k for k in sorted(done) if side.get(k) == b_name]
    a_boots, b_boots = [done[k] for k in a_ks], [done[k] for k in b_ks]
    (a_sampling, a_requests), (b_sampling, b_requests) = kept.of(a_ks), kept.of(b_ks)
    order = "".join(side[k] if len(side[k]) == 1 else f"{side[k]} " for k in sorted(done) if k in side)
    verdict = judge_boots(metric, key, cfg.id, b_boots, a_boots, run.min_effect(metric, key, cfg, rec.item),
                          run.settings.alpha, f"side {a_name} of this session",
                          assumed=noise_prior.assumed(cfg.device, metric),
                          now_sampling=b_sampling, now_requests=b_requests,
                          base_sampling=a_sampling, base_requests=a_requests,
                          comparison="same session")
    verdict = dataclasses.replace(verdict, baseline_in_run=True, engine=rec.side_engine(b_name),
                                  baseline_engine=rec.side_engine(a_name))
    verdict = hold_disturbed(verdict, kept.disturbed_text(b_ks), kept.disturbed_text(a_ks))
    notes = [f"same session: {len(a_boots)} boot(s) of {a_name} vs {len(b_boots)} of {b_name}, order {order.strip()}"]
    fp = rec.fingerprint()
    extra = {**rec.provenance(), **fig.info, "fingerprint": fp,
             "ab": {"baseline_side": a_name, "candidate_side": b_name, "order": order.strip(),
                    "baseline_side_boot_values": [median(b) for b in a_boots]}}
    if kept.raw is not None:
        extra["raw"] = kept.raw
    if disturbed := kept.disturbed_text(b_ks):
        extra["disturbed"] = disturbed
    base = baseline_store.baseline(rec.item.config, keys.stored_key(rec.item), key, fp, run.settings.allow_mismatch)
    if base is not None and not fingerprints.fingerprint_mismatch(
            base[1]["extra_info"][benchmark_files.EXTRA_KEY].get("fingerprint") or {}, fp):
        stored = baseline_store.baseline_boots(base[1]) or []
        if stored and a_boots:
            offset = median([median(b) for b in a_boots]) / median([median(b) for b in stored]) - 1.0
            notes.append(f"side {a_name} against the stored {base[0]}: {offset:+.1%} (this machine's offset and "
                         f"drift since; not judged: the verdict rests on this session's side {a_name})")
    noise = Noise.of(b_boots, b_sampling, b_requests).pooled(Noise.of(a_boots, a_sampling, a_requests))  # one machine
    rec.store(metric, key, b_boots, extra, noise.as_dict())
    return rec.finish_verdict(verdict, key, fig.test, notes, fig.parts, kept.raw, None, [])
