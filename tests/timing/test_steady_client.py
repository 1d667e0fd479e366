"""Steady-state runs of the client against a stub streaming server (no engine): the closed loop
keeps N in flight through warm-up and window, in one process and dealt to several, and Poisson
arrivals come at their rate; the window holds what was asked of it.

No margin here is a wall-clock constant that holds on an idle machine only.  Each test first times
the stub through the client (``request_time``) and sizes the run's settings from that; its
assertions compare figures of the same run with each other (Little's law, the probe against the
stagger, the first sends against the run's own start), bound what cannot happen whatever the load
(more than N in flight, a send before its time), or allow for the scheduling noise measured in
the same run (``jitter``: how late the stub's 5 ms pauses come back)."""

import math
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from llmgate.load import steady as load_steady, workloads as load
from llmgate.analysis import stats
from llmgate.models import tinymodel

# times the client against a stub server: run alone, not beside another xdist worker (tox.ini)

STUB = Path(__file__).resolve().parents[1] / "validation" / "client_capacity.py"
EVENTS, GAP = 20, 0.005          # 20 tokens 5 ms apart: ~0.1 s a request on an idle machine
N = 4                            # streams in flight


sys.path.insert(0, str(STUB.parent))
from client_capacity import Handle  # noqa: E402  (the stub server's handle, as the capacity check uses it)


@pytest.fixture(scope="module")
def stub():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, str(STUB), "--stub", str(port), str(EVENTS), str(GAP)])
    deadline = time.time() + 20
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            break
        except OSError:
            time.sleep(0.1)
    yield Handle(f"http://127.0.0.1:{port}")
    proc.kill()
    proc.wait()


@pytest.fixture(scope="module")
def spec():
    tok = tinymodel.build()
    return load_steady.RequestSpec(str(tok), 16, "stub", {"model": "m", "max_tokens": EVENTS})


def request_time(stub, spec) -> float:
    """The stub's request time at N in flight through this client, now (the slowest of 2 N)."""
    prompts = load.PromptMaker(spec.tokenizer)
    reqs = [spec.request(prompts, "calibrate", i) for i in range(2 * N)]
    res = load.run(stub, reqs, N, 30, workers=1)
    assert not res.failures, res.failures[0].error
    return max(x.e2e for x in res.samples)


def settings(r: float) -> load_steady.Steady:
    """Steady settings in units of the request time ``r`` measured just before (~0.12 s idle: then
    the settings of an idle machine, a 2 s window of at least 30 requests).  The caps are far:
    reaching one is a failure, and a working controller ends well before them."""
    segment = max(0.3, 2 * r)
    return load_steady.Steady(min_s=max(2.0, 16 * r), min_requests=30, max_s=max(10.0, 80 * r),
                       warm_segment_s=segment, warm_max_s=20 * (segment + 2 * r))


def run_start(res) -> float:
    """The perf_counter time the run's clock started (warm-up seconds are rounded to 1 ms)."""
    return res.window[0] - res.warmup["seconds"]


def in_flight(samples, a: float, b: float) -> tuple[float, int]:
    """Time-averaged and largest number of requests in flight over [a, b)."""
    events = []
    for x in samples:
        s, e = max(x.start, a), min(x.start + x.e2e, b)
        if e > s:
            events += [(s, 1), (e, -1)]
    events.sort()                     # an end before a start at the same instant
    area, cur, peak, last = 0.0, 0, 0, a
    for t, d in events:
        area += cur * (t - last)
        last, cur = t, cur + d
        peak = max(peak, cur)
    return area / (b - a), peak


def jitter(samples) -> float:
    """Scheduling noise of stub and client in this run: how much later than usual the 99th
    percentile of the stub's 5 ms pauses comes back (p99 − p50 of the inter-token gaps)."""
    itl = sorted(i for x in samples for i in x.itl)
    return itl[int(0.99 * (len(itl) - 1))] - statistics.median(itl)


def stream_heads(samples) -> list[float]:
    """When each stream sent its first request.  In a closed loop every end is followed by its
    stream's next send: a send with an earlier end not yet followed is that stream's; the
    others begin a stream (order, not a time margin, tells them apart)."""
    events = sorted([(x.end, 0) for x in samples] + [(x.start, 1) for x in samples])   # an end first at a tie
    unfollowed, heads = 0, []
    for t, is_send in events:
        if not is_send:
            unfollowed += 1
        elif unfollowed:
            unfollowed -= 1
        else:
            heads.append(t)
    return heads


@pytest.mark.parametrize("workers", [1, 2])
def test_closed_loop_window_has_its_length_and_requests_and_n_in_flight(stub, spec, workers):
    r = request_time(stub, spec)
    s = settings(r)
    res = load_steady.steady(stub, spec, N, s, 30, workers=workers)
    assert not res.failures and not res.notes, res.notes
    a, b = res.window
    lived = res.lived_in(a, b)
    assert b - a >= s.min_s and len(lived) >= s.min_requests

    # the warm-up ended at the first segment that rose no more than warm_tol over the median of
    # the two before it (segments are rounded to 0.01 tok/s), not at its cap
    segs = res.warmup["segments_tok_s"]

    def flat(i, slack):
        return segs[i] <= (1 + s.warm_tol) * (segs[i - 2] + segs[i - 1]) / 2 + slack

    assert res.warmup["ended_by"] == "throughput stopped rising", res.warmup
    assert len(segs) >= 3 and flat(len(segs) - 1, 0.02), segs
    assert not any(flat(i, -0.02) for i in range(2, len(segs) - 1)), segs

    # the window closed as soon as it had both its length and its requests: once the later of
    # the two was reached, no later than the next completion (or the 50 ms poll of several client
    # processes), give or take this run's scheduling noise
    ok = [x for x in res.ok if x.start >= a]
    due = max(a + s.min_s, sorted(x.end for x in ok)[s.min_requests - 1])
    assert b >= due
    ends = sorted(x.end for x in ok if x.end >= due)
    next_end = ends[0] if ends else due
    assert b <= max(next_end, due + 0.05) + 3 * jitter(lived) + 0.002, (b - due, jitter(lived))

    # N in flight through the window, never more (the closed loop's bound, whatever the load)
    avg, peak = in_flight(res.samples[1:], a, b)
    assert peak == N and avg > N - 0.5, (avg, peak)
    # throughput, counted from the tokens inside the window, is what Little's law makes of the
    # same run's in-flight count and request time (tokens spread evenly over a request: the
    # window's edges cut a few requests, hence the 15%)
    w = stats.window_metrics(res)
    little = avg * EVENTS / statistics.mean(x.e2e for x in lived)
    assert abs(w["aggregate_tok_s"] / little - 1) < 0.15, (w["aggregate_tok_s"], little)
    # prompts are fresh: no two requests share one
    assert len({x.start for x in res.samples}) == len(res.samples)
    parts = stats.repeat_metrics(res, 4)
    assert len(parts) == 4 and all(p["requests_ok"] >= 1 for p in parts)


def test_poisson_arrivals_come_at_their_rate(stub, spec):
    rate = 20.0
    r = request_time(stub, spec)
    res = load_steady.steady(stub, spec, N, settings(r), 30, rate=rate, workers=1)
    assert res.mode == "poisson" and not res.failures and not res.notes, res.notes
    assert res.warmup["ended_by"] == "2 segments at the arrival rate"
    a, b = res.window
    sent = sorted(x.start for x in res.samples if a <= x.start < b)
    # the count of a Poisson process over the window: within 4.5 of its standard deviations
    expected = rate * (b - a)
    assert abs(len(sent) - expected) < 4.5 * math.sqrt(expected) + 1, (len(sent), expected)
    # exponential gaps (coefficient of variation 1), not a fixed pace (0) nor bursts
    gaps = [y - x for x, y in zip(sent, sent[1:])]
    cv = statistics.pstdev(gaps) / statistics.mean(gaps)
    assert 0.5 < cv < 1.6, cv
    # no request waits for another to be sent: the first token (the stub sends it at once) comes
    # within a fraction of the request's time (20 pauses), however slow this machine is now
    w = stats.window_metrics(res)
    e2e = statistics.median(x.e2e for x in res.lived_in(a, b))
    assert w["ttft_p50"] < e2e / 4, (w["ttft_p50"], e2e)


@pytest.mark.parametrize("workers", [1, 2])
def test_closed_loop_streams_start_a_request_time_apart_and_stay_apart(stub, spec, workers):
    """Same-length requests that start together would stay in lockstep (every wave's prefills in one
    step); the streams start one request's time ÷ N apart instead, also across client processes."""
    r = request_time(stub, spec)
    res = load_steady.steady(stub, spec, N, settings(r), 30, workers=workers)
    assert not res.failures and not res.notes, res.notes
    probe, rest = res.samples[0], res.samples[1:]
    # the stagger is the lone probe's time ÷ N, and the probe is a whole request (its 20 pauses
    # make it at least 0.1 s, whatever the load)
    stagger = res.warmup["stagger_s"]
    assert probe.ok and probe.completion_tokens == EVENTS and probe.start < run_start(res)
    assert stagger == round(probe.e2e / N, 4) and stagger >= EVENTS * GAP / N
    noise = jitter(res.lived_in(*res.window))
    firsts = stream_heads(rest)[:N]
    t0 = run_start(res)
    late = [f - (t0 + k * stagger) for k, f in enumerate(firsts)]
    # stream k is sent k staggers after the run's start: never earlier (a sleep does not end early;
    # the 1 ms is warm-up seconds' rounding), and no later than this run's scheduling noise allows
    assert len(firsts) == N and all(x > -0.001 for x in late), (late, stagger)
    assert all(x < 0.005 + 4 * noise for x in late), (late, stagger, noise)
    # in the window the sends stay spread: no two within a tenth of the spacing, mostly.  Streams
    # in lockstep (a client that sends in waves) make 3 of 4 such pairs, random phases about 8%.
    # A stall of stub or client longer than the streams' spacing ends two streams' requests
    # together, and from then on those two stay in step (a quarter of the pairs): where this run
    # saw a stall of half a spacing, two such pairs are allowed, still short of lockstep.
    a, b = res.window
    starts = sorted(x.start for x in res.samples if a <= x.start < b)
    close = sum(1 for x, y in zip(starts, starts[1:]) if y - x < 0.1 * stagger)
    stall = max(i for x in rest for i in x.itl) - GAP
    allowed = 0.5 if stall > 0.5 * stagger else 0.25
    assert close < len(starts) * allowed, (close, len(starts), stall)
