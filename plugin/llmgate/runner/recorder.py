"""The recording pipeline of one test: ``record(metric, values)`` stores the values as the
baseline store's entry and judges them against the compared baseline (the fingerprint and the
provenance every stored result carries, the boots of an entry, A/B mode's sides), accounts for
every request sent, and keeps the test's verdicts for the confirmation policy
(``runner/confirm.py``), which reads them through the public members at the end."""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any

import pytest

from llmgate.store import baseline as baseline_store, benchmark_files, fingerprint as fingerprints, keys
from llmgate.device import hardware
from llmgate.core import metrics
from llmgate.analysis import noise_prior
from llmgate.config.matrix import ServerConfig
from llmgate.load.samples import LoadResult
from llmgate.process.server import ServerDied, ServerHandle
from llmgate.runner.boots import MeasurementBoot
from llmgate.analysis.stats import Noise, median
from llmgate.analysis.paired import judge_duet
from llmgate.analysis.verdict import NO_BASELINE, REFUSED, REGRESSED, UNCHANGED, Verdict, attribution, judge, judge_boots
from llmgate.engines.base import engine_label

if TYPE_CHECKING:
    from llmgate.runner.duet import DuetSide
    from llmgate.runner.run import GateRun


@dataclasses.dataclass(frozen=True)
class BootFigures:
    """What one measurement boot (``--llmgate-boots K``) measured of one figure: its repeat values,
    their raw samples (``gate.record(raw=)``), and the boot value's sampling variance (log scale)
    over its requests, where it is one statistic over them."""

    values: list[float]
    raw: Any = None
    sampling: float | None = None
    requests: float | None = None


def _requests(samp: dict[int, tuple[float | None, float | None]], boots: list[int]) -> list[float]:
    """The request counts of those boots that recorded one (``record(..., requests=)``)."""
    return [float(r) for k in boots if (r := samp[k][1])]


class Recorder:
    """What one test recorded: its verdicts, notes and stored entries, and its requests' count."""

    def __init__(self, item: pytest.Item, run: GateRun, side: DuetSide | None = None):
        self.item, self._run = item, run
        self._side = side                        # a duet's side (runner/duet.py): its server, its turns
        self.verdicts: list[Verdict] = []
        self._stored: list[Any] = []            # pytest-benchmark entries this test added
        self._first_measurement: list[Verdict] | None = None
        self.notes: list[str] = []
        self._request_counts = [0, 0]            # requests sent, failed (account)

    @property
    def entry(self) -> ServerConfig | None:
        """The matrix entry this test measures; None for a test outside the matrix."""
        callspec = getattr(self.item, "callspec", None)
        return callspec.params.get("llmgate_config") if callspec else None

    @property
    def boot(self) -> MeasurementBoot | None:
        """Boot k of its entry's K (``boot.of``) that this test measures (tests marked ``boots``:
        decided where they were parametrized); None otherwise."""
        callspec = getattr(self.item, "callspec", None)
        k = callspec.params.get("llmgate_boot") if callspec else None
        if self.entry is None or not isinstance(k, MeasurementBoot):
            return None
        return k

    def record(self, metric: metrics.Metric, values: list[float], variant: str | None = None,
               raw: dict[str, Any] | None = None, *, parts: dict[str, Verdict] | None = None,
               sampling: float | None = None, requests: int | None = None, **info: Any) -> Verdict | None:
        """``gate.record`` (its docstring says what the arguments are): store ``values`` with the
        provenance and fingerprint and judge them — on the entry's last measurement boot the boots
        kept so far, in A/B mode side B's against side A's."""
        values = [float(v) for v in values]
        if not values:
            raise ValueError(f"{metric.name}: no values to record")
        metrics.register(metric)                 # a team's own Metric: known to options and reports from here on
        key = metric.name + (f"@{variant}" if variant else "")
        self._claim(key)
        cfg = self.entry
        test = getattr(self.item, "originalname", self.item.name)
        boots, mb = [values], self.boot
        if info.get("gpu_sampling"):
            self._keep_gpu_sampling(key, test, mb, info["gpu_sampling"])
        samp: dict[int, tuple[float | None, float | None]] = {1: (sampling, requests)}
        if mb is not None and cfg is not None and self._side is not None:
            return self._record_duet(metric, key, cfg, test, mb, values, raw, sampling, requests, parts, info)
        if mb is not None and cfg is not None:
            k, n_boots = int(mb), mb.of
            slot = (cfg.id, test, key)
            self._run.boot_figures.setdefault(slot, {})[k] = BootFigures(values, raw, sampling, requests)
            if k < n_boots:
                side = mb.side
                self._run.say(f"llmgate: {cfg.id} {key}: boot {k} of {n_boots}"
                                 + (f" (side {side[0]}, its boot {side[2]})" if side else "")
                                 + f": {metric.display(median(values))} (median of {len(values)}"
                                 + (f" values; sampling error {math.sqrt(sampling):.2%} over {requests} requests"
                                    if sampling is not None and requests else "")
                                 + f"); judged after boot {n_boots}")
                return None
            done = self._run.boot_figures[slot]
            boots = [done[i].values for i in sorted(done)]
            samp = {i: (f.sampling, f.requests) for i, f in done.items()}
            if any(f.raw is not None for f in done.values()):
                raw = {"boots": [done[i].raw for i in sorted(done)]}
        if mb is not None and cfg is not None and mb.plan.sides:
            return self._record_ab(metric, key, cfg, test, mb, raw, samp, parts, info)
        fp = self._fingerprint()
        extra = {**self.provenance(), **info, "fingerprint": fp}
        if raw is not None:
            extra["raw"] = raw
        base = baseline_store.baseline(self.item.config, keys.stored_key(self.item), key, fp,
                                       self._run.settings.allow_mismatch)
        base_boots = baseline_store.baseline_boots(base[1]) if base else None
        notes, refused = [], []
        offset = None
        missing = None
        engine, base_engine = engine_label(fp.get("engine"), cfg.launcher if cfg else None), ""
        if base is None:
            missing = baseline_store.why_no_baseline(self.item.config, keys.stored_key(self.item), key, fp)
            if missing:
                notes.append(missing.note)
                self._run.note_once(f"{cfg.id if cfg else self.item.name}: {missing.note}")
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
            if refused and self._run.settings.allow_mismatch:
                notes.append("NOT COMPARABLE, compared anyway (--llmgate-allow-mismatch): " + "; ".join(refused))
                self.item.warn(pytest.PytestWarning(f"{key}: compared with a baseline from another setup: "
                                                    + "; ".join(refused)))
                refused = []
            # an earlier session's shift (and another machine's offset, or an unrecorded one's) is
            # part of the difference, whatever the boots
            offset = noise_prior.stored_offset(cfg.device if cfg else None, metric,
                                               base_info.get("machine") == extra.get("machine"))
        prior = baseline_store.baseline_noise(base[1]) if base is not None and not refused else None
        order = sorted(samp)
        verdict = judge_boots(metric, key, cfg.id if cfg else self.item.name, boots, None if refused else base_boots,
                              self._run.min_effect(metric, key, cfg, self.item), self._run.settings.alpha,
                              base[0] if base else None, prior=prior,
                              assumed=noise_prior.assumed(cfg.device if cfg else None, metric),
                              now_sampling=[samp[i][0] for i in order],
                              now_requests=_requests(samp, order),
                              offset=offset, comparison="stored" if base is not None and not refused else "")
        verdict = dataclasses.replace(verdict, engine=engine, baseline_engine=base_engine)
        if missing:
            verdict = dataclasses.replace(verdict, no_baseline=missing.reason)
        noise = Noise.of(boots, [samp[i][0] for i in order], _requests(samp, order)).pooled(prior)
        self._stored.append(baseline_store.store(self.item, metric, key, boots, extra, noise.as_dict()))
        return self._finish_verdict(verdict, key, test, notes, parts, raw, base, refused)

    def _finish_verdict(self, verdict: Verdict, key: str, test: str, notes: list[str],
                        parts: dict[str, Verdict] | None, raw: dict[str, Any] | None, base: Any,
                        refused: list[str]) -> Verdict:
        cfg = self.entry
        regime = self._run.regimes.get(cfg.id, {}).get("regime", "") if cfg else ""
        where = attribution(verdict, parts) if parts else None
        if where:
            notes.append(where)
        verdict = dataclasses.replace(verdict, test=test, note="; ".join(n for n in notes if n), regime=regime,
                                      attribution=where or "")
        base_raw = (baseline_store.unpack_raw(base[1]["extra_info"][benchmark_files.EXTRA_KEY].get("raw"))
                    if base is not None else None)
        if raw is not None or base_raw is not None:
            self._run.raw[(verdict.config_id, verdict.test, key)] = {"now": raw, "baseline": base_raw}
        if refused:
            verdict = dataclasses.replace(verdict, status=REFUSED, note="; ".join(refused))
        self.verdicts.append(verdict)
        self._run.verdicts.append(verdict)
        return verdict

    def _record_ab(self, metric: metrics.Metric, key: str, cfg: ServerConfig, test: str, mb: MeasurementBoot,
                   raw: dict[str, Any] | None, samp: dict[int, tuple[float | None, float | None]],
                   parts: dict[str, Verdict] | None, info: dict[str, Any]) -> Verdict:
        """A/B mode, on the entry's last measurement boot: side B's boots judged against side A's, both
        measured in this run, alternating (a same-run comparison: the machine, its offset and
        its drift are the same on both sides).  B's boots are what a --benchmark-save stores; a stored
        baseline, when one is compared with, is only set beside side A (what the machine's offset is)."""
        slot = (cfg.id, test, key)
        done = {k: f.values for k, f in self._run.boot_figures[slot].items()}
        plan = mb.plan
        side = {k: s[0] for k in range(1, plan.total + 1) if (s := plan.side(k)) is not None}
        a_name, b_name = plan.sides[0][0], plan.sides[1][0]
        a_ks = [k for k in sorted(done) if side.get(k) == a_name]
        b_ks = [k for k in sorted(done) if side.get(k) == b_name]
        a_boots, b_boots = [done[k] for k in a_ks], [done[k] for k in b_ks]
        order = "".join(side[k] if len(side[k]) == 1 else f"{side[k]} " for k in sorted(done) if k in side)
        verdict = judge_boots(metric, key, cfg.id, b_boots, a_boots, self._run.min_effect(metric, key, cfg, self.item),
                              self._run.settings.alpha, f"side {a_name} of this session",
                              assumed=noise_prior.assumed(cfg.device, metric),
                              now_sampling=[samp[k][0] for k in b_ks],
                              now_requests=_requests(samp, b_ks),
                              base_sampling=[samp[k][0] for k in a_ks],
                              base_requests=_requests(samp, a_ks),
                              comparison="same session")
        verdict = dataclasses.replace(verdict, baseline_in_run=True, engine=self._side_engine(cfg, b_name),
                                      baseline_engine=self._side_engine(cfg, a_name))
        notes = [f"same session: {len(a_boots)} boot(s) of {a_name} vs {len(b_boots)} of {b_name}, order {order.strip()}"]
        fp = self._fingerprint()
        extra = {**self.provenance(), **info, "fingerprint": fp,
                 "ab": {"baseline_side": a_name, "candidate_side": b_name, "order": order.strip(),
                        "baseline_side_boot_values": [median(b) for b in a_boots]}}
        if raw is not None:
            extra["raw"] = raw
        base = baseline_store.baseline(self.item.config, keys.stored_key(self.item), key, fp,
                                       self._run.settings.allow_mismatch)
        if base is not None and not fingerprints.fingerprint_mismatch(
                base[1]["extra_info"][benchmark_files.EXTRA_KEY].get("fingerprint") or {}, fp):
            stored = baseline_store.baseline_boots(base[1]) or []
            if stored and a_boots:
                offset = median([median(b) for b in a_boots]) / median([median(b) for b in stored]) - 1.0
                notes.append(f"side {a_name} against the stored {base[0]}: {offset:+.1%} (this machine's offset and "
                             f"drift since; not judged: the verdict rests on this session's side {a_name})")
        noise = Noise.of(b_boots, [samp[k][0] for k in b_ks], _requests(samp, b_ks)).pooled(
            Noise.of(a_boots, [samp[k][0] for k in a_ks], _requests(samp, a_ks)))     # both sides' boots: one machine
        self._stored.append(baseline_store.store(self.item, metric, key, b_boots, extra, noise.as_dict()))
        return self._finish_verdict(verdict, key, test, notes, parts, raw, None, [])

    def _side_engine(self, cfg: ServerConfig, side: str) -> str:
        """The engine build side ``side`` of an A/B comparison booted (its last boot record that says)."""
        for b in reversed(self._run.boots.get(cfg.id) or []):
            if b.get("side") == side and b.get("version"):
                return engine_label(b, b.get("launcher"))
        return ""

    def _record_duet(self, metric: metrics.Metric, key: str, cfg: ServerConfig, test: str, mb: MeasurementBoot,
                     values: list[float], raw: dict[str, Any] | None, sampling: float | None, requests: int | None,
                     parts: dict[str, Verdict] | None, info: dict[str, Any]) -> Verdict | None:
        """A duet (runner/duet.py): this side's values on boot pair k are kept.  On the last pair, the side
        that records a metric second judges side B's pairs against side A's (``judge_duet``) and gets the
        verdict; the first gets None, as on the earlier pairs (neither waits for the other: their
        scenarios may record in different orders).  A metric only one side recorded is judged when the
        test ends (``finish_duet``).  The verdict is side B's test result; side B's values are what a
        --benchmark-save stores."""
        side = self._side
        assert side is not None
        slot, k, s = (cfg.id, test, key), int(mb), self._run
        with s.duet_lock:
            # a test in rounds (runner/duet.py) records each figure once a round: the rounds are kept in order
            s.duet_values.setdefault(slot, {}).setdefault(k, {}).setdefault(side.name, []).append(
                (values, sampling, requests, raw))
            s.duet_grain.setdefault(slot, set()).add("rounds" if side.windows and side.rounds > 1 else side.grain)
            s.duet_last[slot] = (metric, self)
            if k < mb.of or side.more_rounds:
                s.say(f"llmgate: {cfg.id} {key}: boot pair {k} of {mb.of}, side {side.name}"
                      + (f", round {side.round} of {side.rounds}" if side.windows and side.rounds > 1 else "")
                      + f": {metric.display(median(values))}; judged after pair {mb.of}")
                return None
            pending = s.duet_pending.setdefault(slot, {})
            if not pending:                       # the first side to record it on the last pair: the other judges
                pending.update(metric=metric, key=key, parts=dict(parts or {}), info=info, recorder=self)
                return None
            merged = {**pending["parts"], **(parts or {})}   # each side holds the parts it judged
            del s.duet_pending[slot]
            return self._judge_duet(metric, key, cfg, test, merged, {**pending["info"], **info})

    def _judge_duet(self, metric: metrics.Metric, key: str, cfg: ServerConfig, test: str,
                    parts: dict[str, Verdict], info: dict[str, Any], cut_of: int | None = None) -> Verdict:
        """Judge one metric of a duet over the boot pairs that hold both sides' values (under duet_lock).
        ``cut_of``: the run was interrupted before its last pair (of ``cut_of``): the pairs both sides
        finished are judged, saying so, and nothing is stored as a baseline."""
        side = self._side
        assert side is not None
        s, slot = self._run, (cfg.id, test, key)
        a_name, b_name = side.run.sides
        done = s.duet_values[slot]
        ks = [i for i in sorted(done) if a_name in done[i] and b_name in done[i]]
        cand: Recorder = side.run.recorders[b_name]
        # a figure measured over whole windows (one side under load, then the other), once a pair, rests on the
        # window grain's prior; one measured in rounds of windows (A B, B A …) on their paired ratios and the
        # rounds' prior; one measured request by request, interleaved, on the finest
        grains = s.duet_grain.get(slot, {"window"})
        grain = "window" if "window" in grains else "rounds" if "rounds" in grains else "request"
        if not ks:
            only = sorted({n for i in done for n in done[i]})
            values = [v for i in sorted(done) for n in only for v in _rounds_merged(done[i][n])[0]]
            verdict = judge(metric, key, cfg.id, values, None)
            notes = [f"duet: not compared, no boot pair has both sides' {key} (only side {', '.join(only)} recorded it)"]
        else:
            a = [_rounds_merged(done[i][a_name]) for i in ks]
            b = [_rounds_merged(done[i][b_name]) for i in ks]
            rounds = grain == "rounds" and all(len(done[i][n]) > 1 for i in ks for n in (a_name, b_name))
            if rounds:
                # each round's value (its repeats' median), paired round by round within the boot pair
                pairs = [(_round_values(done[i][a_name]), _round_values(done[i][b_name])) for i in ks]
                pairs = [(ra[:min(len(ra), len(rb))], rb[:min(len(ra), len(rb))]) for ra, rb in pairs]
                verdict = judge_duet(metric, key, cfg.id, [p[0] for p in pairs], [p[1] for p in pairs],
                                     s.min_effect(metric, key, cfg, self.item), s.settings.alpha,
                                     f"side {a_name} of this session (resident beside side {b_name})",
                                     requests=[float(x[2]) for x in a + b if x[2]], paired_rounds=True,
                                     assumed=noise_prior.duet_assumed(cfg.device, metric, "rounds"))
            else:
                verdict = judge_duet(metric, key, cfg.id, [x[0] for x in a], [x[0] for x in b],
                                     s.min_effect(metric, key, cfg, self.item), s.settings.alpha,
                                     f"side {a_name} of this session (resident beside side {b_name})",
                                     a_sampling=[x[1] for x in a], b_sampling=[x[1] for x in b],
                                     requests=[float(x[2]) for x in a + b if x[2]],
                                     assumed=noise_prior.duet_assumed(cfg.device, metric,
                                                                      "window" if grain == "rounds" else grain))
            how = {"window": "window by window", "request": "request by request"}.get(
                grain, f"in rounds of windows ({len(done[ks[0]][a_name])} a side a pair, paired round by round)")
            notes = [f"duet: {len(ks)} boot pair(s), side {a_name} and side {b_name} resident together, "
                     f"interleaved {how}: {side.turns.summary()}"]
            if cut_of is not None:
                notes.insert(0, f"cut by an interrupt: judged on the {len(ks)} of {cut_of} boot pairs both sides finished")
            extra = {**cand.provenance(), **info, "fingerprint": cand._fingerprint(),
                     "duet": {"baseline_side": a_name, "candidate_side": b_name, "pairs": len(ks),
                              "baseline_side_boot_values": [median(x[0]) for x in a]}}
            if any(x[3] is not None for x in b):
                extra["raw"] = {"boots": [x[3] for x in b]}
            b_boots = [x[0] for x in b]
            noise = Noise.of(b_boots, [x[1] for x in b], [float(x[2]) for x in b if x[2]]).pooled(
                Noise.of([x[0] for x in a], [x[1] for x in a], [float(x[2]) for x in a if x[2]]))
            if cut_of is None:
                cand._stored.append(baseline_store.store(self.item, metric, key, b_boots, extra, noise.as_dict()))
        labels = {}
        for name in (a_name, b_name):
            h = side.run.recorders[name]._handle()
            labels[name] = engine_label(dataclasses.asdict(h.engine_info), h.config.launcher) if h is not None else ""
        verdict = dataclasses.replace(verdict, engine=labels[b_name], baseline_engine=labels[a_name])
        return cand._finish_verdict(verdict, key, test, notes, parts, None, None, [])

    def finish_duet(self) -> None:
        """(a duet's test, both sides done) Judge what only one side recorded on the last pair."""
        s = self._run
        cfg = self.entry
        test = getattr(self.item, "originalname", self.item.name)
        with s.duet_lock:
            for slot in [sl for sl in s.duet_pending if cfg is not None and sl[:2] == (cfg.id, test)]:
                pending = s.duet_pending.pop(slot)
                pending["recorder"]._judge_duet(pending["metric"], pending["key"], cfg, test, pending["parts"],
                                                pending["info"])

    def account(self, *results: LoadResult) -> None:
        """Account for every request of a measurement.  A failed one (HTTP error, malformed
        stream, timeout) fails the test at once, naming the errors; the test's share of failed
        requests becomes a verdict ("regressed" when any failed, whatever the baseline)."""
        samples = [s for r in results for s in r.samples]
        failed = [s for s in samples if not s.ok]
        self._request_counts[0] += len(samples)
        self._request_counts[1] += len(failed)
        if failed:
            v = self._requests_verdict()
            errors = sorted({(s.error or "unknown error")[:300] for s in failed})
            label = ", ".join(sorted({r.label for r in results if r.label})) or "measurement"
            h = self._handle()
            if h is not None:
                try:
                    h.check_alive(settle_s=1.0)
                except ServerDied as e:          # the engine died: that is the failure, the requests followed
                    pytest.fail(f"{e}\n{len(failed)} of {len(samples)} requests ({label}) failed with it",
                                pytrace=False)
            pytest.fail(f"{v.config_id}: {len(failed)} of {len(samples)} requests failed ({label}); failed requests "
                        f"are counted, never dropped:\n" + "\n".join(f"  {e}" for e in errors[:8]),
                        pytrace=False)

    def _requests_verdict(self) -> Verdict:
        total, failed = self._request_counts
        cfg = self.entry
        test = getattr(self.item, "originalname", self.item.name)
        # the requests of the entry's earlier measurement boots of this test (their rows were held back)
        carried = self._run.request_counts.pop((cfg.id, test), (0, 0)) if cfg else (0, 0)
        total, failed = total + carried[0], failed + carried[1]
        v = judge(metrics.FAILED_SHARE, metrics.FAILED_SHARE.name, cfg.id if cfg else self.item.name,
                  [failed / total], None)
        # no failure: "unchanged" where a figure of the test was compared with a baseline, "no
        # baseline" (with their reason) where none was — a save run, a compare without a baseline,
        # a test that recorded no figure — as the test's other rows say; never "unchanged" alone
        others = [o for o in self.verdicts if o.metric.name != metrics.FAILED_SHARE.name]
        compared = [o for o in others if o.baseline is not None and o.status != REFUSED]
        why = next((o.no_baseline for o in others if o.no_baseline is not None), None)
        v = dataclasses.replace(v, test=test, status=REGRESSED if failed else UNCHANGED if compared else NO_BASELINE,
                                no_baseline=None if failed or compared else why,
                                engine=compared[0].engine if compared else "",
                                baseline_engine=compared[0].baseline_engine if compared else "",
                                note=f"{failed} of {total} requests failed")
        self.verdicts.append(v)
        self._run.verdicts.append(v)
        self._request_counts = [0, 0]
        return v

    def baseline_info(self, metric: metrics.Metric, variant: str | None = None) -> dict[str, Any] | None:
        """What the compared baseline stored with a metric (its extra_info), when it is comparable."""
        key = metric.name + (f"@{variant}" if variant else "")
        base = baseline_store.baseline(self.item.config, keys.stored_key(self.item), key, self._fingerprint(),
                                       self._run.settings.allow_mismatch)
        if base is None:
            return None
        info = base[1]["extra_info"][benchmark_files.EXTRA_KEY]
        if (fingerprints.fingerprint_mismatch(info.get("fingerprint") or {}, self._fingerprint())
                and not self._run.settings.allow_mismatch):
            return None
        return info

    def note(self, text: str) -> None:
        """Something the reader of the results must know (an unsupported figure…): shown in the summary."""
        cfg = self.entry
        self.notes.append(text)
        self._run.notes.append(f"{cfg.id if cfg else self.item.name}: {text}")

    def count_requests(self) -> Verdict | None:
        """(after the test's call) The ``failed_requests`` row of the requests accounted for since the
        last one — every one succeeded, or the test failed already; None when none were sent.  On an
        entry's measurement boot before its last (whose figures are judged after the last), the counts
        are carried to the last boot's row: one row per test, beside the figures it judges."""
        if not self._request_counts[0]:
            return None
        boot, cfg = self.boot, self.entry
        if boot is not None and cfg is not None and int(boot) < boot.of:
            key = (cfg.id, getattr(self.item, "originalname", self.item.name))
            held = self._run.request_counts.get(key, (0, 0))
            self._run.request_counts[key] = (held[0] + self._request_counts[0], held[1] + self._request_counts[1])
            self._request_counts = [0, 0]
            return None
        return self._requests_verdict()

    @property
    def confirmable(self) -> bool:
        """Whether a regression of this test is re-measured once on a fresh server: not with
        ``--llmgate-no-confirm``, not where a verdict
        spans the entry's measurement boots already."""
        boot = self.boot
        return self._run.settings.confirm and not (boot is not None and boot.of > 1)

    @property
    def regressions(self) -> list[Verdict]:
        return [v for v in self.verdicts if v.failed]

    @property
    def refusals(self) -> list[Verdict]:
        return [v for v in self.verdicts if v.status == REFUSED]

    def start_confirmation(self) -> list[Verdict]:
        """Set the first measurement aside (kept in the report, dropped from storage) before re-measuring."""
        first = list(self.verdicts)
        baseline_store.drop_stored(self.item.config, self._stored)
        self._stored.clear()
        for v in first:
            if v in self._run.verdicts:
                self._run.verdicts.remove(v)
        self.verdicts.clear()
        self._first_measurement = first
        return first

    def _claim(self, key: str) -> None:
        """Two tests may not store under one baseline key (their scenario names would collide)."""
        full = f"{keys.stored_key(self.item)}::{key}"
        other = self._run.stored_keys.setdefault(full, self.item.nodeid)
        if other != self.item.nodeid and keys.base_nodeid(other) != keys.base_nodeid(self.item.nodeid):
            raise RuntimeError(f"{self.item.nodeid} and {other} both record {full!r}: baseline keys are "
                               f"scenario + entry + metric, so two scenarios need different function names")


    def provenance(self) -> dict[str, Any]:
        """What every stored result carries: configuration, engine, model, device, settings, memory,
        and what ``pytest_llmgate_provenance`` hooks add."""
        out = self._provenance()
        self.item.config.hook.pytest_llmgate_provenance(item=self.item, entry=self.entry, provenance=out)
        return out

    def _provenance(self) -> dict[str, Any]:
        st = self._run.settings
        cfg = self.entry
        out: dict[str, Any] = {"device": hardware.describe(), "machine": hardware.machine_id(cfg.device if cfg else "cpu"),
                               "settings": {"repeats": st.repeats, "warmup": st.warmup,
                                            "request_timeout_s": st.request_timeout}}
        if cfg is None:
            return out
        out["config"] = cfg.describe()
        h = self._handle()
        if h is not None:
            out.update(engine=dataclasses.asdict(h.engine_info), model_path=str(h.model_path),
                       model_hash=h.model_hash, startup_s=h.startup_s, boot=h.boot_number,
                       peak_rss_bytes=h.memory.peak(), engine_log=h.engine.read_log(h.log_tail(3000)))
        return out

    def _handle(self) -> ServerHandle | None:
        """The server this recorder measures: its duet side's, else its entry's running one."""
        if self._side is not None and self._side.handle is not None:
            return self._side.handle
        cfg = self.entry
        server = self._run.servers.get(cfg.id) if cfg else None
        return server.handle if server is not None else None

    def _fingerprint(self) -> dict[str, Any]:
        return self._run.entry_fingerprint(self.entry, self._handle())

    def _keep_gpu_sampling(self, key: str, test: str, mb: MeasurementBoot | None, gpus: dict[Any, Any]) -> None:
        """report.json's ``gpu_sampling``: what the GPU did while this figure was measured (its clocks,
        utilisation, throttle reasons; ``hardware.summarize_samples``), with the boot (or boot pair) and side."""
        cfg = self.entry
        side = self._side.name if self._side is not None else (mb.side[0] if mb is not None and mb.side else None)
        self._run.gpu_sampling.append({"config": cfg.id if cfg else self.item.name, "test": test, "key": key,
                                           "boot": int(mb) if mb is not None else None, "side": side,
                                           "gpus": {str(i): g for i, g in gpus.items()}})

    def set_regime(self, regime: dict[str, Any]) -> None:
        """What bounds this entry (``hardware.classify``): shown beside every verdict of the entry."""
        cfg = self.entry
        if cfg is None:
            raise RuntimeError(f"{self.item.nodeid}: set_regime needs a matrix entry")
        self._run.regimes[cfg.id] = regime


def judge_cut_duets(run: GateRun) -> None:
    """(an interrupted run, at its end) Judge each duet figure that the interrupt left unjudged over the boot
    pairs both sides finished: what the run measured is reported, each such verdict saying it was cut, and
    the run still reads interrupted, never passed.  A figure no pair holds both sides of stays unjudged."""
    judged = {(v.config_id, v.test, v.key) for v in run.verdicts}
    with run.duet_lock:
        for slot, (metric, rec) in list(run.duet_last.items()):
            if slot in judged or rec._side is None or rec.entry is None or rec.boot is None:
                continue
            a_name, b_name = rec._side.run.sides
            done = run.duet_values.get(slot, {})
            if not any(a_name in done[k] and b_name in done[k] for k in done):
                continue
            run.duet_pending.pop(slot, None)
            rec._judge_duet(metric, slot[2], rec.entry, slot[1], {}, {}, cut_of=rec.boot.of)


def _round_values(rounds: list[tuple[Any, ...]]) -> list[float]:
    """A duet side's rounds of one figure on one boot pair: each round's value (the median of its repeats)."""
    return [median([float(v) for v in r[0]]) for r in rounds]


def _rounds_merged(rounds: list[tuple[Any, ...]]) -> tuple[Any, ...]:
    """A duet side's rounds of one figure on one boot pair as one boot's (values, sampling, requests, raw):
    one round as it was; several: every round's values, no sampling part of their own (the rounds' spread
    is it), the requests summed, the rounds' raw data in a list."""
    if len(rounds) == 1:
        return rounds[0]
    values = [float(v) for r in rounds for v in r[0]]
    requests = sum(int(r[2]) for r in rounds if r[2]) or None
    raws = [r[3] for r in rounds]
    return (values, None, requests, {"rounds": raws} if any(x is not None for x in raws) else None)
