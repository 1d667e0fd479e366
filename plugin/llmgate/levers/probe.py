"""Probe the largest max_model_len an engine boots with AND serves one real request of that
length, under the configuration's fixed KV memory budget.

Strategy: ask for ``start`` first.  If the boot fails and the engine names an estimated
maximum (vLLM: "the estimated maximum model length is N"), boot with that estimate and
verify it with a request of exactly that many tokens.  If a server boots but does not serve
its full-length request and its /metrics say how many tokens one request can hold in the KV
cache (vLLM: its blocks less the one it keeps back), boot with that next: on an H200, vLLM
0.26.0 booted at its own fp8-KV estimate, 160,208 tokens = the whole KV cache, and left that
request waiting forever.  Otherwise bisect between the largest length known to work and the
smallest known to fail, in steps of ``granularity`` tokens.  Every boot is counted and kept
in the result.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from llmgate.engines import meters
from llmgate.load.workloads import PromptMaker, completion, run
from llmgate.config.matrix import Matrix, ServerConfig
from llmgate.process.server import BootError, Unsupported, Server, ServerHandle


@dataclasses.dataclass
class Attempt:
    max_model_len: int
    booted: bool
    served: bool | None
    reason: str
    startup_s: float | None = None


@dataclasses.dataclass
class ProbeResult:
    config_id: str
    kv_cache_dtype: str
    verified_max_model_len: int | None
    boots: int
    used_engine_estimate: bool
    attempts: list[Attempt]
    log_facts: dict[str, Any] = dataclasses.field(default_factory=dict)
    measured: dict[str, Any] = dataclasses.field(default_factory=dict)
    engine_version: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def model_max_positions(model: Path) -> int | None:
    try:
        cfg = json.loads((Path(model) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    return cfg.get("max_position_embeddings")


def serves_full_length(handle: ServerHandle, prompts: PromptMaker, max_len: int, output_tokens: int,
                       timeout: float) -> tuple[bool, str]:
    """One request whose prompt + output is exactly ``max_len`` tokens."""
    n_prompt = max_len - output_tokens
    req = completion(handle, prompts.text(n_prompt, f"probe-{max_len}"), output_tokens, prompt_tokens=n_prompt)
    s = run(handle, [req], 1, timeout).samples[0]
    if not s.ok:
        return False, f"request of {max_len} tokens failed: {s.error}"
    if s.prompt_tokens != n_prompt or s.completion_tokens != output_tokens:
        return False, (f"request of {max_len} tokens came back with {s.prompt_tokens} prompt + "
                       f"{s.completion_tokens} completion tokens")
    return True, f"served {n_prompt} + {output_tokens} tokens (TTFT {s.ttft:.2f} s)"


def probe_max_model_len(cfg: ServerConfig, matrix: Matrix, log_dir: Path, *, start: int | None = None,
                        output_tokens: int = 16, granularity: int = 16, max_boots: int = 8,
                        timeout: float = 600.0, progress=None,
                        on_verified: Callable[[ServerHandle, PromptMaker], dict[str, Any]] | None = None) -> ProbeResult:
    """See the module docstring.  ``on_verified`` runs on the server of the verified length
    (e.g. to measure decode speed there) before it is stopped; its dict goes to ``measured``."""
    tokenizer = matrix.tokenizer_folder(cfg)
    start = start or model_max_positions(tokenizer) or cfg.max_model_len
    prompts = PromptMaker(tokenizer)
    result = ProbeResult(cfg.id, cfg.kv_cache_dtype, None, 0, False, [])
    good, bad = 0, None                       # largest verified, smallest failed
    candidate: int | None = start             # None: nothing left to try

    while candidate and result.boots < max_boots:
        trial = dataclasses.replace(cfg, max_model_len=candidate)
        server = Server(trial, matrix, log_dir, boot_number=result.boots + 1, progress=progress)
        result.boots += 1
        try:
            handle = server.start()
        except Unsupported:
            raise                                 # no length of it runs here: the caller skips
        except BootError as e:
            diag = e.diagnosis
            result.attempts.append(Attempt(candidate, False, None, diag.reason if diag else str(e).splitlines()[0]))
            bad = candidate if bad is None else min(bad, candidate)
            est = diag.estimated_max_model_len if diag else None
            if est and good < est < candidate and not result.used_engine_estimate:
                result.used_engine_estimate = True
                candidate = est
            else:
                candidate = _bisect(good, bad, granularity)
            continue
        room = None
        try:
            ok, why = serves_full_length(handle, prompts, candidate, output_tokens, timeout)
            if not ok:
                room = request_room(handle)
                if room is not None:
                    why += f"; the KV cache holds {room} tokens for one request (engine /metrics)"
            result.attempts.append(Attempt(candidate, True, ok, why, handle.startup_s))
            result.engine_version = handle.engine_info.version
            if ok:
                good = candidate
                result.verified_max_model_len = candidate
                result.log_facts = handle.engine.read_log(handle.log_tail(2000))
                if on_verified is not None:
                    result.measured = on_verified(handle, prompts)
            else:
                bad = candidate
        finally:
            server.stop()
        if ok and (bad is None or result.used_engine_estimate):
            break  # at the model's maximum, or the engine's own estimate verified
        if room is not None and good < room < candidate:
            bad = room + 1          # no longer request fits that KV cache
            candidate = room
            continue
        candidate = _bisect(good, bad, granularity)
    return result


def request_room(handle: ServerHandle) -> int | None:
    """Tokens one request can hold in the running server's KV cache, as its /metrics say."""
    try:
        with httpx.Client(timeout=10.0) as http:
            return handle.engine.kv_capacity(
                meters.scrape(http, handle.base_url, handle.engine.metrics_path, handle.auth_headers()))
    except (httpx.HTTPError, ValueError):
        return None


def lever_summary(dtype: str, ref_dtype: str, verified: int, ref_verified: int, boots: int, ref_boots: int,
                  decode_tok_s: list[float], ref_decode_tok_s: list[float]) -> str:
    """The KV-dtype lever in one line: both verified lengths, their ratio, the boots each probe
    used and decode speed (median) at each verified length (seed, RTX 4070: KV fp8 64k → 96k,
    1.5×; decode under 0.4% slower)."""
    from llmgate.analysis.stats import median

    mine, theirs = median(decode_tok_s), median(ref_decode_tok_s)
    return (f"KV {dtype} vs {ref_dtype}: verified max_model_len {verified:,} vs {ref_verified:,} "
            f"({verified / ref_verified:.3f}×), boots {boots} + {ref_boots}; decode at the verified "
            f"length {mine:.1f} vs {theirs:.1f} tok/s ({mine / theirs - 1:+.2%})")


def _bisect(good: int, bad: int | None, granularity: int) -> int | None:
    if bad is None or bad - good <= granularity:
        return None
    mid = (good + bad) // 2
    mid -= mid % granularity
    return mid if good < mid < bad else None
