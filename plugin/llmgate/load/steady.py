"""Steady-state runs: a closed loop (N streams always in flight) or Poisson arrivals, warmed up
until throughput stops rising and then measured through a window (``Steady``), decided by a
controller in this process from every completion the client processes report (``steady``).
The client processes are ``workloads``' pool; each holds the queue, stop flag and start signal
that a steady run uses (``workloads.STEADY``)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
import time
from typing import Any

import httpx

from llmgate.engines.meters import Poller
from llmgate.load import workloads
from llmgate.load.client import async_client, stream_request, sync_client
from llmgate.load.samples import Sample, SteadyResult
from llmgate.load.workloads import (DEFAULT_REQUEST_TIMEOUT_S, PromptMaker, Request, client_workers, completion,
                                    gather_requests, import_http_backend)
from llmgate.process.server import ServerHandle


@dataclasses.dataclass(frozen=True)
class Steady:
    """How a steady-state run is timed (``[scenarios]`` window_*; defaults per device).

    Warm-up (discarded) is cut into segments of at least ``warm_segment_s`` and at least one
    completion per stream; it ends when a segment's throughput is no more than ``warm_tol`` above
    the median of the two before it (throughput stopped rising), or at ``warm_max_s`` (said in the
    notes).  The window then lasts until both ``min_s`` and ``min_requests`` requests that lived in
    it are reached (at most ``max_s``, said in the notes); no new request is sent after it closes,
    and the requests in flight drain outside it."""

    min_s: float = 5.0
    min_requests: int = 16
    max_s: float = 60.0
    warm_segment_s: float = 1.5
    warm_max_s: float = 15.0
    warm_tol: float = 0.02
    poll_s: float = 0.25            # the engine's /metrics is read this often through the run (0: never)
    # the server is already warm from this load (a duet's later round of it): one warm-up segment (the
    # load filling up) and the window opens
    settled: bool = False

    def __post_init__(self):
        if self.min_s <= 0 or self.min_requests < 1 or self.max_s < self.min_s or self.warm_segment_s <= 0 \
                or self.warm_max_s < 0 or self.warm_tol < 0 or self.poll_s < 0:
            raise ValueError(f"steady-state settings out of range: {self}")


@dataclasses.dataclass(frozen=True)
class RequestSpec:
    """What every request of a steady run looks like: a fresh prompt of ``prompt_tokens`` tokens
    (seed ``{seed}:{stream}:{i}``: no two requests share a prefix) and the payload's other fields.
    With ``output_spread`` s > 0 request i asks for ``max_tokens`` × (1 ± s), drawn from the same
    seed (so boot after boot the same requests ask for the same lengths), at least 1."""

    tokenizer: str
    prompt_tokens: int
    seed: str
    payload: dict[str, Any]
    path: str = "/v1/completions"
    output_spread: float = 0.0

    def output_tokens(self, tag: str, i: int) -> int:
        base = int(self.payload["max_tokens"])
        if self.output_spread <= 0:
            return base
        u = random.Random(f"llmgate-length:{self.seed}:{tag}:{i}").uniform(-1.0, 1.0)
        return max(1, round(base * (1.0 + self.output_spread * u)))

    def request(self, prompts: PromptMaker, tag: str, i: int) -> Request:
        return Request({**self.payload, "prompt": prompts.text(self.prompt_tokens, f"{self.seed}:{tag}:{i}"),
                        "max_tokens": self.output_tokens(tag, i)},
                       self.path, self.prompt_tokens)


def spec(handle: ServerHandle, prompt_tokens: int, output_tokens: int, seed: str, output_spread: float = 0.0,
         **fields: Any) -> RequestSpec:
    """The request of ``completion`` (greedy, exact output length), prompts made per request;
    ``output_spread``: see ``RequestSpec``."""
    if not 0.0 <= output_spread < 1.0:
        raise ValueError("output_spread must be in [0, 1)")
    payload = completion(handle, "", output_tokens, prompt_tokens=prompt_tokens, **fields).payload
    payload.pop("prompt")
    return RequestSpec(str(handle.tokenizer_path), prompt_tokens, seed, payload, output_spread=output_spread)


class _Controller:
    """Decides, from completions as they arrive, when the warm-up ends and when the window closes."""

    def __init__(self, steady: Steady, concurrency: int, mode: str, rate: float | None, t0: float):
        self.s, self.n, self.mode, self.rate = steady, concurrency, mode, rate
        self.t0 = t0
        self.seg_start, self.seg_tokens, self.seg_done = t0, 0.0, 0
        self.segments: list[float] = []
        self.window_start: float | None = None
        self.window_end: float | None = None
        self.in_window = 0
        self.notes: list[str] = []
        self.ended_by = ""
        self.unsettled = ""        # "rising" | "falling": the warm-up ended at its cap with throughput still moving
        self.failures = 0
        self.done = 0

    def add(self, start: float, end: float, tokens: float, ok: bool) -> None:
        self.done += 1
        if not ok:
            self.failures += 1
            return
        if self.window_start is None:
            self.seg_tokens += tokens
            self.seg_done += 1
            # a segment: one completion per stream of a closed loop; under Poisson arrivals (whose
            # concurrency only sizes the client) two, or a slow rate's warm-up would end at its cap
            need = self.n if self.mode == "closed" else min(self.n, 2)
            if end - self.seg_start >= self.s.warm_segment_s and self.seg_done >= need:
                self.segments.append(self.seg_tokens / (end - self.seg_start))
                self.seg_start, self.seg_tokens, self.seg_done = end, 0.0, 0
                self._maybe_end_warmup(end)
        elif start >= self.window_start:
            self.in_window += 1

    def _maybe_end_warmup(self, now: float) -> None:
        seg = self.segments
        if self.s.settled:
            self._open(now, "one segment (the server warm from this load's earlier round)")
            return
        if self.mode == "poisson":
            # throughput follows the arrival rate: two segments settle the server
            if len(seg) >= 2:
                self._open(now, "2 segments at the arrival rate")
            return
        if len(seg) >= 3 and seg[-1] <= (1 + self.s.warm_tol) * (seg[-3] + seg[-2]) / 2:
            self._open(now, "throughput stopped rising")

    def _open(self, now: float, why: str) -> None:
        self.window_start = now
        self.ended_by = why

    def stop_now(self, now: float) -> bool:
        """True when no new request should be sent (the window has closed, or requests keep failing)."""
        if self.window_end is not None:
            return True
        if self.failures > max(3, self.done // 10):
            self.window_end = now
            self.notes.append(f"stopped early: {self.failures} of {self.done} requests failed")
            return True
        if self.window_start is None:
            if now - self.t0 >= self.s.warm_max_s:
                self._open(now, f"cap of {self.s.warm_max_s:g} s")
                segs = ', '.join(f'{x:.1f}' for x in self.segments)
                self.unsettled = self._moving()
                if self.unsettled:
                    self.notes.append(f"warm-up ended at its cap of {self.s.warm_max_s:g} s with throughput still "
                                      f"{self.unsettled} (segments: {segs} tok/s)")
                else:
                    self.notes.append(f"warm-up ended at its cap of {self.s.warm_max_s:g} s after "
                                      f"{len(self.segments)} segment(s), too few to tell whether throughput settled"
                                      + (f" (segments: {segs} tok/s)" if segs else ""))
            return False
        age = now - self.window_start
        if (age >= self.s.min_s and self.in_window >= self.s.min_requests) or age >= self.s.max_s:
            if age >= self.s.max_s and self.in_window < self.s.min_requests:
                self.notes.append(f"window closed at its cap of {self.s.max_s:g} s with {self.in_window} of "
                                  f"{self.s.min_requests} requests")
            self.window_end = now
            return True
        return False

    def _moving(self) -> str:
        """At the warm-up's cap: "rising" or "falling" where the last segment's throughput is more than
        ``warm_tol`` away from the mean of the (up to two) before it: the server, or the machine, was
        still changing speed when the window opened; "" where it was not, or fewer than two segments cannot tell."""
        seg = self.segments
        if len(seg) < 2:
            return ""
        before = sum(seg[-3:-1]) / len(seg[-3:-1])
        if seg[-1] > (1 + self.s.warm_tol) * before:
            return "rising"
        if seg[-1] < (1 - self.s.warm_tol) * before:
            return "falling"
        return ""

    def warmup_info(self) -> dict[str, Any]:
        return {"seconds": round((self.window_start or self.t0) - self.t0, 3), "ended_by": self.ended_by,
                "segments_tok_s": [round(x, 2) for x in self.segments], "unsettled": self.unsettled}


async def _steady_streams(base_url: str, headers: dict[str, str], spec_: RequestSpec, concurrency: int,
                          rate: float | None, timeout: float, tag: str, report, stop,
                          stagger: tuple[float, int] = (0.0, 0), begin=None) -> list[Sample]:
    """``concurrency`` closed-loop streams (or, with ``rate``, Poisson arrivals at ``rate``/s) until
    ``stop()``; each finished request goes to ``report(start, end, tokens, ok)``.  ``stagger``
    (seconds, index of this process's first stream): stream k starts k × seconds late.  ``begin()``,
    called once the client is set up (it may block), says when the clock starts."""
    prompts = _prompt_maker(spec_.tokenizer)
    samples: list[Sample] = []
    counter = iter(range(10**9))
    cap = concurrency if rate is None else 4096
    limits = httpx.Limits(max_connections=cap, max_keepalive_connections=min(cap, 256))
    async with async_client(limits=limits, timeout=httpx.Timeout(timeout, connect=10.0)) as http:
        if begin is not None:
            begin()
        t_start = time.perf_counter()

        async def one() -> None:
            req = spec_.request(prompts, tag, next(counter))
            x = await stream_request(http, base_url + req.path, req.payload, timeout, headers)
            x.requested_prompt_tokens = req.prompt_tokens
            samples.append(x)
            report(x.start, x.end, float(x.completion_tokens or 0) if x.ok else 0.0, x.ok)

        if rate is None:
            async def loop(k: int) -> None:
                await asyncio.sleep(max(0.0, t_start + stagger[0] * (stagger[1] + k) - time.perf_counter()))
                while not stop():
                    await one()
            await asyncio.gather(*(loop(k) for k in range(concurrency)))
        else:
            rng = random.Random(f"llmgate-arrivals:{spec_.seed}:{tag}")
            tasks: set[asyncio.Task] = set()
            t = t_start
            while not stop():
                t += rng.expovariate(rate)
                while not stop() and (wait := t - time.perf_counter()) > 0:
                    await asyncio.sleep(min(wait, 0.1))
                if stop():
                    break
                task = asyncio.create_task(one())
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            if tasks:
                await asyncio.gather(*tasks)
    return samples


_PROMPT_MAKERS: dict[str, PromptMaker] = {}


def _prompt_maker(tokenizer: str) -> PromptMaker:
    if tokenizer not in _PROMPT_MAKERS:
        _PROMPT_MAKERS[tokenizer] = PromptMaker(tokenizer)
        _ = _PROMPT_MAKERS[tokenizer].words
    return _PROMPT_MAKERS[tokenizer]


def _steady_worker(base_url: str, headers: dict[str, str], spec_: RequestSpec, concurrency: int,
                   rate: float | None, timeout: float, tag: str, stagger: tuple[float, int]) -> list[Sample]:
    q, flag, go = workloads.STEADY["queue"], workloads.STEADY["stop"], workloads.STEADY["go"]

    def begin() -> None:               # prompt maker and HTTP client ready: wait for the others
        q.put(workloads.READY)
        go.wait()                      # every process's streams start together: the stagger holds across them

    return asyncio.run(_steady_streams(base_url, headers, spec_, concurrency, rate, timeout, tag,
                                       lambda *a: q.put(a), flag.is_set, stagger, begin))


def steady(handle: ServerHandle, spec_: RequestSpec, concurrency: int, settings: Steady,
           timeout: float = DEFAULT_REQUEST_TIMEOUT_S, rate: float | None = None, label: str = "",
           workers: int | None = None) -> SteadyResult:
    """A steady-state run (see ``Steady``): ``concurrency`` streams always in flight, or with
    ``rate`` a Poisson arrival process of that many requests per second (``concurrency`` then only
    sizes the client).  With several client ``workers`` each process carries its share and reports
    every completion to this process, which decides when the warm-up ends and the window closes."""
    if concurrency < 1:
        raise ValueError("concurrency must be at least 1")
    if rate is not None and rate <= 0:
        raise ValueError("an arrival rate must be positive")
    handle.check_alive()
    workers = min(workers or client_workers(concurrency), concurrency)
    headers = handle.auth_headers()
    mode = "closed" if rate is None else "poisson"
    poller = None
    if settings.poll_s > 0 and handle.engine.metrics_path is not None:
        poller = Poller(sync_client(timeout=10.0), handle.base_url + handle.engine.metrics_path, headers,
                        settings.poll_s)
    with poller if poller is not None else contextlib.nullcontext():
        res = _steady_run(handle, spec_, concurrency, settings, timeout, rate, label, workers, headers, mode)
    res.engine_readings = poller
    if poller is not None:
        poller.http.close()
    if res.failures:
        handle.check_alive()
    return res


def _steady_run(handle: ServerHandle, spec_: RequestSpec, concurrency: int, settings: Steady, timeout: float,
                rate: float | None, label: str, workers: int, headers: dict[str, str], mode: str) -> SteadyResult:
    # Closed-loop streams of one output length that all start together stay in lockstep: every
    # request of a wave ends in the same step and the next wave's prefills land in one step.
    # Seen on the H200 (8B shape, c=8): TTFT p50 32–64 ms from one window part to the next as
    # the streams fell in and out of step.  So the streams start one request's time ÷ N apart
    # (a lone probe request, part of the warm-up, gives that time) and keep their spacing.
    # The client's own start-up (its processes, the prompt maker) happens before the warm-up's
    # clock starts: the warm-up and its cap are the server's.
    prompts = _prompt_maker(spec_.tokenizer)
    import_http_backend()
    pool = None
    if workers > 1:
        clients = workloads.client_pool(workers)
        pool, q, flag, go = clients.executor, clients.queue, clients.stop, clients.go
    probe: list[Sample] = []
    stagger = 0.0
    if rate is None and concurrency > 1:
        req = spec_.request(prompts, "probe", 0)
        req.payload["max_tokens"] = spec_.payload["max_tokens"]      # the mean length, whatever the spread
        probe = asyncio.run(gather_requests(handle.base_url, headers, [req], 1, timeout))
        if probe[0].ok:
            stagger = probe[0].e2e / concurrency
    if pool is None:
        ctls: list[_Controller] = []

        def begin() -> None:
            ctls.append(_Controller(settings, concurrency, mode, rate, time.perf_counter()))

        def report(start, end, tokens, ok):
            ctls[0].add(start, end, tokens, ok)

        samples = asyncio.run(_steady_streams(handle.base_url, headers, spec_, concurrency, rate, timeout, "s0",
                                              report, lambda: ctls[0].stop_now(time.perf_counter()), (stagger, 0),
                                              begin))
        ctl = ctls[0]
        t0 = ctl.t0
    else:
        import queue as queue_mod

        flag.clear()
        go.clear()
        while True:                       # nothing left from an earlier run
            try:
                q.get_nowait()
            except queue_mod.Empty:
                break
        shares = [concurrency // workers + (i < concurrency % workers) for i in range(workers)]
        futures = [pool.submit(_steady_worker, handle.base_url, headers, spec_, shares[i],
                               None if rate is None else rate / workers, timeout, f"s{i}",
                               (stagger, sum(shares[:i]))) for i in range(workers)]
        try:
            ready = 0                     # each process has its prompt maker and client: the clock starts
            while ready < workers and not any(f.done() for f in futures):
                try:
                    ready += q.get(timeout=0.05) is workloads.READY
                except queue_mod.Empty:
                    pass
            if ready < workers:           # a process failed before sending: its error is raised below
                flag.set()
            t0 = time.perf_counter()
            ctl = _Controller(settings, concurrency, mode, rate, t0)
            go.set()
            while not all(f.done() for f in futures):
                try:
                    ctl.add(*q.get(timeout=0.05))
                except queue_mod.Empty:
                    pass
                if ctl.stop_now(time.perf_counter()):
                    flag.set()
        finally:                          # an error here must not leave the processes waiting or sending
            flag.set()
            go.set()
        samples = [x for f in futures for x in f.result()]
        samples.sort(key=lambda x: x.start)
    samples = probe + samples
    wall = max((x.end for x in samples), default=t0) - t0
    if ctl.window_start is None or ctl.window_end is None:
        ctl.notes.append("no steady-state window was reached")
        ctl.window_start = ctl.window_start or t0
        ctl.window_end = ctl.window_end or (t0 + wall)
    return SteadyResult(samples, wall, concurrency, label, mode=mode, rate=rate,
                        window=(ctl.window_start, ctl.window_end),
                        warmup={**ctl.warmup_info(), "stagger_s": round(stagger, 4)}, notes=ctl.notes)
