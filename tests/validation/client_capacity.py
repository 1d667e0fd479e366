"""How many streamed events per second can llmgate's client take, and at what CPU cost?

A stub OpenAI-style server (a subprocess, loopback) streams completions event by event, each
in its own TCP write, as fast as the client reads; the client (llmgate.load.workloads.run) reads them
at concurrency C with 1, 2, … client processes.  Printed: events/s and the CPU share of the
busiest client process.  Independent of any engine, so it can run on any machine:

    python tests/validation/client_capacity.py --concurrency 16 32 --workers 1 2
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "plugin"))

EVENT = "data: " + json.dumps({"id": "cmpl-1", "object": "text_completion", "created": 1, "model": "m", "choices": [
    {"index": 0, "text": " tok", "logprobs": None, "finish_reason": None}],
    "usage": {"prompt_tokens": 128, "total_tokens": 200, "completion_tokens": 999999}}) + "\n\n"


def stub(port: int, events: int, gap_s: float) -> None:
    async def handle(r, w):
        while True:
            if not await r.readline():
                return
            length = 0
            while (line := await r.readline()) not in (b"\r\n", b""):
                k, v = line.decode().split(":", 1)
                if k.lower() == "content-length":
                    length = int(v)
            await r.readexactly(length)
            w.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
            for i in range(events):
                d = EVENT.replace("999999", str(i + 1)).encode()
                w.write(b"%x\r\n%s\r\n" % (len(d), d))
                await w.drain()
                await asyncio.sleep(gap_s)
            d = b"data: [DONE]\n\n"
            w.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(d), d))
            await w.drain()

    async def main():
        server = await asyncio.start_server(handle, "127.0.0.1", port)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


class Handle:
    """What load.run and load.steady need of a server handle; the stub has no /metrics."""

    class engine:
        metrics_path = None

    def __init__(self, url):
        self.base_url = url

    def check_alive(self):
        pass

    def auth_headers(self):
        return {}


def main() -> int:
    import psutil

    from llmgate.load import workloads as load

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--concurrency", type=int, nargs="+", default=[16, 32])
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--events", type=int, default=500)
    ap.add_argument("--gap-ms", type=float, default=1.0, help="pause of the stub between events of one stream")
    args = ap.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, __file__, "--stub", str(port), str(args.events), str(args.gap_ms / 1000)])
    time.sleep(1.0)
    h = Handle(f"http://127.0.0.1:{port}")
    try:
        for c in args.concurrency:
            for w in args.workers:
                reqs = [load.Request({"prompt": "x", "max_tokens": args.events}) for _ in range(c)]
                load.run(h, reqs[:w], c, 60, workers=w)                     # start the processes
                procs = [psutil.Process(), *(psutil.Process(p) for p in load.client_pids())]
                c0, t0 = [sum(p.cpu_times()[:2]) for p in procs], time.perf_counter()
                res = load.run(h, reqs, c, 60, workers=w)
                wall = time.perf_counter() - t0
                shares = [(sum(p.cpu_times()[:2]) - a) / wall for p, a in zip(procs, c0)]
                events = sum(len(x.chunk_offsets) for x in res.ok)
                print(f"c={c:3d} workers={w}: {len(res.ok)}/{c} ok, {events / wall:,.0f} events/s, busiest client "
                      f"process {max(shares):.0%} of a core ({', '.join(f'{x:.0%}' for x in shares)})", flush=True)
    finally:
        proc.kill()
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--stub":
        stub(int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]))
    else:
        raise SystemExit(main())
