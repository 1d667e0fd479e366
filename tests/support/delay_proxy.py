"""A loopback HTTP proxy that makes a server look slower: a test utility for showing that
the gate detects a regression it was not told about.

Streamed responses (server-sent events) are forwarded event by event: a reader task
timestamps each event as it arrives, and an event that brings the stream to n tokens (its
``usage.completion_tokens``; else n counts events) is passed on no earlier than its arrival
plus n × ``delay_s``, as if every decode step of the server took ``delay_s`` longer (TTFT
grows by one delay, TPOT by one delay), also when a lagging server packs several tokens
into one event.  One upstream client is reused for all requests
(creating an httpx client per request costs tens of milliseconds).  Everything else passes through unchanged.  It listens on 127.0.0.1 only.

Faults, for showing that failed requests are counted: ``fail_every=N`` answers every N-th
POST with HTTP 500 instead of forwarding it; ``corrupt_every=N`` replaces the second event of
every N-th streamed response with a line that is not JSON.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time

import httpx


class DelayProxy:
    def __init__(self, upstream: str, delay_s: float = 0.0, fail_every: int = 0, corrupt_every: int = 0):
        self.upstream, self.delay_s = upstream.rstrip("/"), delay_s
        self.fail_every, self.corrupt_every = fail_every, corrupt_every
        self.posts = self.streams = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name="delay-proxy")
        self._server: asyncio.base_events.Server | None = None
        self._http: httpx.AsyncClient | None = None
        self.url = ""

    def start(self, port: int = 0) -> str:
        """Listen on 127.0.0.1:``port`` (0: a free one); the proxy's URL."""
        self._thread.start()
        fut = asyncio.run_coroutine_threadsafe(asyncio.start_server(self._handle, "127.0.0.1", port), self._loop)
        self._server = fut.result(10)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self.url

    def stop(self) -> None:
        if self._server is not None:
            async def close():
                if self._http is not None:
                    await self._http.aclose()
                self._server.close()
                await self._server.wait_closed()
            asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                request_line = await reader.readline()
                if not request_line:
                    return
                method, path, _ = request_line.decode().split(" ", 2)
                headers = {}
                while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
                    k, v = line.decode().split(":", 1)
                    headers[k.strip().lower()] = v.strip()
                body = await reader.readexactly(int(headers.get("content-length", 0)))
                fwd = {k: v for k, v in headers.items() if k not in ("host", "content-length", "connection")}
                await self._forward(method, path, fwd, body, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def _forward(self, method, path, headers, body, writer) -> None:
        if method == "POST":
            self.posts += 1
            if self.fail_every and self.posts % self.fail_every == 0:
                msg = b'{"error": {"message": "injected by the test proxy", "code": 500}}'
                writer.write(b"HTTP/1.1 500 Internal Server Error\r\ncontent-type: application/json\r\n"
                             b"content-length: %d\r\nconnection: keep-alive\r\n\r\n%s" % (len(msg), msg))
                await writer.drain()
                return
        if self._http is None:
            self._http = httpx.AsyncClient(timeout=None, limits=httpx.Limits(max_connections=None))
        http = self._http
        async with http.stream(method, self.upstream + path, headers=headers, content=body) as r:
            ctype = r.headers.get("content-type", "application/octet-stream")
            writer.write(f"HTTP/1.1 {r.status_code} {r.reason_phrase}\r\ncontent-type: {ctype}\r\n"
                         f"transfer-encoding: chunked\r\nconnection: keep-alive\r\n\r\n".encode())
            if "event-stream" in ctype:
                events: asyncio.Queue = asyncio.Queue()

                async def read():
                    try:
                        async for line in r.aiter_lines():
                            events.put_nowait((time.perf_counter(), line))
                    finally:
                        events.put_nowait(None)

                reader = asyncio.create_task(read())
                self.streams += 1
                corrupt = bool(self.corrupt_every) and self.streams % self.corrupt_every == 0
                n = seen = 0
                try:
                    while (item := await events.get()) is not None:
                        arrived, line = item
                        if line.startswith("data:") and "[DONE]" not in line and '"choices":[]' not in line.replace(" ", ""):
                            n = _tokens_so_far(line) or n + 1
                            seen += 1
                            # the second event, counted as events: a lagging server's second
                            # event may already carry 3 tokens, so n need not pass through 2
                            if corrupt and seen == 2:
                                line = "data: {this is not json"
                            wait = arrived + n * self.delay_s - time.perf_counter()
                            if wait > 0:
                                await asyncio.sleep(wait)
                        await self._chunk(writer, (line + "\n").encode())
                finally:
                    reader.cancel()
            else:
                async for data in r.aiter_raw():
                    await self._chunk(writer, data)
            writer.write(b"0\r\n\r\n")
            await writer.drain()

    @staticmethod
    async def _chunk(writer, data: bytes) -> None:
        if data:
            writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            await writer.drain()


def _tokens_so_far(line: str) -> int:
    """``usage.completion_tokens`` of an event (vLLM's continuous usage stats), or 0."""
    try:
        usage = json.loads(line[5:]).get("usage") or {}
        return int(usage.get("completion_tokens") or 0)
    except (ValueError, AttributeError, TypeError):
        return 0
