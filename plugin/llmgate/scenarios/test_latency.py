"""Latency, measured on purpose (the `latency` lever): what a user waits for, with enough requests a
boot that the sampling error of each figure is known, and the engine's own timers beside it.

- ``test_ttft_c1``: TTFT at c=1 from many short requests (``[scenarios] latency_output_tokens``
  each) at each of ``latency_prompt_tokens`` (default 128 and 2,048: the second prefill-bound), one
  at a time, until the relative standard error of the boot's TTFT mean and median is at most
  ``latency_rel_error`` (1%), between ``latency_min_requests`` and ``latency_max_requests`` (at most
  ``latency_max_s`` of the side's own time: in a duet, of its half of the wall clock).  Recorded per prompt length: TTFT (the median over the boot's requests), and
  the engine's own TTFT, queue and prefill times and the front end's share (client − engine), each
  with its sampling error, so that a TTFT verdict says which part moved.
- ``test_poisson_load``: open-loop Poisson arrivals at ``poisson_load_percent`` (default 30% and
  70%) of the entry's capacity: the completed requests a second of a closed loop at
  ``--llmgate-concurrency`` with the same requests, measured once a session (in A/B mode on side A's
  first boot, so both sides get the same load), or the compared baseline's recorded rates (so a
  later run offers the same load).  Recorded per load: TTFT and TPOT p50 / p95 / p99 over the window's
  requests (each percentile with its sampling error, stated), and goodput: the offered rate × the
  share of requests that met the entry's TTFT and TPOT targets (``goodput = {ttft_ms, tpot_ms}``).

A boot's value is one statistic over its requests; its sampling variance comes from resampling those
requests (``llmgate.stats.sampling_log_var``), and the verdict keeps it apart from the boot-to-boot
part (the noise report prints both).  Where the throughput scenarios' TTFT rows stand beside these:
``test_concurrency``'s TTFT p50/p95 at c=N are TTFT under a saturating closed loop (informative
there, nowhere else); ``test_decode_c1`` no longer records a TTFT (its window held ~8 first tokens a
boot on a GPU: this module's ``ttft_c1`` replaces it).
"""

from __future__ import annotations

import math
import statistics
import time
from typing import Any

import llmgate
from llmgate import figures, metrics, requests, stats


def _rse(values, statistic):
    v = stats.sampling_log_var(values, statistic, resamples=400)
    return math.sqrt(v) if v is not None else math.inf


@llmgate.scenario("latency", boots=True)
def test_ttft_c1(gate):
    cfg, h, st = gate.entry, gate.server, gate.settings
    sc = gate.matrix.scenarios
    size = sc.latency(cfg.device)
    out_tokens = sc.latency_output_tokens
    engine_metrics = h.engine.metrics_path is not None
    for prompt in sc.latency_prompt_tokens:
        if prompt + out_tokens > cfg.max_model_len:
            gate.note(f"TTFT at p{prompt}: not measured, the prompt does not fit max_model_len {cfg.max_model_len}")
            continue
        variant = f"p{prompt}"
        # warm-up: the first requests of a shape compile, capture or allocate
        gate.run(requests.fresh(h, gate.prompts, max(2, st.warmup), prompt, out_tokens, f"ttft-warm-{variant}"), 1, account=False)
        ttfts: list[float] = []
        # the engine's own timers request by request: its /metrics read after every request (a histogram's
        # sum and count move by that request alone; only the timers' series where the engine can render
        # just those: the whole of vLLM's took about as long as the request), kept as text and parsed
        # after the loop, so that the parsing (and the objects it makes) takes nothing from the turns
        before = gate.scrape() if engine_metrics else None
        readings: list[tuple[list[float], Any]] = []     # each request's client TTFTs and the reading after it
        t0 = time.perf_counter()
        # a duet's sides take turns request by request, so each has half the wall clock: its cap is its
        # own half (as many requests as a boot measured alone), not half of its own window
        share = 2 if gate.side is not None else 1
        i = 0
        with gate.watch(f"TTFT c=1 {variant}"):    # a busy machine's figures say so
            while True:
                res = gate.run(requests.fresh(h, gate.prompts, 1, prompt, out_tokens, f"ttft-{variant}-r{i}"), 1,
                               label=f"TTFT c=1 {variant}")
                batch_ttfts = [s.ttft for s in res.ok if s.ttft is not None]
                ttfts += batch_ttfts
                if before is not None:
                    readings.append((batch_ttfts, gate.scrape(deferred=True, timers=True)))
                i += 1
                n, age = len(ttfts), (time.perf_counter() - t0) / share
                if n >= size["latency_max_requests"] or age >= size["latency_max_s"]:
                    break
                if n >= size["latency_min_requests"] and i % 10 == 0 and \
                        max(_rse(ttfts, "mean"), _rse(ttfts, "median")) <= sc.latency_rel_error:
                    break
        parts = _engine_parts(gate, h, before, readings)
        rse_mean, rse_median = _rse(ttfts, "mean"), _rse(ttfts, "median")
        info = {"request_count": len(ttfts), "prompt_tokens": prompt, "output_tokens": out_tokens,
                "seconds": round(time.perf_counter() - t0, 2), "ttft_mean_s": statistics.fmean(ttfts),
                "rel_error_mean": rse_mean, "rel_error_median": rse_median, "target_rel_error": sc.latency_rel_error}
        if max(rse_mean, rse_median) > sc.latency_rel_error:
            gate.note(f"TTFT c=1 {variant}: sampling error {max(rse_mean, rse_median):.1%} over {len(ttfts)} requests "
                      f"(target {sc.latency_rel_error:.0%}: the window's cap of {size['latency_max_requests']} requests "
                      f"or {size['latency_max_s']:g} s came first)")
        verdicts = {}
        for part, values in parts.items():
            metric = metrics.ENGINE_PART_METRICS[part]
            positive = [v for v in values if v > 0]
            if len(positive) < 2:
                continue
            # the median over the boot's requests, as TTFT's own: an outlier request (a scheduler hiccup)
            # moves a mean, and with it a mean per batch of requests, far more than it moves the median
            v = gate.record(metric, [statistics.median(positive)], f"c1-{variant}", {"request_values_s": values},
                            sampling=stats.sampling_log_var(positive, "median"), requests=len(positive),
                            statistic="median over requests")
            if v is not None:
                verdicts[part] = v
        gate.record(metrics.TTFT_C1, [statistics.median(ttfts)], variant, {"request_values_s": ttfts},
                    sampling=stats.sampling_log_var(ttfts, "median"), requests=len(ttfts), parts=verdicts, **info)


def _engine_parts(gate, h, before, readings: list) -> dict[str, list[float]]:
    """The engine's timers request by request, from the readings taken after each request: a reading
    that has not seen its request yet is merged with the next (the delta then spans both)."""
    parts: dict[str, list[float]] = {}
    unseen: list[float] = []                # client TTFTs of requests the engine's timers have not shown yet
    for j, (batch_ttfts, after) in enumerate(readings):
        readings[j] = None                  # each parsed reading is let go once the next has used it
        unseen += batch_ttfts
        timers = h.engine.engine_timers(figures.delta(before, after))
        if "ttft" in timers or "prefill" in timers:
            for part in ("ttft", "queue", "prefill"):
                if part in timers:
                    parts.setdefault(part, []).append(timers[part])
            if "ttft" in timers and unseen:
                parts.setdefault("frontend", []).append(statistics.fmean(unseen) - timers["ttft"])
            before, unseen = after, []
    return parts


def _capacity(gate, prompt, output):
    """Completed requests a second of a closed loop at --llmgate-concurrency with the Poisson's requests."""
    n = gate.settings.concurrency
    result = gate.steady(prompt, output, n, seed="poisson-capacity", label=f"capacity c={n}", output_spread=0.0)
    return stats.window_metrics(result)["request_rate"]


@llmgate.scenario("latency", boots=True)
def test_poisson_load(gate):
    cfg, st, sc = gate.entry, gate.settings, gate.matrix.scenarios
    size = sc.latency(cfg.device)
    prompt, output = sc.poisson_prompt_tokens, sc.poisson_output_tokens
    targets = sc.goodput_targets(cfg)
    capacity = None
    for pct in sc.poisson_load_percent:
        variant = f"load{pct}"
        stored = gate.baseline_info(metrics.TTFT_P50, variant) or {}
        if stored.get("arrival_rate_rps"):
            rate, source = float(stored["arrival_rate_rps"]), "the compared baseline's rate"
        else:
            if capacity is None:
                capacity = gate.levers.memo("poisson-capacity", lambda: _capacity(gate, prompt, output))
            rate, source = pct / 100.0 * capacity, f"{pct}% of {capacity:.2f} req/s measured this session"
        result = gate.steady(prompt, output, st.concurrency, rate=rate, seed=f"poisson-{variant}",
                             label=f"Poisson {variant}", window_requests=int(size["poisson_requests"]),
                             window_max_s=size["poisson_max_s"])
        a, b = result.window
        window = [s for s in result.ok if a <= s.start < b and s.ttft is not None]
        assert len(window) >= 2, f"{variant}: {len(window)} requests arrived in the window"
        ttfts = [s.ttft for s in window]
        tpots = [s.tpot for s in window if s.tpot is not None]
        good = sum(1 for s in window if s.ttft * 1000 <= targets["ttft_ms"]
                   and (s.tpot is None or s.tpot * 1000 <= targets["tpot_ms"]))
        info = {"arrival_rate_rps": rate, "rate_source": source, "capacity_rps": capacity, "request_count": len(window),
                "window_s": round(b - a, 3), "goodput_targets_ms": targets, "window": result.window_info()}
        gate.note(f"Poisson {variant}: {rate:.2f} req/s ({source}), {len(window)} requests in {b - a:.1f} s")
        parts = gate.record_engine_parts(result, variant)
        for metric, q in ((metrics.TTFT_P50, 50), (metrics.TTFT_P95, 95), (metrics.TTFT_P99, 99)):
            gate.record(metric, [stats.percentile(ttfts, q)], variant, sampling=stats.sampling_log_var(ttfts, q),
                        requests=len(ttfts), parts=parts, **(info if q == 50 else {}))
        if len(tpots) >= 2:
            for metric, q in ((metrics.TPOT, 50), (metrics.TPOT_P95, 95), (metrics.TPOT_P99, 99)):
                gate.record(metric, [stats.percentile(tpots, q)], variant, sampling=stats.sampling_log_var(tpots, q),
                            requests=len(tpots))
        gate.record(metrics.GOODPUT, [rate * good / len(window)], variant,
                    sampling=stats.fraction_log_var(good, len(window)), requests=len(window),
                    good_requests=good, targets_ms=targets)
