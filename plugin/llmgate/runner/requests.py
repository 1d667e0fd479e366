"""``llmgate.requests``: requests to send with ``gate.run``, for scenarios: functions of their
arguments only (the server and its prompts are passed in: ``gate.server``, ``gate.prompts``)."""

from __future__ import annotations

from typing import Any

from llmgate.config import matrix as matrix_mod
from llmgate.config.matrix import Matrix, ServerConfig
from llmgate.load import workloads
from llmgate.load.workloads import PromptMaker, Request
from llmgate.process.server import ServerHandle


def request(server: ServerHandle, prompt: str, max_tokens: int, *, prompt_tokens: int | None = None,
            fixed_length: bool = True, **fields: Any) -> Request:
    """One streaming /v1/completions request to ``server`` (greedy; exactly ``max_tokens`` generated
    unless ``fixed_length=False``); extra body fields as keywords."""
    return workloads.completion(server, prompt, max_tokens, fixed_length=fixed_length,
                                prompt_tokens=prompt_tokens, **fields)


def fresh(server: ServerHandle, prompts: PromptMaker, n: int, prompt_tokens: int, output_tokens: int,
          seed: str) -> list[Request]:
    """``n`` requests with distinct prompts of exactly ``prompt_tokens`` tokens (``prompts.text``,
    seeds ``{seed}:0`` …), each generating exactly ``output_tokens``."""
    return workloads.fixed_requests(server, prompts, n, prompt_tokens, output_tokens, seed)


def lookup(server: ServerHandle, prompts: PromptMaker, n: int, prompt_tokens: int, output_tokens: int,
           seed: str) -> list[Request]:
    """``n`` requests whose prompts (``prompts.lookup``, seeds ``{seed}:0`` …) hold every pair of
    a few words, each generating exactly ``output_tokens`` of those words only: an n-gram
    drafter finds its match at every step, whatever the model emits."""
    out = []
    for i in range(n):
        text, ids = prompts.lookup(prompt_tokens, f"{seed}:{i}")
        fields = server.engine.allowed_tokens_fields(ids)
        if fields is None:
            raise ValueError(f"{server.engine.name} cannot restrict generation to a set of tokens")
        out.append(request(server, text, output_tokens, prompt_tokens=prompt_tokens, **fields))
    return out


def lookup_workload(entry: ServerConfig, server: ServerHandle, matrix: Matrix) -> bool:
    """Whether ``entry`` measures the speculative scenario's prompt-lookup workload (``lookup``):
    its drafts come from the context, or it is the reference of an entry whose drafts do; and its
    engine (``server.engine``) can restrict generation to the prompt's words."""
    if server.engine.allowed_tokens_fields([0]) is None:
        return False
    return matrix_mod.drafts_from_context(entry) or any(
        e.reference == entry.id and matrix_mod.drafts_from_context(e) for e in matrix.entries)
