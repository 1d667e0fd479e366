"""The recording pipeline of one test: ``record(metric, values)`` hands each figure to the entry's
comparison (``runner/compare``: a stored baseline, alternating boots, a duet), which stores it as the
baseline store's entry with the provenance and fingerprint and judges it; the recorder accounts for
every request sent, and keeps the test's verdicts for the confirmation policy
(``runner/confirm.py``), which reads them through the public members at the end."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import pytest

from llmgate.store import baseline as baseline_store, benchmark_files, fingerprint as fingerprints, keys
from llmgate.device import hardware
from llmgate.core import metrics
from llmgate.config.matrix import ServerConfig
from llmgate.load.samples import LoadResult
from llmgate.process.server import ServerDied, ServerHandle
from llmgate.runner.boots import MeasurementBoot
from llmgate.analysis.verdict import NO_BASELINE, REFUSED, REGRESSED, UNCHANGED, Verdict, attribution, judge
from llmgate.engines.base import engine_label
from llmgate.runner import compare
from llmgate.runner.compare.figure import Figure

if TYPE_CHECKING:
    from llmgate.runner.duet import DuetSide
    from llmgate.runner.run import GateRun


class Recorder:
    """What one test recorded: its verdicts, notes and stored entries, and its requests' count."""

    def __init__(self, item: pytest.Item, run: GateRun, side: DuetSide | None = None):
        self.item, self.run = item, run
        self.side = side                        # a duet's side (runner/duet.py): its server, its turns
        self.verdicts: list[Verdict] = []
        self._stored: list[Any] = []            # pytest-benchmark entries this test added
        self._first_measurement: list[Verdict] | None = None
        self.notes: list[str] = []
        self._request_counts = [0, 0]            # requests sent, failed (account)
        # why the workload the next figures come from may read slower than the engine is (a busy
        # machine: ``Gate.watch``); "" where nothing says so
        self.disturbed = ""

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
        provenance and fingerprint and judge them by the entry's comparison (``runner/compare``) — on
        the entry's last measurement boot the boots kept so far, in A/B mode side B's against side A's."""
        values = [float(v) for v in values]
        if not values:
            raise ValueError(f"{metric.name}: no values to record")
        metrics.register(metric)                 # a team's own Metric: known to options and reports from here on
        metric = self.run.tuned(metric)          # --llmgate-min-effect METRIC=FRACTION:ABS
        key = metric.name + (f"@{variant}" if variant else "")
        self._claim(key)
        test = getattr(self.item, "originalname", self.item.name)
        mb = self.boot
        if info.get("gpu_sampling"):
            self._keep_gpu_sampling(key, test, mb, info["gpu_sampling"])
        fig = Figure(metric, key, self.entry, test, mb, values, raw, sampling, requests, parts, info, self.disturbed)
        return compare.choose(self, fig)(self, fig)

    def store(self, metric: metrics.Metric, key: str, boots: list[list[float]], extra: dict[str, Any],
              noise: dict[str, Any]) -> None:
        """Add a figure's boots to what a --benchmark-save stores (dropped again if the test re-measures)."""
        self._stored.append(baseline_store.store(self.item, metric, key, boots, extra, noise))

    def finish_verdict(self, verdict: Verdict, key: str, test: str, notes: list[str],
                       parts: dict[str, Verdict] | None, raw: dict[str, Any] | None, base: Any,
                       refused: list[str]) -> Verdict:
        """A comparison's verdict as the test's: its attribution to ``parts``, notes and regime; the raw
        samples of both sides kept for the report; refused where the setups differ."""
        cfg = self.entry
        regime = self.run.regimes.get(cfg.id, {}).get("regime", "") if cfg else ""
        where = attribution(verdict, parts) if parts else None
        if where:
            notes.append(where)
        verdict = dataclasses.replace(verdict, test=test, note="; ".join(n for n in notes if n), regime=regime,
                                      attribution=where or "")
        base_raw = (baseline_store.unpack_raw(base[1]["extra_info"][benchmark_files.EXTRA_KEY].get("raw"))
                    if base is not None else None)
        if raw is not None or base_raw is not None:
            self.run.raw[(verdict.config_id, verdict.test, key)] = {"now": raw, "baseline": base_raw}
        if refused:
            verdict = dataclasses.replace(verdict, status=REFUSED, note="; ".join(refused))
        self.verdicts.append(verdict)
        self.run.verdicts.append(verdict)
        return verdict

    def side_engine(self, side: str) -> str:
        """The engine build side ``side`` of an A/B comparison booted (its last boot record that says)."""
        cfg = self.entry
        for b in reversed(self.run.boots.get(cfg.id) or [] if cfg else []):
            if b.get("side") == side and b.get("version"):
                return engine_label(b, b.get("launcher"))
        return ""

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
            h = self.handle()
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
        carried = self.run.request_counts.pop((cfg.id, test), (0, 0)) if cfg else (0, 0)
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
        self.run.verdicts.append(v)
        self._request_counts = [0, 0]
        return v

    def baseline_info(self, metric: metrics.Metric, variant: str | None = None) -> dict[str, Any] | None:
        """What the compared baseline stored with a metric (its extra_info), when it is comparable."""
        key = metric.name + (f"@{variant}" if variant else "")
        base = baseline_store.baseline(self.item.config, keys.stored_key(self.item), key, self.fingerprint(),
                                       self.run.settings.allow_mismatch)
        if base is None:
            return None
        info = base[1]["extra_info"][benchmark_files.EXTRA_KEY]
        if (fingerprints.fingerprint_mismatch(info.get("fingerprint") or {}, self.fingerprint())
                and not self.run.settings.allow_mismatch):
            return None
        return info

    def note(self, text: str) -> None:
        """Something the reader of the results must know (an unsupported figure…): shown in the summary."""
        cfg = self.entry
        self.notes.append(text)
        self.run.notes.append(f"{cfg.id if cfg else self.item.name}: {text}")

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
            held = self.run.request_counts.get(key, (0, 0))
            self.run.request_counts[key] = (held[0] + self._request_counts[0], held[1] + self._request_counts[1])
            self._request_counts = [0, 0]
            return None
        return self._requests_verdict()

    @property
    def confirmable(self) -> bool:
        """Whether a regression of this test is re-measured once on a fresh server: not with
        ``--llmgate-no-confirm``, not where a verdict
        spans the entry's measurement boots already."""
        boot = self.boot
        return self.run.settings.confirm and not (boot is not None and boot.of > 1)

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
            if v in self.run.verdicts:
                self.run.verdicts.remove(v)
        self.verdicts.clear()
        self._first_measurement = first
        return first

    def _claim(self, key: str) -> None:
        """Two tests may not store under one baseline key (their scenario names would collide)."""
        full = f"{keys.stored_key(self.item)}::{key}"
        other = self.run.stored_keys.setdefault(full, self.item.nodeid)
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
        st = self.run.settings
        cfg = self.entry
        out: dict[str, Any] = {"device": hardware.describe(), "machine": hardware.machine_id(cfg.device if cfg else "cpu"),
                               "settings": {"repeats": st.repeats, "warmup": st.warmup,
                                            "request_timeout_s": st.request_timeout}}
        if cfg is None:
            return out
        out["config"] = cfg.describe()
        h = self.handle()
        if h is not None:
            out.update(engine=dataclasses.asdict(h.engine_info), model_path=str(h.model_path),
                       model_hash=h.model_hash, startup_s=h.startup_s, boot=h.boot_number,
                       peak_rss_bytes=h.memory.peak(), engine_log=h.engine.read_log(h.log_tail(3000)))
        return out

    def handle(self) -> ServerHandle | None:
        """The server this recorder measures: its duet side's, else its entry's running one."""
        if self.side is not None and self.side.handle is not None:
            return self.side.handle
        cfg = self.entry
        partner = self.run.pool.partner(cfg.id) if cfg is not None and self.boot is None else None
        if partner is not None:              # a duet: a test outside the boot pairs measures side B
            return partner
        server = self.run.servers.get(cfg.id) if cfg else None
        return server.handle if server is not None else None

    def fingerprint(self) -> dict[str, Any]:
        return self.run.entry_fingerprint(self.entry, self.handle())

    def _keep_gpu_sampling(self, key: str, test: str, mb: MeasurementBoot | None, gpus: dict[Any, Any]) -> None:
        """report.json's ``gpu_sampling``: what the GPU did while this figure was measured (its clocks,
        utilisation, throttle reasons; ``hardware.summarize_samples``), with the boot (or boot pair) and side."""
        cfg = self.entry
        side = self.side.name if self.side is not None else (mb.side[0] if mb is not None and mb.side else None)
        self.run.gpu_sampling.append({"config": cfg.id if cfg else self.item.name, "test": test, "key": key,
                                           "boot": int(mb) if mb is not None else None, "side": side,
                                           "gpus": {str(i): g for i, g in gpus.items()}})

    def set_regime(self, regime: dict[str, Any]) -> None:
        """What bounds this entry (``hardware.classify``): shown beside every verdict of the entry."""
        cfg = self.entry
        if cfg is None:
            raise RuntimeError(f"{self.item.nodeid}: set_regime needs a matrix entry")
        self.run.regimes[cfg.id] = regime
