"""Quality checks that ride along with the performance gate: a fixed corpus with machine
checks, structured-output validity, greedy determinism and quantization agreement.

Corpus cases (``llmgate/data/quality_corpus.jsonl``, one JSON object a line):

- ``prompt``, ``max_tokens``; ``structured`` asks for the engine's constrained decoding
  (``json_schema``, ``regex`` with a GBNF twin for llama.cpp, or ``choice``);
- ``checks``: ``json_schema`` (parse + validate), ``regex`` (full match), ``exact``,
  ``contains``, ``python_tests`` (the generated code run with the asserts, in a separate
  interpreter with a timeout);
- ``expect``: ``guaranteed`` — constrained decoding guarantees the checks, so they must pass
  on any model, random weights included; ``real_model`` — only a trained model can pass, so
  on random-weight models the result is reported, not gated (never a loosened check).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx

from llmgate.process.server import ServerHandle
from llmgate.models.tinymodel import MANIFEST

CORPUS = Path(__file__).parent.parent / "data" / "quality_corpus.jsonl"
EXPECTS = ("guaranteed", "real_model")
CHECK_TYPES = ("json_schema", "regex", "exact", "contains", "python_tests")
STRUCTURED_TYPES = ("json_schema", "regex", "choice")


class CorpusError(ValueError):
    pass


@dataclasses.dataclass(frozen=True)
class Case:
    id: str
    prompt: str
    max_tokens: int
    checks: tuple[dict[str, Any], ...]
    expect: str
    structured: dict[str, Any] | None = None


def load_corpus(path: Path | str = CORPUS) -> list[Case]:
    cases, seen = [], set()
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{n}"
        try:
            raw = json.loads(line)
        except json.JSONDecodeError as e:
            raise CorpusError(f"{where}: not valid JSON: {e.msg}") from None
        for key in ("id", "prompt", "max_tokens", "checks", "expect"):
            if key not in raw:
                raise CorpusError(f"{where}: case lacks {key!r}")
        if raw["id"] in seen:
            raise CorpusError(f"{where}: case id {raw['id']!r} used twice")
        seen.add(raw["id"])
        if raw["expect"] not in EXPECTS:
            raise CorpusError(f"{where}: expect must be one of {EXPECTS}")
        for c in raw["checks"]:
            if c.get("type") not in CHECK_TYPES:
                raise CorpusError(f"{where}: check type {c.get('type')!r} is not one of {CHECK_TYPES}")
        st = raw.get("structured")
        if st is not None and st.get("type") not in STRUCTURED_TYPES:
            raise CorpusError(f"{where}: structured type {st.get('type')!r} is not one of {STRUCTURED_TYPES}")
        if raw["expect"] == "guaranteed" and st is None:
            raise CorpusError(f"{where}: only constrained decoding can guarantee a check (add 'structured')")
        cases.append(Case(raw["id"], raw["prompt"], int(raw["max_tokens"]), tuple(raw["checks"]), raw["expect"], st))
    if len(cases) < 20:
        raise CorpusError(f"{path}: {len(cases)} cases; the method asks for at least 20")
    return cases


# -- checks ------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class CheckResult:
    check: str
    ok: bool
    detail: str = ""


def _code(text: str) -> str:
    m = re.search(r"```(?:python)?\n(.*?)```", text, re.S)
    return m.group(1) if m else text


def run_python_tests(code: str, tests: str, timeout: float = 10.0) -> CheckResult:
    """The generated code and the asserts, in a fresh isolated interpreter (no site, no cwd on the path)."""
    program = _code(code) + "\n\n" + tests + "\n"
    try:
        r = subprocess.run([sys.executable, "-I", "-c", program], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return CheckResult("python_tests", False, f"timed out after {timeout:.0f} s")
    if r.returncode == 0:
        return CheckResult("python_tests", True)
    last = (r.stderr.strip().splitlines() or ["(no output)"])[-1]
    return CheckResult("python_tests", False, f"exit {r.returncode}: {last[:200]}")


def run_check(check: dict[str, Any], text: str) -> CheckResult:
    kind = check["type"]
    if kind == "json_schema":
        import jsonschema

        try:
            doc = json.loads(text)
        except json.JSONDecodeError as e:
            return CheckResult(kind, False, f"not JSON: {e.msg} at column {e.colno}")
        try:
            jsonschema.validate(doc, check["schema"])
        except jsonschema.ValidationError as e:
            return CheckResult(kind, False, f"schema: {e.message[:200]}")
        return CheckResult(kind, True)
    if kind == "regex":
        ok = re.fullmatch(check["pattern"], text) is not None
        return CheckResult(kind, ok, "" if ok else f"does not match {check['pattern']!r}")
    if kind == "exact":
        ok = text.strip() == check["value"]
        return CheckResult(kind, ok, "" if ok else f"expected exactly {check['value']!r}")
    if kind == "contains":
        ok = check["value"] in text
        return CheckResult(kind, ok, "" if ok else f"does not contain {check['value']!r}")
    if kind == "python_tests":
        return run_python_tests(text, check["tests"])
    raise ValueError(kind)


def check_case(case: Case, text: str) -> list[CheckResult]:
    return [run_check(c, text) for c in case.checks]


# -- talking to the engine ------------------------------------------------------------------
@dataclasses.dataclass
class Completion:
    status: int
    text: str = ""
    token_ids: list[int] | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    finish_reason: str | None = None
    error: str | None = None


def complete(handle: ServerHandle, prompt: str, max_tokens: int, fields: dict[str, Any] | None = None,
             temperature: float = 0.0, timeout: float = 300.0, seed: int | None = None) -> tuple[Completion, dict]:
    """One non-streaming /v1/completions request; returns the result and the request body sent."""
    body: dict[str, Any] = {"model": handle.model_name, "prompt": prompt, "max_tokens": max_tokens,
                            "temperature": temperature, **handle.engine.token_ids_fields(), **(fields or {})}
    if seed is not None:
        body["seed"] = seed
    try:
        r = httpx.post(handle.base_url + "/v1/completions", json=body, headers=handle.auth_headers(), timeout=timeout)
    except httpx.HTTPError as e:
        return Completion(0, error=f"{type(e).__name__}: {e}"), body
    if r.status_code != 200:
        return Completion(r.status_code, error=r.text[:500]), body
    data = r.json()
    choice = (data.get("choices") or [{}])[0]
    usage = data.get("usage") or {}
    return Completion(200, choice.get("text") or "", handle.engine.extract_token_ids(choice),
                      usage.get("prompt_tokens"), usage.get("completion_tokens"), choice.get("finish_reason")), body


def as_curl(handle: ServerHandle, body: dict[str, Any], path: str = "/v1/completions") -> str:
    """A request someone can paste to reproduce a finding.  A long body is written whole to a
    file next to the server logs (``requests/<hash>.json``) and the command reads it from there."""
    data = json.dumps(body)
    if len(data) <= 400:
        return f"curl {handle.base_url}{path} -H 'content-type: application/json' -d '{data}'"
    folder = handle.log_path.parent / "requests"
    folder.mkdir(parents=True, exist_ok=True)
    file = folder / (hashlib.sha256(data.encode()).hexdigest()[:16] + ".json")
    file.write_text(data)
    return f"curl {handle.base_url}{path} -H 'content-type: application/json' -d @{file}"


def random_weights(handle: ServerHandle) -> bool:
    """Whether the served model has random weights (llmgate's tiny models, or load_format=dummy)."""
    return handle.config.load_format == "dummy" or (handle.tokenizer_path / MANIFEST).is_file()


# -- comparing outputs ----------------------------------------------------------------------
def first_difference(a: list | str, b: list | str) -> int | None:
    """Index of the first position where two sequences differ (None when identical)."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def agreement(a: list, b: list) -> float:
    """Share of positions where two token sequences agree (over the longer one)."""
    n = max(len(a), len(b))
    if n == 0:
        return 1.0
    return sum(1 for x, y in zip(a, b) if x == y) / n
