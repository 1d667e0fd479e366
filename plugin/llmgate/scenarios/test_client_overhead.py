"""The client is a measuring instrument: its TTFT must stay within a few ms of the engine's
own figure (vLLM: vllm:time_to_first_token_seconds), and it must never be the bottleneck at
concurrency 8 and up (its CPU time stays a small share of the wall time).

Per repeat, the mean client TTFT minus the mean engine TTFT over the same requests (from
the engine's histogram sum/count deltas) is recorded, at c=1 and at c=8 and 16, and the CPU
share of the busiest client process (at high concurrency on a many-core machine the load is
spread over several client processes: llmgate.figures.client_workers).
"""

import statistics
import time

import psutil
import pytest

import llmgate
from llmgate import figures, metrics, requests

# client TTFT − engine TTFT, median over repeats, at c=1.  What it holds is the client and the API
# server's own path (HTTP, the handler before the engine's clock starts, the streamed event back).
# On a GPU host "a few ms" (H200: 3.7–5.7 ms); on a CPU entry the client, the API server and the
# engine share the cores (on 2 cores the engine's busy loop and its worker take most of both), so
# the same path measured 4 ms on a quiet hour and 11.3 ms (10.3–13.3) on a slow one: 25 ms there
MAX_OVERHEAD_S = {"gpu": 0.010, "cpu": 0.025}
MAX_CLIENT_CPU_SHARE = 0.5    # half of one core: far from saturating the client process


def cpu(p: psutil.Process) -> float:
    t = p.cpu_times()
    return t.user + t.system


@llmgate.scenario()
def test_client_overhead(gate):
    h, st = gate.server, gate.settings
    me = psutil.Process()
    summary = {}
    for n in (1, 8, 16):
        gate.run(requests.fresh(h, gate.prompts, n, 128, 32, f"overhead-warm-{n}"), n, account=False)
        overheads, cpu_shares = [], []
        for r in range(st.repeats):
            reqs = requests.fresh(h, gate.prompts, max(2 * n, 4), 128, 32, f"overhead-c{n}-{r}")
            before = gate.scrape()
            procs = [me, *(psutil.Process(pid) for pid in figures.client_pids())]
            cpu0, t0 = [cpu(p) for p in procs], time.perf_counter()
            res = gate.run(reqs, n)
            cpu1, wall = [cpu(p) for p in procs], time.perf_counter() - t0
            after = gate.scrape()
            server = h.engine.server_ttft(figures.delta(before, after))
            if server is None:
                pytest.skip(f"{h.engine.name} exposes no server-side TTFT to compare the client with")
            overheads.append(sum(res.ttfts()) / len(res.ttfts()) - server)
            cpu_shares.append(max(b - a for a, b in zip(cpu0, cpu1)) / wall)
        gate.record(metrics.CLIENT_OVERHEAD, overheads, f"c{n}")
        gate.record(metrics.CLIENT_CPU, cpu_shares, f"c{n}", client_processes=figures.client_workers(n))
        summary[n] = (statistics.median(overheads), statistics.median(cpu_shares))
    limit = MAX_OVERHEAD_S[gate.entry.device]
    assert summary[1][0] < limit, (
        f"client TTFT is {summary[1][0] * 1000:.1f} ms above the engine's own at c=1 (limit {limit * 1000:.0f} ms "
        f"on a {gate.entry.device} entry)")
    for n in (8, 16):
        assert summary[n][1] < MAX_CLIENT_CPU_SHARE, (
            f"the client used {summary[n][1]:.0%} of a core at c={n}: it could become the bottleneck")
