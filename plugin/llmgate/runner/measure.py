"""``gate.measure``: what a scenario uses beside running a workload and recording it that needs
the test's entry, server or recorder — building requests, the engine's own timers per repeat, the
engine's /metrics, the GPU sampler, and the recording pipeline's other offers (accounting for
requests sent with ``gate.run(account=False)``, the compared baseline's info, the minimum effect,
verdicts judged elsewhere, the entry's regime).  A result's figures and the client's processes,
which need nothing of the test, are ``llmgate.figures``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from llmgate.device import hardware
from llmgate.load import workloads
from llmgate.core import metrics
from llmgate.engines import meters
from llmgate.config import matrix as matrix_mod
from llmgate.config.matrix import Matrix, ServerConfig
from llmgate.load.samples import LoadResult, SteadyResult
from llmgate.load.workloads import PromptMaker, Request
from llmgate.process.server import ServerHandle
from llmgate.runner.recorder import Recorder
from llmgate.runner.settings import Settings
from llmgate.analysis.verdict import Verdict


class Measure:
    """One test's measuring tools, for its entry's server (booted on first use)."""

    def __init__(self, recorder: Recorder, settings: Settings, entry: Callable[[], ServerConfig],
                 server: Callable[[], ServerHandle], prompts: Callable[[], PromptMaker], matrix: Callable[[], Matrix]):
        self._recorder, self._settings = recorder, settings
        self._entry, self._server, self._prompts, self._matrix = entry, server, prompts, matrix
        self._client: Any = None

    @property
    def server(self) -> ServerHandle:
        return self._server()

    @property
    def prompts(self) -> PromptMaker:
        return self._prompts()

    @property
    def settings(self) -> Settings:
        return self._settings

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


    def engine_parts(self, result: SteadyResult) -> dict[str, list[float]]:
        """Per repeat of a steady window (the window cut into ``settings.repeats`` parts, as
        ``llmgate.figures.repeat_values`` cuts it): the engine's own per-request timers as window
        means (seconds; ``meters.ENGINE_PARTS`` the engine keeps), from its /metrics read through the run, and
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
            v = self._recorder.record(metric, values, variant)
            if v is not None:
                out[part] = v
        return out

    def scrape(self, deferred: bool = False) -> meters.Scrape:
        """The engine's own /metrics now (``llmgate.figures.delta(before, after)`` gives what
        changed); ``deferred``: kept as text and parsed when first read (a loop that reads it after
        every request)."""
        h = self.server
        return meters.scrape(self._http(), h.base_url, h.engine.metrics_path, h.auth_headers(), deferred)

    def gpu_sampler(self) -> hardware.GpuSampler:
        """A context manager sampling the GPU (memory, utilisation, clocks) while a measurement
        runs; a no-op on a CPU entry."""
        return hardware.GpuSampler(enabled=self._entry().device == "gpu")

    def lookup_workload(self) -> bool:
        """Whether this entry measures the speculative scenario's prompt-lookup workload
        (``lookup_requests``): its drafts come from the context, or it is the reference of an entry
        whose drafts do; and its engine can restrict generation to the prompt's words."""
        cfg = self._recorder.entry
        if cfg is None or self.server.engine.allowed_tokens_fields([0]) is None:
            return False
        return matrix_mod.drafts_from_context(cfg) or any(
            e.reference == cfg.id and matrix_mod.drafts_from_context(e) for e in self._matrix().entries)

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
        if self._client is None:
            import httpx
            self._client = httpx.Client(timeout=60)
        return self._client

    # -- what the recording pipeline offers beside gate.record ------------------------------------
    def account(self, *results: LoadResult) -> None:
        """Account for every request of a measurement (``gate.steady``, ``gate.sequential`` and
        ``gate.run`` do it themselves).  A failed one (HTTP error, malformed stream, timeout) fails
        the test at once, naming the errors; the test's share of failed requests becomes a verdict
        ("regressed" when any failed, whatever the baseline)."""
        self._recorder.account(*results)

    def baseline_info(self, metric: metrics.Metric, variant: str | None = None) -> dict[str, Any] | None:
        """What the compared baseline stored with a metric (its extra_info), when it is comparable."""
        return self._recorder.baseline_info(metric, variant)

    def min_effect(self, metric: metrics.Metric, key: str) -> float:
        """The minimum effect that counts for ``key`` (``metric.name`` or ``name@variant``) in this
        test: ``--llmgate-min-effect``, then the test's ``@pytest.mark.llmgate(min_effect=…)``, then
        the entry's ``min_effect``, then the metric's own."""
        return self._recorder.min_effect(metric, key)

    def attach(self, verdicts: list[Verdict], confirm: bool = False) -> None:
        """Verdicts judged elsewhere (A/B mode) become this test's: it fails if one regressed.
        ``confirm=False``: no confirmation run (an A/B comparison controls drift by design)."""
        self._recorder.attach(verdicts, confirm)

    def set_regime(self, regime: dict[str, Any]) -> None:
        """What bounds this entry (``hardware.classify``): shown beside every verdict of the entry."""
        self._recorder.set_regime(regime)
