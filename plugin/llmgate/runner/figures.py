"""``llmgate.figures``: a result's figures and the client's processes, for scenarios: functions of
their arguments only (nothing of the test, its entry or its server)."""

from __future__ import annotations

from llmgate.analysis import stats
from llmgate.engines import meters
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


def delta(before: meters.Scrape, after: meters.Scrape) -> meters.Delta:
    """What changed in the engine's own /metrics between two scrapes (``gate.measure.scrape()``)."""
    return meters.Delta(before, after)


def client_pids() -> list[int]:
    """The client processes measuring (beside this one) while a run is in flight."""
    return workloads.client_pids()


def client_workers(concurrency: int) -> int:
    """How many client processes a load at ``concurrency`` is dealt to."""
    return workloads.client_workers(concurrency)
