"""The ``gate`` fixture's object: what a scenario is given (the matrix entry, its running
server, exact-length prompts, the run's settings and the matrix's ``[scenarios]``), the ways to
run a workload against the server, and ``record(metric, values)``, which stores the values as
the baseline store's entry and judges them against the compared baseline.

This is llmgate's public API for scenarios (docs/api.md); the packaged scenarios
(``llmgate.scenarios``) are written with it."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest

from llmgate.store import baseline as baseline_store
from llmgate.device import hardware
from llmgate.load import workloads
from llmgate.core import metrics
from llmgate.analysis import noise_prior
from llmgate.engines import meters
from llmgate.analysis import stats
from llmgate.load.workloads import PromptMaker, Request
from llmgate.config import matrix as matrix_mod
from llmgate.config.matrix import Matrix, Scenarios, ServerConfig
from llmgate.load.samples import LoadResult, SteadyResult
from llmgate.process.server import ServerDied, ServerHandle
from llmgate.runner.settings import Settings
from llmgate.analysis.stats import Noise, median
from llmgate.analysis.verdict import NO_BASELINE, REFUSED, REGRESSED, UNCHANGED, Verdict, attribution, judge, judge_boots

if TYPE_CHECKING:
    from llmgate.runner.session import GateSession

GATE_KEY = pytest.StashKey["Gate"]()


def _requests(samp: dict[int, tuple[float | None, float | None]], boots: list[int]) -> list[float]:
    """The request counts of those boots that recorded one (``record(..., requests=)``)."""
    return [float(r) for k in boots if (r := samp[k][1])]


class Gate:
    """Records a test's metrics into the baseline store and judges them against the baseline."""

    def __init__(self, item: pytest.Item, session: GateSession, request: pytest.FixtureRequest | None = None):
        self.item, self.session, self._fixture_request = item, session, request
        self.verdicts: list[Verdict] = []
        self._stored: list[Any] = []            # pytest-benchmark entries this test added
        self._first_measurement: list[Verdict] | None = None
        self.notes: list[str] = []
        self._confirm = True
        self._request_counts = [0, 0]            # requests sent, failed (Gate.requests)

    # -- the public API: what a scenario is given ----------------------------------------------
    @property
    def entry(self) -> ServerConfig:
        """The matrix entry this test measures (``entry.id``, ``entry.device``, ``entry.max_model_len`` …)."""
        cfg = self._config_entry
        if cfg is None:
            raise RuntimeError(f"{self.item.nodeid}: not a scenario of the matrix: mark it @llmgate.scenario() "
                               f"(or take the llmgate_config fixture) so that it runs once per matrix entry")
        return cfg

    @property
    def server(self) -> ServerHandle:
        """The entry's running server (booted on first use, once per session; ``base_url``,
        ``model_name``, ``engine``, ``tokenizer_path`` …)."""
        self.entry
        if self._fixture_request is None:
            raise RuntimeError("this Gate was made without its fixture request")
        return self._fixture_request.getfixturevalue("llmgate_server")

    @property
    def prompts(self) -> PromptMaker:
        """Exact-length prompts in the server's tokenizer: ``prompts.text(n_tokens, seed)``."""
        return self.session.prompts(self.server)

    @property
    def settings(self) -> Settings:
        """The run's settings: ``repeats``, ``warmup``, ``concurrency``, ``request_timeout`` …"""
        return self.session.settings

    @property
    def scenarios(self) -> Scenarios:
        """The matrix's ``[scenarios]`` table (workload sizes, steady-state windows)."""
        return self.session.matrix.scenarios

    @property
    def matrix(self) -> Matrix:
        """The loaded matrix: every entry (``entries``, ``by_id(id)``), ``models`` and ``scenarios``."""
        return self.session.matrix

    def steady(self, prompt_tokens: int, output_tokens: int, concurrency: int = 1, *, rate: float | None = None,
               seed: str | None = None, label: str | None = None, output_spread: float | None = None,
               window_requests: int | None = None, window_max_s: float | None = None,
               **fields: Any) -> SteadyResult:
        """A steady-state run: ``concurrency`` streams always in flight (or Poisson arrivals at
        ``rate`` requests/s), fresh prompts of ``prompt_tokens`` tokens, exactly ``output_tokens``
        generated — or, in a closed loop at c > 1, each request exactly its own length drawn from
        ``output_tokens`` × (1 ± ``output_spread``) (default ``[scenarios] output_spread``; every
        sample's ``requested_output_tokens`` says it); a warm-up until throughput stops rising, then
        a window sized by ``[scenarios]`` (or by ``window_requests``, at most ``window_max_s``).  Every
        request is accounted for (a failed one fails the test)."""
        cfg, h = self.entry, self.server
        label = label or (f"rate {rate:g}" if rate else f"c={concurrency}")
        sizes: dict[str, Any] = self.scenarios.steady(cfg.device, concurrency if rate is None else max(2, concurrency))
        if window_requests is not None:         # a window sized by its requests (a latency percentile's sample)
            sizes.update(min_requests=window_requests, min_s=min(sizes["min_s"], 1.0))
        if window_max_s is not None:
            sizes.update(max_s=max(window_max_s, sizes["min_s"]))
        window = workloads.Steady(**sizes)
        if output_spread is None:
            output_spread = self.scenarios.output_spread if rate is None and concurrency > 1 else 0.0
        result = workloads.steady(h, workloads.spec(h, prompt_tokens, output_tokens, seed or self._seed(label), output_spread,
                                          **fields),
                             concurrency, window, self.settings.request_timeout, rate=rate, label=label)
        self.requests(result)
        bad = [x for x in result.ok if x.completion_tokens != x.requested_output_tokens]
        assert not bad, (f"{label}: {len(bad)} request(s) generated another length than asked, e.g. "
                         f"{bad[0].completion_tokens} tokens for {bad[0].requested_output_tokens}")
        for n in result.notes:
            self.note(f"{label} window: {n}")
        return result

    def sequential(self, prompt_tokens: int, output_tokens: int, requests: int | None = None, *,
                   seed: str | None = None, server: ServerHandle | None = None,
                   prompts: PromptMaker | None = None) -> LoadResult:
        """``settings.warmup`` discarded requests, then ``requests`` (default ``settings.repeats``)
        one at a time, each with a fresh prompt; accounted for like ``steady``.  ``server`` (with
        its ``prompts``) measures a server the scenario booted itself instead of the entry's."""
        st = self.settings
        if server is not None and prompts is None:
            raise ValueError("sequential(server=…) needs that server's prompts (the prompts= it was given)")
        result = workloads.decode_run(server or self.server, prompts or self.prompts, prompt_tokens, output_tokens,
                                 st.repeats if requests is None else requests, st.warmup, st.request_timeout,
                                 seed or self._seed("sequential"))
        self.requests(result)
        return result

    def request(self, prompt: str, max_tokens: int, *, prompt_tokens: int | None = None,
                fixed_length: bool = True, **fields: Any) -> Request:
        """One streaming /v1/completions request (greedy; exactly ``max_tokens`` generated unless
        ``fixed_length=False``); extra body fields as keywords."""
        return workloads.completion(self.server, prompt, max_tokens, fixed_length=fixed_length,
                               prompt_tokens=prompt_tokens, **fields)

    def fresh_requests(self, n: int, prompt_tokens: int, output_tokens: int, seed: str) -> list[Request]:
        """``n`` requests with distinct prompts of exactly ``prompt_tokens`` tokens (seeds
        ``{seed}:0`` …), each generating exactly ``output_tokens``."""
        return workloads.fixed_requests(self.server, self.prompts, n, prompt_tokens, output_tokens, seed)

    def run(self, requests: list[Request], concurrency: int = 1, *, label: str = "",
            account: bool = True) -> LoadResult:
        """Send ``requests`` with at most ``concurrency`` in flight.  With ``account`` (the default)
        every request is accounted for: a failed one fails the test; ``account=False`` is for
        warm-ups and for scenarios that judge failures themselves."""
        result = workloads.run(self.server, requests, concurrency, self.settings.request_timeout, label=label)
        if account:
            self.requests(result)
        return result

    def repeat_values(self, result: SteadyResult, figure: str) -> list[float]:
        """One value per repeat of a measurement: the window (or the requests) cut into
        ``settings.repeats`` parts, ``figure`` of each (``decode_tok_s``, ``ttft_p50``, ``ttft_p95``,
        ``itl_p95``, ``tpot_median``, ``e2e_p50``, ``aggregate_tok_s`` …)."""
        return stats.values_of(stats.repeat_metrics(result, self.settings.repeats), figure)

    def engine_parts(self, result: SteadyResult) -> dict[str, list[float]]:
        """Per repeat of a steady window (the window cut into ``settings.repeats`` parts, as
        ``repeat_values`` cuts it): the engine's own per-request timers as window means (seconds;
        ``meters.ENGINE_PARTS`` the engine keeps), from its /metrics read through the run, and
        ``frontend``: the client's mean TTFT minus the engine's over the requests whose first token
        came in the same interval.  {} for an engine without those timers."""
        poller = result.engine_readings
        if poller is None or not poller.texts:
            return {}
        a, b = result.window
        n = self.settings.repeats
        edges = [a + (b - a) * i / n for i in range(n + 1)]
        engine = self.server.engine
        out: dict[str, list[float]] = {}
        for d in poller.deltas(edges):
            if d is None:
                continue
            t0, t1, delta = d
            timers = engine.engine_timers(delta)
            for part, v in timers.items():
                out.setdefault(part, []).append(v)
            firsts = [s.ttft for s in result.ok if s.ttft is not None and t0 <= s.start + s.ttft < t1]
            if "ttft" in timers and firsts:
                out.setdefault("frontend", []).append(sum(firsts) / len(firsts) - timers["ttft"])
        return out

    def record_engine_parts(self, result: SteadyResult, variant: str | None = None) -> dict[str, Verdict]:
        """Record the engine's own timers and the front end's share of TTFT (``engine_parts``) as
        metrics of this test (``engine_ttft``, ``engine_queue``, ``engine_prefill``, ``engine_tpot``,
        ``engine_e2e``, ``frontend_ttft``); their verdicts by part, to pass as a TTFT's ``parts``."""
        out = {}
        for part, values in self.engine_parts(result).items():
            metric = metrics.ENGINE_PART_METRICS.get(part)
            if metric is None or not values:
                continue
            v = self.record(metric, values, variant)
            if v is not None:
                out[part] = v
        return out

    def whole(self, result: SteadyResult) -> dict[str, float]:
        """The figures of a whole steady-state window (not cut into repeats)."""
        return stats.window_metrics(result)

    def scrape(self) -> meters.Scrape:
        """The engine's own /metrics now (``delta(before, after)`` gives what changed)."""
        h = self.server
        return meters.scrape(self._http(), h.base_url, h.engine.metrics_path, h.auth_headers())

    @staticmethod
    def delta(before: meters.Scrape, after: meters.Scrape) -> meters.Delta:
        return meters.Delta(before, after)

    def set_regime(self, regime: dict[str, Any]) -> None:
        """What bounds this entry (``hardware.classify``): shown beside every verdict of the entry."""
        self.session.regimes[self.entry.id] = regime

    def gpu_sampler(self) -> hardware.GpuSampler:
        """A context manager sampling the GPU (memory, utilisation, clocks) while a measurement
        runs; a no-op on a CPU entry."""
        return hardware.GpuSampler(enabled=self.entry.device == "gpu")

    @staticmethod
    def client_pids() -> list[int]:
        """The client processes measuring (beside this one) while a run is in flight."""
        return workloads.client_pids()

    @staticmethod
    def client_workers(concurrency: int) -> int:
        """How many client processes a load at ``concurrency`` is dealt to."""
        return workloads.client_workers(concurrency)

    # -- scenarios that boot servers of their own (A/B mode, the max_model_len probe) -------------
    # They take the ``llmgate_exclusive`` fixture: they run after every other test, with the
    # session's servers stopped.
    def log_dir(self, name: str) -> Path:
        """The folder for the logs of servers the scenario boots itself (``.llmgate/logs/<name>``)."""
        return self.session.out_dir / "logs" / name

    def boot_progress(self, cid: str, elapsed: float, last_line: str) -> None:
        """What a booting server reports (``Server(progress=…)``): the live ``booting …`` line."""
        self.session.progress(cid, elapsed, last_line)

    def say(self, line: str) -> None:
        """A line on the terminal now (not only in the summary)."""
        self.session.say(line)

    def add_boots(self, label: str, rows: list[dict[str, Any]]) -> None:
        """Rows for the session's boots table, under ``label`` (``boot``, ``engine``, ``version``,
        ``startup_s``, ``log``)."""
        self.session.boots.setdefault(label, []).extend(rows)

    def min_effect(self, metric: metrics.Metric, key: str) -> float:
        """The minimum effect that counts for ``key`` (``metric.name`` or ``name@variant``) in this
        test: ``--llmgate-min-effect``, then the test's ``@pytest.mark.llmgate(min_effect=…)``, then
        the entry's ``min_effect``, then the metric's own."""
        return self.session.min_effect(metric, key, self._config_entry, self.item)

    def entry_memo(self, name: str, compute: Callable[[], Any]) -> Any:
        """A figure of this entry worked out once a session and reused by its later boots (in A/B mode:
        on side A's first boot, so that both sides get the same, e.g. the arrival rates of a latency
        scenario): ``compute()`` the first time ``name`` is asked for, the same value after."""
        cfg = self.entry
        memo = self.session.lever_results.setdefault(("memo", cfg.id), {})
        if name not in memo:
            memo[name] = compute()
        return memo[name]

    def acceptance_meaningful(self) -> str | None:
        """None when this entry's speculative acceptance is a figure to record and compare (a
        context draft such as n-gram, or a trained draft on trained weights); else why not."""
        return matrix_mod.spec_acceptance_meaningful(self.entry, self.matrix.models)

    def acceptance_caveat(self) -> str | None:
        """What this entry's (meaningful) speculative acceptance still does not say, e.g. that n-gram
        acceptance on random weights is an upper bound; None when nothing."""
        return matrix_mod.spec_acceptance_caveat(self.entry, self.matrix.models)

    def lookup_workload(self) -> bool:
        """Whether this entry measures the speculative scenario's prompt-lookup workload
        (``lookup_requests``): its drafts come from the context, or it is the reference of an entry
        whose drafts do; and its engine can restrict generation to the prompt's words."""
        cfg = self._config_entry
        if cfg is None or self.server.engine.allowed_tokens_fields([0]) is None:
            return False
        return matrix_mod.drafts_from_context(cfg) or any(
            e.reference == cfg.id and matrix_mod.drafts_from_context(e) for e in self.matrix.entries)

    def lookup_requests(self, n: int, prompt_tokens: int, output_tokens: int, seed: str) -> list[Request]:
        """``n`` requests whose prompts (``prompts.lookup``, seeds ``{seed}:0`` …) hold every pair of
        a few words, each generating exactly ``output_tokens`` of those words only: an n-gram
        drafter finds its match at every step, whatever the model emits."""
        out = []
        for i in range(n):
            text, ids = self.prompts.lookup(prompt_tokens, f"{seed}:{i}")
            fields = self.server.engine.allowed_tokens_fields(ids)
            if fields is None:
                raise ValueError(f"{self.server.engine.name} cannot restrict generation to a set of tokens")
            out.append(self.request(text, output_tokens, prompt_tokens=prompt_tokens, **fields))
        return out

    def _http(self):
        if getattr(self, "_client", None) is None:
            import httpx
            self._client = httpx.Client(timeout=60)
        return self._client

    def _seed(self, label: str) -> str:
        return f"{getattr(self.item, 'originalname', self.item.name)}:{label}"

    def _claim(self, key: str) -> None:
        """Two tests may not store under one baseline key (their scenario names would collide)."""
        full = f"{baseline_store.stored_key(self.item)}::{key}"
        other = self.session.stored_keys.setdefault(full, self.item.nodeid)
        if other != self.item.nodeid and baseline_store.base_nodeid(other) != baseline_store.base_nodeid(self.item.nodeid):
            raise RuntimeError(f"{self.item.nodeid} and {other} both record {full!r}: baseline keys are "
                               f"scenario + entry + metric, so two scenarios need different function names")

    @property
    def _config_entry(self) -> ServerConfig | None:
        callspec = getattr(self.item, "callspec", None)
        return callspec.params.get("llmgate_config") if callspec else None

    def provenance(self) -> dict[str, Any]:
        """What every stored result carries: configuration, engine, model, device, settings, memory,
        and what ``pytest_llmgate_provenance`` hooks add."""
        out = self._provenance()
        self.item.config.hook.pytest_llmgate_provenance(item=self.item, entry=self._config_entry, provenance=out)
        return out

    def _provenance(self) -> dict[str, Any]:
        st = self.session.settings
        cfg = self._config_entry
        out: dict[str, Any] = {"device": hardware.describe(), "machine": hardware.machine_id(cfg.device if cfg else "cpu"),
                               "settings": {"repeats": st.repeats, "warmup": st.warmup,
                                            "request_timeout_s": st.request_timeout}}
        if cfg is None:
            return out
        out["config"] = cfg.describe()
        server = self.session.servers.get(cfg.id)
        if server is not None and server.handle is not None:
            h = server.handle
            out.update(engine=dataclasses.asdict(h.engine_info), model_path=str(h.model_path),
                       model_hash=h.model_hash, startup_s=h.startup_s, boot=h.boot_number,
                       peak_rss_bytes=h.memory.peak(), engine_log=h.engine.read_log(h.log_tail(3000)))
        return out

    # -- lever scenarios: figures shared between an entry and its reference ----------------
    def require_lever(self, lever: str) -> ServerConfig:
        """This test's matrix entry, which must take part in ``lever`` (tests carry
        ``@pytest.mark.lever(name)``, so other entries were skipped before booting)."""
        cfg = self._config_entry
        if cfg is None or lever not in cfg.levers:
            raise RuntimeError(f"require_lever({lever!r}): the test needs @pytest.mark.lever({lever!r}) and a matrix "
                               f"entry that lists it")
        return cfg

    def remember(self, lever: str, figures: dict[str, Any]) -> None:
        cfg = self._config_entry
        assert cfg is not None
        self.session.lever_results[(lever, cfg.id)] = figures

    def reference(self, lever: str) -> tuple[ServerConfig | None, dict[str, Any] | None]:
        """The reference entry of this test's entry and its figures for ``lever`` in this session."""
        cfg = self._config_entry
        if cfg is None or cfg.reference is None:
            return None, None
        ref = self.session.matrix.by_id(cfg.reference)
        return ref, self.session.lever_results.get((lever, ref.id))

    def versus_reference_engine(self, values: list[float], variant: str) -> Verdict | None:
        """The seed's engine comparison as a same-session ratio: this boot's aggregate tok/s ``values``
        (``variant``: c8) ÷ the median over the boots of this entry's reference, where the reference is
        another engine measured earlier in this session (same model and budget: the matrix says so).
        Every entry's values are kept for the entries that take it as their reference."""
        cfg = self._config_entry
        if cfg is None:
            return None
        mb = self._measurement_boot()
        kept = self.session.lever_results.setdefault(("engines", cfg.id), {}).setdefault(variant, {})
        kept[mb[0] if mb else 1] = [float(v) for v in values]
        if cfg.reference is None:
            return None
        ref = self.session.matrix.by_id(cfg.reference)
        if ref.engine == cfg.engine:
            return None
        theirs = self.session.lever_results.get(("engines", ref.id), {}).get(variant)
        if not theirs:
            self.note(f"aggregate tok/s @{variant} ÷ {ref.id}'s ({ref.engine}): not measured, as {ref.id} was not "
                      f"measured at {variant} earlier in this session")
            return None
        base = median([median(v) for v in theirs.values()])
        return self.record(metrics.ENGINE_RATIO, [v / base for v in values], variant, reference=ref.id,
                           reference_engine=ref.engine, reference_boot_medians=[median(v) for v in theirs.values()])

    def _fingerprint(self) -> dict[str, Any]:
        cfg = self._config_entry
        server = self.session.servers.get(cfg.id) if cfg else None
        handle = server.handle if server is not None else None
        model_hash: str | None
        engine: dict[str, Any] | None
        if handle is not None:
            model_hash, engine = handle.model_hash, dataclasses.asdict(handle.engine_info)
        else:
            model_hash = self.session.model_hash(cfg) if cfg else None
            engine = {"engine": cfg.engine} if cfg else None
        return baseline_store.fingerprint(cfg.describe() if cfg else None, model_hash, hardware.describe(), engine,
                                          self.session.matrix.scenarios.workload(cfg.device if cfg else None))

    def _measurement_boot(self) -> tuple[int, int] | None:
        """(k, K): this test measures boot k of its entry's K (tests marked ``boots``); None otherwise."""
        cfg = self._config_entry
        callspec = getattr(self.item, "callspec", None)
        k = callspec.params.get("llmgate_boot") if callspec else None
        if cfg is None or k is None:
            return None
        return int(k), self.session.measurement_boots(cfg)

    def record(self, metric: metrics.Metric, values: list[float], variant: str | None = None,
               raw: dict[str, Any] | None = None, *, parts: dict[str, Verdict] | None = None,
               sampling: float | None = None, requests: int | None = None, **info: Any) -> Verdict | None:
        """Record ``values``: this boot's repeat-level measurements in the metric's natural unit.
        ``parts`` (a TTFT's: ``record_engine_parts``' verdicts) adds where the time went to the verdict.
        ``sampling`` (with ``requests``): where this boot's value is one statistic over many requests
        (``values`` of one), the log-scale variance of that statistic from resampling them
        (``stats.sampling_log_var``): the sampling part of its noise, kept apart from the boot part.

        In a test marked ``boots`` whose entry spans K boots, boots 1 … K−1 only keep their values
        (None is returned); on boot K all K go into the baseline store as one entry and are judged
        against the stored baseline's boots, if one is compared with and its fingerprint matches.  In
        A/B mode (``--llmgate-ab``) the boots alternate between the two sides, and on the last one side
        B's boots are judged against side A's of this session (a same-session comparison)."""
        values = [float(v) for v in values]
        if not values:
            raise ValueError(f"{metric.name}: no values to record")
        metrics.register(metric)                 # a team's own Metric: known to options and reports from here on
        key = metric.name + (f"@{variant}" if variant else "")
        self._claim(key)
        cfg = self._config_entry
        test = getattr(self.item, "originalname", self.item.name)
        boots, mb = [values], self._measurement_boot()
        samp: dict[int, tuple[float | None, float | None]] = {1: (sampling, requests)}
        if mb is not None and cfg is not None:
            k, n_boots = mb
            slot = (cfg.id, test, key)
            self.session.boot_values.setdefault(slot, {})[k] = values
            self.session.boot_raw.setdefault(slot, {})[k] = raw
            self.session.boot_sampling.setdefault(slot, {})[k] = (sampling, requests)
            if k < n_boots:
                side = self.session.side_of(k)
                self.session.say(f"llmgate: {cfg.id} {key}: boot {k} of {n_boots}"
                                 + (f" (side {side[0]}, its boot {side[2]})" if side else "")
                                 + f": {metric.display(median(values))} (median of {len(values)}"
                                 + (f" values; sampling error {math.sqrt(sampling):.2%} over {requests} requests"
                                    if sampling is not None and requests else "")
                                 + f"); judged after boot {n_boots}")
                return None
            done = self.session.boot_values[slot]
            boots = [done[i] for i in sorted(done)]
            samp = dict(self.session.boot_sampling[slot])
            if any(self.session.boot_raw[slot].get(i) is not None for i in done):
                raw = {"boots": [self.session.boot_raw[slot].get(i) for i in sorted(done)]}
        if mb is not None and cfg is not None and self.session.settings.ab:
            return self._record_ab(metric, key, cfg, test, mb[1], raw, samp, parts, info)
        fp = self._fingerprint()
        extra = {**self.provenance(), **info, "fingerprint": fp}
        if raw is not None:
            extra["raw"] = raw
        base = baseline_store.baseline(self.item.config, baseline_store.stored_key(self.item), key, fp,
                                       self.session.settings.allow_mismatch)
        base_boots = baseline_store.baseline_boots(base[1]) if base else None
        notes, refused = [], []
        offset = None
        missing = None
        if base is None:
            missing = baseline_store.why_no_baseline(self.item.config, baseline_store.stored_key(self.item), key, fp)
            if missing:
                notes.append(missing.note)
                self.session.note_once(f"{cfg.id if cfg else self.item.name}: {missing.note}")
        if base is not None:
            base_info = base[1]["extra_info"][baseline_store.EXTRA_KEY]
            base_fp = base_info.get("fingerprint") or {}
            refused = baseline_store.fingerprint_mismatch(base_fp, fp)
            change = baseline_store.engine_change(base_fp, fp)
            if change:
                notes.append(change)
            if base_info.get("schema", baseline_store.SCHEMA_VERSION) < 3:
                notes.append("baseline of schema 2: its values read as one boot without a noise model "
                             "(re-record it with --benchmark-save and --llmgate-boots)")
            if refused and self.session.settings.allow_mismatch:
                notes.append("NOT COMPARABLE, compared anyway (--llmgate-allow-mismatch): " + "; ".join(refused))
                self.item.warn(pytest.PytestWarning(f"{key}: compared with a baseline from another setup: "
                                                    + "; ".join(refused)))
                refused = []
            if base_info.get("machine") != extra.get("machine"):
                # another machine (or one that was not recorded): its offset is part of the difference
                offset = noise_prior.machine_offset(cfg.device if cfg else None, metric)
        prior = baseline_store.baseline_noise(base[1]) if base is not None and not refused else None
        order = sorted(samp)
        verdict = judge_boots(metric, key, cfg.id if cfg else self.item.name, boots, None if refused else base_boots,
                              self.session.min_effect(metric, key, cfg, self.item), self.session.settings.alpha,
                              base[0] if base else None, prior=prior,
                              assumed=noise_prior.assumed(cfg.device if cfg else None, metric),
                              now_sampling=[samp[i][0] for i in order],
                              now_requests=_requests(samp, order),
                              offset=offset, comparison="stored" if base is not None and not refused else "")
        if missing:
            verdict = dataclasses.replace(verdict, no_baseline=missing.reason)
        noise = Noise.of(boots, [samp[i][0] for i in order], _requests(samp, order)).pooled(prior)
        self._stored.append(baseline_store.store(self.item, metric, key, boots, extra, noise.as_dict()))
        return self._finish_verdict(verdict, key, test, notes, parts, raw, base, refused)

    def _finish_verdict(self, verdict: Verdict, key: str, test: str, notes: list[str],
                        parts: dict[str, Verdict] | None, raw: dict[str, Any] | None, base: Any,
                        refused: list[str]) -> Verdict:
        cfg = self._config_entry
        regime = self.session.regimes.get(cfg.id, {}).get("regime", "") if cfg else ""
        where = attribution(verdict, parts) if parts else None
        if where:
            notes.append(where)
        verdict = dataclasses.replace(verdict, test=test, note="; ".join(n for n in notes if n), regime=regime)
        base_raw = (baseline_store.unpack_raw(base[1]["extra_info"][baseline_store.EXTRA_KEY].get("raw"))
                    if base is not None else None)
        if raw is not None or base_raw is not None:
            self.session.raw[(verdict.config_id, verdict.test, key)] = {"now": raw, "baseline": base_raw}
        if refused:
            verdict = dataclasses.replace(verdict, status=REFUSED, note="; ".join(refused))
        self.verdicts.append(verdict)
        self.session.verdicts.append(verdict)
        return verdict

    def _record_ab(self, metric: metrics.Metric, key: str, cfg: ServerConfig, test: str, n_boots: int,
                   raw: dict[str, Any] | None, samp: dict[int, tuple[float | None, float | None]],
                   parts: dict[str, Verdict] | None, info: dict[str, Any]) -> Verdict:
        """A/B mode, on the entry's last measurement boot: side B's boots judged against side A's, both
        measured in this session, alternating (a same-session comparison: the machine, its offset and
        its drift are the same on both sides).  B's boots are what a --benchmark-save stores; a stored
        baseline, when one is compared with, is only set beside side A (what the machine's offset is)."""
        slot = (cfg.id, test, key)
        done = self.session.boot_values[slot]
        side = {k: s[0] for k in range(1, n_boots + 1) if (s := self.session.side_of(k)) is not None}
        a_name, b_name = self.session.settings.ab[0][0], self.session.settings.ab[1][0]
        a_ks = [k for k in sorted(done) if side.get(k) == a_name]
        b_ks = [k for k in sorted(done) if side.get(k) == b_name]
        a_boots, b_boots = [done[k] for k in a_ks], [done[k] for k in b_ks]
        order = "".join(side[k] if len(side[k]) == 1 else f"{side[k]} " for k in sorted(done) if k in side)
        verdict = judge_boots(metric, key, cfg.id, b_boots, a_boots, self.session.min_effect(metric, key, cfg, self.item),
                              self.session.settings.alpha, f"side {a_name} of this session",
                              assumed=noise_prior.assumed(cfg.device, metric),
                              now_sampling=[samp[k][0] for k in b_ks],
                              now_requests=_requests(samp, b_ks),
                              base_sampling=[samp[k][0] for k in a_ks],
                              base_requests=_requests(samp, a_ks),
                              comparison="same session")
        verdict = dataclasses.replace(verdict, baseline_in_run=True)
        notes = [f"same session: {len(a_boots)} boot(s) of {a_name} vs {len(b_boots)} of {b_name}, order {order.strip()}"]
        fp = self._fingerprint()
        extra = {**self.provenance(), **info, "fingerprint": fp,
                 "ab": {"baseline_side": a_name, "candidate_side": b_name, "order": order.strip(),
                        "baseline_side_boot_values": [median(b) for b in a_boots]}}
        if raw is not None:
            extra["raw"] = raw
        base = baseline_store.baseline(self.item.config, baseline_store.stored_key(self.item), key, fp,
                                       self.session.settings.allow_mismatch)
        if base is not None and not baseline_store.fingerprint_mismatch(
                base[1]["extra_info"][baseline_store.EXTRA_KEY].get("fingerprint") or {}, fp):
            stored = baseline_store.baseline_boots(base[1]) or []
            if stored and a_boots:
                offset = median([median(b) for b in a_boots]) / median([median(b) for b in stored]) - 1.0
                notes.append(f"side {a_name} against the stored {base[0]}: {offset:+.1%} (this machine's offset and "
                             f"drift since; not judged: the verdict rests on this session's side {a_name})")
        noise = Noise.of(b_boots, [samp[k][0] for k in b_ks], _requests(samp, b_ks)).pooled(
            Noise.of(a_boots, [samp[k][0] for k in a_ks], _requests(samp, a_ks)))     # both sides' boots: one machine
        self._stored.append(baseline_store.store(self.item, metric, key, b_boots, extra, noise.as_dict()))
        return self._finish_verdict(verdict, key, test, notes, parts, raw, None, [])

    def requests(self, *results: LoadResult) -> None:
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
            cfg = self._config_entry
            server = self.session.servers.get(cfg.id) if cfg else None
            h = server.handle if server is not None else None
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
        cfg = self._config_entry
        v = judge(metrics.FAILED_SHARE, metrics.FAILED_SHARE.name, cfg.id if cfg else self.item.name,
                  [failed / total], None)
        # no failure: "unchanged" where the test's figures were compared with a baseline, "no
        # baseline" where none of them was (a save run), as every other row of the test says
        others = [o.status for o in self.verdicts if o.metric.name != metrics.FAILED_SHARE.name]
        unfailed = NO_BASELINE if others and all(s == NO_BASELINE for s in others) else UNCHANGED
        v = dataclasses.replace(v, test=getattr(self.item, "originalname", self.item.name),
                                status=REGRESSED if failed else unfailed, note=f"{failed} of {total} requests failed")
        self.verdicts.append(v)
        self.session.verdicts.append(v)
        self._request_counts = [0, 0]
        return v

    def attach(self, verdicts: list[Verdict], confirm: bool = False) -> None:
        """Verdicts judged elsewhere (A/B mode) become this test's: it fails if one regressed.
        ``confirm=False``: no confirmation run (an A/B comparison controls drift by design)."""
        test = getattr(self.item, "originalname", self.item.name)
        for v in verdicts:
            v = dataclasses.replace(v, test=test)
            self.verdicts.append(v)
            self.session.verdicts.append(v)
        self._confirm = self._confirm and confirm

    def baseline_info(self, metric: metrics.Metric, variant: str | None = None) -> dict[str, Any] | None:
        """What the compared baseline stored with a metric (its extra_info), when it is comparable."""
        key = metric.name + (f"@{variant}" if variant else "")
        base = baseline_store.baseline(self.item.config, baseline_store.stored_key(self.item), key, self._fingerprint(),
                                       self.session.settings.allow_mismatch)
        if base is None:
            return None
        info = base[1]["extra_info"][baseline_store.EXTRA_KEY]
        if (baseline_store.fingerprint_mismatch(info.get("fingerprint") or {}, self._fingerprint())
                and not self.session.settings.allow_mismatch):
            return None
        return info

    def note(self, text: str) -> None:
        """Something the reader of the results must know (an unsupported figure…): shown in the summary."""
        cfg = self._config_entry
        self.notes.append(text)
        self.session.notes.append(f"{cfg.id if cfg else self.item.name}: {text}")

    @property
    def _regressions(self) -> list[Verdict]:
        return [v for v in self.verdicts if v.failed]

    @property
    def _refusals(self) -> list[Verdict]:
        return [v for v in self.verdicts if v.status == REFUSED]

    def _start_confirmation(self) -> list[Verdict]:
        """Set the first measurement aside (kept in the report, dropped from storage) before re-measuring."""
        first = list(self.verdicts)
        baseline_store.drop_stored(self.item.config, self._stored)
        self._stored.clear()
        for v in first:
            if v in self.session.verdicts:
                self.session.verdicts.remove(v)
        self.verdicts.clear()
        self._first_measurement = first
        return first
