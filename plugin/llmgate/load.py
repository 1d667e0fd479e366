"""Workloads: prompts of an exact token length, and a bounded pool that runs them at concurrency N."""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import dataclasses
import math
import os
import random
import time
from functools import cached_property
from pathlib import Path
from typing import Any

import httpx

from .client import stream_request
from .samples import LoadResult, Sample
from .server import ServerHandle

DEFAULT_REQUEST_TIMEOUT_S = 300.0


class PromptMaker:
    """Prompts whose tokenization by the model's own tokenizer has exactly N tokens.

    A prompt is a seeded random sequence of whole-word tokens (" word" strings that
    are one token each and stay one token when concatenated), so different seeds
    share no prefix and the same seed gives the same prompt on every run.
    """

    def __init__(self, model_path: Path | str):
        from tokenizers import Tokenizer

        path = Path(model_path) / "tokenizer.json"
        if not path.is_file():
            raise FileNotFoundError(f"{path}: the model folder has no tokenizer.json, needed for exact-length prompts")
        self.tok = Tokenizer.from_file(str(path))
        self.specials = len(self.tok.encode("", add_special_tokens=True).ids)

    @cached_property
    def words(self) -> list[str]:
        out = []
        for tid in range(self.tok.get_vocab_size()):
            s = self.tok.decode([tid])
            if len(s) >= 3 and s[0] == " " and s[1:].isascii() and s[1:].isalpha():
                if self.tok.encode(s, add_special_tokens=False).ids == [tid]:
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
        if got != n_tokens:
            raise AssertionError(f"prompt of {n_tokens} tokens came out as {got}; the tokenizer merges across words")
        return text

    def shared_prefix(self, prefix_tokens: int, suffix_tokens: int, prefix_seed: int | str, suffix_seed: int | str) -> str:
        """A prompt whose first ``prefix_tokens`` tokens are the same for the same ``prefix_seed``."""
        prefix = self.text(prefix_tokens, prefix_seed)
        rng = random.Random(f"llmgate-suffix:{suffix_seed}")
        suffix = "".join(rng.choice(self.words) for _ in range(suffix_tokens))
        return prefix + suffix


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


def run(handle: ServerHandle, requests: list[Request], concurrency: int,
        timeout: float = DEFAULT_REQUEST_TIMEOUT_S, label: str = "", workers: int | None = None) -> LoadResult:
    """Send ``requests`` with at most ``concurrency`` in flight; wall time covers first send to last end.
    With several client ``workers`` (default: ``client_workers``) the requests are dealt round-robin
    to processes that each keep their share of the concurrency in flight."""
    if concurrency < 1:
        raise ValueError("concurrency must be at least 1")
    handle.check_alive()
    workers = min(workers or client_workers(concurrency), concurrency, max(1, len(requests)))
    headers = handle.auth_headers()
    if workers <= 1:
        t0 = time.perf_counter()
        samples = asyncio.run(_gather(handle.base_url, headers, requests, concurrency, timeout))
        wall = time.perf_counter() - t0
    else:
        pool = _pool(workers)
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


async def _gather(base_url: str, headers: dict[str, str], requests: list[Request], concurrency: int,
                  timeout: float) -> list[Sample]:
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    sem = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(timeout, connect=10.0)) as http:
        async def one(req: Request) -> Sample:
            async with sem:
                x = await stream_request(http, base_url + req.path, req.payload, timeout, headers)
                x.requested_prompt_tokens = req.prompt_tokens
                return x

        return list(await asyncio.gather(*(one(r) for r in requests)))


def _worker(base_url: str, headers: dict[str, str], requests: list[Request], concurrency: int,
            timeout: float) -> list[Sample]:
    return asyncio.run(_gather(base_url, headers, requests, concurrency, timeout))


_POOLS: dict[int, concurrent.futures.ProcessPoolExecutor] = {}


def _pool(workers: int) -> concurrent.futures.ProcessPoolExecutor:
    """Client processes, started once (spawned: the parent has threads) and kept for the session."""
    if workers not in _POOLS:
        import multiprocessing

        _POOLS[workers] = concurrent.futures.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))
        list(_POOLS[workers].map(_warm, range(workers)))     # imports done before anything is timed
    return _POOLS[workers]


def _warm(_: int) -> int:
    return os.getpid()


def client_pids() -> list[int]:
    """Process ids of the client worker processes (for CPU accounting)."""
    return [p.pid for pool in _POOLS.values() for p in (pool._processes or {}).values()]


@atexit.register
def _shutdown_pools() -> None:
    for pool in _POOLS.values():
        pool.shutdown(cancel_futures=True)
    _POOLS.clear()


def decode_run(handle: ServerHandle, prompts: PromptMaker, prompt_tokens: int, output_tokens: int, repeats: int,
               warmup: int, timeout: float, seed: str) -> LoadResult:
    """Warm-up requests (discarded), then ``repeats`` requests one at a time, each a fresh prompt."""
    if warmup:
        run(handle, fixed_requests(handle, prompts, warmup, prompt_tokens, output_tokens, f"{seed}-warm"), 1, timeout)
    return run(handle, fixed_requests(handle, prompts, repeats, prompt_tokens, output_tokens, seed), 1, timeout,
               label=f"decode p={prompt_tokens} out={output_tokens}")
