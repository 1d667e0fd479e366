"""The stored comparison (``--benchmark-compare``): a figure's boots against the boots a baseline of
an earlier run stored (pytest-benchmark storage, ``store/``), where both setups' fingerprints agree.
An earlier session's shift (and another machine's offset) is part of the difference whatever the
boots: it widens the MDE (``noise_prior.stored_offset``).  Also the comparison of a run that has no
baseline to compare with: its figures are stored (``--benchmark-save``) and read ``no baseline``."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import pytest

from llmgate.analysis import noise_prior
from llmgate.analysis.stats import Noise
from llmgate.analysis.verdict import NoBaseline, Verdict, hold_disturbed, judge_boots
from llmgate.engines.base import engine_label
from llmgate.runner.compare.figure import Figure, kept_boots
from llmgate.store import baseline as baseline_store, benchmark_files, fingerprint as fingerprints, keys

if TYPE_CHECKING:
    from llmgate.runner.recorder import Recorder


def judge(rec: Recorder, fig: Figure) -> Verdict | None:
    """Store ``fig``'s boots with the provenance and fingerprint, and judge them against the compared
    baseline's (None on a measurement boot before the entry's last)."""
    kept = kept_boots(rec, fig)
    if kept is None:
        return None
    cfg, metric, key, run, item = fig.cfg, fig.metric, fig.key, rec.run, rec.item
    fp = rec.fingerprint()
    extra = {**rec.provenance(), **fig.info, "fingerprint": fp}
    if kept.raw is not None:
        extra["raw"] = kept.raw
    disturbed = kept.disturbed_text()
    if disturbed:
        extra["disturbed"] = disturbed           # a later run's improvement over this is held (hold_disturbed)
    base = baseline_store.baseline(item.config, keys.stored_key(item), key, fp, run.settings.allow_mismatch)
    base_boots = baseline_store.baseline_boots(base[1]) if base else None
    notes: list[str] = []
    refused: list[str] = []
    offset = None
    missing = None
    engine, base_engine = engine_label(fp.get("engine"), cfg.launcher if cfg else None), ""
    if base is None:
        missing = baseline_store.why_no_baseline(item.config, keys.stored_key(item), key, fp)
        if missing:
            notes.append(missing.note)
            run.note_once(f"{cfg.id if cfg else item.name}: {missing.note}")
        elif run.settings.ab and not baseline_store.compared_spec(item.config):
            on = "on side B (the candidate)" if cfg is not None and run.pool.partner(cfg.id) is not None else "once"
            missing = baseline_store.Missing(
                NoBaseline.OUTSIDE_AB, f"{NoBaseline.OUTSIDE_AB}: A/B mode compares the scenarios that measure "
                f"boots; this test ran {on}, and its own checks are its gate")
            notes.append(missing.note)
    if base is not None:
        base_info = base[1]["extra_info"][benchmark_files.EXTRA_KEY]
        base_fp = base_info.get("fingerprint") or {}
        refused = fingerprints.fingerprint_mismatch(base_fp, fp)
        # both builds are named by the verdict itself (its line, the reports' header)
        base_engine = engine_label(base_fp.get("engine") or base_info.get("engine"),
                                   (base_info.get("config") or {}).get("launcher"))
        if base_info.get("schema", benchmark_files.SCHEMA_VERSION) < 3:
            notes.append("baseline of schema 2: its values read as one boot without a noise model "
                         "(re-record it with --benchmark-save and --llmgate-boots)")
        if refused and run.settings.allow_mismatch:
            notes.append("NOT COMPARABLE, compared anyway (--llmgate-allow-mismatch): " + "; ".join(refused))
            item.warn(pytest.PytestWarning(f"{key}: compared with a baseline from another setup: " + "; ".join(refused)))
            refused = []
        # an earlier session's shift (and another machine's offset, or an unrecorded one's) is
        # part of the difference, whatever the boots
        offset = noise_prior.stored_offset(cfg.device if cfg else None, metric,
                                           base_info.get("machine") == extra.get("machine"))
    prior = baseline_store.baseline_noise(base[1]) if base is not None and not refused else None
    order = sorted(kept.sampling)
    sampling, requests = kept.of(order)
    verdict = judge_boots(metric, key, cfg.id if cfg else item.name, kept.values, None if refused else base_boots,
                          run.min_effect(metric, key, cfg, item), run.settings.alpha,
                          base[0] if base else None, prior=prior,
                          assumed=noise_prior.assumed(cfg.device if cfg else None, metric),
                          now_sampling=sampling, now_requests=requests,
                          offset=offset, comparison="stored" if base is not None and not refused else "")
    verdict = dataclasses.replace(verdict, engine=engine, baseline_engine=base_engine)
    if base is not None and not refused:
        verdict = hold_disturbed(verdict, disturbed, str(base_info.get("disturbed") or ""))
    if missing:
        verdict = dataclasses.replace(verdict, no_baseline=missing.reason)
    noise = Noise.of(kept.values, sampling, requests).pooled(prior)
    rec.store(metric, key, kept.values, extra, noise.as_dict())
    return rec.finish_verdict(verdict, key, fig.test, notes, fig.parts, kept.raw, base, refused)
