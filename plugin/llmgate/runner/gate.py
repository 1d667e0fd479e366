"""The ``gate`` fixture's object: what a scenario is given (the matrix entry, its running
server, exact-length prompts, the run's settings and the matrix), the ways to run a workload
against the server (each accounting for its requests), ``record(metric, values)``, which stores
the values as the baseline store's entry and judges them against the compared baseline
(``runner/recorder.py``), what that baseline stored (``baseline_info``), the engine's own
figures (``scrape``, ``record_engine_parts``), ``note``; and ``levers``, the figures shared
between entries (``llmgate.levers.shared``).  What needs nothing of the test (building requests,
a result's figures) is ``llmgate.requests`` and ``llmgate.figures``.

This is llmgate's public API for scenarios (docs/api.md); the packaged scenarios
(``llmgate.scenarios``) are written with it."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

import pytest

from llmgate.load import steady as steady_state, workloads
from llmgate.core import metrics
from llmgate.engines import meters
from llmgate.levers.shared import EntryLevers
from llmgate.load.client import sync_client
from llmgate.load.workloads import PromptMaker, Request
from llmgate.config.matrix import Matrix, ServerConfig
from llmgate.load.samples import LoadResult, SteadyResult
from llmgate.process.meters import MachineLoad
from llmgate.process.server import ServerHandle
from llmgate.runner.duet import DuetSide, side_turn
from llmgate.runner import figures
from llmgate.runner.recorder import Recorder
from llmgate.runner.settings import Settings
from llmgate.analysis.verdict import Verdict

if TYPE_CHECKING:
    from llmgate.runner.run import GateRun

RECORDER_KEY = pytest.StashKey[Recorder]()


class Gate:
    """What a scenario is given, how it runs a workload, and how it records the figures."""

    def __init__(self, item: pytest.Item, gate_run: GateRun, request: pytest.FixtureRequest | None = None,
                 side: DuetSide | None = None):
        self._item, self._gate_run, self._fixture_request = item, gate_run, request
        # a duet's side (runner/duet.py): this gate measures that side's server, taking turns with the other
        self._side = side
        self._recorder = Recorder(item, gate_run, side)
        if side is None:
            item.stash[RECORDER_KEY] = self._recorder   # the confirmation policy's, after the test's call
        boot = self._recorder.boot
        self._http: Any = None                  # scrape's client, one per test
        self._timers_path_ok = True             # the engine's timers-only /metrics answered (or is not tried yet)
        self.levers = EntryLevers(gate_run.figures, self._recorder.entry, lambda: gate_run.matrix,
                                  self._recorder.record, self._recorder.note, int(boot) if boot is not None else None,
                                  waiting=side.parked if side is not None else None)
        """The figures shared between this entry and the entries that take it as their reference
        (``llmgate.levers.shared``)."""

    # -- the public API: what a scenario is given ----------------------------------------------
    @property
    def entry(self) -> ServerConfig:
        """The matrix entry this test measures (``entry.id``, ``entry.device``, ``entry.max_model_len`` …)."""
        cfg = self._recorder.entry
        if cfg is None:
            raise RuntimeError(f"{self._item.nodeid}: not a scenario of the matrix: mark it @llmgate.scenario() "
                               f"(or take the llmgate_config fixture) so that it runs once per matrix entry")
        return cfg

    @property
    def server(self) -> ServerHandle:
        """The entry's running server (booted on first use, once per run; ``base_url``,
        ``model_name``, ``engine``, ``tokenizer_path`` …)."""
        self.entry
        if self._side is not None and self._side.handle is not None:
            return self._side.handle
        if self._fixture_request is None:
            raise RuntimeError("this Gate was made without its fixture request")
        return self._fixture_request.getfixturevalue("llmgate_server")

    @property
    def side(self) -> str | None:
        """In a duet (``--llmgate-ab``, both sides resident), the side this gate measures ("A", "B", as
        named); None otherwise."""
        return self._side.name if self._side is not None else None

    @property
    def prompts(self) -> PromptMaker:
        """Exact-length prompts in the server's tokenizer: ``prompts.text(n_tokens, seed)``."""
        return self._gate_run.pool.prompts(self.server)

    @property
    def settings(self) -> Settings:
        """The run's settings: ``repeats``, ``warmup``, ``concurrency``, ``request_timeout`` …"""
        return self._gate_run.settings

    @property
    def matrix(self) -> Matrix:
        """The loaded matrix: every entry (``entries``, ``by_id(id)``), ``models`` and ``scenarios``
        (the ``[scenarios]`` table: workload sizes, steady-state windows)."""
        return self._gate_run.matrix

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
        sizes: dict[str, Any] = self.matrix.scenarios.steady(cfg.device, concurrency if rate is None else max(2, concurrency))
        if window_requests is not None:         # a window sized by its requests (a latency percentile's sample)
            sizes.update(min_requests=window_requests, min_s=min(sizes["min_s"], 1.0))
        if window_max_s is not None:
            sizes.update(max_s=max(window_max_s, sizes["min_s"]))
        if self._side is not None:
            # a duet: the test runs in rounds, in turns with the other side's, each round's window a share of
            # the whole or a whole one (``[scenarios] duet_split_window``)
            sizes = self._side.round_window(sizes, self.matrix.scenarios.duet_split(cfg.device))
        window = steady_state.Steady(**sizes)
        if output_spread is None:
            output_spread = self.matrix.scenarios.output_spread if rate is None and concurrency > 1 else 0.0
        spec = steady_state.spec(h, prompt_tokens, output_tokens, seed or self._seed(label), output_spread, **fields)
        with self._turn(), self.watch(label) as watched:     # a duet: the whole window is one turn
            result = steady_state.steady(h, spec, concurrency, window, self.settings.request_timeout, rate=rate,
                                         label=label)
        self._recorder.account(result)
        # the figures recorded from here on come from this window: whether the machine was busy goes with them
        self._recorder.disturbed = "; ".join(watched)
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
        with self.watch("sequential requests", server) as watched:
            result = workloads.decode_run(server or self.server, prompts or self.prompts, prompt_tokens, output_tokens,
                                          st.repeats if requests is None else requests, st.warmup, st.request_timeout,
                                          seed or self._seed("sequential"),
                                          turn=side_turn(self._side) if server is None else None)
        self._recorder.account(result)
        self._recorder.disturbed = "; ".join(watched)
        return result

    def run(self, requests: list[Request], concurrency: int = 1, *, label: str = "",
            account: bool = True) -> LoadResult:
        """Send ``requests`` with at most ``concurrency`` in flight.  With ``account`` (the default)
        every request is accounted for: a failed one fails the test; ``account=False`` is for
        warm-ups and for scenarios that judge failures themselves."""
        if self._side is not None and concurrency == 1:        # a duet: request by request, in turns
            result = workloads.run(self.server, requests, 1, self.settings.request_timeout, label=label,
                                   turn=side_turn(self._side))
        else:
            with self._turn():
                result = workloads.run(self.server, requests, concurrency, self.settings.request_timeout, label=label)
        if account:
            self._recorder.account(result)
            self._recorder.disturbed = ""         # not watched: a loop of runs is, as a whole (``watch``)
        return result

    def record(self, metric: metrics.Metric, values: list[float], variant: str | None = None,
               raw: dict[str, Any] | None = None, *, parts: dict[str, Verdict] | None = None,
               sampling: float | None = None, requests: int | None = None, regime: dict[str, Any] | None = None,
               **info: Any) -> Verdict | None:
        """Record ``values``: this boot's repeat-level measurements in the metric's natural unit.
        ``parts`` (a TTFT's: ``record_engine_parts``' verdicts) adds where the time went to the verdict.
        ``sampling`` (with ``requests``): where this boot's value is one statistic over many requests
        (``values`` of one), the log-scale variance of that statistic from resampling them
        (``stats.sampling_log_var``): the sampling part of its noise, kept apart from the boot part.

        In a test marked ``boots`` whose entry spans K boots, boots 1 … K−1 only keep their values
        (None is returned); on boot K all K go into the baseline store as one entry and are judged
        against the stored baseline's boots, if one is compared with and its fingerprint matches.  In
        A/B mode (``--llmgate-ab``) the boots alternate between the two sides, and on the last one side
        B's boots are judged against side A's of this run (a same-run comparison).

        ``regime`` (``llmgate.device.classify``'s): what bounds this entry, shown beside every verdict of
        the entry from here on, and stored with this figure (as its ``regime`` info)."""
        if regime is not None:
            self._recorder.set_regime(regime)
            info = {**info, "regime": regime}
        return self._recorder.record(metric, values, variant, raw, parts=parts, sampling=sampling,
                                     requests=requests, **info)

    def baseline_info(self, metric: metrics.Metric, variant: str | None = None) -> dict[str, Any] | None:
        """What the compared baseline stored with ``metric`` (at ``variant``: its ``info``), when it is
        comparable; None otherwise (a save run, no baseline, another setup)."""
        return self._recorder.baseline_info(metric, variant)

    def record_engine_parts(self, result: SteadyResult, variant: str | None = None,
                            only: tuple[str, ...] | None = None) -> dict[str, Verdict]:
        """Record the engine's own timers over a steady window and the front end's share of TTFT
        (``llmgate.figures.engine_parts``, one value per repeat) as metrics of this test
        (``engine_ttft``, ``engine_queue``, ``engine_prefill``, ``engine_tpot``, ``engine_e2e``,
        ``frontend_ttft``); their verdicts by part, to pass as a TTFT's ``record(..., parts=)``.
        ``only``: those parts alone (a window of few requests: its per-request phases are not figures)."""
        out = {}
        for part, values in figures.engine_parts(result, self.server.engine, self.settings.repeats).items():
            metric = metrics.ENGINE_PART_METRICS.get(part)
            if metric is None or not values or (only is not None and part not in only):
                continue
            v = self._recorder.record(metric, values, variant)
            if v is not None:
                out[part] = v
        return out

    def scrape(self, deferred: bool = False, timers: bool = False) -> meters.Scrape:
        """The engine's own /metrics now (``llmgate.figures.delta(before, after)`` gives what
        changed); ``deferred``: kept as text and parsed when first read (a loop that reads it after
        every request); ``timers``: only the series of the engine's own timers where the engine can
        render just those (``Engine.timers_path``; else, or where that path fails, all of /metrics)."""
        h = self.server
        if self._http is None:
            self._http = sync_client(timeout=60)
        path = h.engine.timers_path() if timers and self._timers_path_ok else None
        if path is not None:
            reading = meters.scrape_filtered(self._http, h.base_url, path, h.auth_headers(), deferred)
            if reading is not None:
                return reading
            self._timers_path_ok = False        # this build does not filter: every later reading is whole
        return meters.scrape(self._http, h.base_url, h.engine.metrics_path, h.auth_headers(), deferred)

    def note(self, text: str) -> None:
        """Something the reader of the results must know (an unsupported figure…): shown in the summary."""
        self._recorder.note(text)

    @contextlib.contextmanager
    def watch(self, label: str, server: ServerHandle | None = None):
        """``with gate.watch("TTFT c=1"): …`` around a measurement (``steady`` and ``sequential`` watch
        their own): what the rest of the machine did meanwhile (``process.meters.MachineLoad``).  Where
        other processes used a quarter of the CPUs or more, the figures recorded after the block may
        read slower than the engine is: they carry that, and a regression they show (or a later run's
        improvement over them as a baseline) is held as inconclusive; said once as a note.  Yields a
        list that holds that reason after the block.  Not in a duet: its other side is part of the
        machine there, and a busy machine slows both sides alike."""
        out: list[str] = []
        if self._side is not None:
            yield out
            return
        h = server or (self.server if self._recorder.entry is not None else None)
        with MachineLoad(h.pid if h is not None else None) as load:
            yield out
        if why := load.disturbed():
            out.append(why)
            self.note(f"{label}: {why}: its figures may read slower than the engine is (a change that "
                      f"explains is held as inconclusive)")
        self._recorder.disturbed = "; ".join(out)

    def _turn(self) -> contextlib.AbstractContextManager[Any]:
        """A duet: this side's turn on the machine; otherwise nothing to wait for."""
        return self._side.turn() if self._side is not None else contextlib.nullcontext()

    def _seed(self, label: str) -> str:
        return f"{getattr(self._item, 'originalname', self._item.name)}:{label}"
