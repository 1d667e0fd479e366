"""Workloads: prompts of an exact token length, and a bounded pool of client processes that runs them
at concurrency N (steady-state runs through the same pool: ``llmgate.load.steady``)."""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import dataclasses
import math
import os
import random
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from functools import cached_property
from pathlib import Path
from typing import Any

import httpx

from llmgate.load.client import async_client, stream_request
from llmgate.load.samples import LoadResult, Sample
from llmgate.process.server import ServerHandle

DEFAULT_REQUEST_TIMEOUT_S = 300.0


class PromptMaker:
    """Prompts whose tokenization by the model's own tokenizer has exactly N tokens.

    A prompt is a seeded random sequence of whole-word tokens (" word" strings that
    are one token each and stay one token when concatenated), so different seeds
    share no prefix and the same seed gives the same prompt on every run.
    """

    def __init__(self, model_path: Path | str):
        from llmgate.models import tokenizer

        self.tok = tokenizer.load(model_path)     # tokenizer.json, or what transformers converts
        self.specials = len(self.tok.encode("", add_special_tokens=True).ids)

    @cached_property
    def words(self) -> list[str]:
        out = []
        for tid in range(self.tok.get_vocab_size()):
            s = self.tok.decode([tid])
            if s[:1] != " " and (self.tok.id_to_token(tid) or "").startswith("\u2581"):
                s = " " + s        # SentencePiece: "▁word" decodes alone without its space
            if len(s) >= 3 and s[0] == " " and s[1:].isascii() and s[1:].isalpha():
                # one token by itself (a SentencePiece normalizer adds its own "▁" to "word")
                if [tid] in (self.tok.encode(s, add_special_tokens=False).ids,
                             self.tok.encode(s[1:], add_special_tokens=False).ids):
                    out.append(s)
        if len(out) < 50:
            raise ValueError("the tokenizer has too few single-token words to build exact-length prompts")
        return sorted(out)

    def count(self, text: str) -> int:
        return len(self.tok.encode(text, add_special_tokens=True).ids)

    def text(self, n_tokens: int, seed: int | str) -> str:
        """A prompt of exactly ``n_tokens`` tokens (special tokens such as BOS included)."""
        body = n_tokens - self.specials
        if body < 1:
            raise ValueError(f"a prompt needs at least {self.specials + 1} tokens with this tokenizer")
        rng = random.Random(f"llmgate:{seed}")
        text = "".join(rng.choice(self.words) for _ in range(body))
        got = self.count(text)
        if got != n_tokens and self.count(text[1:]) == n_tokens:
            text, got = text[1:], n_tokens      # a tokenizer that puts "▁" before the text itself
        if got != n_tokens:
            raise AssertionError(f"prompt of {n_tokens} tokens came out as {got}; the tokenizer merges across words")
        return text

    def lookup(self, n_tokens: int, seed: int | str) -> tuple[str, list[int]]:
        """A prompt of exactly ``n_tokens`` tokens over a small alphabet of single-token words in
        which every ordered pair of those words occurs (a de Bruijn sequence of order 2, repeated to
        the length), and the alphabet's token ids.  Generation restricted to that alphabet then
        ends, at every step, in a pair that occurs earlier in the context: a prompt-lookup drafter
        whose shortest n-gram is 1 or 2 tokens finds a match and proposes, whatever the weights
        emit.  The alphabet is the largest with all its pairs in the prompt (7 words at 64 tokens)."""
        body = n_tokens - self.specials
        k = math.isqrt(body - 1) if body > 1 else 0
        if k < 2:
            raise ValueError(f"a lookup prompt needs at least {self.specials + 5} tokens with this tokenizer")
        rng = random.Random(f"llmgate-lookup:{seed}")
        alphabet = rng.sample(self.words, min(k, len(self.words)))
        cycle = _de_bruijn_pairs(len(alphabet))
        text = "".join(alphabet[cycle[i % len(cycle)]] for i in range(body))
        got = self.count(text)
        if got != n_tokens and self.count(text[1:]) == n_tokens:
            text, got = text[1:], n_tokens      # a tokenizer that puts "▁" before the text itself
        if got != n_tokens:
            raise AssertionError(f"prompt of {n_tokens} tokens came out as {got}; the tokenizer merges across words")
        ids = sorted(set(self.tok.encode(text, add_special_tokens=False).ids))
        if len(ids) != len(alphabet):
            raise AssertionError(f"a lookup prompt over {len(alphabet)} words came out as {len(ids)} distinct tokens")
        return text, ids

    def shared_prefix(self, prefix_tokens: int, suffix_tokens: int, prefix_seed: int | str, suffix_seed: int | str) -> str:
        """A prompt whose first ``prefix_tokens`` tokens are the same for the same ``prefix_seed``."""
        prefix = self.text(prefix_tokens, prefix_seed)
        rng = random.Random(f"llmgate-suffix:{suffix_seed}")
        suffix = "".join(rng.choice(self.words) for _ in range(suffix_tokens))
        return prefix + suffix


def _de_bruijn_pairs(k: int) -> list[int]:
    """A cyclic sequence over ``range(k)`` of length k² in which every ordered pair (a, b), a == b
    included, occurs exactly once (the de Bruijn sequence B(k, 2), Lyndon-word construction); its
    first k² + 1 elements, read linearly, hold every pair."""
    seq: list[int] = []
    a = [0] * 3

    def db(t: int, p: int) -> None:
        if t > 2:
            if 2 % p == 0:
                seq.extend(a[1:p + 1])
            return
        a[t] = a[t - p]
        db(t + 1, p)
        for j in range(a[t - p] + 1, k):
            a[t] = j
            db(t + 1, t)

    db(1, 1)
    return seq


@dataclasses.dataclass
class Request:
    payload: dict[str, Any]
    path: str = "/v1/completions"
    prompt_tokens: int | None = None


def completion(handle: ServerHandle, prompt: str, max_tokens: int, *, fixed_length: bool = True,
               prompt_tokens: int | None = None, **fields: Any) -> Request:
    """A streaming /v1/completions request, greedy, with the engine's fields for exact output length."""
    payload: dict[str, Any] = {"model": handle.model_name, "prompt": prompt, "max_tokens": max_tokens,
                               "temperature": 0.0}
    payload.update(handle.engine.stream_fields())
    if fixed_length:
        payload.update(handle.engine.fixed_length_fields(handle.config, handle.eos_token_id))
    payload.update(fields)
    return Request(payload, "/v1/completions", prompt_tokens)


def fixed_requests(handle: ServerHandle, prompts: PromptMaker, n: int, prompt_tokens: int, output_tokens: int,
                   seed: str) -> list[Request]:
    """``n`` requests with distinct prompts of ``prompt_tokens`` tokens, each generating ``output_tokens``."""
    return [completion(handle, prompts.text(prompt_tokens, f"{seed}:{i}"), output_tokens, prompt_tokens=prompt_tokens)
            for i in range(n)]


STREAMS_PER_WORKER = 4      # concurrent streams one client process carries before another is added


def client_workers(concurrency: int) -> int:
    """Client processes for ``concurrency`` streams: one per 4 streams, at most a quarter of the
    cores (the engine needs the rest; on a 2-core machine: always one).  Seen on H200s: one
    process spent 58–79% of a core at c=16 (~5,500 tok/s), and 49–58% at c=8 (2,200–2,800 tok/s)."""
    env = os.environ.get("LLMGATE_CLIENT_WORKERS")
    if env:
        return max(1, int(env))
    return max(1, min(math.ceil(concurrency / STREAMS_PER_WORKER), (os.cpu_count() or 1) // 4))


# a duet's turns (runner.duet.Turns.turn bound to a side): a context manager that holds while one
# request (or one window) of this side has the machine to itself
Turn = Callable[[], AbstractContextManager[Any]]


def run(handle: ServerHandle, requests: list[Request], concurrency: int,
        timeout: float = DEFAULT_REQUEST_TIMEOUT_S, label: str = "", workers: int | None = None,
        turn: Turn | None = None) -> LoadResult:
    """Send ``requests`` with at most ``concurrency`` in flight; wall time covers first send to last end.
    With several client ``workers`` (default: ``client_workers``) the requests are dealt round-robin
    to processes that each keep their share of the concurrency in flight.  ``turn`` (a duet, one
    request at a time only): each request is sent inside its own turn, so that another server's
    requests interleave with these one by one."""
    if concurrency < 1:
        raise ValueError("concurrency must be at least 1")
    if turn is not None and concurrency != 1:
        raise ValueError("turns interleave requests sent one at a time (concurrency 1)")
    handle.check_alive()
    workers = min(workers or client_workers(concurrency), concurrency, max(1, len(requests)))
    headers = handle.auth_headers()
    if workers <= 1:
        t0 = time.perf_counter()
        samples = asyncio.run(gather_requests(handle.base_url, headers, requests, concurrency, timeout, turn))
        wall = time.perf_counter() - t0
    else:
        pool = client_pool(workers).executor
        shares = [concurrency // workers + (i < concurrency % workers) for i in range(workers)]
        futures = [pool.submit(_worker, handle.base_url, headers, requests[i::workers], shares[i], timeout)
                   for i in range(workers)]
        samples = [None] * len(requests)
        for i, f in enumerate(futures):
            samples[i::workers] = f.result()
        # perf_counter is the system's monotonic clock: comparable between processes
        wall = max(x.start + x.e2e for x in samples) - min(x.start for x in samples)
    if any(not x.ok for x in samples):
        handle.check_alive()  # a dead server explains every failure at once
    return LoadResult(list(samples), wall, concurrency, label)


async def gather_requests(base_url: str, headers: dict[str, str], requests: list[Request], concurrency: int,
                  timeout: float, turn: Turn | None = None) -> list[Sample]:
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    sem = asyncio.Semaphore(concurrency)
    async with async_client(limits=limits, timeout=httpx.Timeout(timeout, connect=10.0)) as http:
        async def one(req: Request) -> Sample:
            async with sem:
                # waiting for a turn blocks this loop: at concurrency 1 nothing else of it is in flight
                with turn() if turn is not None else contextlib.nullcontext():
                    x = await stream_request(http, base_url + req.path, req.payload, timeout, headers)
                x.requested_prompt_tokens = req.prompt_tokens
                return x

        return list(await asyncio.gather(*(one(r) for r in requests)))


def _worker(base_url: str, headers: dict[str, str], requests: list[Request], concurrency: int,
            timeout: float) -> list[Sample]:
    return asyncio.run(gather_requests(base_url, headers, requests, concurrency, timeout))


@dataclasses.dataclass
class _ClientPool:
    """Client processes of one size, started once (spawned: the parent has threads) and kept for the
    session, for fixed runs and steady runs alike.  Each process holds (``steady_init``) the queue to
    this process, the stop flag and the start signal that a steady run uses."""

    executor: concurrent.futures.ProcessPoolExecutor
    queue: Any
    stop: Any
    go: Any

    def pids(self) -> list[int]:
        # the executor names its processes only in a private table: read in this one place
        return [p.pid for p in (self.executor._processes or {}).values()]


_POOLS: dict[int, _ClientPool] = {}


def client_pool(workers: int) -> _ClientPool:
    if workers not in _POOLS:
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        q, flag, go = ctx.Queue(), ctx.Event(), ctx.Event()
        executor = concurrent.futures.ProcessPoolExecutor(workers, mp_context=ctx, initializer=steady_init,
                                                          initargs=(q, flag, go))
        list(executor.map(_warm, range(workers)))     # imports done before anything is timed
        _POOLS[workers] = _ClientPool(executor, q, flag, go)
    return _POOLS[workers]


def _warm(_: int) -> int:
    import_http_backend()
    return os.getpid()


def import_http_backend() -> None:
    """What httpx imports on its first connection (anyio's asyncio backend, 0.05–0.1 s), imported
    ahead: inside a run it would stall the event loop (the streams' stagger) or inflate the probe."""
    try:
        import anyio._backends._asyncio  # noqa: F401
    except ImportError:
        pass


def client_pids() -> list[int]:
    """Process ids of the client worker processes (for CPU accounting)."""
    return [pid for pool in _POOLS.values() for pid in pool.pids()]


@atexit.register
def _shutdown_pools() -> None:
    for pool in _POOLS.values():
        pool.stop.set()               # a steady run still waiting for its signal or its end gives up
        pool.go.set()
        pool.executor.shutdown(cancel_futures=True)
    _POOLS.clear()


def decode_run(handle: ServerHandle, prompts: PromptMaker, prompt_tokens: int, output_tokens: int, repeats: int,
               warmup: int, timeout: float, seed: str, turn: Turn | None = None) -> LoadResult:
    """Warm-up requests (discarded), then ``repeats`` requests one at a time, each a fresh prompt
    (``turn``: each inside its own turn of a duet)."""
    if warmup:
        run(handle, fixed_requests(handle, prompts, warmup, prompt_tokens, output_tokens, f"{seed}-warm"), 1, timeout,
            turn=turn)
    return run(handle, fixed_requests(handle, prompts, repeats, prompt_tokens, output_tokens, seed), 1, timeout,
               label=f"decode p={prompt_tokens} out={output_tokens}", turn=turn)


# in a client process: the queue to the controller, the stop flag and the start signal
STEADY: dict[str, Any] = {}
READY = None                      # what a client process puts on the queue once it is ready to send


def steady_init(queue, stop_flag, go) -> None:
    STEADY.update(queue=queue, stop=stop_flag, go=go)
