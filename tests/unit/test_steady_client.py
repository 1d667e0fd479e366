"""Steady-state runs of the client against a stub streaming server (no engine): the closed loop
keeps N in flight through warm-up and window, in one process and dealt to several, and Poisson
arrivals come at their rate; the window holds what was asked of it."""

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from llmgate import load, stats, tinymodel

# times the client against a stub server: run alone, not beside another xdist worker (tox.ini)
pytestmark = pytest.mark.timing

STUB = Path(__file__).resolve().parents[1] / "validation" / "client_capacity.py"
EVENTS, GAP = 20, 0.005          # 20 tokens 5 ms apart: ~0.1 s a request


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
    return load.RequestSpec(str(tok), 16, "stub", {"model": "m", "max_tokens": EVENTS})


SETTINGS = load.Steady(min_s=2.0, min_requests=30, max_s=10, warm_segment_s=0.3, warm_max_s=4)


@pytest.mark.parametrize("workers", [1, 2])
def test_closed_loop_window_has_its_length_and_requests_and_n_in_flight(stub, spec, workers):
    res = load.steady(stub, spec, 4, SETTINGS, 30, workers=workers)
    assert not res.failures and not res.notes, res.notes
    a, b = res.window
    assert b - a >= 2.0 and len(res.lived_in(a, b)) >= 30
    assert res.warmup["ended_by"] == "throughput stopped rising"
    # 4 streams of 20 tokens per ~0.1 s: about 800 tok/s, counted inside the window only
    w = stats.window_metrics(res)
    assert 300 < w["aggregate_tok_s"] < 1000
    # prompts are fresh: no two requests share one
    assert len({x.start for x in res.samples}) == len(res.samples)
    parts = stats.repeat_metrics(res, 4)
    assert len(parts) == 4 and all(p["requests_ok"] >= 1 for p in parts)


def test_poisson_arrivals_come_at_their_rate(stub, spec):
    res = load.steady(stub, spec, 4, SETTINGS, 30, rate=20.0, workers=1)
    assert res.mode == "poisson" and not res.failures
    a, b = res.window
    sent = [x for x in res.samples if a <= x.start < b]
    assert 10 < len(sent) / (b - a) < 30            # 20 requests/s, Poisson
    assert stats.window_metrics(res)["ttft_p50"] < 0.05


def test_closed_loop_streams_start_a_request_time_apart_and_stay_apart(stub, spec):
    """Same-length requests that start together would stay in lockstep (every wave's prefills in one
    step); the streams start one request's time ÷ N apart instead."""
    res = load.steady(stub, spec, 4, SETTINGS, 30, workers=1)
    stagger = res.warmup["stagger_s"]
    assert 0.015 < stagger < 0.1                      # ~0.1 s a request ÷ 4
    firsts = sorted(x.start for x in res.samples[1:5])  # after the probe: each stream's first request
    gaps = [b - a for a, b in zip(firsts, firsts[1:])]
    assert all(g > 0.5 * stagger for g in gaps)
    # in the window the sends stay spread: no two within a tenth of the spacing, mostly
    a, b = res.window
    starts = sorted(x.start for x in res.samples if a <= x.start < b)
    close = sum(1 for x, y in zip(starts, starts[1:]) if y - x < 0.1 * stagger)
    assert close < len(starts) * 0.25
