"""The engine's own timers beside the client's: window means from /metrics histogram deltas, read
through a run by ``signals.Poller``; the front end's share of TTFT; which part of a TTFT moved
(``verdict.attribution``); and the regime from GPU utilisation as well as the roofline."""

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from llmgate import engines
from llmgate.device import hardware as device
from llmgate.core import metrics
from llmgate.engines import meters as signals
from llmgate.analysis.verdict import attribution, judge_boots

SGLANG = Path(__file__).parents[1] / "data" / "sglang-0.5.17-h200"

# vLLM's histogram names (vllm/v1/metrics/loggers.py, 0.26.0 and 0.32.0) with two label sets,
# as a two-engine server shows them: the means are over both
VLLM_TEXT = """\
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_sum{{engine="0",model_name="m"}} {ttft_sum}
vllm:time_to_first_token_seconds_count{{engine="0",model_name="m"}} {n}
vllm:time_to_first_token_seconds_sum{{engine="1",model_name="m"}} {ttft_sum}
vllm:time_to_first_token_seconds_count{{engine="1",model_name="m"}} {n}
# TYPE vllm:request_queue_time_seconds histogram
vllm:request_queue_time_seconds_sum{{engine="0",model_name="m"}} {queue_sum}
vllm:request_queue_time_seconds_count{{engine="0",model_name="m"}} {n}
# TYPE vllm:request_prefill_time_seconds histogram
vllm:request_prefill_time_seconds_sum{{engine="0",model_name="m"}} {prefill_sum}
vllm:request_prefill_time_seconds_count{{engine="0",model_name="m"}} {n}
# TYPE vllm:request_time_per_output_token_seconds histogram
vllm:request_time_per_output_token_seconds_sum{{engine="0",model_name="m"}} {tpot_sum}
vllm:request_time_per_output_token_seconds_count{{engine="0",model_name="m"}} {n}
"""


def vllm_scrape(n, ttft=0.02, queue=0.001, prefill=0.015, tpot=0.005):
    return signals.Scrape.parse(VLLM_TEXT.format(n=n, ttft_sum=n * ttft, queue_sum=n * queue,
                                                 prefill_sum=n * prefill, tpot_sum=n * tpot))


def test_vllm_timers_are_the_means_of_what_was_added_between_two_readings():
    before, after = vllm_scrape(10), vllm_scrape(14)
    # 4 more requests whose timers summed to the new sums: 4 × (0.02, 0.001, 0.015, 0.005)
    t = engines.get("vllm").engine_timers(signals.Delta(before, after))
    assert set(t) == {"ttft", "queue", "prefill", "tpot"}          # decode, itl, e2e absent here: not made up
    assert t["ttft"] == pytest.approx(0.02) and t["queue"] == pytest.approx(0.001)
    assert t["prefill"] == pytest.approx(0.015) and t["tpot"] == pytest.approx(0.005)
    # nothing added: no mean at all (never a zero)
    assert engines.get("vllm").engine_timers(signals.Delta(after, after)) == {}
    assert engines.get("vllm").engine_timers(signals.Delta(signals.Scrape({}), signals.Scrape({}))) == {}


def test_sglang_timers_from_its_recorded_h200_metrics():
    scrape = signals.Scrape.parse((SGLANG / "metrics.txt").read_text())
    zero = signals.Scrape({k: {lab: 0.0 for lab in v} for k, v in scrape.values.items()})
    t = engines.get("sglang").engine_timers(signals.Delta(zero, scrape))
    assert {"ttft", "queue", "prefill", "itl", "e2e"} <= set(t)
    # streamed requests only: 20 streamed TTFTs summing to 0.745 s (the one non-streamed warm-up's 8.6 s is left out)
    assert t["ttft"] == pytest.approx(0.7452619710000192 / 20)
    assert t["prefill"] == pytest.approx(9.029242402000108 / 22)      # stage="prefill_forward"
    assert t["queue"] == pytest.approx(0.02067715999999109 / 22)
    assert all(v > 0 for v in t.values())


def test_every_adapter_keeps_to_the_timer_contract():
    from llmgate.engines import contract

    for name in ("vllm", "sglang", "llamacpp", "mlx"):
        assert contract.problems(engines.get(name), name) == [], name

    class Careless(type(engines.get("vllm"))):
        def engine_timers(self, delta):
            return {"ttft_ms": 12}                      # a part the gate does not know

    assert any("engine_timers" in p and "unknown parts ['ttft_ms']" in p for p in contract.problems(Careless()))


class _Metrics(BaseHTTPRequestHandler):
    """A /metrics whose request count grows by one per reading."""

    count = 0

    def do_GET(self):
        type(self).count += 1
        body = VLLM_TEXT.format(n=self.count, ttft_sum=self.count * 0.02, queue_sum=0.0, prefill_sum=self.count * 0.01,
                                tpot_sum=0.0).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


@pytest.fixture
def metrics_server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Metrics)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/metrics"
    srv.shutdown()


def test_poller_reads_through_a_run_and_gives_one_delta_per_interval(metrics_server):
    with httpx.Client() as http, signals.Poller(http, metrics_server, interval=0.05) as poller:
        t0 = time.perf_counter()
        # ~every 50 ms; on a busy machine later: wait for enough readings rather than a fixed time
        deadline = t0 + 30.0
        while (len(poller.times) < 8 or time.perf_counter() - t0 < 0.6) and time.perf_counter() < deadline:
            time.sleep(0.05)
        t1 = time.perf_counter()
    assert len(poller.texts) >= 9                      # one at the start, those waited for, one at the end
    assert poller.times == sorted(poller.times) and poller.times[0] <= t0 and poller.times[-1] >= t1
    inside = [t for t in poller.times if t0 < t < t1]
    edges = [t0, inside[len(inside) // 3], inside[2 * len(inside) // 3], t1]    # each interval has readings
    parts = poller.deltas(edges)
    assert len(parts) == 3 and all(p is not None for p in parts)
    for (a, b, d), (lo, hi) in zip(parts, zip(edges, edges[1:])):
        nearest = [min(poller.times, key=lambda t: abs(t - edge)) for edge in (lo, hi)]
        assert [a, b] == nearest                                   # the readings nearest the edges
        assert d.histogram_mean("vllm:time_to_first_token_seconds") == pytest.approx(0.02)
        assert d.counter("vllm:request_prefill_time_seconds_count") >= 1
    # an interval shorter than the polling has no reading of its own: None, not a made-up zero
    assert poller.deltas([t0, t0 + 1e-4]) == [None]
    # and an engine without /metrics gives no readings at all
    with httpx.Client() as http, signals.Poller(http, None) as none:
        pass
    assert none.texts == [] and none.deltas([0.0, 1.0]) == [None]


def _v(metric, now, base):
    return judge_boots(metric, metric.name, "e", [[x] for x in now], [[x] for x in base])


def test_attribution_names_the_part_that_moved():
    base_t = [0.0200, 0.0204, 0.0198]
    parts = {
        "frontend": _v(metrics.FRONTEND_TTFT, [0.0041, 0.0040, 0.0042], [0.0040, 0.0041, 0.0040]),
        "queue": _v(metrics.ENGINE_QUEUE, [0.0001, 0.0001, 0.0001], [0.0001, 0.0001, 0.0001]),
        "prefill": _v(metrics.ENGINE_PREFILL, [0.0140, 0.0142, 0.0141], [0.0120, 0.0121, 0.0119]),
        "ttft": _v(metrics.ENGINE_TTFT, [0.0182, 0.0181, 0.0180], [0.0160, 0.0162, 0.0159]),
    }
    client = _v(metrics.TTFT_P50, [0.0222, 0.0224, 0.0221], base_t)
    text = attribution(client, parts)
    assert text is not None and text.endswith("most of it: prefill")
    assert "prefill +2.1 ms (+18%) regressed" in text and "queue +0.0 ms" in text and "front end +0.1 ms" in text
    assert "engine other -0.0 ms" in text or "engine other +0.0 ms" in text
    # the front end moved instead
    parts["frontend"] = _v(metrics.FRONTEND_TTFT, [0.0070, 0.0071, 0.0069], [0.0040, 0.0041, 0.0040])
    parts["prefill"] = _v(metrics.ENGINE_PREFILL, [0.0120, 0.0121, 0.0119], [0.0120, 0.0121, 0.0119])
    parts["ttft"] = _v(metrics.ENGINE_TTFT, [0.0160, 0.0162, 0.0159], [0.0160, 0.0162, 0.0159])
    assert attribution(client, parts).endswith("most of it: front end")
    # no baseline: nothing to attribute
    fresh = judge_boots(metrics.TTFT_P50, "ttft_p50", "e", [[0.02]], None)
    assert attribution(fresh, parts) is None and attribution(client, {}) is None


def test_regime_from_gpu_utilisation_beside_the_roofline():
    busy = {"0": {"utilization_mean": 95.0}}
    idle = {"0": {"utilization_mean": 55.0}}
    cpu = {"busiest": "EngineCore", "busiest_share": 0.98}
    # AWQ on the H200: 21% of the roofline with the GPU busy 95% of the time: its kernels limit it
    awq = device.classify("gpu", {"efficiency": 0.21}, busy, cpu)
    assert awq["regime"] == "gpu-bound" and "GPU busy 95%" in awq["decided_by"]
    assert awq["roofline_efficiency"] == 0.21 and awq["gpu_utilization_mean"] == 95.0
    # a small model on a big card: the GPU waits on the host
    small = device.classify("gpu", {"efficiency": 0.28}, idle, cpu)
    assert small["regime"] == "host-bound" and "28% of the bandwidth roofline" in small["decided_by"]
    assert "98% of a core" in small["decided_by"]
    assert device.classify("gpu", {"efficiency": 0.7}, idle, None)["regime"] == "gpu-bound"
    assert device.classify("gpu", None, busy, None)["regime"] == "gpu-bound"
    assert device.classify("gpu", None, None, None)["regime"].startswith("unknown")
    assert device.classify("cpu", None, None, cpu)["regime"] == "cpu"


def test_attribution_judges_a_part_near_zero_by_its_floor_not_as_a_percentage():
    """An A/A: the queue's mean is ~0.1 ms and moves by a fraction of a millisecond, within its 1 ms
    floor (metrics.ENGINE_QUEUE.min_abs_effect): no percentage of it, and never "most of it"."""
    parts = {
        "frontend": _v(metrics.FRONTEND_TTFT, [0.0040, 0.0041, 0.0040], [0.0040, 0.0041, 0.0040]),
        "queue": _v(metrics.ENGINE_QUEUE, [0.00019, 0.00018, 0.00019], [0.0001, 0.0001, 0.0001]),
        "prefill": _v(metrics.ENGINE_PREFILL, [0.01203, 0.01212, 0.01191], [0.0120, 0.0121, 0.0119]),
        "ttft": _v(metrics.ENGINE_TTFT, [0.01612, 0.01622, 0.01592], [0.0160, 0.0162, 0.0159]),
    }
    client = _v(metrics.TTFT_P50, [0.0201, 0.0205, 0.0199], [0.0200, 0.0204, 0.0198])
    text = attribution(client, parts)
    assert "queue +0.1 ms," in text and "%" not in text.split("queue")[1].split(",")[0], text
    assert not text.endswith("most of it: queue"), text
    assert text.endswith("most of it: engine other") or text.endswith("most of it: prefill"), text
    # every part within its floor (the front end and queue), the rest unmoved: nothing is named
    for k in ("prefill", "ttft"):
        parts[k] = _v(parts[k].metric, [parts[k].baseline.median] * 3, [parts[k].baseline.median] * 3)
    assert attribution(client, parts).endswith("no part moved beyond its floor")
    # a queue that grew beyond its floor is named, with its percentage of a baseline above the floor
    parts["queue"] = _v(metrics.ENGINE_QUEUE, [0.0060, 0.0061, 0.0059], [0.0020, 0.0021, 0.0019])
    text = attribution(client, parts)
    assert text.endswith("most of it: queue") and "queue +4.0 ms (+200%) regressed" in text, text


def vllm_text(n, ttft_sum, prefill_sum):
    return VLLM_TEXT.format(n=n, ttft_sum=ttft_sum, queue_sum=n * 0.001, prefill_sum=prefill_sum, tpot_sum=n * 0.005)


def test_ttft_c1_reads_the_engine_after_each_request_and_parses_after_its_loop():
    # a deferred reading is the same reading, parsed only when first read
    text = vllm_text(3, 0.06, 0.045)
    lazy = signals.Scrape.deferred(text)
    assert lazy.values._values is None                               # not parsed yet
    assert lazy.total("vllm:time_to_first_token_seconds_count") == signals.Scrape.parse(text).total(
        "vllm:time_to_first_token_seconds_count") == 6.0
    assert lazy.values._text is None and lazy.has("vllm:request_prefill_time_seconds_sum")   # parsed once, text let go

    # three requests at c=1 (client TTFTs 25, 30, 28 ms; the engine's 20, 24, 22 ms, prefill 15, 18, 16 ms);
    # the reading after the second has not seen it yet (the same as the one before): its request is merged
    # into the third's reading, whose delta spans both
    from types import SimpleNamespace
    from llmgate.scenarios.test_latency import _engine_parts
    cum = [(1, 0.020, 0.015), (1, 0.020, 0.015), (3, 0.066, 0.049)]
    readings = [([c], signals.Scrape.deferred(vllm_text(n, t, p)))
                for c, (n, t, p) in zip((0.025, 0.030, 0.028), cum)]
    gate = SimpleNamespace(measure=SimpleNamespace(delta=signals.Delta))
    h = SimpleNamespace(engine=engines.get("vllm"))
    parts = _engine_parts(gate, h, signals.Scrape.deferred(vllm_text(0, 0.0, 0.0)), readings)
    # two label sets of TTFT (both engines add the same): the means are per request all the same
    assert parts["ttft"] == pytest.approx([0.020, 0.023])
    assert parts["prefill"] == pytest.approx([0.015, 0.017])
    assert parts["frontend"] == pytest.approx([0.005, 0.029 - 0.023])    # the merged requests' mean client TTFT
    assert readings == [None, None, None]                              # each reading let go once used


def test_vllm_timers_path_renders_only_the_timers_series_through_prometheus_clients_own_filter():
    # vLLM mounts prometheus_client's app at /metrics/ (its name[] filter); a registry of vLLM's timer
    # histograms beside an unrelated gauge, served by prometheus_client's own exposition server
    import prometheus_client
    from prometheus_client import CollectorRegistry, Gauge, Histogram

    reg = CollectorRegistry()
    from llmgate.engines.vllm import TIMERS

    for hist, _ in TIMERS.values():
        h = Histogram(hist, "a timer", ["model_name"], registry=reg)
        h.labels(model_name="m").observe(0.02)
    Gauge("vllm:kv_cache_usage_perc", "other", registry=reg).set(0.5)
    server, thread = prometheus_client.start_http_server(0, addr="127.0.0.1", registry=reg)
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        path = engines.get("vllm").timers_path()
        assert path is not None and path.startswith("/metrics/?name[]=")
        with httpx.Client() as http:
            reading = signals.scrape_filtered(http, base, path)
            whole = signals.scrape(http, base, "/metrics")
        assert reading is not None
        names = set(reading.values)
        assert "vllm:kv_cache_usage_perc" in whole.values and "vllm:kv_cache_usage_perc" not in names
        assert not [n for n in names if n.endswith("_bucket")], names          # sums and counts only
        assert "vllm:request_prefill_time_seconds_count" in names and "vllm:time_to_first_token_seconds_sum" in names
    finally:
        server.shutdown()
        thread.join(5)


def test_a_filtered_path_the_server_does_not_serve_reads_as_none_not_an_error():
    class NotFound(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(404)
            self.end_headers()

        def log_message(self, *a):
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), NotFound)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        with httpx.Client() as http:
            assert signals.scrape_filtered(http, f"http://127.0.0.1:{srv.server_address[1]}", "/metrics/?name[]=x") is None
    finally:
        srv.shutdown()
