"""``llmgate.figures``: a result's figures (the client's and the engine's own) and the client's
processes, for scenarios: functions of their arguments only (nothing of the test, its entry or
its server beyond what is passed in)."""

from __future__ import annotations

from llmgate.analysis import stats
from llmgate.engines import meters
from llmgate.engines.base import Engine
from llmgate.load import workloads
from llmgate.load.samples import SteadyResult


def repeat_values(result: SteadyResult, figure: str, repeats: int) -> list[float]:
    """One value per repeat of a measurement: the window (or the requests) cut into ``repeats``
    parts (a scenario passes ``gate.settings.repeats``), ``figure`` of each (``decode_tok_s``,
    ``ttft_p50``, ``ttft_p95``, ``itl_p95``, ``tpot_median``, ``e2e_p50``, ``aggregate_tok_s`` …)."""
    return stats.values_of(stats.repeat_metrics(result, repeats), figure)


def whole(result: SteadyResult) -> dict[str, float]:
    """The figures of a whole steady-state window (not cut into repeats)."""
    return stats.window_metrics(result)


def engine_parts(result: SteadyResult, engine: Engine, repeats: int) -> dict[str, list[float]]:
    """Per repeat of a steady window (the window cut into ``repeats`` parts, as ``repeat_values``
    cuts it): the engine's own per-request timers as window means (seconds; ``meters.ENGINE_PARTS``
    the engine keeps: ``engine`` is the server's adapter, ``gate.server.engine``), from its /metrics
    read through the run, and ``frontend``: the client's mean TTFT minus the engine's over the
    requests whose first token came in the same interval.  {} for an engine without those timers."""
    poller = result.engine_readings
    if poller is None or not poller.texts:
        return {}
    a, b = result.window
    edges = [a + (b - a) * i / repeats for i in range(repeats + 1)]
    out: dict[str, list[float]] = {}
    for d in poller.deltas(edges):
        if d is None:
            continue
        t0, t1, changed = d
        timers = engine.engine_timers(changed)
        for part, v in timers.items():
            out.setdefault(part, []).append(v)
        firsts = [s.ttft for s in result.ok if s.ttft is not None and t0 <= s.start + s.ttft < t1]
        if "ttft" in timers and firsts:
            out.setdefault("frontend", []).append(sum(firsts) / len(firsts) - timers["ttft"])
    return out


def delta(before: meters.Scrape, after: meters.Scrape) -> meters.Delta:
    """What changed in the engine's own /metrics between two scrapes (``gate.scrape()``)."""
    return meters.Delta(before, after)


def client_pids() -> list[int]:
    """The client processes measuring (beside this one) while a run is in flight."""
    return workloads.client_pids()


def client_workers(concurrency: int) -> int:
    """How many client processes a load at ``concurrency`` is dealt to."""
    return workloads.client_workers(concurrency)
